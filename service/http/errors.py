"""How every failure becomes a JSON answer that says what to fix (never a bare 500).

Malformed JSON → 400 saying where it breaks; validation → 422 naming the field; missing index → 404 with the build command; embedder
mismatch → 409; a request over its embedding budget → 413; the LLM unreachable → 503 naming it; its 429 → 429 with `Retry-After`; its other HTTP errors → 502.

Elasticsearch: unreachable, a time-out, or an answer that means "not now" (no shard
available, all shards failed, a red index, a cluster block, 429/503/504) → 503 with
`Retry-After` and a one-line reason; any other error answer → 502. An outage is expected:
it is logged as one warning line per failure kind every `OUTAGE_LOG_INTERVAL_S` (the next
line counts the ones held back), without traceback, and the client's own per-request
warnings are held back the same way. Only unexpected errors log a traceback.
"""

import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import openai
from elastic_transport import ConnectionError as ESConnectionError
from elastic_transport import ConnectionTimeout as ESConnectionTimeout
from elasticsearch import ApiError
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException  # FastAPI's is a subclass; its body parser raises this one
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.failures import log_failure
from core.kbs import InvalidKnowledgeBaseName, KnowledgeBaseExists
from core.redact import redact_url
from core.retry import es_api_transient
from core.scheduling import BudgetExceeded, ClientGone
from core.store import EmbedderMismatchError, IndexNotFoundError, SearchError
from service.http.metrics import endpoint_label
from service.inputs import InvalidText
from service.kbs import NotPermitted, UnknownKnowledgeBase
from service.llm.client import LLMNotConfiguredError

if TYPE_CHECKING:  # at run time the app's own object; importing service.deps would load the workflow
    from service.deps import Services

logger = logging.getLogger(__name__)


def _services(app: Any) -> "Services":
    """The app's `Services` (service.app's lifespan puts them there before the first request)."""
    services: Services = app.state.services
    return services


outage_logger = logging.getLogger("service.outage")

RETRY_AFTER_S = 5
OUTAGE_LOG_INTERVAL_S = 30.0
# The Elasticsearch client logs a warning (with a traceback) for every failed attempt on a node.
_TRANSPORT_LOGGERS = ("elastic_transport.transport", "elastic_transport.node_pool")


class OncePerKind(logging.Filter):
    """One record per kind per `interval` seconds, without traceback; the next one counts those held back.

    The kind is the record's `kind` extra, else its message template.
    """

    def __init__(self, interval: float = OUTAGE_LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval, self._clock = interval, clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(getattr(record, "kind", record.msg)))
        now = self._clock()
        with self._lock:
            last, held = self._seen.get(key, (float("-inf"), 0))
            if now - last < self.interval:
                self._seen[key] = (last, held + 1)
                return False
            self._seen[key] = (now, 0)
        message = record.getMessage().splitlines()[0] if record.getMessage() else ""
        if held:
            message += f" ({held} more like it in the last {self.interval:.0f} s)"
        record.msg, record.args, record.exc_info, record.exc_text = message, None, None, None
        return True


def quiet_outage_logs() -> None:
    """Rate-limit outage warnings: ours and the Elasticsearch client's (idempotent)."""
    for name in (outage_logger.name, *_TRANSPORT_LOGGERS):
        target = logging.getLogger(name)
        if not any(isinstance(f, OncePerKind) for f in target.filters):
            target.addFilter(OncePerKind())


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _error(
    request: Request, status: int, kind: str, detail: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    _services(request.app).metrics.record_error(endpoint_label(request.scope), kind)
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def _describe(error: dict[str, Any]) -> str:
    """`field: problem`; malformed JSON has no field, so it says where the JSON breaks (a character,
    FastAPI's parser; else the line and column in the words of `core.contract.parse_json`)."""
    if error["type"] == "json_invalid":
        where = error["loc"][-1]
        return (
            f"body: malformed JSON near character {where}"
            if isinstance(where, int)
            else f"body: malformed JSON: {error['msg']}"
        )
    return f"{'.'.join(str(part) for part in error['loc'] if part != 'body') or 'body'}: {error['msg']}"


async def _validation(request: Request, err: RequestValidationError) -> JSONResponse:
    """422 with each error once (FastAPI validates a body that two dependencies share once per use);
    400 (`detail`: where it breaks) when the body is not JSON at all, so there is nothing to validate."""
    unique = dict.fromkeys(
        (tuple(e.get("loc", ())), str(e.get("msg", "")), str(e.get("type", ""))) for e in err.errors()
    )
    errors = [{"loc": list(loc), "msg": msg, "type": kind} for loc, msg, kind in unique]
    message = "; ".join(_describe(e) for e in errors)
    if any(e["type"] == "json_invalid" for e in errors):
        return _error(request, 400, "malformed_json", message)
    _services(request.app).metrics.record_error(endpoint_label(request.scope), "validation")
    return JSONResponse({"detail": errors, "message": message}, status_code=422)


async def _invalid_text(request: Request, err: InvalidText) -> JSONResponse:
    """A question or query every protocol refuses (service.inputs): a 422 like any invalid field."""
    return await _validation(
        request, RequestValidationError([{"type": err.kind, "loc": ("body", err.field), "msg": err.problem}])
    )


async def _http_error(request: Request, err: HTTPException) -> JSONResponse:
    headers = err.headers
    if err.status_code == 405:  # Starlette's Allow names one route's methods; a path may have several routes
        headers = {**(headers or {}), "Allow": ", ".join(_allowed_methods(request))}
    return _error(request, err.status_code, f"http_{err.status_code}", str(err.detail), headers)


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app answers at the request's path."""
    methods: set[str] = set()
    # The routes of included routers too (FastAPI keeps those inside the router it includes).
    for route in iter_route_contexts(request.app.router.routes):
        if route.methods and route.matches(request.scope)[0] != Match.NONE:
            methods |= route.methods
    return sorted(methods)


async def _index_not_found(request: Request, err: IndexNotFoundError) -> JSONResponse:
    return _error(request, 404, "index_not_found", str(err))


async def _unknown_kb(request: Request, err: UnknownKnowledgeBase) -> JSONResponse:
    """404 naming the bases the caller may read; a key that may read none gets a 403 that names nothing."""
    if err.no_access:
        return _error(request, 403, "no_access", "this key gives access to no knowledge base")
    return _error(request, 404, "kb_not_found", str(err))


async def _not_permitted(request: Request, err: NotPermitted) -> JSONResponse:
    return _error(request, 403, "forbidden", str(err))


async def _invalid_kb_name(request: Request, err: InvalidKnowledgeBaseName) -> JSONResponse:
    return _error(request, 422, "invalid_kb_name", str(err))


async def _kb_exists(request: Request, err: KnowledgeBaseExists) -> JSONResponse:
    return _error(request, 409, "kb_exists", str(err))


async def _embedder_mismatch(request: Request, err: EmbedderMismatchError) -> JSONResponse:
    return _error(request, 409, "embedder_mismatch", str(err))


def _es_unavailable(request: Request, kind: str, reason: str, cause: str = "") -> JSONResponse:
    outage_logger.warning("%s", reason, extra={"kind": f"{kind}:{cause}"})
    detail = f"{reason}; retry in {RETRY_AFTER_S} s"
    return _error(request, 503, kind, detail, headers={"Retry-After": str(RETRY_AFTER_S)})


async def _es_unreachable(request: Request, err: ESConnectionError) -> JSONResponse:
    url = redact_url(_services(request.app).settings.es_url)
    reason = f"Elasticsearch unreachable at {url} ({type(err).__name__})"
    return _es_unavailable(request, "elasticsearch_unreachable", reason)


async def _es_timeout(request: Request, err: ESConnectionTimeout) -> JSONResponse:
    settings = _services(request.app).settings
    reason = f"Elasticsearch at {redact_url(settings.es_url)} did not answer within {settings.es_request_timeout:g} s"
    return _es_unavailable(request, "elasticsearch_timeout", reason)


def _es_failed(request: Request, reason: str, *, transient: bool, cause: str) -> JSONResponse:
    """A transient failure is a 503 with Retry-After (quietly logged); any other a logged 502."""
    if transient:
        return _es_unavailable(request, "elasticsearch_unavailable", reason, cause)
    logger.error("%s", reason)
    return _error(request, 502, "elasticsearch_error", reason)


async def _es_search_failed(request: Request, err: SearchError) -> JSONResponse:
    reason = f"Elasticsearch could not search {err.index!r}: {err.type}: {_one_line(err.reason)}"
    return _es_failed(request, reason, transient=err.transient, cause=err.type)


async def _es_api_error(request: Request, err: ApiError) -> JSONResponse:
    reason = f"Elasticsearch answered {err.meta.status}: {_one_line(str(err.message))}"
    return _es_failed(request, reason, transient=es_api_transient(err), cause=str(err.meta.status))


async def _llm_not_configured(request: Request, err: LLMNotConfiguredError) -> JSONResponse:
    return _error(request, 503, "llm_not_configured", str(err))


async def _llm_failed(request: Request, err: openai.APIError) -> JSONResponse:
    url = redact_url(_services(request.app).settings.openai_base_url or "https://api.openai.com/v1")
    logger.warning("LLM endpoint %s failed: %s", url, err)
    name = type(err).__name__
    if isinstance(err, openai.RateLimitError):  # "slow down" is the client's to hear, with when to come back
        wait = err.response.headers.get("retry-after", str(RETRY_AFTER_S))
        detail = f"the LLM endpoint at {url} is rate-limiting requests (HTTP 429); retry in {wait} s"
        return _error(request, 429, "llm_rate_limited", detail, headers={"Retry-After": wait})
    if isinstance(err, openai.APIStatusError):
        return _error(request, 502, "llm_error", f"the LLM endpoint at {url} answered HTTP {err.status_code} ({name})")
    return _error(request, 503, "llm_unreachable", f"the LLM endpoint at {url} is unreachable ({name}); retry later")


async def _over_budget(request: Request, err: BudgetExceeded) -> JSONResponse:
    return _error(request, 413, "embedding_budget", str(err))


async def _client_gone(request: Request, err: ClientGone) -> JSONResponse:
    return _error(request, 499, "client_gone", str(err))  # nobody reads it: nginx's "client closed request"


# Exception type → its answer; Starlette picks the handler of the nearest class in the MRO.
_HANDLERS: list[tuple[type[Exception], Callable[[Request, Any], Awaitable[JSONResponse]]]] = [
    (RequestValidationError, _validation),
    (InvalidText, _invalid_text),
    (HTTPException, _http_error),
    (IndexNotFoundError, _index_not_found),
    (UnknownKnowledgeBase, _unknown_kb),
    (NotPermitted, _not_permitted),
    (InvalidKnowledgeBaseName, _invalid_kb_name),
    (KnowledgeBaseExists, _kb_exists),
    (EmbedderMismatchError, _embedder_mismatch),
    (ESConnectionError, _es_unreachable),
    (ESConnectionTimeout, _es_timeout),
    (SearchError, _es_search_failed),
    (ApiError, _es_api_error),
    (LLMNotConfiguredError, _llm_not_configured),
    (openai.APIError, _llm_failed),
    (BudgetExceeded, _over_budget),
    (ClientGone, _client_gone),
]


async def error_response(request: Request, err: Exception) -> JSONResponse:
    """The answer the app gives `err` (its handler above, else a logged 500 naming an error id),
    for routes that speak another protocol and reshape it into that protocol's error body."""
    for kind in type(err).__mro__:
        for exception, handler in _HANDLERS:
            if kind is exception:
                return await handler(request, err)
    _services(request.app).metrics.record_error(endpoint_label(request.scope), "internal")
    return JSONResponse({"detail": internal_error(err, request.scope["path"])}, status_code=500)


def internal_error(err: Exception, path: str) -> str:
    """Log `err` under a new error id (its traceback once per cause); the detail the client gets names only the id."""
    error_id = uuid.uuid4().hex[:12]
    log_failure(logger, err, "unhandled error %s on %s", error_id, path)
    return f"internal error {error_id} ({type(err).__name__}); details are in the service log"


def add_error_handlers(app: FastAPI) -> None:
    """The mapping above, quiet outage logs, and `UnexpectedErrors` for anything else."""
    quiet_outage_logs()
    for exception, handler in _HANDLERS:
        app.exception_handler(exception)(handler)
    app.add_middleware(UnexpectedErrors)


class UnexpectedErrors:
    """Any other exception: one logged traceback and a 500 naming an error id.

    Not an `Exception` handler: Starlette answers those in its outermost middleware and then
    re-raises, so the server logs the same traceback a second time. This answers and stops.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_tracked)
        except Exception as err:
            detail = internal_error(err, scope["path"])
            if started:
                return  # the response is under way: the client sees it cut short
            _services(scope["app"]).metrics.record_error(endpoint_label(scope), "internal")
            await JSONResponse({"detail": detail}, status_code=500)(scope, receive, send)
