"""Chat models behind any OpenAI-compatible endpoint (langchain-openai `ChatOpenAI`).

Judgements (rewrite, route, decompose, plan, evaluate) use `temperature=0` and may use a
smaller model (`EVALUATOR_MODEL_NAME`); the answer uses `GENERATION_TEMPERATURE` and streams.

Retries: the OpenAI client's own are off (`max_retries=0`); `core.retry`'s policy for
OpenAI-compatible endpoints is the one layer (docs/reliability.md). A streamed answer is retried
only until its first piece arrives: after that the user has seen text, and a failure propagates.

Structured outputs use tool calling (`method="function_calling"`). langchain-openai 1.7's
`ChatOpenAI.with_structured_output` defaults to `json_schema` (OpenAI Structured Outputs via
`response_format`), which several OpenAI-compatible servers (older vLLM, DashScope, DeepSeek)
reject or ignore; forced tool calls are the protocol they all speak.
"""

import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import httpx
import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, BaseMessageChunk
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, SecretStr

from core.config import Settings
from core.redact import redact_url
from core.retry import OPENAI, async_retrying

logger = logging.getLogger(__name__)

SchemaT = TypeVar("SchemaT", bound=BaseModel)
Opened = tuple[AsyncIterator[BaseMessageChunk], BaseMessageChunk | None]  # a stream and its first chunk


class LLMNotConfiguredError(RuntimeError):
    """No chat model is configured, so the service cannot answer questions."""

    def __init__(self) -> None:
        super().__init__(
            "no LLM configured: set OPENAI_BASE_URL (or OPENAI_API_KEY for api.openai.com) and MODEL_NAME "
            "(optionally EVALUATOR_MODEL_NAME for judgements) in the environment or .env"
        )


def chat_model(settings: Settings, model: str, temperature: float) -> ChatOpenAI:
    """One client of the configured endpoint; a keyless local server gets a placeholder key."""
    return ChatOpenAI(
        model=model,
        temperature=temperature,
        base_url=settings.openai_base_url,
        api_key=settings.openai_api_key or SecretStr("not-needed"),
        timeout=settings.llm_timeout,
        max_retries=0,  # the retry layer is `core.retry`'s policy, around each call
        stream_usage=True,  # a streamed answer's token counts too (`QueryResult.usage`)
    )


def build_llms(settings: Settings) -> tuple[ChatOpenAI | None, ChatOpenAI | None]:
    """(judge, answer) models, or (None, None) when no endpoint/model is configured."""
    if not settings.llm_configured:
        return None, None
    judge = chat_model(settings, settings.judge_model_name or "", temperature=0.0)
    answer = chat_model(settings, settings.model_name or "", temperature=settings.generation_temperature)
    return judge, answer


async def ask_structured(
    llm: BaseChatModel | None, schema: type[SchemaT], messages: list[BaseMessage]
) -> tuple[SchemaT | None, str | None]:
    """(parsed, None) or (None, why): a bad or missing tool call is a result, never a crash."""
    if llm is None:
        raise LLMNotConfiguredError()
    runnable = llm.with_structured_output(schema, method="function_calling", include_raw=True)
    try:
        output: dict[str, Any] = await async_retrying(OPENAI, f"{schema.__name__} call")(runnable.ainvoke, messages)
    except openai.APIError as err:
        logger.warning("%s call failed: %s", schema.__name__, err)
        return None, f"模型调用失败：{type(err).__name__}"
    parsed = output.get("parsed")
    if isinstance(parsed, schema):
        return parsed, None
    error = output.get("parsing_error")
    raw = output.get("raw")
    logger.warning(
        "unparseable %s output (%s): %.300r", schema.__name__, error or "no tool call", getattr(raw, "content", raw)
    )
    if error or getattr(raw, "invalid_tool_calls", None):
        return None, "结构化输出无法解析"
    return None, "模型未按要求返回结构化结果"


async def stream_text(llm: BaseChatModel | None, messages: list[BaseMessage]) -> AsyncIterator[str]:
    """The answer's text as the model streams it; opening the stream is retried, the rest is not."""
    if llm is None:
        raise LLMNotConfiguredError()
    opened: Opened = await async_retrying(OPENAI, "answer stream")(_open_stream, llm, messages)
    stream, first = opened
    if first is None:
        return
    yield first.text
    async for chunk in stream:
        yield chunk.text


async def _open_stream(llm: BaseChatModel, messages: list[BaseMessage]) -> Opened:
    """The stream and its first chunk (None: an empty answer); the request fails here if it fails."""
    stream = llm.astream(messages)
    try:
        return stream, await anext(stream)
    except StopAsyncIteration:
        return stream, None


class LLMProbe:
    """Is the configured endpoint answering? One cheap `GET {base}/models`, trusted for `ttl_s`.

    A 2xx, or a 404/405 from a server without the listing, means reachable; a connection error,
    a time-out, 401/403 (the key is refused) or a 5xx means every answer would fail.
    """

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic) -> None:
        base = (settings.openai_base_url or "https://api.openai.com/v1").rstrip("/")
        self.url = f"{base}/models"
        self._key = settings.openai_api_key
        self.ttl_s = settings.llm_probe_ttl_s
        self.timeout = settings.llm_probe_timeout
        self._clock = clock
        self._last: tuple[float, str | None] | None = None

    async def unavailable(self) -> str | None:
        """None when reachable, else why not (a short Chinese phrase naming the endpoint)."""
        now = self._clock()
        if self._last is not None and now - self._last[0] < self.ttl_s:
            return self._last[1]
        why = await self._check()
        self._last = (self._clock(), why)
        return why

    def report_failure(self, why: str) -> None:
        """A model call failed: trust that verdict, as a failed probe's, for `ttl_s`."""
        self._last = (self._clock(), why)

    async def _check(self) -> str | None:
        where = redact_url(self.url.removesuffix("/models"))
        headers = {"Authorization": f"Bearer {self._key.get_secret_value()}"} if self._key else {}
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                response = await client.get(self.url, headers=headers)
        except httpx.HTTPError as err:
            logger.warning("LLM endpoint %s unreachable: %s", where, type(err).__name__)
            return f"大模型服务 {where} 无法连接（{type(err).__name__}）"
        if response.status_code < 400 or response.status_code in (404, 405):
            return None
        logger.warning("LLM endpoint %s answered HTTP %d to the probe", where, response.status_code)
        return f"大模型服务 {where} 返回 HTTP {response.status_code}"
