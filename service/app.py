"""The app: `create_app` wires the routers, middleware and the MCP endpoint; `open_services` builds
the one typed `Services` object (service/deps.py) that the lifespan puts on `app.state.services`.

Routers import `service.deps`, never this module. Blocking endpoints are plain `def`, so FastAPI
runs them in its threadpool and the event loop never waits on embedding or Elasticsearch.
"""

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from core.config import Settings
from core.embeddings import BatchingEmbedder, Embedder, Sharing, load_embedder
from core.redact import redact_url
from core.store import create_client
from retrieval.rerank import Reranker, build_reranker
from retrieval.retriever import build_retriever
from service.answers import AnswerLog
from service.deps import Services
from service.graph import build_deps
from service.http.errors import add_error_handlers
from service.http.fairness import Tickets
from service.http.metrics import Metrics, MetricsMiddleware
from service.http.middleware import BodySizeLimit, OneCredential, OriginPolicy, TrustedOrigin, UnicodeText
from service.http.openapi import document_statuses
from service.http.protocols import dify, mcp_server, openai_chat, openai_embeddings
from service.http.protocols.errors import ProtocolErrors
from service.http.protocols.openai_wire import render_error as render_openai_error
from service.http.routes import aliases, answers, calibration, documents, evaluation, health, jobs, kbs, page, query
from service.jobs.evaluation import Evaluations
from service.jobs.runner import JobRunner, RunnerLimits
from service.jobs.store import JobStore
from service.jobs.upload import Uploads
from service.kbs import KnowledgeBases
from service.llm.rerank import LlmScorer
from service.principals import Keys, load_principals

logger = logging.getLogger(__name__)

WEB_DIR = Path(__file__).resolve().parent / "http" / "web"
ROUTERS = (
    health,
    page,
    query,
    kbs,
    calibration,
    aliases,
    documents,
    jobs,
    evaluation,
    answers,
    openai_chat,
    openai_embeddings,
    dify,
)
# Each protocol's paths and the shape of its errors (service/http/protocols/errors.py).
PROTOCOL_ERRORS = (("/v1", render_openai_error), ("/retrieval", dify.render_error), ("/mcp", mcp_server.render_error))


def build_stage(settings: Settings, metrics: Metrics) -> Reranker | None:
    """The reranking stage `RERANKER` names (the chat model's for `llm`), counted in /metrics."""
    reranker = build_reranker(settings, LlmScorer(settings) if settings.reranker == "llm" else None)
    if reranker is not None:
        reranker.listeners.append(metrics.record_rerank)
    return reranker


@asynccontextmanager
async def open_services(
    settings: Settings, keys: Keys, metrics: Metrics, *, embedder: Embedder | None = None, run_jobs: bool = True
) -> AsyncIterator[Services]:
    """Everything the service holds, loaded and warmed; the job runner runs only where `run_jobs`
    (the HTTP service: the stdio MCP server never takes a job another process may be running)."""
    es = create_client(settings)
    loaded = embedder if embedder is not None else await run_in_threadpool(load_embedder, settings.embedder, settings)
    window_s, most = settings.query_batch_window_ms / 1000, settings.query_batch_max
    sharing = Sharing(window_s, most, settings.embed_express_tokens, settings.embed_slice_tokens)
    batching = BatchingEmbedder(loaded, window_s, most, sharing)
    retriever = build_retriever(settings, es, batching, build_stage(settings, metrics))
    # Load jieba's dictionary and run the embedder once now, not on the first user's query.
    await run_in_threadpool(retriever.tokenizer.query_terms, "预热")
    await run_in_threadpool(batching.embed_query, "预热")
    bases = KnowledgeBases(es, settings, retriever)
    runner = JobRunner(
        JobStore(es, settings.jobs_index),
        [Uploads(es, batching, settings).kind(), Evaluations(es, retriever, bases).kind()],
        RunnerLimits.of(settings),
    )
    services = Services(
        settings=settings,
        es=es,
        keys=keys,
        metrics=metrics,
        embedder=batching,
        retriever=retriever,
        kbs=bases,
        workflow=build_deps(settings, es, retriever),
        jobs=runner,
        answers=AnswerLog(es, settings),
    )
    if run_jobs:
        runner.start()  # resuming what a previous process left unfinished
    logger.info("ready: index %r on %s, embedder %s", settings.es_index, redact_url(settings.es_url), batching.name)
    try:
        yield services
    finally:
        if run_jobs:
            runner.stop()  # before the client closes under a running job
        batching.close()
        es.close()


def create_app(settings: Settings, *, embedder: Embedder | None = None) -> FastAPI:
    """The app for `settings`; pass `embedder` to share one already loaded (tests)."""
    keys, metrics, policy = Keys(load_principals(settings)), Metrics(), origin_policy(settings)
    mcp = mcp_server.build_mcp_server(lambda: app.state.services)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_services(settings, keys, metrics, embedder=embedder) as services, mcp.session_manager.run():
            app.state.services = services
            yield

    # /docs loads Swagger UI from the app (fastapi-offline's packaged files), not a CDN: it works offline.
    # No /redoc: ReDoc's bundle still fetches its logo from the network.
    app = FastAPIOffline(
        redoc_url=None,
        title="Agentic RAG on Elasticsearch",
        summary="Chinese knowledge-base questions answered with hybrid retrieval, sufficiency checks and web fallback",
        lifespan=lifespan,
    )
    add_error_handlers(app)
    for module in ROUTERS:
        app.include_router(module.router)
    endpoint = mcp_server.http_endpoint(mcp, keys, policy)
    # Stateless: no session to stream to, so no GET (its event stream never closed) and no DELETE: 405.
    app.router.routes.append(Route("/mcp", endpoint, methods=["POST"], include_in_schema=False))
    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")
    app.add_api_route("/", lambda: FileResponse(WEB_DIR / "index.html"), include_in_schema=False)
    icon = WEB_DIR / "favicon.ico"  # what a browser asks for on every page
    app.add_api_route("/favicon.ico", lambda: FileResponse(icon, media_type="image/x-icon"), include_in_schema=False)
    _add_middleware(app, settings, metrics, policy)
    limit = settings.max_question_chars
    embedder_name = embedder.name if embedder is not None else settings.embedder  # what `load_embedder` names it
    document_statuses(
        app,
        max_lengths={"query": limit, "question": limit},
        choices={"CreateKnowledgeBase": {"embedder": [embedder_name]}},
        secured=not keys.open,
    )
    return app


def origin_policy(settings: Settings) -> OriginPolicy:
    """The names and pages the service answers (CORS origins are pages it answers too)."""
    return OriginPolicy.of(settings.host, settings.allowed_hosts, [*settings.allowed_origins, *settings.cors_origins])


def _add_middleware(app: FastAPI, settings: Settings, metrics: Metrics, policy: OriginPolicy) -> None:
    """Outermost last: the Host/Origin check runs before anything else reads the request, and every
    refusal made before a route (that check's too) is rendered in the shape of the protocol it was sent to."""
    larger = [
        *documents.upload_body_limits(settings),
        *openai_chat.body_limits(settings),
        *aliases.aliases_body_limits(),
    ]
    app.add_middleware(UnicodeText, larger=documents.upload_body_limits(settings))  # streamed to their route
    app.add_middleware(BodySizeLimit, limit=settings.max_request_bytes, larger=larger)
    app.add_middleware(
        Tickets, budget=settings.embed_request_tokens, read_timeout_s=settings.body_read_timeout_s
    )  # whose work, how much, still there?
    app.add_middleware(
        CORSMiddleware,
        allow_origins=settings.cors_origins,
        allow_methods=["GET", "POST", "PUT", "DELETE"],
        allow_headers=["Authorization", "X-API-Key", "Content-Type", "Mcp-Session-Id", "Mcp-Protocol-Version"],
    )
    routes = [route for module in ROUTERS for route in module.router.routes]
    paths = frozenset(path for route in routes if "{" not in (path := getattr(route, "path", "{")))
    app.add_middleware(MetricsMiddleware, metrics=metrics, paths=paths)
    app.add_middleware(OneCredential)
    app.add_middleware(TrustedOrigin, policy=policy)
    app.add_middleware(ProtocolErrors, shapes=PROTOCOL_ERRORS)
