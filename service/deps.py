"""What routes depend on, in one place at the bottom of the HTTP shell: the app's typed `Services`,
the caller, and the knowledge base a route works on, checked for the route's role.

A route declares its access once, in its signature, and reads only through the scope it gets:

    base: Annotated[BaseAccess, Depends(base_in_path("write"))]             # a `{kb}` path parameter
    base: Annotated[BaseAccess, Depends(base_in_body(valid_search))]       # a `kb` in the body
    base: Annotated[BaseAccess, Depends(base_in_query("read"))]            # a `?kb=` query parameter

The protocols (OpenAI, Dify, MCP) open their base through the same `KnowledgeBases.open`. This
module imports no router and no app: routers import it, and `service.app` builds `Services`.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Protocol, TypeVar

from elastic_transport import TransportError as ESTransportError
from elasticsearch import ApiError, Elasticsearch
from fastapi import Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from core.config import Settings
from core.embeddings import Embedder
from core.kbs import KB_NAME_PATTERN
from retrieval.retriever import Retriever
from service.answers import AnswerLog, Asked, Channel, logged_answer, new_answer_id
from service.graph import QueryResult, WorkflowDeps, WorkflowTools, ensure_answerable
from service.http.auth import unauthorized
from service.http.metrics import Metrics
from service.http.schemas import CompareRequest, QueryRequest, SearchRequest
from service.inputs import valid_text
from service.jobs.runner import JobRunner
from service.kbs import BaseAccess, KnowledgeBases
from service.principals import Caller, Keys, Role

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Services:
    """Everything the app holds, built once by `service.app`'s lifespan (`app.state.services`)."""

    settings: Settings
    es: Elasticsearch
    keys: Keys
    metrics: Metrics
    embedder: Embedder
    retriever: Retriever
    kbs: KnowledgeBases
    workflow: WorkflowTools
    jobs: JobRunner
    answers: AnswerLog


async def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def get_settings(services: ServicesDep) -> Settings:
    return services.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]

_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="a key of KEYS_FILE or API_KEYS")
_bearer = HTTPBearer(auto_error=False, description="a key of KEYS_FILE or API_KEYS")


async def get_caller(
    services: ServicesDep,
    api_key: Annotated[str | None, Depends(_api_key_header)],
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    """The caller of a request; a missing or wrong key is a 401 (when the service has keys)."""
    caller = services.keys.caller(api_key or (bearer.credentials if bearer else ""))
    if caller is None:
        raise unauthorized()
    return caller


CallerDep = Annotated[Caller, Depends(get_caller)]

KbName = Annotated[str, PathParam(pattern=KB_NAME_PATTERN, max_length=100, description="knowledge-base name")]


async def _nothing_else() -> None:
    """No other input to check before the base."""


@cache
def base_in_path(role: Role, checked: Callable[..., object] = _nothing_else) -> Callable[..., BaseAccess]:
    """The `{kb}` of the path, when the caller holds `role` on it (404 as if absent when it may not
    read it). `checked` validates the route's other parameters first: bad input is a 422 whatever the base."""

    def dependency(
        kb: KbName, caller: CallerDep, services: ServicesDep, _: Annotated[object, Depends(checked)]
    ) -> BaseAccess:  # ES: on the threadpool
        return services.kbs.open(caller, kb, role)

    return dependency


ReadBase = Annotated[BaseAccess, Depends(base_in_path("read"))]
WriteBase = Annotated[BaseAccess, Depends(base_in_path("write"))]
AdminBase = Annotated[BaseAccess, Depends(base_in_path("admin"))]


@cache
def base_in_query(role: Role, checked: Callable[..., object] = _nothing_else) -> Callable[..., BaseAccess]:
    """The `?kb=` of the query (none: the default base), when the caller holds `role` on it; `checked`
    as for `base_in_path`."""

    def dependency(
        caller: CallerDep,
        services: ServicesDep,
        _: Annotated[object, Depends(checked)],
        kb: Annotated[str | None, Query(pattern=KB_NAME_PATTERN, max_length=100)] = None,
    ) -> BaseAccess:
        return services.kbs.open(caller, kb, role)

    return dependency


class NamesBase(Protocol):
    """A request body that may name its knowledge base."""

    @property
    def kb(self) -> str | None: ...


Body = TypeVar("Body", bound=BaseModel)


async def valid_search(body: SearchRequest, settings: SettingsDep) -> SearchRequest:
    return body.model_copy(update={"query": valid_text(settings, "query", body.query)})


async def valid_compare(body: CompareRequest, settings: SettingsDep) -> CompareRequest:
    return body.model_copy(update={"query": valid_text(settings, "query", body.query)})


async def valid_question(body: QueryRequest, settings: SettingsDep) -> QueryRequest:
    """The request body with the length limit checked (a dependency, so streams start valid)."""
    return body.model_copy(update={"question": valid_text(settings, "question", body.question)})


SearchBody = Annotated[SearchRequest, Depends(valid_search)]
CompareBody = Annotated[CompareRequest, Depends(valid_compare)]
QuestionBody = Annotated[QueryRequest, Depends(valid_question)]


@cache
def base_in_body(valid: Callable[..., object], role: Role = "read") -> Callable[..., BaseAccess]:
    """The `kb` of the body that `valid` checks (none: the default base), when the caller holds `role`.
    The body is validated first: bad input is a 422 whatever the base."""

    def dependency(body: Annotated[NamesBase, Depends(valid)], caller: CallerDep, services: ServicesDep) -> BaseAccess:
        return services.kbs.open(caller, body.kb, role)

    return dependency


def answering(services: Services, base: BaseAccess) -> WorkflowDeps:
    """The workflow answering from `base` with what its caller may read there; `ANSWER_MODE=llm`
    without a model is a 503 before any answer starts (every protocol asks this way)."""
    workflow = services.workflow.for_scope(base.scope, base.caller.name)
    ensure_answerable(workflow)
    return workflow


def workflow_for_question(
    base: Annotated[BaseAccess, Depends(base_in_body(valid_question))], services: ServicesDep
) -> WorkflowDeps:
    """The question's workflow: bad input is a 422 and an unknown base a 404, before any stream starts."""
    return answering(services, base)


WorkflowDep = Annotated[WorkflowDeps, Depends(workflow_for_question)]


async def log_answer(
    services: Services,
    base: BaseAccess,
    result: QueryResult,
    channel: Channel,
    *,
    retrieval_mode: str = "hybrid",
    answer_id: str | None = None,
) -> QueryResult:
    """`result` with its id, kept in the answer log (every protocol's answers go there, so any can be
    rated). A log that cannot be written costs the answer nothing: it is answered, and warned about."""
    answer_id = answer_id or new_answer_id()
    asked = Asked(base.caller, base.kb, base.scope.documents.key, channel, retrieval_mode)
    try:
        await run_in_threadpool(
            services.answers.record, logged_answer(answer_id, asked, result, services.settings.answer_log_questions)
        )
        services.metrics.record_answer(base.kb)
    except (ApiError, ESTransportError) as err:  # the answer stands; only its rating will be unavailable
        logger.warning("answer %s not logged: %s", answer_id, type(err).__name__)
    return result.model_copy(update={"answer_id": answer_id})
