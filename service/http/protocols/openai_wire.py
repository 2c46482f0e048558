"""OpenAI's chat-completion wire format as this service speaks it: the request it accepts, the
completion and chunks it answers, its error body, and the options it refuses.

Options a client may send and we can honour by ignoring them (sampling: `temperature`, `top_p`,
`max_tokens`, `seed`, `stop`, penalties, `user`, `metadata`, ...; `tools` the client does not force)
are accepted: the workflow's own prompts and limits answer. Options that demand something we
cannot give are a 400 naming the option, so an agent framework learns at once instead of failing
later on an answer of the wrong shape: a forced tool call (`tool_choice` "required" or a named
function, `function_call` likewise), a JSON `response_format`, `n` > 1.
"""

from typing import Any, Literal

from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field

from service.graph import Citation, Conflict

OWNER = "es-agentic-rag"


class OpenAIError(HTTPException):
    """An error OpenAI clients parse: `{"error": {"message", "type", "param", "code"}}`."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(status_code=status, detail=message)
        self.param, self.code = param, code


_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "permission_error"}
_TYPES |= {404: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error"}


def render_error(status: int, message: str, err: Exception | None) -> tuple[int, dict[str, Any]]:
    """OpenAI's body for an error of the app (a 422 is answered 400, as OpenAI does)."""
    status = 400 if status == 422 else status
    param = getattr(err, "param", None) or _field(err)
    code = getattr(err, "code", None) or ("invalid_api_key" if status == 401 else None)
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return status, {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _field(err: Exception | None) -> str | None:
    """The request field a validation error names first (OpenAI's `param`)."""
    if not isinstance(err, RequestValidationError) or not err.errors():
        return None
    fields = [str(part) for part in err.errors()[0].get("loc", ()) if part != "body"]
    return ".".join(fields) or None


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorBody(BaseModel):
    error: OpenAIErrorDetail


# --- the request ----------------------------------------------------------------------------


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
    """OpenAI's request: the options below are read (and refused when they demand what we cannot
    give), every other one is accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = None
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    functions: list[Any] | None = None
    function_call: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    rerank: bool = True  # ours (an SDK's `extra_body`): False answers without the reranking stage

    def refuse_unsupported(self) -> None:
        """A 400 naming the first option that asks for what a knowledge base's answer cannot be."""
        if self.tools and self.tool_choice not in (None, "auto", "none"):
            raise _unsupported("tool_choice", "it forces a tool call, and this model calls no tools")
        if self.functions and self.function_call not in (None, "auto", "none"):
            raise _unsupported("function_call", "it forces a function call, and this model calls no functions")
        wanted = (self.response_format or {}).get("type", "text")
        if wanted != "text":
            raise _unsupported("response_format", f"the answer is text with citations, never {wanted}")
        if self.n is not None and self.n > 1:
            raise _unsupported("n", f"one answer per request, not {self.n}")


def _unsupported(option: str, why: str) -> OpenAIError:
    return OpenAIError(
        400,
        f"`{option}` is not supported: {why}; leave it out (docs/api.md lists the options this service accepts)",
        param=option,
        code="unsupported_parameter",
    )


# --- the answer -----------------------------------------------------------------------------


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
    conflicts: list[Conflict] = Field(
        default_factory=list, description="extension: cited sources that disagree, as /query's conflicts"
    )


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
    conflicts: list[Conflict] | None = Field(None, description="extension: on the chunk that finishes the answer")


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = OWNER
    kind: Literal["chat", "embedding"] = Field(
        "chat", description="extension: a chat model (a knowledge base) or the embedding model (/v1/embeddings)"
    )


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]
