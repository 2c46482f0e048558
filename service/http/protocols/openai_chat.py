"""OpenAI's chat completions over the workflow: `POST /v1/chat/completions` and `GET /v1/models`.

Any OpenAI client (the SDKs, LangChain's ChatOpenAI, Open WebUI, Cherry Studio, LobeChat) talks
to a knowledge base as to a model: `kb:<name>`, or the default base as `CHAT_DEFAULT_MODEL`.
The last user message is the question and the turns before it are the history (the workflow's
rewrite step makes the question standalone). System prompts and sampling options (temperature,
top_p, max_tokens, ...) are accepted and ignored: the workflow's own prompts and limits answer.

The message content is the answer with its `[n]` citations, then a source list a chat UI renders
(`[n]` with the passage's label, or the web page's title as a link); the same citations go as
structured data in the extension field `sources`. The workflow's steps are `reasoning_content`
(`CHAT_REASONING`), which chat UIs show apart and which never enter the answer. `usage` sums
the tokens of every model call of the workflow (0 for an extractive answer: no model ran).
"""

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from core.config import Settings
from service.deps import CallerDep, ServicesDep, answering, get_caller
from service.graph import ChatTurn, Citation, QueryOptions, QueryResult, WorkflowDeps, run_query, stream_query
from service.http.metrics import Metrics
from service.http.openapi import error_responses
from service.http.protocols.access import open_base
from service.http.protocols.errors import protocol_route
from service.inputs import valid_text
from service.kbs import BaseAccess, KnowledgeBases, UnknownKnowledgeBase
from service.principals import Caller

KB_PREFIX = "kb:"
SOURCES_HEADING = "\n\n---\n**来源**\n"
OWNER = "es-agentic-rag"


# --- the wire format ------------------------------------------------------------------------


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_calls, ... are accepted

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        """The message's text; a part that is not text (an image, a file) is a 400, never dropped silently."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        other = [part.type for part in self.content if part.type != "text"]
        if other:
            raise OpenAIError(400, f"only text content is supported, got {', '.join(other)} parts", param="messages")
        return "".join(part.text or "" for part in self.content)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """OpenAI's request; every other option (temperature, top_p, max_tokens, n, ...) is accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str
    reasoning_content: str | None = None


class _Choice(BaseModel):
    index: int = 0
    logprobs: None = None


class Choice(_Choice):
    message: AssistantMessage
    finish_reason: Literal["stop"] = "stop"


class _Completion(BaseModel):
    """What a completion and each of its streamed chunks carry alike."""

    id: str
    created: int
    model: str


class ChatCompletion(_Completion):
    object: Literal["chat.completion"] = "chat.completion"
    choices: list[Choice]
    usage: Usage
    sources: list[Citation] = Field(description="extension: the cited passages and web pages, as /query's citations")


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None


class ChunkChoice(_Choice):
    delta: Delta
    finish_reason: Literal["stop"] | None = None


class ChatCompletionChunk(_Completion):
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    choices: list[ChunkChoice]
    usage: Usage | None = None
    sources: list[Citation] | None = Field(None, description="extension: on the chunk that finishes the answer")


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = OWNER


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]


# --- errors in OpenAI's shape -----------------------------------------------------------------


class OpenAIError(HTTPException):
    """An error OpenAI clients parse: `{"error": {"message", "type", "param", "code"}}`."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(status_code=status, detail=message)
        self.param, self.code = param, code


_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "permission_error"}
_TYPES |= {404: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error"}


def _render(status: int, message: str, err: Exception) -> tuple[int, dict[str, Any]]:
    status = 400 if status == 422 else status  # OpenAI answers a malformed request with 400
    param = getattr(err, "param", None)
    code = getattr(err, "code", None) or ("invalid_api_key" if status == 401 else None)
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return status, {"error": {"message": message, "type": kind, "param": param, "code": code}}


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorBody(BaseModel):
    error: OpenAIErrorDetail


router = APIRouter(
    prefix="/v1",
    tags=["openai"],
    dependencies=[Depends(get_caller)],
    route_class=protocol_route(_render),
    # Every error in OpenAI's shape (a 422 is answered 400, as OpenAI does).
    responses=error_responses(400, 401, 403, 404, 409, 413, 502, 503, model=OpenAIErrorBody),
)


# --- models and conversations ---------------------------------------------------------------------


def model_names(settings: Settings, readable: list[str]) -> list[str]:
    """Every model a caller who may read `readable` may use: the default base's alias (when it is one
    of them), then `kb:<name>` of each."""
    default = [settings.chat_default_model] if settings.es_index in readable else []
    return default + [KB_PREFIX + kb for kb in readable]


def knowledge_base(settings: Settings, kbs: KnowledgeBases, caller: Caller, model: str) -> BaseAccess:
    """The base a model name addresses; a name that is not one of the caller's is a 404."""
    name = None if model == settings.chat_default_model else model.removeprefix(KB_PREFIX)
    try:
        if name is not None and not model.startswith(KB_PREFIX):
            raise UnknownKnowledgeBase(model, kbs.readable(caller))
        return open_base(kbs, caller, name)
    except UnknownKnowledgeBase as err:
        models = ", ".join(model_names(settings, err.readable))
        raise OpenAIError(
            404,
            f"The model `{model}` does not exist or you do not have access to it; models: {models}",
            param="model",
            code="model_not_found",
        ) from None


def conversation(messages: list[ChatMessage]) -> tuple[str, list[ChatTurn]]:
    """(the question: the last user message, the history: the user and assistant turns before it)."""
    last = max((i for i, message in enumerate(messages) if message.role == "user"), default=None)
    if last is None:
        raise OpenAIError(400, "messages hold no user message: the last user message is the question", param="messages")
    question = messages[last].text()  # checked by `valid_text`, as every protocol checks a question
    history = [
        ChatTurn(role="user" if message.role == "user" else "assistant", content=_without_sources(message.text()))
        for message in messages[:last]
        if message.role in ("user", "assistant") and message.text().strip()
    ]
    return question, history


def _without_sources(text: str) -> str:
    """An earlier answer of ours without its source list (the history is the conversation, not our footer)."""
    return text.split(SOURCES_HEADING, 1)[0]


def source_list(citations: list[Citation]) -> str:
    """The cited sources as Markdown a chat UI renders: `[n] label`, a web page as a link."""
    if not citations:
        return ""
    lines = []
    for citation in citations:
        if citation.kind == "web" and citation.url:
            lines.append(f"- [{citation.number}] [{citation.title or citation.url}]({citation.url})")
        else:
            lines.append(f"- [{citation.number}] {citation.label or citation.title or citation.source}")
    return SOURCES_HEADING + "\n".join(lines)


def step_line(event: str, data: dict[str, Any]) -> str:
    """One workflow step as a line of the reasoning stream."""
    if event == "mode":
        return f"回答方式：{data['mode']}（{data['reason']}）\n"
    return f"{data['node']}（{data['ms']:.0f} ms）：{data['outcome']}\n"


def _usage(result: QueryResult) -> Usage:
    usage = result.usage
    return Usage(
        prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens, total_tokens=usage.total_tokens
    )


def _record(metrics: Metrics, result: QueryResult) -> None:
    metrics.record_workflow(result.route, result.web_used, result.llm_calls, result.web_calls)


# --- routes ---------------------------------------------------------------------------------


@router.get("/models", response_model=ModelList)
def list_models(services: ServicesDep, caller: CallerDep) -> ModelList:
    """The caller's knowledge bases as models."""
    created, readable = int(time.time()), services.kbs.readable(caller)
    return ModelList(data=[Model(id=name, created=created) for name in model_names(services.settings, readable)])


@router.get("/models/{model:path}", response_model=Model)
def get_model(model: str, services: ServicesDep, caller: CallerDep) -> Model:
    knowledge_base(services.settings, services.kbs, caller, model)
    return Model(id=model, created=int(time.time()))


@dataclass(frozen=True)
class _Chat:
    """A valid request, resolved: the base's workflow, the question and the options."""

    body: ChatCompletionRequest
    workflow: WorkflowDeps
    question: str
    options: QueryOptions


def chat_request(body: ChatCompletionRequest, services: ServicesDep, caller: CallerDep) -> _Chat:
    """Checked before any answer starts: the model (404), the messages (400), the length and the model's configuration."""
    base = knowledge_base(services.settings, services.kbs, caller, body.model)
    question, history = conversation(body.messages)
    question = valid_text(services.settings, "messages", question)
    workflow = answering(services, base)
    return _Chat(body=body, workflow=workflow, question=question, options=QueryOptions(history=history))


ChatDep = Annotated[_Chat, Depends(chat_request)]


@router.post(
    "/chat/completions", response_model=ChatCompletion, responses={200: {"content": {"text/event-stream": {}}}}
)
async def chat_completions(chat: ChatDep, services: ServicesDep) -> ChatCompletion | StreamingResponse:
    """The workflow's answer as a chat completion; `stream: true` sends `chat.completion.chunk`s, then `[DONE]`."""
    settings, metrics = services.settings, services.metrics
    completion_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    if chat.body.stream:
        chunks = _stream(chat, settings, metrics, completion_id, created)
        return StreamingResponse(chunks, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    result = await run_query(chat.workflow, chat.question, chat.options)
    _record(metrics, result)
    steps = "".join(step_line("node", step.model_dump()) for step in result.trace)
    message = AssistantMessage(
        content=result.answer + source_list(result.citations),
        reasoning_content=f"{step_line('mode', {'mode': result.answer_mode, 'reason': result.mode_reason})}{steps}"
        if settings.chat_reasoning
        else None,
    )
    return ChatCompletion(
        id=completion_id,
        created=created,
        model=chat.body.model,
        choices=[Choice(message=message)],
        usage=_usage(result),
        sources=result.citations,
    )


async def _stream(
    chat: _Chat, settings: Settings, metrics: Metrics, completion_id: str, created: int
) -> AsyncIterator[str]:
    def chunk(delta: Delta, finish: Literal["stop"] | None = None, **extra: Any) -> str:
        body = ChatCompletionChunk(
            id=completion_id,
            created=created,
            model=chat.body.model,
            choices=[ChunkChoice(delta=delta, finish_reason=finish)],
            **extra,
        )
        return _sse(body.model_dump(mode="json", exclude_none=True))

    yield chunk(Delta(role="assistant", content=""))
    async for event in stream_query(chat.workflow, chat.question, chat.options):
        if event.event in ("mode", "node") and settings.chat_reasoning:
            yield chunk(Delta(reasoning_content=step_line(event.event, event.data)))
        elif event.event == "token":
            yield chunk(Delta(content=event.data["text"]))
        elif event.event == "final":
            result = QueryResult.model_validate(event.data)
            _record(metrics, result)
            if sources := source_list(result.citations):
                yield chunk(Delta(content=sources))
            yield chunk(Delta(), "stop", sources=result.citations)
            if chat.body.stream_options and chat.body.stream_options.include_usage:
                usage = ChatCompletionChunk(
                    id=completion_id, created=created, model=chat.body.model, choices=[], usage=_usage(result)
                )
                yield _sse(usage.model_dump(mode="json", exclude_none=True))
        elif event.event == "error":
            metrics.record_error("/v1/chat/completions", "workflow")
            yield _sse(
                {"error": {"message": event.data["message"], "type": "server_error", "param": None, "code": None}}
            )
    yield "data: [DONE]\n\n"


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"
