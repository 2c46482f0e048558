"""Answers people rate, and the admin's review of them (service/answers.py, service/feedback.py).

    GET    /answers/{answer_id}                       one answer: its asker's, or any to the base's admins
    POST   /answers/{answer_id}/feedback              the asker's rating: up or down, a comment, the right passage
    GET    /kbs/{kb}/answers?kind=down|up|gap|all     the caller's answers (an admin: everyone's), newest first
    POST   /kbs/{kb}/answers/{answer_id}/accept       admin: the rated answer becomes a question of the base's set
    DELETE /kbs/{kb}/answers/{answer_id}/accept       admin: undo that

An answer the caller may not see, one that does not exist and a passage the caller may not read
all get the same 404. Nothing here changes retrieval: an evaluation of the question set does.
"""

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi import Path as PathParam
from pydantic import BaseModel, Field

from core.contract import StrictModel
from service.answers import Kind, LoggedAnswer
from service.deps import AdminBase, CallerDep, Services, ServicesDep, base_in_path, get_caller
from service.feedback import AbsentAnswer, Accepted, NotAcceptable, NotTheAsker, accept, rate, seen, undo
from service.http.openapi import error_responses
from service.http.routes.evaluation import QuestionsSummary, questions_summary
from service.http.routes.kbs import invalid
from service.kbs import BaseAccess

router = APIRouter(tags=["answers"], dependencies=[Depends(get_caller)], responses=error_responses(404, 503))

# An answer's id (`answer_id` of /query, MCP's ask) or its chat completion's (`chatcmpl-…`).
AnswerId = Annotated[
    str, PathParam(pattern=r"^(chatcmpl-)?[0-9a-f]{32}$", description="answer_id, or the chat completion's id")
]
ChunkId = Annotated[str, Field(min_length=1, max_length=200, description="a chunk the caller may read")]


class Feedback(StrictModel):
    vote: Literal["up", "down"]
    comment: str = Field("", max_length=2000)
    chunk_id: ChunkId | None = Field(None, description="the passage that answers the question (the caller may read it)")


class AcceptRequest(StrictModel):
    chunk_id: ChunkId | None = Field(
        None, description="the relevant passage (default: the asker's pick, else an upvote's cited passages)"
    )


class AnswerList(BaseModel):
    kb: str
    kind: str
    answers: list[LoggedAnswer]


class AcceptResult(BaseModel):
    answer: LoggedAnswer
    line: dict[str, Any] | None = Field(description="the question-set line added (null: a gap, or undone)")
    questions: QuestionsSummary | None = Field(description="the base's question set now")


def _absent(err: AbsentAnswer) -> HTTPException:
    return HTTPException(404, str(err))


def feedback_body(body: Feedback) -> Feedback:
    return body


def accept_body(body: AcceptRequest) -> AcceptRequest:
    return body


@router.get("/answers/{answer_id}", response_model=LoggedAnswer)
def get_answer(answer_id: AnswerId, caller: CallerDep, services: ServicesDep) -> LoggedAnswer:
    """One answer of the log: to its asker and the base's admins; to anyone else it is absent."""
    try:
        return seen(services.answers, caller, answer_id)
    except AbsentAnswer as err:
        raise _absent(err) from None


@router.post("/answers/{answer_id}/feedback", response_model=LoggedAnswer, responses=error_responses(403, 422))
def feedback(
    answer_id: AnswerId, body: Annotated[Feedback, Depends(feedback_body)], caller: CallerDep, services: ServicesDep
) -> LoggedAnswer:
    """Rate an answer you asked: `up` or `down`, a comment, and the passage that answers it (a chunk
    id you may read: search the base for it). A new rating replaces the old; an answer you may not
    see, or a passage you may not read, is a 404 as for an absent answer; an admin's rating of
    another's answer a 403."""
    try:
        rated = rate(services.answers, services.retriever, caller, answer_id, body.vote, body.comment, body.chunk_id)
    except AbsentAnswer as err:
        raise _absent(err) from None
    except NotTheAsker as err:
        raise HTTPException(403, str(err)) from None
    services.metrics.record_vote(rated.answer.kb, body.vote, first=rated.first)
    return rated.answer


def review_kind(
    kind: Annotated[
        Kind, Query(description="down, up, gap (said 无法从上下文确认, or voted down with no passage), all")
    ] = "all",
    size: Annotated[int, Query(ge=1, le=200)] = 50,
) -> tuple[Kind, int]:
    return kind, size


@router.get("/kbs/{kb}/answers", response_model=AnswerList, responses=error_responses(422))
def answers(
    review: Annotated[tuple[Kind, int], Depends(review_kind)],
    base: Annotated[BaseAccess, Depends(base_in_path("read", review_kind))],
    services: ServicesDep,
) -> AnswerList:
    """The base's answers, newest first: the caller's own, or everyone's for an admin of the base
    (the review: downvotes with comments and passages, gaps, upvotes with citations)."""
    kind, size = review
    owner = None if base.caller.may(base.kb, "admin") else base.caller.name
    return AnswerList(kb=base.kb, kind=kind, answers=services.answers.listed(base.kb, owner, kind, size))


def _of_base(services: Services, base: BaseAccess, answer_id: str) -> LoggedAnswer:
    try:
        answer = seen(services.answers, base.caller, answer_id)
    except AbsentAnswer as err:
        raise _absent(err) from None
    if answer.kb != base.kb:
        raise _absent(AbsentAnswer(answer_id))
    return answer


def _result(services: Services, base: BaseAccess, done: Accepted) -> AcceptResult:
    summary = questions_summary(services, base, done.questions) if done.questions else None
    return AcceptResult(answer=done.answer, line=done.line, questions=summary)


@router.post(
    "/kbs/{kb}/answers/{answer_id}/accept", response_model=AcceptResult, responses=error_responses(403, 409, 422)
)
def accept_answer(
    answer_id: AnswerId,
    body: Annotated[AcceptRequest, Depends(accept_body)],
    base: Annotated[BaseAccess, Depends(base_in_path("admin", accept_body))],
    services: ServicesDep,
) -> AcceptResult:
    """Turn a rated answer into a question of the base's question set, with its relevant passage
    (`chunk_id`, else the asker's pick, else an upvote's citations), split dev/test by the set's
    rule; a downvote with no passage becomes a knowledge gap (`GET /gaps` lists it). Nothing changes
    retrieval until an evaluation of the set chooses a fusion."""
    answer = _of_base(services, base, answer_id)
    if body.chunk_id is not None and services.retriever.chunk(base.scope, body.chunk_id) is None:
        raise invalid("chunk_id", f"no chunk {body.chunk_id!r} in {base.kb!r}")
    try:
        done = accept(
            services.answers, services.es, services.settings.questions_index, base.caller, answer, body.chunk_id
        )
    except NotAcceptable as err:
        raise HTTPException(409, str(err)) from None
    return _result(services, base, done)


@router.delete("/kbs/{kb}/answers/{answer_id}/accept", response_model=AcceptResult, responses=error_responses(403))
def undo_accept(answer_id: AnswerId, base: AdminBase, services: ServicesDep) -> AcceptResult:
    """Undo an acceptance: the question leaves the base's set (or the gap the report)."""
    answer = _of_base(services, base, answer_id)
    return _result(
        services, base, undo(services.answers, services.es, services.settings.questions_index, base.caller, answer)
    )
