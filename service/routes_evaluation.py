"""Routes of a knowledge base's evaluation and fusion: upload a question set, run an evaluation in
the background, read its status, report and plot, and see, pin or reset the base's fusion.

    PUT    /kbs/{kb}/questions                       the JSONL question set (every bad line reported)
    GET    /kbs/{kb}/questions                       what is stored
    POST   /kbs/{kb}/questions/draft                 questions drafted by the model from sampled chunks
    POST   /kbs/{kb}/evaluate                        202 {"job"}: runs retrieval.evaluate in the background
    GET    /kbs/{kb}/evaluations/{job}               status, progress and, once done, the report
    GET    /kbs/{kb}/evaluations/{job}/report.png    the plot
    GET    /kbs/{kb}/fusion                          the fusion every hybrid search of the base uses
    PUT    /kbs/{kb}/fusion                          pin one; DELETE: back to the service default
"""

import json
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from elasticsearch import Elasticsearch
from fastapi import APIRouter, Depends, HTTPException, Path, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, field_validator
from starlette.concurrency import run_in_threadpool

from core.config import FusionMethod, Settings
from core.contract import Choice, StrictModel
from core.kbs import (
    FusionSetting,
    read_kb,
    write_fusion,
)
from core.schema import Mode
from retrieval.evaluation import LIST_DEPTH
from retrieval.questions import BadLine, base_corpus, parse_questions, resolve
from retrieval.results import FusionUsed
from retrieval.retriever import Retriever, fusion_used
from service.api import ESDep, RetrieverDep, RunnerDep, SettingsDep
from service.auth import KbAccess, kb_access
from service.evaluation_jobs import (
    EVALUATION,
    evaluation_params,
    find_evaluation,
    load_questions,
    plot,
    save_questions,
    unfinished_evaluation,
)
from service.jobs import Job, JobRunner
from service.llm import LLMNotConfiguredError
from service.openapi import error_responses
from service.question_drafts import draft_questions, sample_chunks

MAX_QUESTIONS_CHARS = 4_000_000  # also bounded by MAX_REQUEST_BYTES

ListName = Literal["vector", "bm25", "bigram", "standard"]  # the lists hybrid can fuse (core.schema.LIST_MODES)
LIST_NAMES: tuple[ListName, ...] = ("vector", "bm25", "bigram", "standard")


router = APIRouter(tags=["evaluation"], responses=error_responses(404, 502, 503))


# The caller's role on `{kb}` (service.auth): read to look, write to upload, evaluate, pin or reset.
Reader = Annotated[KbAccess, Depends(kb_access("read"))]
Writer = Annotated[KbAccess, Depends(kb_access("write"))]


class QuestionsUpload(StrictModel):
    text: str = Field(max_length=MAX_QUESTIONS_CHARS, description="the question set: JSON lines (docs/retrieval.md)")


class BadLineOut(BaseModel):
    line: int
    error: str
    text: str


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


class JobAccepted(BaseModel):
    job: str
    status_url: str


class EvaluationStatus(BaseModel):
    job: str
    kb: str
    status: Literal["queued", "running", "done", "failed"]
    done: int = Field(description="questions searched so far")
    total: int
    dry_run: bool
    stored: bool = Field(description="the chosen fusion is now the base's")
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
        default=list(LIST_NAMES), min_length=1, max_length=4, json_schema_extra={"uniqueItems": True}
    )
    weights: dict[ListName, Annotated[float, Field(ge=0, le=100)]] = Field(
        default_factory=dict, description="per list; 1 when absent"
    )
    note: str = Field("", max_length=200)

    @field_validator("lists")
    @classmethod
    def _distinct(cls, lists: list[str]) -> list[str]:
        if len(set(lists)) != len(lists):
            raise ValueError("lists must be distinct")
        return lists


class FusionState(BaseModel):
    kb: str
    effective: FusionUsed = Field(description="what every hybrid search of the base uses now")
    stored: dict[str, Any] | None = Field(description="the base's own setting (null: the service default)")


def _questions_summary(es: Elasticsearch, kb: str, text: str, uploaded_at: str) -> QuestionsSummary:
    parsed = parse_questions(text.splitlines())
    ready, bad = resolve(parsed, base_corpus(es, kb))
    return QuestionsSummary(
        kb=kb,
        lines=parsed.lines,
        usable=len(ready),
        dev=sum(q.split == "dev" for q in ready),
        test=sum(q.split == "test" for q in ready),
        generated=sum(q.generated for q in ready),
        bad_lines=[_bad(b) for b in bad],
        uploaded_at=uploaded_at,
    )


def _bad(line: BadLine) -> BadLineOut:
    return BadLineOut(line=line.line, error=line.error, text=line.text)


@router.put("/kbs/{kb}/questions", response_model=QuestionsSummary)
def put_questions(access: Writer, body: QuestionsUpload, es: ESDep) -> QuestionsSummary:
    """Store the base's question set (replacing the last); every line that cannot be used is listed."""
    kb = access.kb
    stored = save_questions(es, kb, body.text)
    return _questions_summary(es, kb, stored.text, stored.uploaded_at)


@router.get("/kbs/{kb}/questions", response_model=QuestionsSummary)
def get_questions(access: Reader, es: ESDep) -> QuestionsSummary:
    """The stored question set, checked against the base as it is now."""
    kb = access.kb
    stored = load_questions(es, kb)
    if stored is None:
        raise HTTPException(404, f"no question set for {kb!r}: PUT /kbs/{kb}/questions first")
    return _questions_summary(es, kb, stored.text, stored.uploaded_at)


@router.post("/kbs/{kb}/questions/draft", response_model=DraftResponse)
async def draft(access: Writer, body: DraftRequest, request: Request, es: ESDep) -> DraftResponse:
    """Questions drafted by the judgement model from sampled chunks, each with its sentence as evidence
    (503 without a model); appended to the stored set unless `append` is false."""
    model = request.app.state.workflow.judge_llm
    if model is None:
        raise LLMNotConfiguredError()
    chunks = await run_in_threadpool(sample_chunks, es, access.kb, body.count, body.seed)
    drafted = await draft_questions(model, chunks)
    if not body.append:
        return DraftResponse(drafted=drafted, questions=None)
    stored = await run_in_threadpool(load_questions, es, access.kb)
    lines = [stored.text.rstrip("\n")] if stored and stored.text.strip() else []
    text = "\n".join([*lines, *(json.dumps(line, ensure_ascii=False) for line in drafted)]) + "\n"
    saved = await run_in_threadpool(save_questions, es, access.kb, text)
    summary = await run_in_threadpool(_questions_summary, es, access.kb, saved.text, saved.uploaded_at)
    return DraftResponse(drafted=drafted, questions=summary)


@router.post(
    "/kbs/{kb}/evaluate",
    status_code=202,
    response_model=JobAccepted,
    responses=error_responses(409),
)
def evaluate(access: Writer, es: ESDep, runner: RunnerDep, body: EvaluateRequest) -> JSONResponse:
    """Evaluate the stored question set in the background and, unless `dry_run`, store the fusion chosen on dev."""
    kb = access.kb
    stored = load_questions(es, kb)
    if stored is None:
        raise HTTPException(404, f"no question set for {kb!r}: PUT /kbs/{kb}/questions first")
    running = unfinished_evaluation(runner.store, kb)
    if running is not None:
        raise HTTPException(409, f"an evaluation of {kb!r} is already {running.state}: job {running.id}")
    params = evaluation_params(stored, dry_run=body.dry_run)
    job = runner.submit(EVALUATION, kb, access.caller.name, params)
    url = f"/kbs/{kb}/evaluations/{job.id}"
    return JSONResponse({"job": job.id, "status_url": url}, status_code=202, headers={"Location": url})


def _job(runner: JobRunner, kb: str, job_id: str) -> Job:
    job = find_evaluation(runner.store, kb, job_id)
    if job is None:
        raise HTTPException(404, f"no evaluation {job_id!r} of {kb!r}")
    return job


# A job id of service/jobs.py (32 hex digits); 16 (the ids of earlier versions) are a 404, not a 422.
JobId = Annotated[
    str, Path(pattern=r"^[0-9a-f]{16}(?:[0-9a-f]{16})?$", description="the job id POST /kbs/{kb}/evaluate returned")
]


@router.get("/kbs/{kb}/evaluations/{job_id}", response_model=EvaluationStatus)
def evaluation_status(access: Reader, job_id: JobId, runner: RunnerDep) -> EvaluationStatus:
    """Status and progress of an evaluation; its report once done."""
    kb = access.kb
    job = _job(runner, kb, job_id)
    result = job.result or {}
    return EvaluationStatus(
        job=job.id,
        kb=job.kb,
        status=job.state,
        done=job.counts.get("done", 0),
        total=job.counts.get("total", 0),
        dry_run=bool(job.params.get("dry_run")),
        stored=bool(result.get("stored")),
        error=job.error,
        created_at=job.created_at,
        finished_at=job.finished_at,
        plot_url=f"/kbs/{kb}/evaluations/{job.id}/report.png" if job.state == "done" else None,
        report=result.get("report"),
    )


@router.get(
    "/kbs/{kb}/evaluations/{job_id}/report.png",
    response_class=Response,
    responses={200: {"content": {"image/png": {"schema": {"type": "string", "format": "binary"}}}}},
)
def evaluation_plot(access: Reader, job_id: JobId, runner: RunnerDep) -> Response:
    """The report's plot: per-mode bars with 95 % interval whiskers, and the rank distribution."""
    report = (_job(runner, access.kb, job_id).result or {}).get("report")
    if report is None:
        raise HTTPException(404, f"evaluation {job_id!r} has no plot yet: it is not done")
    return Response(plot(report), media_type="image/png")


def _fusion_state(es: Elasticsearch, kb: str, settings: Settings, retriever: Retriever) -> FusionState:
    stored = read_kb(es, kb, settings).fusion
    effective = fusion_used(retriever.params.with_fusion(stored), stored)
    return FusionState(kb=kb, effective=effective, stored=stored.to_meta() if stored else None)


@router.get("/kbs/{kb}/fusion", response_model=FusionState)
def get_fusion(access: Reader, es: ESDep, settings: SettingsDep, retriever: RetrieverDep) -> FusionState:
    """The fusion the base's hybrid searches use: its own (chosen by an evaluation, or pinned) or the default."""
    return _fusion_state(es, access.kb, settings, retriever)


@router.put("/kbs/{kb}/fusion", response_model=FusionState)
def pin_fusion(
    access: Writer, body: FusionPin, es: ESDep, settings: SettingsDep, retriever: RetrieverDep
) -> FusionState:
    """Pin the base's fusion (until the next evaluation that is not a dry run, or a DELETE)."""
    kb = access.kb
    setting = FusionSetting(
        method=body.method,
        rrf_k=body.rrf_k,
        depth=body.depth,
        lists=tuple(Mode.from_str(name) for name in body.lists),
        weights={str(name): weight for name, weight in body.weights.items()},
        origin="pinned",
        chosen_at=datetime.now(UTC).isoformat(),
        note=body.note,
    )
    write_fusion(es, kb, setting)
    retriever.forget(kb)
    return _fusion_state(es, kb, settings, retriever)


@router.delete("/kbs/{kb}/fusion", response_model=FusionState)
def reset_fusion(access: Writer, es: ESDep, settings: SettingsDep, retriever: RetrieverDep) -> FusionState:
    """Back to the service default (`FUSION`, `RRF_K`, `RRF_DEPTH`)."""
    kb = access.kb
    write_fusion(es, kb, None)
    retriever.forget(kb)
    return _fusion_state(es, kb, settings, retriever)
