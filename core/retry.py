"""Retry policies for remote calls: one tenacity layer per call, the clients' own retries off.

The policy for OpenAI-compatible endpoints (the chat models in `service/llm.py`, the remote
embedder in `core/embeddings.py`) lives here because both sides use it; every policy of the
project is listed in docs/reliability.md.
"""

import logging
from collections.abc import Callable
from typing import Any

import openai
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

logger = logging.getLogger(__name__)

OPENAI_ATTEMPTS = 3
_WAIT = wait_exponential(multiplier=0.5, max=4) + wait_random(0, 0.25)  # 0.5 s, 1 s, ... plus jitter


def openai_transient(error: BaseException) -> bool:
    """Worth another attempt: connection refused or reset, 429, 5xx.

    Not a time-out (a model that took `LLM_TIMEOUT` once would take it again, and the query
    has a time budget) and not another 4xx (a bad key or request fails the same way again).
    """
    if isinstance(error, openai.APITimeoutError):
        return False
    return isinstance(error, openai.APIConnectionError | openai.RateLimitError | openai.InternalServerError)


def log_retry(log: logging.Logger, what: str) -> Callable[[RetryCallState], None]:
    """A tenacity `before_sleep` hook: one warning line per retry, naming the call and the error."""

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        delay = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "%s failed (%s: %s), attempt %d; retrying in %.1f s",
            what,
            type(error).__name__,
            error,
            state.attempt_number,
            delay,
        )

    return before_sleep


def openai_retrying(what: str) -> Retrying:
    """The OpenAI-compatible endpoint policy for a blocking call; the last error is re-raised."""
    return Retrying(**_openai_policy(what))


def openai_async_retrying(what: str) -> AsyncRetrying:
    """The same policy for a coroutine."""
    return AsyncRetrying(**_openai_policy(what))


def _openai_policy(what: str) -> dict[str, Any]:
    return {
        "stop": stop_after_attempt(OPENAI_ATTEMPTS),
        "wait": _WAIT,
        "retry": retry_if_exception(openai_transient),
        "before_sleep": log_retry(logger, what),
        "reraise": True,
    }
