"""Search, comparison and answers over one knowledge base: `/search`, `/compare`, `/query`,
`/query/stream` and `/gaps`. Each route's base and scope come from its declaration (service/deps.py)."""

from collections.abc import AsyncIterable
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.sse import EventSourceResponse, ServerSentEvent

from retrieval.compare import Comparison
from retrieval.results import SearchResult
from service.deps import (
    CompareBody,
    QuestionBody,
    SearchBody,
    Services,
    ServicesDep,
    WorkflowDep,
    base_in_body,
    base_in_query,
    get_caller,
    log_answer,
    valid_compare,
    valid_question,
    valid_search,
)
from service.graph import (
    GapReport,
    QueryResult,
    ReportedGap,
    VerdictScope,
    knowledge_gap_report,
    run_query,
    stream_query,
)
from service.http.openapi import error_responses
from service.kbs import BaseAccess

# Every route here reads Elasticsearch (or the model).
router = APIRouter(dependencies=[Depends(get_caller)], responses=error_responses(404, 409, 502, 503))


@router.post("/search", response_model=SearchResult, tags=["retrieval"])
def search(
    body: SearchBody, base: Annotated[BaseAccess, Depends(base_in_body(valid_search))], services: ServicesDep
) -> SearchResult:
    """One retrieval mode over a knowledge base (hybrid: kNN + jieba BM25 + bigram + standard, fused),
    among the documents the caller may read."""
    return services.retriever.search(base.scope, body.query, body.mode, body.k, body.filters, rerank=body.rerank)


@router.post("/compare", response_model=Comparison, tags=["retrieval"])
def compare(
    body: CompareBody, base: Annotated[BaseAccess, Depends(base_in_body(valid_compare))], services: ServicesDep
) -> Comparison:
    """The same query in several modes side by side, with overlap and rank differences."""
    return services.retriever.compare(base.scope, body.query, body.k, body.modes, body.filters, rerank=body.rerank)


# The question's base (FastAPI resolves it once: `WorkflowDep` opens the same one).
QuestionBase = Annotated[BaseAccess, Depends(base_in_body(valid_question))]


@router.post("/query", response_model=QueryResult, tags=["answers"], responses=error_responses(429))
async def query(body: QuestionBody, workflow: WorkflowDep, base: QuestionBase, services: ServicesDep) -> QueryResult:
    """Answer with the agentic workflow (route, decompose, retrieve, evaluate, web fallback, cite), or,
    without a reachable model (`ANSWER_MODE`), with quoted sentences only: `mode` says which and why.
    `answer_id` is the answer's id in the answer log (rate it: `POST /answers/{answer_id}/feedback`)."""
    result = await run_query(workflow, body.question, body.options())
    services.metrics.record_workflow(result.route, result.web_used, result.llm_calls, result.web_calls)
    return await log_answer(services, base, result, "query", retrieval_mode=str(body.retrieval_mode))


@router.post("/query/stream", response_class=EventSourceResponse, tags=["answers"])
async def query_stream(
    body: QuestionBody, workflow: WorkflowDep, base: QuestionBase, services: ServicesDep
) -> AsyncIterable[ServerSentEvent]:
    """The same as server-sent events: `mode` ({mode: llm|extractive, reason}), `node` per workflow
    step (outcome, ms), in an extractive answer a `quote` ({part, text}) as each is chosen, `token`s of
    the answer, then `final` (the whole `/query` result, with its
    `answer_id`) or `error`."""
    metrics = services.metrics
    async for event in stream_query(workflow, body.question, body.options()):
        if event.event == "final":
            metrics.record_workflow(
                event.data["route"], event.data["web_used"], event.data["llm_calls"], event.data["web_calls"]
            )
            result = QueryResult.model_validate(event.data)
            logged = await log_answer(services, base, result, "stream", retrieval_mode=str(body.retrieval_mode))
            event = event.model_copy(update={"data": event.data | {"answer_id": logged.answer_id}})
        elif event.event == "error":
            metrics.record_error("/query/stream", "workflow")
        yield ServerSentEvent(event=event.event, data=event.data)


def gaps_top(top: Annotated[int, Query(ge=1, le=100, description="aspects to list")] = 20) -> int:
    return top


@router.get("/gaps", response_model=GapReport, tags=["answers"])
def gaps(
    top: Annotated[int, Depends(gaps_top)],
    base: Annotated[BaseAccess, Depends(base_in_query("read", gaps_top))],
    services: ServicesDep,
) -> GapReport:
    """A base's knowledge-gap report: what the evaluator most often found missing, and how often the
    web was needed (the base's admins: everyone's questions; anyone else: its own)."""
    scope = VerdictScope(base.kb, base.scope.documents.key, base.caller.name)
    report = knowledge_gap_report(services.es, services.settings, scope, top)
    return report.model_copy(update={"reported": reported_gaps(services, base, top)})


def reported_gaps(services: Services, base: BaseAccess, top: int) -> list[ReportedGap]:
    """Downvotes with no passage picked, newest first: the caller's own (an admin's: everyone's)."""
    owner = None if base.caller.may(base.kb, "admin") else base.caller.name
    return [
        ReportedGap(answer_id=a.id, question=a.question, comment=a.rating.comment, rated_at=a.rating.rated_at)
        for a in services.answers.listed(base.kb, owner, "down", top)
        if a.rating is not None and a.rating.chunk_id is None
    ]
