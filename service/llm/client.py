"""Chat models behind any OpenAI-compatible endpoint, and what each one was found to do.

Judgements (rewrite, route, decompose, plan, evaluate) use `temperature=0` and may use a
smaller model (`EVALUATOR_MODEL_NAME`); the answer uses `GENERATION_TEMPERATURE` and streams.

The client is langchain-deepseek's `ChatDeepSeek` for every endpoint: it is langchain-openai's
`BaseChatOpenAI` (the same requests) plus the `reasoning_content` / `reasoning` fields of replies
and stream deltas, which `ChatOpenAI` drops (its docstring says so).

Structured output (`ask_structured`) tries the strategies of `service.llm.structured` in order, or
the one `STRUCTURED_OUTPUT` names. In `auto`, a refusal (a 400/422 naming the feature, or a
tools request answered without a tool call) moves that endpoint and model to the next strategy;
what works is remembered in its `Habits` for the process's life and logged once. A bad output
is asked for once more with the error shown; what is still bad is a result, never a crash.

Retries: the OpenAI client's own are off (`max_retries=0`); `core.retry`'s policy for
OpenAI-compatible endpoints is the one layer (docs/reliability.md). A streamed answer is retried
only until its first piece arrives: after that the user has seen text, and a failure propagates.
"""

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Generic

import httpx
import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, BaseMessageChunk, HumanMessage
from langchain_deepseek import ChatDeepSeek
from langchain_openai.chat_models.base import BaseChatOpenAI
from pydantic import SecretStr

from core.config import Settings, StructuredOutput
from core.redact import redact_url
from core.retry import OPENAI, async_retrying
from core.scheduling import PrincipalGates
from service.llm.reasoning import ReasoningForm, ReasoningStream, split_reasoning
from service.llm.structured import (
    STRATEGIES,
    OutputError,
    OutputPrompts,
    Reply,
    SchemaT,
    Strategy,
    is_refusal,
    parse_output,
    read_reply,
    request,
    with_format,
)

logger = logging.getLogger(__name__)

Opened = tuple[AsyncIterator[BaseMessageChunk], BaseMessageChunk | None]  # a stream and its first chunk
Piece = tuple[str, str]  # ("answer" | "reasoning", text)


class LLMNotConfiguredError(RuntimeError):
    """No chat model is configured, so the service cannot answer questions."""

    def __init__(self) -> None:
        super().__init__(
            "no LLM configured: set OPENAI_BASE_URL (or OPENAI_API_KEY for api.openai.com) and MODEL_NAME "
            "(optionally EVALUATOR_MODEL_NAME for judgements) in the environment or .env"
        )


@dataclass
class Habits:
    """What one model on one endpoint was found to do: the strategy that worked, the ones it
    refused (and why), and the form of its reasoning."""

    strategy: Strategy | None = None
    refused: dict[Strategy, str] = field(default_factory=dict)
    reasoning: ReasoningForm | None = None


@dataclass
class ChatModel:
    """One model on one endpoint: the langchain client, `STRUCTURED_OUTPUT`, and its habits
    (shared by the judge and the answer model when they are the same)."""

    client: BaseChatOpenAI
    name: str
    endpoint: str  # redacted, for logs and reports
    structured_output: StructuredOutput
    habits: Habits
    gates: PrincipalGates  # calls in flight per principal (LLM_CALLS_PER_PRINCIPAL)

    def strategy(self) -> Strategy:
        if self.structured_output != "auto":
            return self.structured_output
        if self.habits.strategy is not None:
            return self.habits.strategy
        return next(s for s in STRATEGIES if s not in self.habits.refused)

    def can_fall_back(self, strategy: Strategy) -> bool:
        return self.structured_output == "auto" and strategy != STRATEGIES[-1]

    def refuse(self, strategy: Strategy, why: str) -> None:
        self.habits.refused[strategy] = why
        if self.habits.strategy == strategy:
            self.habits.strategy = None
        logger.warning(
            "model %s at %s does not do structured output by %s (%s): trying %s",
            self.name,
            self.endpoint,
            strategy,
            why,
            self.strategy(),
        )

    def worked(self, strategy: Strategy) -> None:
        if self.structured_output == "auto" and self.habits.strategy != strategy:
            self.habits.strategy = strategy
            logger.info("model %s at %s: structured output by %s", self.name, self.endpoint, strategy)

    def saw_reasoning(self, form: ReasoningForm | None) -> None:
        if form is not None and self.habits.reasoning != form:
            self.habits.reasoning = form
            logger.info("model %s at %s reasons in the form %s (kept out of answers)", self.name, self.endpoint, form)


def chat_model(
    settings: Settings,
    model: str,
    temperature: float,
    habits: Habits | None = None,
    http_async_client: httpx.AsyncClient | None = None,
) -> ChatModel:
    """One client of the configured endpoint; a keyless local server gets a placeholder key.
    `http_async_client`: a client of one event loop (the reranker's own), not the shared default."""
    base = settings.openai_base_url or "https://api.openai.com/v1"
    client = ChatDeepSeek(
        http_async_client=http_async_client,
        model_name=model,
        temperature=temperature,
        api_base=base,
        api_key=settings.openai_api_key or SecretStr("not-needed"),
        timeout=settings.llm_timeout,
        max_retries=0,  # the retry layer is `core.retry`'s policy, around each call
        stream_usage=True,  # a streamed answer's token counts too (`QueryResult.usage`)
    )
    gates = PrincipalGates(settings.llm_calls_per_principal)
    return ChatModel(client, model, redact_url(base), settings.structured_output, habits or Habits(), gates)


def build_llms(settings: Settings) -> tuple[ChatModel | None, ChatModel | None]:
    """(judge, answer) models, or (None, None) when no endpoint/model is configured."""
    if not settings.llm_configured:
        return None, None
    judge_name, answer_name = settings.judge_model_name or "", settings.model_name or ""
    judge = chat_model(settings, judge_name, temperature=0.0)
    shared = judge.habits if judge_name == answer_name else None
    answer = chat_model(settings, answer_name, temperature=settings.generation_temperature, habits=shared)
    return judge, answer


@dataclass(frozen=True)
class Structured(Generic[SchemaT]):
    """A judgement: the value, or why there is none (Chinese, for the trace), and what it cost."""

    value: SchemaT | None
    error: str | None
    calls: int  # model calls spent: a failed one counts, a refusal does not, a repair is one more
    strategy: Strategy
    reasoning: str = ""


async def ask_structured(
    model: ChatModel | None,
    schema: type[SchemaT],
    messages: list[BaseMessage],
    prompts: OutputPrompts,
    max_calls: int = 2,
) -> Structured[SchemaT]:
    """One judgement in the model's strategy: a bad output, a failed call or a refusal at the last
    strategy is a result, never a crash. At most `max_calls` replies (the repair needs two)."""
    if model is None:
        raise LLMNotConfiguredError()
    calls, conversation, repaired = 0, list(messages), False
    reasoning: list[str] = []
    while True:
        strategy = model.strategy()
        try:
            reply = await _ask(model, strategy, schema, with_format(conversation, strategy, schema, prompts))
        except openai.OpenAIError as err:  # an HTTP error, no connection, or a reply cut off by its length
            if isinstance(err, openai.APIStatusError) and is_refusal(err, strategy) and model.can_fall_back(strategy):
                model.refuse(strategy, f"HTTP {err.status_code}")
                continue
            logger.warning("%s call failed: %s", schema.__name__, err)
            return Structured(None, f"模型调用失败：{type(err).__name__}", calls + 1, strategy, "\n".join(reasoning))
        calls += 1
        model.saw_reasoning(reply.form)
        reasoning += [reply.reasoning] if reply.reasoning else []
        if reply.output is None:  # a tools request answered without a tool call
            if model.can_fall_back(strategy) and calls < max_calls:
                model.refuse(strategy, "reply without a tool call")
                continue
            return Structured(None, "模型未按要求返回结构化结果", calls, strategy, "\n".join(reasoning))
        try:
            value = parse_output(reply.output, schema)
        except OutputError as err:
            logger.warning("unparseable %s output (%s): %.300r", schema.__name__, err, reply.output)
            if repaired or calls >= max_calls:
                return Structured(None, f"结构化输出无法解析（{err}）", calls, strategy, "\n".join(reasoning))
            repair = prompts.repair.format(output=reply.output[:2000], error=err)
            conversation, repaired = [*messages, HumanMessage(repair)], True
            continue
        model.worked(strategy)
        return Structured(value, None, calls, strategy, "\n".join(reasoning))


async def _ask(model: ChatModel, strategy: Strategy, schema: type[SchemaT], messages: list[BaseMessage]) -> Reply:
    runnable = request(model.client, strategy, schema)
    async with model.gates.turn():
        message: BaseMessage = await async_retrying(OPENAI, f"{schema.__name__} call")(runnable.ainvoke, messages)
    return read_reply(message, strategy)


@dataclass(frozen=True)
class PlainReply:
    """One plain completion: its text without reasoning, and the tokens the endpoint counted."""

    text: str
    prompt_tokens: int
    completion_tokens: int


async def ask_plain(model: ChatModel | None, messages: list[BaseMessage]) -> PlainReply:
    """One plain call (no structured output, no stream) with the retry policy: a chat client's own
    task prompt, answered as the client parses it."""
    if model is None:
        raise LLMNotConfiguredError()
    async with model.gates.turn():
        message: BaseMessage = await async_retrying(OPENAI, "plain call")(model.client.ainvoke, messages)
    text, _, form = split_reasoning(message.text)
    model.saw_reasoning("field" if message.additional_kwargs.get("reasoning_content") else form)
    usage = message.usage_metadata if isinstance(message, AIMessage) else None
    return PlainReply(text, usage["input_tokens"] if usage else 0, usage["output_tokens"] if usage else 0)


class AnswerStream:
    """The answer as the model streams it: iterate for ("answer" | "reasoning", text) pieces, then
    read `answer` and `reasoning` (the totals; see `ReasoningStream` for a late lone `</think>`).
    Opening the stream is retried, the rest is not."""

    def __init__(self, model: ChatModel | None, messages: list[BaseMessage]) -> None:
        if model is None:
            raise LLMNotConfiguredError()
        self._model, self._messages = model, messages
        self._split = ReasoningStream(lone_close=model.habits.reasoning == "lone_close")

    @property
    def answer(self) -> str:
        return self._split.answer

    @property
    def reasoning(self) -> str:
        return self._split.reasoning

    async def __aiter__(self) -> AsyncIterator[Piece]:
        async with self._model.gates.turn():  # the whole stream is one call in flight
            opened: Opened = await async_retrying(OPENAI, "answer stream")(
                _open_stream, self._model.client, self._messages
            )
            stream, first = opened
            if first is not None:
                for piece in self._pieces(first):
                    yield piece
                async for chunk in stream:
                    for piece in self._pieces(chunk):
                        yield piece
        for piece in self._split.close():
            yield piece
        self._model.saw_reasoning(self._split.form)

    def _pieces(self, chunk: BaseMessageChunk) -> list[Piece]:
        field_text = str(chunk.additional_kwargs.get("reasoning_content") or "")
        return self._split.add_reasoning(field_text) + self._split.feed(chunk.text)


def stream_text(model: ChatModel | None, messages: list[BaseMessage]) -> AnswerStream:
    """The answer's stream (see `AnswerStream`)."""
    return AnswerStream(model, messages)


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
