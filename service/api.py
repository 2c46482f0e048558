"""FastAPI app: thin routers over retrieval and the workflow.

Everything a request needs (settings, the one Elasticsearch client, the one embedder, the
retriever, the workflow, the metrics) lives on `app.state`, created by `create_app` and its
lifespan, and reaches endpoints through `Depends`. Blocking endpoints are plain `def`, so
FastAPI runs them in its threadpool and the event loop never waits on embedding or ES.
Error mapping: `service.errors`; body-size limit: `service.middleware`; metrics: `service.metrics`.
"""

import logging
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated

from elastic_transport import ConnectionError as ESConnectionError
from elastic_transport import ConnectionTimeout as ESConnectionTimeout
from elasticsearch import ApiError, Elasticsearch
from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from core.config import Settings
from core.embeddings import BatchingEmbedder, Embedder, load_embedder
from core.kbs import KB_NAME_PATTERN
from core.redact import redact_url
from core.schema import Mode
from core.store import (
    IndexNotFoundError,
    create_client,
    read_index_meta,
)
from retrieval.compare import Comparison
from retrieval.results import SearchResult
from retrieval.retriever import Retriever, build_retriever
from service.auth import CallerDep, Keys, KnowledgeBases, KnowledgeBasesDep, get_caller, load_principals
from service.errors import add_error_handlers
from service.evaluation_jobs import Evaluations
from service.graph import (
    GapReport,
    QueryResult,
    VerdictScope,
    WorkflowDeps,
    build_deps,
    ensure_answerable,
    knowledge_gap_report,
    run_query,
    stream_query,
)
from service.jobs import JobRunner, JobStore
from service.metrics import Metrics, MetricsMiddleware
from service.middleware import BodySizeLimit
from service.openapi import document_statuses, error_responses
from service.schemas_api import (
    CompareRequest,
    ElasticsearchStatus,
    HealthResponse,
    IndexStatus,
    ModesResponse,
    QueryRequest,
    ReadyResponse,
    SearchRequest,
)
from service.uploads import Uploads

logger = logging.getLogger(__name__)

WEB_DIR = Path(__file__).resolve().parent / "web"


# --- dependencies -------------------------------------------------------------------------
# The ones that never block are `async def`: FastAPI runs a plain `def` dependency on a thread of
# its pool, one hand-off each per request; these run on the event loop instead.


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_es(request: Request) -> Elasticsearch:
    return request.app.state.es


async def get_retriever(request: Request) -> Retriever:
    return request.app.state.retriever


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


async def get_runner(request: Request) -> JobRunner:
    return request.app.state.jobs


SettingsDep = Annotated[Settings, Depends(get_settings)]
ESDep = Annotated[Elasticsearch, Depends(get_es)]
RetrieverDep = Annotated[Retriever, Depends(get_retriever)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
RunnerDep = Annotated[JobRunner, Depends(get_runner)]


def check_length(settings: Settings, field: str, value: str) -> str:
    """`value` stripped, once its length as sent is checked: MAX_QUESTION_CHARS is a setting, so it is
    enforced here (and written into the schema by service.openapi as the text's `maxLength`)."""
    if len(value) > settings.max_question_chars:
        raise RequestValidationError(
            [
                {
                    "type": "string_too_long",
                    "loc": ("body", field),
                    "msg": f"{len(value)} characters, more than MAX_QUESTION_CHARS={settings.max_question_chars}",
                }
            ]
        )
    return value.strip()


async def valid_question(body: QueryRequest, settings: SettingsDep) -> QueryRequest:
    """The request body with the length limit checked (a dependency, so streams start valid)."""
    return body.model_copy(update={"question": check_length(settings, "question", body.question)})


QuestionDep = Annotated[QueryRequest, Depends(valid_question)]


def get_workflow(request: Request, body: QuestionDep, caller: CallerDep, kbs: KnowledgeBasesDep) -> WorkflowDeps:
    """The workflow's dependencies for the caller's base. It depends on the valid body, so bad input is
    a 422 whatever the state of the model; an unknown base is a 404 and `ANSWER_MODE=llm` without a
    model a 503, all before any stream starts."""
    kb = kbs.open(caller, body.kb)
    workflow: WorkflowDeps = request.app.state.workflow
    ensure_answerable(workflow)
    return workflow.for_caller(kb, caller.document_access(kb))


WorkflowDep = Annotated[WorkflowDeps, Depends(get_workflow)]


# --- routes -------------------------------------------------------------------------------

health = APIRouter(tags=["health"])
# Every route here reads Elasticsearch (or the model).
api = APIRouter(dependencies=[Depends(get_caller)], responses=error_responses(404, 409, 502, 503))


@health.get("/healthz", response_model=HealthResponse)
def healthz() -> HealthResponse:
    """The process is alive (says nothing about Elasticsearch)."""
    return HealthResponse()


def _cluster_status(es: Elasticsearch, status: ElasticsearchStatus) -> None:
    health = es.cluster.health(timeout="2s")
    status.reachable = True
    status.status = str(health["status"])
    status.nodes = int(health["number_of_nodes"])
    status.data_nodes = int(health["number_of_data_nodes"])


def _index_status(es: Elasticsearch, embedder: Embedder, index: IndexStatus) -> None:
    meta = read_index_meta(es, index.name)
    index.present = True
    index.health = str(es.cluster.health(index=index.name, timeout="2s")["status"])
    index.embedder = meta.embedder
    index.embedder_matches = meta.embedder == embedder.name and meta.dim == embedder.dim
    index.docs = int(es.count(index=index.name)["count"])


@health.get("/modes", response_model=ModesResponse, tags=["retrieval"])
def modes() -> ModesResponse:
    """The retrieval modes, from `core.schema.Mode`: the page builds its choices from this list."""
    return ModesResponse(modes=list(Mode), default=Mode.HYBRID)


@health.get("/readyz", response_model=ReadyResponse, responses={503: {"model": ReadyResponse}})
def readyz(request: Request, settings: SettingsDep, es: ESDep) -> JSONResponse:
    """Ready when search works: the cluster answers, the index exists, is not red and matches the embedder."""
    embedder: Embedder = request.app.state.embedder
    es = es.options(request_timeout=5, max_retries=0)  # a probe answers quickly, even when ES hangs
    es_status = ElasticsearchStatus(url=redact_url(settings.es_url), reachable=False)
    index = IndexStatus(name=settings.es_index, present=False)
    try:
        _cluster_status(es, es_status)
        _index_status(es, embedder, index)
    except (ESConnectionError, ESConnectionTimeout) as err:
        es_status.error = f"unreachable at {redact_url(settings.es_url)}: {type(err).__name__}"
    except IndexNotFoundError as err:
        index.error = str(err)
    except ApiError as err:  # e.g. a red index cannot be counted
        index.error = f"Elasticsearch answered {err.meta.status}: {err.message}"
    body = ReadyResponse(
        ready=es_status.reachable and index.present and index.health != "red" and bool(index.embedder_matches),
        elasticsearch=es_status,
        index=index,
        embedder={"name": embedder.name, "dim": embedder.dim, "loaded": True},
        llm_configured=settings.llm_configured,
        answer_mode=settings.answer_mode,
        web_search_configured=settings.bocha_api_key is not None,
    )
    return JSONResponse(jsonable_encoder(body), status_code=200 if body.ready else 503)


@api.post("/search", response_model=SearchResult, tags=["retrieval"])
def search(
    body: SearchRequest, settings: SettingsDep, retriever: RetrieverDep, caller: CallerDep, kbs: KnowledgeBasesDep
) -> SearchResult:
    """One retrieval mode over a knowledge base (hybrid: kNN + jieba BM25 + bigram + standard, fused),
    among the documents the caller may read."""
    query = check_length(settings, "query", body.query)
    kb = kbs.open(caller, body.kb)
    return retriever.search(kb, query, body.mode, body.k, body.filters, access=caller.document_access(kb))


@api.post("/compare", response_model=Comparison, tags=["retrieval"])
def compare(
    body: CompareRequest, settings: SettingsDep, retriever: RetrieverDep, caller: CallerDep, kbs: KnowledgeBasesDep
) -> Comparison:
    """The same query in several modes side by side, with overlap and rank differences."""
    query = check_length(settings, "query", body.query)
    kb = kbs.open(caller, body.kb)
    return retriever.compare(kb, query, body.k, body.modes, body.filters, caller.document_access(kb))


@api.post("/query", response_model=QueryResult, tags=["answers"])
async def query(body: QuestionDep, workflow: WorkflowDep, metrics: MetricsDep) -> QueryResult:
    """Answer with the agentic workflow (route, decompose, retrieve, evaluate, web fallback, cite), or,
    without a reachable model (`ANSWER_MODE`), with quoted sentences only: `mode` says which and why."""
    result = await run_query(workflow, body.question, body.options())
    metrics.record_workflow(result.route, result.web_used, result.llm_calls, result.web_calls)
    return result


@api.post("/query/stream", response_class=EventSourceResponse, tags=["answers"])
async def query_stream(body: QuestionDep, workflow: WorkflowDep, metrics: MetricsDep) -> AsyncIterable[ServerSentEvent]:
    """The same as server-sent events: `mode` ({mode: llm|extractive, reason}), `node` per workflow
    step (outcome, ms), `token`s of the answer, then `final` (the whole `/query` result) or `error`."""
    async for event in stream_query(workflow, body.question, body.options()):
        if event.event == "final":
            metrics.record_workflow(
                event.data["route"], event.data["web_used"], event.data["llm_calls"], event.data["web_calls"]
            )
        elif event.event == "error":
            metrics.record_error("/query/stream", "workflow")
        yield ServerSentEvent(event=event.event, data=event.data)


@api.get("/gaps", response_model=GapReport, tags=["answers"])
def gaps(
    settings: SettingsDep,
    es: ESDep,
    caller: CallerDep,
    kbs: KnowledgeBasesDep,
    top: Annotated[int, Query(ge=1, le=100)] = 20,
    kb: Annotated[str | None, Query(pattern=KB_NAME_PATTERN, max_length=100)] = None,
) -> GapReport:
    """A base's knowledge-gap report: what the evaluator most often found missing, and how often the
    web was needed (counting only verdicts on what the caller may read)."""
    name = kbs.open(caller, kb)
    return knowledge_gap_report(es, settings, VerdictScope(name, caller.document_access(name).scope), top)


@api.get(
    "/metrics",
    tags=["health"],
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus metrics"}},
)
def metrics_endpoint(metrics: MetricsDep) -> Response:
    """Prometheus text format."""
    return Response(metrics.render(), media_type=metrics.content_type)


# --- the app ------------------------------------------------------------------------------


def create_app(settings: Settings, *, embedder: Embedder | None = None) -> FastAPI:
    """The app for `settings`; pass `embedder` to share one already loaded (tests)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.es = create_client(settings)
        app.state.kbs = KnowledgeBases(app.state.es, settings.es_index)
        loaded = (
            embedder if embedder is not None else await run_in_threadpool(load_embedder, settings.embedder, settings)
        )
        app.state.embedder = BatchingEmbedder(loaded, settings.query_batch_window_ms / 1000, settings.query_batch_max)
        app.state.retriever = build_retriever(settings, app.state.es, app.state.embedder)
        # Load jieba's dictionary and run the embedder once now, not on the first user's query.
        await run_in_threadpool(app.state.retriever.tokenizer.query_terms, "预热")
        await run_in_threadpool(app.state.embedder.embed_query, "预热")
        app.state.workflow = build_deps(settings, app.state.es, app.state.retriever)
        # Background jobs (uploads, evaluations), resuming what a previous process left unfinished.
        app.state.jobs = JobRunner(
            JobStore(app.state.es, settings.jobs_index),
            [
                Uploads(app.state.es, app.state.embedder, settings).kind(),
                Evaluations(app.state.es, app.state.retriever).kind(),
            ],
            concurrency=settings.job_concurrency,
            progress_interval_s=settings.job_progress_interval_s,
        )
        app.state.jobs.start()
        logger.info(
            "ready: index %r on %s, embedder %s",
            settings.es_index,
            redact_url(settings.es_url),
            app.state.embedder.name,
        )
        async with app.state.mcp.session_manager.run():
            yield
        app.state.jobs.stop()  # before the client closes under a running job
        app.state.embedder.close()
        app.state.es.close()

    # /docs loads Swagger UI from the app (fastapi-offline's packaged files), not a CDN: it works offline.
    # No /redoc: ReDoc's bundle still fetches its logo from the network.
    app = FastAPIOffline(
        redoc_url=None,
        title="Agentic RAG on Elasticsearch",
        summary="Chinese knowledge-base questions answered with hybrid retrieval, sufficiency checks and web fallback",
        lifespan=lifespan,
    )
    # The protocol routers build on this module's dependencies, so they are imported once it is loaded.
    from service import routes_documents, routes_evaluation, routes_kbs
    from service.protocols import dify, mcp_server, openai_chat

    app.state.settings = settings
    app.state.keys = Keys(load_principals(settings))
    app.state.metrics = Metrics()
    app.state.mcp = mcp_server.build_mcp_server(app.state)
    add_error_handlers(app)
    app.include_router(health)
    app.include_router(api)
    app.include_router(routes_kbs.router)
    app.include_router(openai_chat.router)
    app.include_router(dify.router)
    app.include_router(routes_documents.router)
    app.include_router(routes_evaluation.router)
    mcp_endpoint = mcp_server.http_endpoint(app.state.mcp, app.state.keys)
    app.router.routes.append(Route("/mcp", mcp_endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False))
    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")

    @app.get("/", include_in_schema=False)
    def index_page() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html")

    app.add_middleware(
        BodySizeLimit, limit=settings.max_request_bytes, larger=[routes_documents.upload_body_limit(settings)]
    )
    app.add_middleware(
        CORSMiddleware,
        allow_origins=settings.cors_origins,
        allow_methods=["GET", "POST", "PUT", "DELETE"],
        allow_headers=["Authorization", "X-API-Key", "Content-Type", "Mcp-Session-Id", "Mcp-Protocol-Version"],
    )
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    limit = settings.max_question_chars
    document_statuses(app, max_lengths={"query": limit, "question": limit}, secured=not app.state.keys.open)
    return app
