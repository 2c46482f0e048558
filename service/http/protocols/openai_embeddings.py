"""OpenAI's embeddings over the service's own embedder: `POST /v1/embeddings`.

A chat client that retrieves on its own (Open WebUI with `RAG_EMBEDDING_ENGINE=openai`, LangChain's
`OpenAIEmbeddings`, Dify's OpenAI-API-compatible provider) gets the multilingual embedder the
service carries, offline, on the same keys. Embedding reads no base: any key that may read some
base may embed. The model is the embedder's name (listed in `/v1/models`).

E5-style embedders tell queries from passages: an input written `query: …` or `passage: …` (what
Open WebUI sends with `RAG_EMBEDDING_QUERY_PREFIX` / `RAG_EMBEDDING_CONTENT_PREFIX`), or a request
field `input_type` (`query`, or `passage`/`document`; Open WebUI's `RAG_EMBEDDING_PREFIX_FIELD_NAME`),
picks the side; an input without either is embedded as a passage. Token arrays (what LangChain sends
unless `check_embedding_ctx_length=False`) are refused with that advice: the service reads text.

The model reads a window of tokens (e5-small: 512, in its own tokenizer, prefix and specials
included). An input longer than that is refused with a 400 (`code: context_length_exceeded`), as
OpenAI refuses an input over its model's context, unless the request asks for it to be cut: TEI's
`truncate: true` (then only the window's head is embedded, as TEI does), or the service is set to cut
for every caller (`EMBEDDINGS_TRUNCATE=true`: Open WebUI cannot send the field). A request also embeds at
most `EMBED_REQUEST_TOKENS` tokens in all (400, `code: too_many_tokens`); `usage` counts the model's
own tokens. A request of more than one input is bulk work for the shared embedder
(core.embeddings.BatchingEmbedder): searches go first, and principals take turns.
"""

import base64
from typing import Literal

import numpy as np
from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from core.embeddings import Embedder, TokenWindow
from core.scheduling import current_ticket
from service.deps import CallerDep, ServicesDep, get_caller
from service.http.openapi import error_responses
from service.http.protocols.errors import protocol_route
from service.http.protocols.openai_wire import OpenAIError, OpenAIErrorBody, render_error

MAX_INPUT_CHARS = 8192  # one text: far over what the embedder reads (512 tokens), under a runaway
_SIDES = {"query: ": "query", "passage: ": "passage"}
_QUERY_TYPES = ("query", "search_query")

router = APIRouter(
    prefix="/v1",
    tags=["openai"],
    dependencies=[Depends(get_caller)],
    route_class=protocol_route(render_error),
    responses=error_responses(400, 401, 403, 404, 413, 503, model=OpenAIErrorBody),
)


class EmbeddingRequest(BaseModel):
    """OpenAI's request; `input_type` is the extension Open WebUI and other clients send for the side."""

    model_config = ConfigDict(extra="allow")

    model: str
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    input_type: str | None = None
    truncate: bool = False  # TEI's: cut an input over the model's window instead of refusing it


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


def embedding_model(embedder: Embedder) -> str:
    """The model name the embedder answers to (as `/v1/models` lists it)."""
    return embedder.name


def _texts(body: EmbeddingRequest, most: int) -> list[str]:
    """The inputs as texts, checked: text (not token ids), not empty, at most `most` of them and
    MAX_INPUT_CHARS characters each."""
    texts = [body.input] if isinstance(body.input, str) else body.input
    if any(not isinstance(item, str) for item in texts):
        raise _invalid(
            "send the input as text, not token ids (LangChain's OpenAIEmbeddings: check_embedding_ctx_length=False)"
        )
    strings = [item for item in texts if isinstance(item, str)]
    if not strings:
        raise _invalid("input is empty: send a text or a list of texts")
    if len(strings) > most:
        raise _invalid(f"{len(strings)} inputs, more than MAX_EMBEDDING_INPUTS={most}: send them in smaller batches")
    for index, text in enumerate(strings):
        if not text.strip():
            raise _invalid(f"input[{index}] is empty: every input needs a non-space character")
        if len(text) > MAX_INPUT_CHARS:
            raise _invalid(f"input[{index}] has {len(text)} characters, more than {MAX_INPUT_CHARS}: split it first")
    return strings


def _invalid(message: str) -> OpenAIError:
    return OpenAIError(400, message, param="input")


def _sides(texts: list[str], input_type: str | None) -> list[tuple[bool, str]]:
    """Each text as (is a query, the text without its side's prefix)."""
    default = "query" if (input_type or "").lower() in _QUERY_TYPES else "passage"
    sides = []
    for text in texts:
        prefix = next((p for p in _SIDES if text.startswith(p)), None)
        side, bare = (_SIDES[prefix], text[len(prefix) :]) if prefix else (default, text)
        sides.append((side == "query", bare))
    return sides


def _tokens(window: TokenWindow | None, sides: list[tuple[bool, str]], truncate: bool, budget: int) -> int:
    """The tokens the model will read (characters without a window): an input over the window is a 400
    unless `truncate`; so is a request over EMBED_REQUEST_TOKENS. Checked before anything is embedded."""
    if window is None:
        return sum(len(text) for _, text in sides)
    total = 0
    for index, (query, text) in enumerate(sides):
        tokens = window.tokens(text, query)
        if tokens > window.size and not truncate:
            raise OpenAIError(
                400,
                f"input[{index}] is {tokens} tokens, more than the model's window of {window.size}: "
                'shorten it, or send "truncate": true to embed its first tokens only',
                param="input",
                code="context_length_exceeded",
            )
        total += min(tokens, window.size)
    if total > budget:
        message = f"the inputs are {total} tokens, more than EMBED_REQUEST_TOKENS={budget}: send smaller batches"
        raise OpenAIError(400, message, param="input", code="too_many_tokens")
    return total


def _embed(embedder: Embedder, sides: list[tuple[bool, str]]) -> np.ndarray:
    """Each text on its side (query or passage), the passages in one call."""
    vectors = np.zeros((len(sides), embedder.dim), dtype=np.float32)
    passages = [i for i, (query, _) in enumerate(sides) if not query]
    if passages:
        vectors[passages] = embedder.embed_documents([sides[i][1] for i in passages])
    for i, (query, text) in enumerate(sides):
        if query:
            vectors[i] = embedder.embed_query(text)
    return vectors


def _encoded(vector: np.ndarray, encoding: str) -> list[float] | str:
    """A vector as OpenAI sends it: floats, or the base64 of its little-endian float32 bytes."""
    if encoding == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return [float(value) for value in vector]


@router.post("/embeddings", response_model=EmbeddingList)
async def create_embeddings(body: EmbeddingRequest, services: ServicesDep, caller: CallerDep) -> EmbeddingList:
    """Vectors of the service's embedder for a text or a batch, as OpenAI answers them."""
    embedder = services.embedder
    name = embedding_model(embedder)
    if body.model != name:
        raise OpenAIError(
            404,
            f"The model `{body.model}` does not exist or is not an embedding model; embedding model: {name}",
            param="model",
            code="model_not_found",
        )
    if not services.kbs.readable(caller):
        raise OpenAIError(403, "this key may read no knowledge base, so it may not embed either")
    texts = _texts(body, services.settings.max_embedding_inputs)
    if body.dimensions is not None and body.dimensions != embedder.dim:
        raise OpenAIError(
            400, f"{name} makes {embedder.dim}-dimensional vectors, not {body.dimensions}", param="dimensions"
        )
    sides = _sides(texts, body.input_type)
    window: TokenWindow | None = getattr(embedder, "window", None)
    truncate = body.truncate or services.settings.embeddings_truncate
    tokens = await run_in_threadpool(_tokens, window, sides, truncate, services.settings.embed_request_tokens)
    current_ticket().bulk = len(texts) > 1  # a batch waits behind searches
    vectors = await run_in_threadpool(_embed, embedder, sides)
    data = [Embedding(index=i, embedding=_encoded(v, body.encoding_format)) for i, v in enumerate(vectors)]
    return EmbeddingList(data=data, model=name, usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens))
