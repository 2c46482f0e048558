"""An MCP server (the official `mcp` SDK) over the retriever and the workflow.

Tools: `list_knowledge_bases`, `search(query, kb?, mode?, k?, filters?)` (hits with their
citation labels and pages) and `ask(question, kb?, web?)` (the workflow's answer with its
citations, under the same honesty rules as `/query`: what the context does not confirm is said
to be unconfirmed). Resource: a chunk by id, `chunk://{kb}/{chunk_id}`.

Transports: streamable HTTP at `/mcp` on the service (`mount`; the same keys as the rest of the
API, checked before the SDK sees the request) and stdio (`python -m service.mcp`).
A failure the caller can act on (a query or question that `service.inputs.valid_text` refuses, with
the message and limits of every protocol, an unknown base, a missing index, Elasticsearch away, no
model configured) is a tool error with a message; anything else stays in the service log.
"""

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from elastic_transport import TransportError as ESTransportError
from elasticsearch import ApiError
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import INTERNAL_ERROR, INVALID_REQUEST
from pydantic import BaseModel, Field
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from core.schema import Mode
from core.store import EmbedderMismatchError, IndexNotFoundError, SearchError
from retrieval.lists import Filters
from retrieval.results import Hit
from service.answers import Vote
from service.deps import Services, answering, log_answer
from service.feedback import AbsentAnswer, NotTheAsker, rate
from service.graph import Citation, Conflict, QueryOptions, run_query
from service.http.auth import presented_key, unauthorized
from service.http.middleware import OriginPolicy
from service.http.protocols.access import open_base
from service.http.protocols.conversation import source_list
from service.http.schemas import MAX_K
from service.inputs import valid_text
from service.kbs import UnknownKnowledgeBase
from service.llm.client import LLMNotConfiguredError
from service.principals import EVERYONE, Caller, Keys

T = TypeVar("T")

INSTRUCTIONS = (
    "中文知识库检索与问答：search 返回带出处（章节、页码、小节）的片段，ask 用检索增强的工作流回答并引用出处；"
    "知识库里没有的内容，回答会明确说明无法确认。"
)


ServicesOf = Callable[[], Services]  # the app's services, once its lifespan has built them


class KnowledgeBaseSize(BaseModel):
    name: str
    default: bool = Field(description="the base `kb` means when left out")
    chunks: int | None = Field(None, description="chunks indexed (None: the index is not built yet)")


class KnowledgeBaseList(BaseModel):
    knowledge_bases: list[KnowledgeBaseSize]


class SearchHit(BaseModel):
    id: str = Field(description="chunk id: read it whole as the resource chunk://{kb}/{id}")
    label: str = Field(description="how to cite it: 《书名》第 3 页 · 小节, or 第N章 …")
    page: int | str | None
    section: str | None
    chapter: int | None
    title: str
    source: str
    score: float
    text: str


class SearchHits(BaseModel):
    kb: str
    mode: Mode
    hits: list[SearchHit]
    warnings: list[str] = Field(default_factory=list, description="e.g. a failed reranker: the fused order was kept")


class Answer(BaseModel):
    answer_id: str = Field(description="the answer's id: rate it with the rate_answer tool")
    answer: str = Field(description="the answer with [n] citations and the numbered source list")
    citations: list[Citation]
    conflicts: list[Conflict] = Field(description="cited sources that disagree; the answer states them too")
    mode: str = Field(description="llm: written by the model; extractive: quoted sentences only")
    web_used: bool
    warnings: list[str]


def _caller(services: Services, ctx: Context) -> Caller:
    """Who calls a tool: the key of the HTTP request (checked by `KeyRequired`), or over stdio the
    process's own `MCP_API_KEY` (all access without one: whoever starts it reads Elasticsearch itself)."""
    request = ctx.request_context.request if ctx.request_context else None
    keys = services.keys
    if request is None:
        key = services.settings.mcp_api_key
        caller = keys.caller(key.get_secret_value()) if key is not None else EVERYONE
    else:
        caller = keys.caller(presented_key(dict(request.headers)))
    if caller is None:
        raise ToolError("invalid API key")
    return caller


def _hit(hit: Hit) -> SearchHit:
    return SearchHit.model_validate(hit.model_dump(include=set(SearchHit.model_fields)))


async def _explained(call: Awaitable[T]) -> T:
    """`call`'s result; a failure the caller can act on becomes a tool error saying what to do."""
    try:
        return await call
    except (UnknownKnowledgeBase, IndexNotFoundError, EmbedderMismatchError, LLMNotConfiguredError, ValueError) as err:
        raise ToolError(str(err)) from err
    except (ESTransportError, ApiError, SearchError) as err:
        raise ToolError("Elasticsearch 暂时不可用，请稍后重试") from err


def build_mcp_server(services: ServicesOf) -> MCPServer:
    """The server's tools over the app's `services`, for either transport."""
    server: MCPServer = MCPServer(name="es-agentic-rag", instructions=INSTRUCTIONS)
    _add_search_tools(server, services)
    _add_answer_tools(server, services)
    _add_rating_tool(server, services)
    return server


def _sizes(services: Services, caller: Caller) -> KnowledgeBaseList:
    """The caller's bases, each with the chunks the caller may read of it."""
    names = services.kbs.readable(caller)
    stats = services.kbs.stats([caller.scope(name) for name in names])
    return KnowledgeBaseList(
        knowledge_bases=[
            KnowledgeBaseSize(
                name=name, default=name == services.kbs.default, chunks=stats[name].chunks if name in stats else None
            )
            for name in names
        ]
    )


def _add_search_tools(server: MCPServer, services: ServicesOf) -> None:
    """`list_knowledge_bases` and `search`."""

    @server.tool()
    async def list_knowledge_bases(ctx: Context) -> KnowledgeBaseList:
        """The knowledge bases you may search and ask, with their size."""
        return await asyncio.to_thread(_sizes, services(), _caller(services(), ctx))

    @server.tool()
    async def search(
        ctx: Context,
        query: Annotated[
            str,
            Field(
                min_length=1, description="what to look for, in any language (at most MAX_QUESTION_CHARS characters)"
            ),
        ],
        kb: Annotated[str | None, Field(description="knowledge base (default: the service's default)")] = None,
        mode: Annotated[Mode, Field(description="hybrid (default), vector, bm25, bigram or standard")] = Mode.HYBRID,
        k: Annotated[int, Field(ge=1, le=MAX_K, description="number of hits")] = 5,
        filters: Annotated[Filters | None, Field(description="sources, chapter_from, chapter_to")] = None,
        rerank: Annotated[bool, Field(description="rerank hybrid's candidates (when RERANKER is set)")] = True,
    ) -> SearchHits:
        """Search a knowledge base; each hit has its citation label, page and section."""

        async def run() -> SearchHits:
            app = services()
            text = valid_text(app.settings, "query", query)  # the limits and messages of every protocol
            base = await asyncio.to_thread(open_base, app.kbs, _caller(app, ctx), kb)
            search = app.retriever.search
            result = await asyncio.to_thread(search, base.scope, text, mode, k, filters, rerank=rerank)
            hits = [_hit(hit) for hit in result.hits]
            return SearchHits(kb=base.kb, mode=result.mode, hits=hits, warnings=result.warnings)

        return await _explained(run())


def _add_answer_tools(server: MCPServer, services: ServicesOf) -> None:
    """`ask` and the `chunk://` resource."""

    @server.tool()
    async def ask(
        ctx: Context,
        question: Annotated[
            str, Field(min_length=1, description="the question (at most MAX_QUESTION_CHARS characters)")
        ],
        kb: Annotated[str | None, Field(description="knowledge base (default: the service's default)")] = None,
        web: Annotated[bool, Field(description="allow a web search when the knowledge base is not enough")] = True,
        rerank: Annotated[bool, Field(description="rerank hybrid's candidates (when RERANKER is set)")] = True,
    ) -> Answer:
        """Answer from a knowledge base with the agentic workflow, citing sources; says what it cannot confirm."""

        async def run() -> Answer:
            app = services()
            text = valid_text(app.settings, "question", question)
            base = await asyncio.to_thread(open_base, app.kbs, _caller(app, ctx), kb)
            result = await run_query(answering(app, base), text, QueryOptions(web=web, rerank=rerank))
            app.metrics.record_workflow(result.route, result.web_used, result.llm_calls, result.web_calls)
            result = await log_answer(app, base, result, "mcp")
            return Answer(
                answer_id=result.answer_id,
                answer=result.answer + source_list(result.citations),
                citations=result.citations,
                conflicts=result.conflicts,
                mode=result.answer_mode,
                web_used=result.web_used,
                warnings=result.warnings,
            )

        return await _explained(run())

    @server.resource("chunk://{kb}/{chunk_id}", mime_type="application/json")
    async def chunk(kb: str, chunk_id: str, ctx: Context) -> str:
        """One chunk, whole, with where it comes from."""
        try:
            app = services()
            base = await asyncio.to_thread(open_base, app.kbs, _caller(app, ctx), kb)
            hit = await asyncio.to_thread(app.retriever.chunk, base.scope, chunk_id)
        except (UnknownKnowledgeBase, IndexNotFoundError) as err:
            raise ResourceNotFoundError(str(err)) from err
        if hit is None:
            raise ResourceNotFoundError(f"no chunk {chunk_id!r} in {kb!r}")
        return json.dumps(hit.model_dump(mode="json", exclude={"explain", "similarity"}), ensure_ascii=False)


class Rated(BaseModel):
    answer_id: str
    vote: Vote
    comment: str
    chunk_id: str | None


def _add_rating_tool(server: MCPServer, services: ServicesOf) -> None:
    """`rate_answer`: the asker's rating of an answer `ask` gave (as `POST /answers/{id}/feedback`)."""

    @server.tool()
    async def rate_answer(
        ctx: Context,
        answer_id: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$", description="the answer_id that ask returned")],
        vote: Annotated[Vote, Field(description="up: the answer was right; down: it was not")],
        comment: Annotated[str, Field(max_length=2000, description="what was wrong or missing")] = "",
        chunk_id: Annotated[
            str | None,
            Field(
                min_length=1, max_length=200, description="the id of the passage that answers it (a search hit's id)"
            ),
        ] = None,
    ) -> Rated:
        """Rate an answer you asked for; a new rating replaces the old. An admin may turn a downvote
        with the right passage into a question of the base's evaluation set."""
        app = services()
        try:
            rated = await asyncio.to_thread(
                rate, app.answers, app.retriever, _caller(app, ctx), answer_id, vote, comment, chunk_id
            )
        except (AbsentAnswer, NotTheAsker) as err:
            raise ToolError(str(err)) from err
        app.metrics.record_vote(rated.answer.kb, vote, first=rated.first)
        rating = rated.answer.rating
        assert rating is not None
        return Rated(answer_id=rated.answer.id, vote=rating.vote, comment=rating.comment, chunk_id=rating.chunk_id)


class KeyRequired:
    """The API's keys in front of an ASGI app: `Authorization: Bearer <key>` or `X-API-Key`, else a 401."""

    def __init__(self, app: ASGIApp, keys: Keys) -> None:
        self.app, self.keys = app, keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers", [])}
        if scope["type"] == "http" and self.keys.caller(presented_key(headers)) is None:
            refusal = unauthorized()
            answer = JSONResponse({"detail": refusal.detail}, status_code=refusal.status_code, headers=refusal.headers)
            await answer(scope, receive, send)
            return
        await self.app(scope, receive, send)


def render_error(status: int, message: str, err: Exception | None) -> tuple[int, dict[str, Any]]:
    """A JSON-RPC error object, whose `message` MCP clients show (the SDK raises it as the call's
    error): a refused key says how to send one, instead of "Server returned an error response"."""
    code = INTERNAL_ERROR if status >= 500 else INVALID_REQUEST
    return status, {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


def transport_security(policy: OriginPolicy) -> TransportSecuritySettings:
    """The SDK's own Host/Origin check, from the service's policy (service.http.middleware checks
    first; this holds if `/mcp` is ever served on its own)."""
    if "*" in policy.hosts or "*" in policy.origins:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    hosts = [pattern for host in sorted(policy.hosts) for pattern in (host, f"{host}:*")]
    origins = [f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(allowed_hosts=hosts, allowed_origins=origins + sorted(policy.origins))


def http_endpoint(server: MCPServer, keys: Keys, policy: OriginPolicy) -> ASGIApp:
    """The streamable HTTP transport as one ASGI endpoint (routed at `/mcp`), keys checked first.
    Stateless: every request stands alone, so any worker answers it."""
    server.streamable_http_app(stateless_http=True, transport_security=transport_security(policy))
    return KeyRequired(StreamableHTTPASGIApp(server.session_manager), keys)
