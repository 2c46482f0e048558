"""Retries and transient errors of every remote call, in one place (docs/reliability.md).

Each remote call has one tenacity layer, its client's own retries off (Elasticsearch reads
are the exception: the transport retries them on another node, `core.store.create_client`).
A `Policy` is how often and how long to try, and which errors are worth another attempt:

- `OPENAI`: chat models (`service/llm.py`) and the remote embedder (`core/embeddings.py`);
- `ES_SEARCH`: one failed search of an `_msearch` (`core.reader`);
- `ES_BULK`: bulk writes of the indexing job (`indexing/write.py`);
- `WEB_SEARCH`: the Bocha web search (`service/websearch.py`);
- `RERANK`: a rerank endpoint (`retrieval/rerank.py`);
- `ES_NEW_INDEX`: the first read of an index just created (`core.store.wait_until_readable`).

The transient tests say which failures may pass when tried later; the API answers those with
503 and Retry-After (`service/errors.py`).
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
from elasticsearch import ApiError, ConnectionTimeout
from elasticsearch import ConnectionError as ESConnectionError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_fixed,
    wait_random,
)
from tenacity.wait import wait_base

logger = logging.getLogger(__name__)

# Elasticsearch answers that mean "not now" (a node or shard is away, the cluster is busy).
TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})
TRANSIENT_TYPES = frozenset(
    {
        "no_shard_available_action_exception",
        "unavailable_shards_exception",
        "search_phase_execution_exception",  # "all shards failed" while shards recover
        "cluster_block_exception",
        "master_not_discovered_exception",
        "node_not_connected_exception",
        "node_disconnected_exception",
        "es_rejected_execution_exception",
    }
)


def is_transient(status: int | None, error_type: str | None) -> bool:
    """Whether an Elasticsearch failure (HTTP status, error type) may pass if retried later. A 4xx
    other than 429 never does, whatever its type: "all shards failed" with 400 is a query Elasticsearch
    refuses (a bad value), not shards that are recovering."""
    if status is not None and 400 <= status < 500 and status != 429:
        return False
    return status in TRANSIENT_STATUSES or error_type in TRANSIENT_TYPES


def es_api_transient(error: ApiError) -> bool:
    """An Elasticsearch error answer, by its status and the error type in its body."""
    body = error.body.get("error") if isinstance(error.body, dict) else None
    return is_transient(error.meta.status, body.get("type") if isinstance(body, dict) else None)


def marked_transient(error: BaseException) -> bool:
    """An error of this project that says itself whether it may pass (`transient`)."""
    return getattr(error, "transient", False) is True


# A search Elasticsearch refused for its cost (a tripped circuit breaker, its time budget spent,
# core/reader.py) is not sent again at once: it would cost as much again. The caller gets 503 and Retry-After.
SEARCH_TIMED_OUT = "search_timeout_exception"
COSTLY_TYPES = frozenset({"circuit_breaking_exception", SEARCH_TIMED_OUT})


def es_search_transient(error: BaseException) -> bool:
    """A failed search item worth re-sending once: transient, and not refused for its cost."""
    return marked_transient(error) and getattr(error, "type", None) not in COSTLY_TYPES


def es_write_transient(error: BaseException) -> bool:
    """A write worth re-sending: a lost connection, a time-out, a transient answer or item."""
    if isinstance(error, ESConnectionError | ConnectionTimeout):
        return True
    return marked_transient(error) or (isinstance(error, ApiError) and error.meta.status in TRANSIENT_STATUSES)


def openai_transient(error: BaseException) -> bool:
    """Worth another attempt: connection refused or reset, 429, 5xx.

    Not a time-out (a model that took `LLM_TIMEOUT` once would take it again, and the query
    has a time budget) and not another 4xx (a bad key or request fails the same way again).
    """
    if isinstance(error, openai.APITimeoutError):
        return False
    return isinstance(error, openai.APIConnectionError | openai.RateLimitError | openai.InternalServerError)


@dataclass(frozen=True)
class Policy:
    attempts: int
    wait: wait_base
    transient: Callable[[BaseException], bool]


OPENAI_ATTEMPTS = 3
OPENAI = Policy(
    OPENAI_ATTEMPTS, wait_exponential(multiplier=0.5, max=4) + wait_random(0, 0.25), openai_transient
)  # 0.5 s, 1 s + jitter
# A shard copy lost with its node between the query and fetch phases: once more, when the
# cluster has moved on to the surviving copies.
ES_SEARCH = Policy(2, wait_fixed(0.5), es_search_transient)
# 1, 2, 4, 8, 16 s (31 s in all): time for a node to restart or a primary to move.
ES_BULK = Policy(6, wait_exponential(multiplier=1, max=16), es_write_transient)
# One retry on a time-out or a 5xx; none on 4xx (429 means slow down) nor on a refused connection.
WEB_SEARCH = Policy(2, wait_fixed(0.2), marked_transient)
# One retry on a refused or reset connection or a 5xx; none on a time-out (the stage has a time
# budget) nor on 429: the query goes on with the fused order (retrieval/rerank.py).
RERANK = Policy(2, wait_fixed(0.05), marked_transient)
# A new index's primary is started for the cluster (health yellow) a moment before its node serves
# reads of it: on a loaded machine a read then is a 503 no_shard_available. 10 s of reads at most.
ES_NEW_INDEX = Policy(40, wait_fixed(0.25), lambda error: isinstance(error, ApiError) and es_api_transient(error))


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


def _arguments(policy: Policy, what: str, log: logging.Logger) -> dict[str, Any]:
    return {
        "stop": stop_after_attempt(policy.attempts),
        "wait": policy.wait,
        "retry": retry_if_exception(policy.transient),
        "before_sleep": log_retry(log, what),
        "reraise": True,
    }


def retrying(policy: Policy, what: str, log: logging.Logger = logger) -> Retrying:
    """`policy` for a blocking call named `what` in the log; the last error is re-raised."""
    return Retrying(**_arguments(policy, what, log))


def async_retrying(policy: Policy, what: str, log: logging.Logger = logger) -> AsyncRetrying:
    """The same for a coroutine."""
    return AsyncRetrying(**_arguments(policy, what, log))
