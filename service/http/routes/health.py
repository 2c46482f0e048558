"""`/healthz`, `/readyz`, `/modes` and `/metrics`: the process, its dependencies and its figures.

`/readyz` answers anyone (a load balancer sends no key) but says only whether search works; the
details (the cluster, the default base's name and size, the embedder, the model) go to an
admin of the default base.
"""

import hmac

from elastic_transport import ConnectionError as ESConnectionError
from elastic_transport import ConnectionTimeout as ESConnectionTimeout
from elasticsearch import ApiError, Elasticsearch
from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse

from core.access import Scope
from core.embeddings import Embedder
from core.reader import Reader
from core.redact import redact_url
from core.schema import Mode
from core.store import IndexNotFoundError, read_index_meta
from service.deps import Services, ServicesDep
from service.http.auth import presented_key, unauthorized
from service.http.openapi import error_responses
from service.http.schemas import ElasticsearchStatus, HealthResponse, IndexStatus, ModesResponse, ReadyResponse

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthResponse)
def healthz() -> HealthResponse:
    """The process is alive (says nothing about Elasticsearch)."""
    return HealthResponse()


@router.get("/modes", response_model=ModesResponse, tags=["retrieval"])
def modes() -> ModesResponse:
    """The retrieval modes, from `core.schema.Mode`: the page builds its choices from this list."""
    return ModesResponse(modes=list(Mode), default=Mode.HYBRID)


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
    index.docs = Reader(es, Scope.whole(index.name)).count()  # shown to the base's admins only


def _readiness(services: Services) -> ReadyResponse:
    settings, embedder = services.settings, services.embedder
    es = services.es.options(request_timeout=5, max_retries=0)  # a probe answers quickly, even when ES hangs
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
    return ReadyResponse(
        ready=es_status.reachable and index.present and index.health != "red" and bool(index.embedder_matches),
        elasticsearch=es_status,
        index=index,
        embedder={"name": embedder.name, "dim": embedder.dim, "loaded": True},
        llm_configured=settings.llm_configured,
        answer_mode=settings.answer_mode,
        web_search_configured=settings.bocha_api_key is not None,
    )


@router.get("/readyz", response_model=ReadyResponse, responses={503: {"model": ReadyResponse}})
def readyz(request: Request, services: ServicesDep) -> JSONResponse:
    """Ready when search works: the cluster answers, the index exists, is not red and matches the embedder.
    Only an admin of the default base sees why (its name and size, the cluster, the model)."""
    body = _readiness(services)
    caller = services.keys.caller(presented_key({k.lower(): v for k, v in request.headers.items()}))
    shown = jsonable_encoder(body) if caller is not None and caller.may(services.settings.es_index, "admin") else {}
    return JSONResponse({**shown, "ready": body.ready}, status_code=200 if body.ready else 503)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus metrics"},
        **error_responses(401, 403),
    },
)
def metrics_endpoint(request: Request, services: ServicesDep) -> Response:
    """Prometheus text format, for the service's admins or a scraper holding `METRICS_KEY`: the
    figures are service-wide (bases created, uploads), not any one base's."""
    presented = presented_key({k.lower(): v for k, v in request.headers.items()})
    scraper = services.settings.metrics_key
    if scraper is None or not hmac.compare_digest(presented.encode(), scraper.get_secret_value().encode()):
        caller = services.keys.caller(presented)
        if caller is None:
            raise unauthorized()
        if not caller.admin:
            raise HTTPException(403, "/metrics is for the service's admins, or a scraper sending METRICS_KEY")
    return Response(services.metrics.render(), media_type=services.metrics.content_type)
