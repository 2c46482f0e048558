"""How every failure becomes a JSON answer that says what to fix (never a bare 500).

Validation → 422 naming the field; missing index → 404 with the build command; embedder
mismatch → 409; Elasticsearch or the LLM unreachable → 503 naming it; their HTTP errors → 502.
"""

import logging
import uuid
from collections.abc import Mapping
from typing import Any

import openai
from elastic_transport import ConnectionError as ESConnectionError
from elastic_transport import ConnectionTimeout as ESConnectionTimeout
from elasticsearch import ApiError
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from core.redact import redact_url
from service.llm import LLMNotConfiguredError
from service.metrics import endpoint_label
from service.store import EmbedderMismatchError, IndexNotFoundError

logger = logging.getLogger(__name__)


def _error(
    request: Request, status: int, kind: str, detail: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    request.app.state.metrics.record_error(endpoint_label(request.scope), kind)
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def _describe(error: dict[str, Any]) -> str:
    """`field: problem`; malformed JSON has no field, so it says where the JSON breaks."""
    if error["type"] == "json_invalid":
        return f"body: malformed JSON near character {error['loc'][-1]}"
    return f"{'.'.join(str(part) for part in error['loc'] if part != 'body') or 'body'}: {error['msg']}"


def add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def validation(request: Request, err: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
            for e in err.errors()
        ]
        message = "; ".join(_describe(e) for e in errors)
        request.app.state.metrics.record_error(endpoint_label(request.scope), "validation")
        return JSONResponse({"detail": errors, "message": message}, status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> JSONResponse:
        return _error(request, err.status_code, f"http_{err.status_code}", str(err.detail), err.headers)

    @app.exception_handler(IndexNotFoundError)
    async def index_not_found(request: Request, err: IndexNotFoundError) -> JSONResponse:
        return _error(request, 404, "index_not_found", str(err))

    @app.exception_handler(EmbedderMismatchError)
    async def embedder_mismatch(request: Request, err: EmbedderMismatchError) -> JSONResponse:
        return _error(request, 409, "embedder_mismatch", str(err))

    @app.exception_handler(ESConnectionError)
    @app.exception_handler(ESConnectionTimeout)
    async def es_unreachable(request: Request, err: Exception) -> JSONResponse:
        url = redact_url(request.app.state.settings.es_url)
        logger.warning("Elasticsearch unreachable at %s: %s", url, err)
        return _error(
            request,
            503,
            "elasticsearch_unreachable",
            f"Elasticsearch unreachable at {url} ({type(err).__name__}); retry when it is back",
        )

    @app.exception_handler(ApiError)
    async def es_api_error(request: Request, err: ApiError) -> JSONResponse:
        logger.error("Elasticsearch error: %s", err)
        return _error(request, 502, "elasticsearch_error", f"Elasticsearch answered {err.meta.status}: {err.message}")

    @app.exception_handler(LLMNotConfiguredError)
    async def llm_not_configured(request: Request, err: LLMNotConfiguredError) -> JSONResponse:
        return _error(request, 503, "llm_not_configured", str(err))

    @app.exception_handler(openai.APIError)
    async def llm_failed(request: Request, err: openai.APIError) -> JSONResponse:
        url = redact_url(request.app.state.settings.openai_base_url or "https://api.openai.com/v1")
        logger.warning("LLM endpoint %s failed: %s", url, err)
        if isinstance(err, openai.APIStatusError):
            return _error(
                request,
                502,
                "llm_error",
                f"the LLM endpoint at {url} answered HTTP {err.status_code} ({type(err).__name__})",
            )
        return _error(
            request,
            503,
            "llm_unreachable",
            f"the LLM endpoint at {url} is unreachable ({type(err).__name__}); retry later",
        )

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception) -> JSONResponse:
        error_id = uuid.uuid4().hex[:12]
        logger.exception("unhandled error %s on %s", error_id, request.url.path)
        return _error(
            request,
            500,
            "internal",
            f"internal error {error_id} ({type(err).__name__}); details are in the service log",
        )
