"""Routes of a knowledge base's evaluation and fusion: upload a question set, run an evaluation in
the background, read its status, report and plot, and see, pin or reset the base's fusion.

    PUT    /kbs/{kb}/questions                       the JSONL question set (every bad line reported)
    GET    /kbs/{kb}/questions                       what is stored
    POST   /kbs/{kb}/questions/draft                 questions drafted by the model from sampled chunks
    POST   /kbs/{kb}/evaluate                        202 {"job"}: runs evaluation.run in the background
    GET    /kbs/{kb}/evaluations/{job}               status, progress and, once done, the report
    POST   /kbs/{kb}/evaluations/{job}/undo          the base's fusion back to what it was before that evaluation
    GET    /kbs/{kb}/evaluations/{job}/report.png    the plot
    GET    /kbs/{kb}/fusion                          the base's own fusion (404 when it uses the default)
    PUT    /kbs/{kb}/fusion                          pin one; DELETE: back to the service default
"""

import json
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Response
from pydantic import AfterValidator, BaseModel, Field, Strict, WithJsonSchema, field_validator
from starlette.concurrency import run_in_threadpool

from core.config import FusionMethod
from core.contract import Choice, StrictModel
from core.kbs import FusionSetting
from core.reader import Reader
from core.schema import LIST_MODES, Mode
from evaluation.drafts import sample_chunks
from evaluation.metrics import LIST_DEPTH
from evaluation.questions import BadLine, base_corpus, parse_questions, resolve
from evaluation.store import StoredQuestions, UnreadableQuestions, load_questions, save_questions
from retrieval.results import FusionUsed
from retrieval.retriever import fusion_used
from service.deps import ReadBase, Services, ServicesDep, WriteBase, base_in_path, get_caller
from service.http.openapi import error_responses
from service.http.routes.kbs import invalid
from service.http.schemas import ErrorResponse, JobAccepted
from service.jobs.evaluation import (
    EVALUATION,
    EvaluationParams,
    find_evaluation,
    plot,
    stored_note,
    unfinished_evaluation,
)
from service.jobs.store import Job, Reach
from service.kbs import BaseAccess
from service.llm.client import LLMNotConfiguredError
from service.llm.drafts import draft_questions

MAX_QUESTIONS_CHARS = 4_000_000  # also bounded by MAX_REQUEST_BYTES


def _fusable(mode: Mode) -> Mode:
    if mode not in LIST_MODES:
        raise ValueError(f"{mode} is not a list hybrid fuses: choose among {', '.join(LIST_MODES)}")
    return mode


# A list hybrid can fuse: one of core.schema.LIST_MODES.
ListName = Annotated[
    Mode, Strict(False), AfterValidator(_fusable), WithJsonSchema({"type": "string", "enum": list(LIST_MODES)})
]

router = APIRouter(tags=["evaluation"], dependencies=[Depends(get_caller)], responses=error_responses(404, 502, 503))


class QuestionsUpload(StrictModel):
    text: str = Field(max_length=MAX_QUESTIONS_CHARS, description="the question set: JSON lines (docs/retrieval.md)")


class BadLineOut(BaseModel):
    line: int
    error: str
    text: str
    absent: bool = Field(False, description="a valid question about a document not in the base: skipped, not wrong")


class QuestionsSummary(BaseModel):
    kb: str
    lines: int = Field(description="non-blank lines")
    usable: int = Field(description="questions whose evidence is in the base")
    dev: int
    test: int
    generated: int
    bad_lines: list[BadLineOut]
    uploaded_at: str


class DraftRequest(StrictModel):
    count: int = Field(10, ge=1, le=50, description="chunks to sample (a chunk without a usable sentence gives none)")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="the sample's seed")
    append: bool = Field(True, description="add the drafted lines to the stored question set")


class DraftResponse(BaseModel):
    drafted: list[dict[str, Any]] = Field(description='question-set lines, each `"generated": true`')
    questions: QuestionsSummary | None = Field(description="the stored set after appending (null: not appended)")


class EvaluateRequest(StrictModel):
    dry_run: bool = Field(False, description="report only: keep the base's fusion as it is")


class EvaluationStatus(BaseModel):
    job: str
    kb: str
    status: Literal["queued", "running", "done", "failed"]
    done: int = Field(description="questions searched so far")
    total: int
    dry_run: bool
    stored: bool = Field(description="the chosen fusion is now the base's")
    previous: dict[str, Any] | None = Field(
        None, description="the base's own fusion before this evaluation stored its choice (null: the default)"
    )
    error: str | None
    created_at: str
    finished_at: str | None
    plot_url: str | None
    report: dict[str, Any] | None = Field(description="report.json (docs/retrieval.md) once done")


class FusionPin(StrictModel):
    method: Choice[FusionMethod]
    rrf_k: int = Field(60, ge=1, le=1000)
    depth: int = Field(10, ge=1, le=LIST_DEPTH)
    lists: list[ListName] = Field(
        default=list(LIST_MODES), min_length=1, max_length=4, json_schema_extra={"uniqueItems": True}
    )
    weights: dict[ListName, Annotated[float, Field(ge=0, le=100)]] = Field(
        default_factory=dict, description="per list; 1 when absent"
    )
    rerank_weight: float | None = Field(
        None, ge=0, le=1, description="the reranker's share of the final score (0: off; null: RERANK_WEIGHT)"
    )
    coverage: float = Field(
        1.0, ge=0, le=8, description="a keyword list's weight times its coverage of the question to this power (0: off)"
    )
    note: str = Field("", max_length=200)

    @field_validator("lists")
    @classmethod
    def _distinct(cls, lists: list[Mode]) -> list[Mode]:
        if len(set(lists)) != len(lists):
            raise ValueError("lists must be distinct")
        return lists


class FusionState(BaseModel):
    kb: str
    effective: FusionUsed = Field(description="what every hybrid search of the base uses now")
    stored: dict[str, Any] | None = Field(description="the base's own setting (null: the service default)")


def questions_summary(services: Services, base: BaseAccess, stored: StoredQuestions) -> QuestionsSummary:
    """The set checked against what the caller may read of the base: evidence in a document hidden
    from the caller is "not found", exactly as evidence that is nowhere."""
    parsed = parse_questions(stored.text.splitlines())
    ready, bad = resolve(parsed, base_corpus(Reader(services.es, base.scope)))
    return QuestionsSummary(
        kb=base.kb,
        lines=parsed.lines,
        usable=len(ready),
        dev=sum(q.split == "dev" for q in ready),
        test=sum(q.split == "test" for q in ready),
        generated=sum(q.generated for q in ready),
        bad_lines=[_bad(b) for b in bad],
        uploaded_at=stored.uploaded_at,
    )


def _bad(line: BadLine) -> BadLineOut:
    return BadLineOut(line=line.line, error=line.error, text=line.text, absent=line.absent)


def _stored(services: Services, base: BaseAccess) -> StoredQuestions | None:
    """The base's question set as the caller may see it: its lines may quote documents only its
    uploader may read, so it is seen by the uploader and the base's admins, and is absent to others."""
    stored = load_questions(services.es, services.settings.questions_index, base.kb)
    return stored if stored is not None and base.caller.sees_work_of(base.kb, stored.owner) else None


def _replaceable(services: Services, base: BaseAccess) -> StoredQuestions | None:
    """The stored set, when the caller may replace it: a set it may not read is one it may not
    overwrite either (a 404, word for word as GET's)."""
    stored = load_questions(services.es, services.settings.questions_index, base.kb)
    if stored is not None and not base.caller.sees_work_of(base.kb, stored.owner):
        raise _no_set(base.kb)
    return stored


def _no_set(kb: str) -> HTTPException:
    return HTTPException(404, f"no question set for {kb!r}: PUT /kbs/{kb}/questions first")


def questions_body(body: QuestionsUpload) -> QuestionsUpload:
    return body


def draft_body(body: DraftRequest) -> DraftRequest:
    return body


def evaluate_body(body: EvaluateRequest) -> EvaluateRequest:
    return body


def pin_body(body: FusionPin) -> FusionPin:
    return body


# A route with a body checks it before its base (bad input is a 422 whatever the base).
QuestionsBody = Annotated[QuestionsUpload, Depends(questions_body)]
DraftBody = Annotated[DraftRequest, Depends(draft_body)]
EvaluateBody = Annotated[EvaluateRequest, Depends(evaluate_body)]
PinBody = Annotated[FusionPin, Depends(pin_body)]


@router.put("/kbs/{kb}/questions", response_model=QuestionsSummary, responses=error_responses(422))
def put_questions(
    body: QuestionsBody,
    base: Annotated[BaseAccess, Depends(base_in_path("write", questions_body))],
    services: ServicesDep,
) -> QuestionsSummary:
    """Store the base's question set (replacing the last, when the caller may read it: else a 404 as
    for GET); every line that cannot be used is listed.
    A line nested past the JSON parser's limit (200 levels) is a 422 for the whole set, and the last set stays."""
    _replaceable(services, base)
    try:
        stored = save_questions(services.es, services.settings.questions_index, base.kb, body.text, base.caller.name)
    except UnreadableQuestions as err:
        raise invalid("text", str(err)) from None
    return questions_summary(services, base, stored)


@router.get("/kbs/{kb}/questions", response_model=QuestionsSummary)
def get_questions(base: ReadBase, services: ServicesDep) -> QuestionsSummary:
    """The stored question set, checked against the base as the caller may read it now."""
    stored = _stored(services, base)
    if stored is None:
        raise _no_set(base.kb)
    return questions_summary(services, base, stored)


@router.post(
    "/kbs/{kb}/questions/draft",
    response_model=DraftResponse,
    responses={
        **error_responses(409),
        503: {
            "model": ErrorResponse,
            "description": "no model is configured (OPENAI_BASE_URL or OPENAI_API_KEY, and MODEL_NAME): drafting "
            "needs one; or Elasticsearch or the model unreachable",
        },
    },
)
async def draft(
    body: DraftBody, base: Annotated[BaseAccess, Depends(base_in_path("write", draft_body))], services: ServicesDep
) -> DraftResponse:
    """Questions drafted by the judgement model from sampled chunks the caller may read, each with its
    sentence as evidence (503 without a model); appended to the caller's stored set unless `append` is false."""
    model = services.workflow.judge_llm
    if model is None:
        raise LLMNotConfiguredError()
    chunks = await run_in_threadpool(sample_chunks, Reader(services.es, base.scope), body.count, body.seed)
    drafted = await draft_questions(model, chunks)
    if not body.append:
        return DraftResponse(drafted=drafted, questions=None)
    stored = await run_in_threadpool(_replaceable, services, base)
    lines = [stored.text.rstrip("\n")] if stored and stored.text.strip() else []
    text = "\n".join([*lines, *(json.dumps(line, ensure_ascii=False) for line in drafted)]) + "\n"
    try:
        saved = await run_in_threadpool(
            save_questions, services.es, services.settings.questions_index, base.kb, text, base.caller.name
        )
    except UnreadableQuestions as err:  # a set stored before such lines were refused: never appended to
        raise HTTPException(409, f"the stored question set is refused as it is ({err}): replace it first") from None
    summary = await run_in_threadpool(questions_summary, services, base, saved)
    return DraftResponse(drafted=drafted, questions=summary)


@router.post("/kbs/{kb}/evaluate", status_code=202, response_model=JobAccepted, responses=error_responses(409))
def evaluate(
    body: EvaluateBody,
    base: Annotated[BaseAccess, Depends(base_in_path("write", evaluate_body))],
    services: ServicesDep,
) -> Response:
    """Evaluate the stored question set in the background, reading what the caller may read, and,
    unless `dry_run`, store the fusion chosen on dev."""
    stored = _stored(services, base)
    if stored is None:
        raise _no_set(base.kb)
    running = unfinished_evaluation(services.jobs.store, base.kb)
    if running is not None:
        mine = base.caller.sees_work_of(base.kb, running.owner)
        raise HTTPException(
            409, f"an evaluation of {base.kb!r} is already {running.state}" + (f": job {running.id}" if mine else "")
        )
    params = EvaluationParams.of(stored, Reach.of(base.scope.documents), dry_run=body.dry_run)
    job = services.jobs.submit(EVALUATION, base.kb, base.caller.name, params.model_dump())
    return JobAccepted(job=job.id, status_url=f"/kbs/{base.kb}/evaluations/{job.id}").response()


def _job(services: Services, base: BaseAccess, job_id: str) -> Job:
    """The evaluation, when the caller may see it (its owner, the base's admins): else absent."""
    job = find_evaluation(services.jobs.store, base.kb, job_id)
    if job is None or not base.caller.sees_work_of(base.kb, job.owner):
        raise HTTPException(404, f"no evaluation {job_id!r} of {base.kb!r}")
    return job


# A job id of service/jobs/store.py (32 hex digits); 16 (the ids of earlier versions) are a 404, not a 422.
JobId = Annotated[
    str, Path(pattern=r"^[0-9a-f]{16}(?:[0-9a-f]{16})?$", description="the job id POST /kbs/{kb}/evaluate returned")
]


@router.get("/kbs/{kb}/evaluations/{job_id}", response_model=EvaluationStatus)
def evaluation_status(base: ReadBase, job_id: JobId, services: ServicesDep) -> EvaluationStatus:
    """Status and progress of an evaluation; its report once done."""
    job = _job(services, base, job_id)
    result = job.result or {}
    return EvaluationStatus(
        job=job.id,
        kb=job.kb,
        status=job.state,
        done=job.counts.get("done", 0),
        total=job.counts.get("total", 0),
        dry_run=bool(job.params.get("dry_run")),
        stored=bool(result.get("stored")),
        previous=result.get("previous"),
        error=job.error,
        created_at=job.created_at,
        finished_at=job.finished_at,
        plot_url=f"/kbs/{job.kb}/evaluations/{job.id}/report.png" if job.state == "done" else None,
        report=result.get("report"),
    )


@router.get(
    "/kbs/{kb}/evaluations/{job_id}/report.png",
    response_class=Response,
    responses={200: {"content": {"image/png": {"schema": {"type": "string", "format": "binary"}}}}},
)
def evaluation_plot(base: ReadBase, job_id: JobId, services: ServicesDep) -> Response:
    """The report's plot: per-mode bars with 95 % interval whiskers, and the rank distribution."""
    report = (_job(services, base, job_id).result or {}).get("report")
    if report is None:
        raise HTTPException(404, f"evaluation {job_id!r} has no plot yet: it is not done")
    return Response(plot(report), media_type="image/png")


@router.post("/kbs/{kb}/evaluations/{job_id}/undo", response_model=FusionState, responses=error_responses(409))
def undo_evaluation(job_id: JobId, base: WriteBase, services: ServicesDep) -> FusionState:
    """Undo what an evaluation changed: the base's fusion goes back to what it was before it (a 409
    when the evaluation stored nothing, or the fusion has changed since)."""
    job = _job(services, base, job_id)
    result = job.result or {}
    current = services.kbs.read(base.kb).fusion
    if not result.get("stored") or current is None or current.note != stored_note(job):
        raise HTTPException(409, f"evaluation {job_id!r} is not what {base.kb!r} uses now: nothing to undo")
    previous = result.get("previous")
    services.kbs.write_fusion(base.kb, FusionSetting.from_meta(previous) if previous else None)
    return _fusion_state(services, base)


def _fusion_state(services: Services, base: BaseAccess) -> FusionState:
    stored = services.kbs.read(base.kb).fusion
    effective = fusion_used(services.retriever.params.with_fusion(stored), stored)
    shown = stored.seen_by(base.caller.may(base.kb, "admin")).to_meta() if stored else None
    return FusionState(kb=base.kb, effective=effective, stored=shown)


@router.get("/kbs/{kb}/fusion", response_model=FusionState)
def get_fusion(base: ReadBase, services: ServicesDep) -> FusionState:
    """The base's own fusion (chosen by an evaluation, or pinned), which its hybrid searches use; 404
    when it has none (or it was deleted): it then uses the service default, which `GET /kbs/{kb}` shows."""
    state = _fusion_state(services, base)
    if state.stored is None:
        raise HTTPException(
            404,
            f"knowledge base {base.kb!r} has no fusion of its own: its hybrid search uses the service default "
            f"({state.effective.method}; GET /kbs/{base.kb} shows it)",
        )
    return state


@router.put("/kbs/{kb}/fusion", response_model=FusionState)
def pin_fusion(
    body: PinBody, base: Annotated[BaseAccess, Depends(base_in_path("write", pin_body))], services: ServicesDep
) -> FusionState:
    """Pin the base's fusion (until the next evaluation that is not a dry run, or a DELETE)."""
    setting = FusionSetting(
        method=body.method,
        rrf_k=body.rrf_k,
        depth=body.depth,
        lists=tuple(body.lists),
        weights={str(name): weight for name, weight in body.weights.items()},
        coverage=body.coverage,
        rerank_weight=body.rerank_weight,
        origin="pinned",
        chosen_at=datetime.now(UTC).isoformat(),
        note=body.note,
    )
    services.kbs.write_fusion(base.kb, setting)
    return _fusion_state(services, base)


@router.delete("/kbs/{kb}/fusion", response_model=FusionState)
def reset_fusion(base: WriteBase, services: ServicesDep) -> FusionState:
    """Delete the base's own fusion: back to the service default (`FUSION`, `RRF_K`, `RRF_DEPTH`), which
    the answer gives as `effective` (`stored` null); a GET of the fusion is then a 404."""
    services.kbs.write_fusion(base.kb, None)
    return _fusion_state(services, base)
