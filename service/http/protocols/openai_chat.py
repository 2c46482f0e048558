"""OpenAI's chat completions over the workflow: `POST /v1/chat/completions` and `GET /v1/models`.

Any OpenAI client (the SDKs, LangChain's ChatOpenAI, Open WebUI, Cherry Studio, LobeChat) talks
to a knowledge base as to a model: `kb:<name>`, or the default base as `CHAT_DEFAULT_MODEL`.
The conversation is read by `conversation` (the question, the history, the client's system prompt
and the sources it sent); a client's housekeeping prompt (Open WebUI's title, tags, follow-ups, ...)
is recognised by `chat_tasks` and answered as the client parses it, without retrieval. Options
the answer cannot honour are refused by `openai_wire` with a 400 naming them.

The message content is the answer with its `[n]` citations, a short note of the workflow's
warnings, then a source list a chat UI renders; the same citations go as structured data in the
extension field `sources`. The workflow's steps are `reasoning_content` (`CHAT_REASONING`), which
chat UIs show apart and which never enter the answer. `usage` sums the tokens of every model call
(0 for an extractive answer or a task answered locally: no model ran).
"""

import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse

from core.config import Settings
from core.failures import log_failure
from service.answers import new_answer_id
from service.deps import CallerDep, Services, ServicesDep, answering, get_caller, log_answer
from service.examples import MAX_EXAMPLES, example_questions
from service.feedback import CHAT_PREFIX, answer_key
from service.graph import QueryOptions, QueryResult, WorkflowDeps, run_query, stream_query
from service.http.metrics import Metrics
from service.http.middleware import LargerBody
from service.http.openapi import error_responses
from service.http.protocols import chat_tasks
from service.http.protocols.access import open_base
from service.http.protocols.chat_tasks import ChatTask, TaskAnswer
from service.http.protocols.conversation import (
    Conversation,
    TooLong,
    assistant_turn,
    check_question,
    notes,
    read_conversation,
    source_list,
)
from service.http.protocols.errors import protocol_route
from service.http.protocols.openai_embeddings import embedding_model
from service.http.protocols.openai_wire import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChunkChoice,
    Delta,
    Model,
    ModelList,
    OpenAIError,
    OpenAIErrorBody,
    Usage,
    render_error,
)
from service.kbs import BaseAccess, KnowledgeBases, UnknownKnowledgeBase
from service.principals import Caller

KB_PREFIX = "kb:"
_LARGER_BODY_ADVICE = (
    "send a shorter question or less attached text (MAX_QUESTION_CHARS and MAX_GIVEN_CHARS say how much is "
    "answered) / 请缩短问题或少附些资料"
)


def body_limits(settings: Settings) -> list[LargerBody]:
    """The /v1 routes' body limit: a chat client's tool definitions, history and attached files (and
    a batch to embed) are far over MAX_REQUEST_BYTES; what is answered is limited by the question's
    and the given context's length instead (`check_question`)."""
    limit = settings.max_openai_request_bytes
    named = f"MAX_OPENAI_REQUEST_BYTES={limit}"
    path = re.compile(r"/v1/(chat/completions|embeddings)")
    return [LargerBody("POST", path, "application/json", limit, named, _LARGER_BODY_ADVICE)]


logger = logging.getLogger(__name__)

router = APIRouter(
    prefix="/v1",
    tags=["openai"],
    dependencies=[Depends(get_caller)],
    route_class=protocol_route(render_error),
    # Every error in OpenAI's shape (a 422 is answered 400, as OpenAI does).
    responses=error_responses(400, 401, 403, 404, 409, 413, 429, 502, 503, model=OpenAIErrorBody),
)


# --- models and conversations ---------------------------------------------------------------------


def model_names(settings: Settings, readable: list[str]) -> list[str]:
    """Every model a caller who may read `readable` may use: the default base's alias (when it is one
    of them), then `kb:<name>` of each."""
    default = [settings.chat_default_model] if settings.es_index in readable else []
    return default + [KB_PREFIX + kb for kb in readable]


def knowledge_base(
    settings: Settings, kbs: KnowledgeBases, caller: Caller, model: str, embedding: str = ""
) -> BaseAccess:
    """The base a model name addresses; a name that is not one of the caller's is a 404. The embedding
    model (`embedding`), which a chat client offers among the chat models, answers as the default one."""
    default = model in (settings.chat_default_model, embedding)
    name = None if default else model.removeprefix(KB_PREFIX)
    try:
        if name is not None and not model.startswith(KB_PREFIX):
            raise UnknownKnowledgeBase(model, kbs.readable(caller, listing=False))
        return open_base(kbs, caller, name)
    except UnknownKnowledgeBase as err:
        models = ", ".join(model_names(settings, err.readable))
        raise OpenAIError(
            404,
            f"The model `{model}` does not exist or you do not have access to it; models: {models}",
            param="model",
            code="model_not_found",
        ) from None


def step_line(event: str, data: dict[str, Any]) -> str:
    """One workflow step as a line of the reasoning stream."""
    if event == "mode":
        return f"回答方式：{data['mode']}（{data['reason']}）\n"
    return f"{data['node']}（{data['ms']:.0f} ms）：{data['outcome']}\n"


def _usage(prompt_tokens: int, completion_tokens: int) -> Usage:
    return Usage(
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens
    )


def _record(metrics: Metrics, result: QueryResult) -> None:
    metrics.record_workflow(result.route, result.web_used, result.llm_calls, result.web_calls)


# --- routes ---------------------------------------------------------------------------------


@router.get("/models", response_model=ModelList)
def list_models(services: ServicesDep, caller: CallerDep) -> ModelList:
    """The caller's knowledge bases as chat models, then the embedding model (for a caller who may read some base)."""
    created, readable = int(time.time()), services.kbs.readable(caller)
    chat = [Model(id=name, created=created) for name in model_names(services.settings, readable)]
    embedding = [Model(id=embedding_model(services.embedder), created=created, kind="embedding")] if readable else []
    return ModelList(data=[*chat, *embedding])


# `/v1/models/` (a trailing slash, as some clients write the base URL) lists them too, and is not
# read as the model "".
router.add_api_route("/models/", list_models, methods=["GET"], response_model=ModelList, include_in_schema=False)


@router.get("/models/{model:path}", response_model=Model)
def get_model(model: str, services: ServicesDep, caller: CallerDep) -> Model:
    if model == embedding_model(services.embedder):
        return Model(id=model, created=int(time.time()), kind="embedding")
    knowledge_base(services.settings, services.kbs, caller, model)
    return Model(id=model, created=int(time.time()))


def _suggest(services: Services, base: BaseAccess, about: str, asked: frozenset[str]) -> list[str]:
    """Follow-ups: the questions the page offers as examples of this base (service/examples.py)."""
    index = services.settings.questions_index
    found = example_questions(services.es, index, services.retriever, base, about, asked, MAX_EXAMPLES)
    return found.questions


@dataclass(frozen=True)
class _Chat:
    """A valid request, resolved: the base's workflow, the conversation, and the client's task if it is one."""

    body: ChatCompletionRequest
    base: BaseAccess
    workflow: WorkflowDeps
    conversation: Conversation
    task: ChatTask | None

    @property
    def options(self) -> QueryOptions:
        return QueryOptions(history=self.conversation.history, rerank=self.body.rerank)


def chat_request(body: ChatCompletionRequest, services: ServicesDep, caller: CallerDep) -> _Chat:
    """Checked before any answer starts: the model (404), the options and messages (400), the
    question's length (a task prompt is not a question) and the model's configuration (503)."""
    base = knowledge_base(services.settings, services.kbs, caller, body.model, embedding_model(services.embedder))
    body.refuse_unsupported()
    conversation = read_conversation(body.messages)
    task = chat_tasks.recognise(conversation.last_message)
    if task is None:
        try:
            check_question(services.settings, conversation)
        except TooLong as refused:
            services.metrics.record_refusal("/v1/chat/completions", refused.reason)
            raise
    return _Chat(body=body, base=base, workflow=answering(services, base), conversation=conversation, task=task)


ChatDep = Annotated[_Chat, Depends(chat_request)]


@router.post(
    "/chat/completions", response_model=ChatCompletion, responses={200: {"content": {"text/event-stream": {}}}}
)
async def chat_completions(chat: ChatDep, services: ServicesDep) -> ChatCompletion | StreamingResponse:
    """The workflow's answer as a chat completion; `stream: true` sends `chat.completion.chunk`s, then `[DONE]`."""
    settings, metrics = services.settings, services.metrics
    answer_id = new_answer_id()
    reply = _Reply(chat, CHAT_PREFIX + answer_id, int(time.time()))
    if chat.task is not None:
        done = await chat_tasks.answer(chat.task, chat.workflow, partial(_suggest, services, chat.base))
        if chat.body.stream:
            return _event_stream(reply.task_chunks(done))
        return reply.task_completion(done)
    if chat.body.stream:
        return _event_stream(_stream(chat, services, reply))
    question, client = chat.conversation.question, chat.conversation.client
    result = await run_query(chat.workflow, question, chat.options, client)
    _record(metrics, result)
    await log_answer(services, chat.base, result, "openai", answer_id=answer_id)
    steps = "".join(step_line("node", step.model_dump()) for step in result.trace)
    reasoning = step_line("mode", {"mode": result.answer_mode, "reason": result.mode_reason}) + steps
    message = AssistantMessage(
        content=assistant_turn(result, chat.conversation.notes),
        reasoning_content=reasoning if settings.chat_reasoning else None,
    )
    usage = _usage(result.usage.prompt_tokens, result.usage.completion_tokens)
    return reply.completion(message, usage, result)


@dataclass(frozen=True)
class _Reply:
    """One reply's identity, and the completion or chunks that carry it."""

    chat: _Chat
    id: str
    created: int

    def completion(self, message: AssistantMessage, usage: Usage, result: QueryResult | None = None) -> ChatCompletion:
        return ChatCompletion(
            id=self.id,
            created=self.created,
            model=self.chat.body.model,
            choices=[Choice(message=message)],
            usage=usage,
            sources=result.citations if result is not None else [],
            conflicts=result.conflicts if result is not None else [],
        )

    def chunk(self, delta: Delta, finish: Literal["stop"] | None = None, **extra: Any) -> str:
        body = ChatCompletionChunk(
            id=self.id,
            created=self.created,
            model=self.chat.body.model,
            choices=[ChunkChoice(delta=delta, finish_reason=finish)],
            **extra,
        )
        return _sse(body.model_dump(mode="json", exclude_none=True))

    def usage_chunk(self, usage: Usage) -> Iterator[str]:
        """The `usage` chunk, when the client asked for it (`stream_options.include_usage`)."""
        if self.chat.body.stream_options and self.chat.body.stream_options.include_usage:
            body = ChatCompletionChunk(
                id=self.id, created=self.created, model=self.chat.body.model, choices=[], usage=usage
            )
            yield _sse(body.model_dump(mode="json", exclude_none=True))

    def task_completion(self, done: TaskAnswer) -> ChatCompletion:
        return self.completion(
            AssistantMessage(content=done.content), _usage(done.prompt_tokens, done.completion_tokens)
        )

    def task_chunks(self, done: TaskAnswer) -> Iterator[str]:
        yield self.chunk(Delta(role="assistant", content=""))
        yield self.chunk(Delta(content=done.content))
        yield self.chunk(Delta(), "stop", sources=[])
        yield from self.usage_chunk(_usage(done.prompt_tokens, done.completion_tokens))
        yield DONE


async def _stream(chat: _Chat, services: Services, reply: _Reply) -> AsyncIterator[str]:
    """The answer as chunks; the finished answer goes to the answer log under the completion's id."""
    settings, metrics = services.settings, services.metrics
    yield reply.chunk(Delta(role="assistant", content=""))
    conversation = chat.conversation
    async for event in stream_query(chat.workflow, conversation.question, chat.options, conversation.client):
        if event.event in ("mode", "node") and settings.chat_reasoning:
            yield reply.chunk(Delta(reasoning_content=step_line(event.event, event.data)))
        elif event.event == "token":
            yield reply.chunk(Delta(content=event.data["text"]))
        elif event.event == "final":
            result = QueryResult.model_validate(event.data)
            _record(metrics, result)
            await log_answer(services, chat.base, result, "openai", answer_id=answer_key(reply.id))
            if tail := notes(result, conversation.notes) + source_list(result.citations):
                yield reply.chunk(Delta(content=tail))
            yield reply.chunk(Delta(), "stop", sources=result.citations, conflicts=result.conflicts)
            for line in reply.usage_chunk(_usage(result.usage.prompt_tokens, result.usage.completion_tokens)):
                yield line
        elif event.event == "error":
            metrics.record_error("/v1/chat/completions", "workflow")
            yield _error_chunk(event.data["message"])
    yield DONE


DONE = "data: [DONE]\n\n"


def _error_chunk(message: str) -> str:
    return _sse({"error": {"message": message, "type": "server_error", "param": None, "code": None}})


def _event_stream(lines: AsyncIterator[str] | Iterator[str]) -> StreamingResponse:
    return StreamingResponse(_ended(lines), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _each(lines: AsyncIterator[str] | Iterator[str]) -> AsyncIterator[str]:
    if isinstance(lines, Iterator):
        for line in lines:
            yield line
    else:
        async for line in lines:
            yield line


async def _ended(lines: AsyncIterator[str] | Iterator[str]) -> AsyncIterator[bytes]:
    """`lines` as UTF-8; a failure while they stream ends them as OpenAI ends a failed stream (an
    error chunk, then `[DONE]`), never a body cut short, which clients read as a network fault."""
    done = False
    try:
        async for line in _each(lines):
            done = line == DONE
            yield line.encode("utf-8")
    except Exception as err:
        if done:
            raise
        error_id = uuid.uuid4().hex[:12]
        log_failure(logger, err, "chat completion stream failed, error %s", error_id)
        yield (_error_chunk(f"回答中断：服务内部错误（错误编号 {error_id}，详情见服务日志）") + DONE).encode("utf-8")


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"
