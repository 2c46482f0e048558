"""Evaluations as background jobs (service/jobs/runner.py) of the base's stored question set
(evaluation/store.py).

An evaluation is a job of kind `evaluation` (`Evaluations`): `evaluation.run.run_evaluation` in a job worker,
one at a time (it embeds every question and the cores are shared with the searches). Its
progress and its report are kept with the job in `JOBS_INDEX`, so they outlive the process; one
interrupted by a restart runs again, and fails with the reason when the question set changed
in between. It reads the base as its owner may (`EvaluationParams.reader`): its report, misses
and bad lines never name a chunk the owner could not read. The plot is drawn from the stored
report when asked for.
"""

import json
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticsearch import Elasticsearch
from pydantic import BaseModel

from core.access import Scope
from evaluation.metrics import config_of
from evaluation.run import EvaluationError, chosen_setting, plot_png, run_evaluation
from evaluation.store import StoredQuestions, load_questions
from retrieval.retriever import Retriever
from service.jobs.runner import JobKind, Progress
from service.jobs.store import UNFINISHED, Job, JobFailed, JobStore, Reach
from service.kbs import KnowledgeBases

EVALUATION = "evaluation"


class EvaluationParams(BaseModel):
    """The job's input: which upload of the question set it evaluates, whether it stores its choice, and
    what its owner may read of the base (a job stored without one reads public documents only)."""

    questions_uploaded_at: str
    dry_run: bool = False
    reader: Reach = Reach()

    @classmethod
    def of(cls, stored: StoredQuestions, reader: Reach, *, dry_run: bool) -> "EvaluationParams":
        return cls(questions_uploaded_at=stored.uploaded_at, dry_run=dry_run, reader=reader)


def find_evaluation(store: JobStore, kb: str, job_id: str) -> Job | None:
    job = store.get(job_id)
    return job if job is not None and job.kind == EVALUATION and job.kb == kb else None


def unfinished_evaluation(store: JobStore, kb: str) -> Job | None:
    """The base's queued or running evaluation, if any (one at a time per base)."""
    filters: list[dict[str, Any]] = [
        {"term": {"kind": EVALUATION}},
        {"term": {"kb": kb}},
        {"terms": {"state": list(UNFINISHED)}},
    ]
    found = store.recent(filters, 1, fresh=True)  # a job submitted a moment ago counts
    return found[0] if found else None


def stored_note(job: Job) -> str:
    """The note of the fusion an evaluation stored: it names the job, so an undo knows it is still that one."""
    return f"POST /kbs/{job.kb}/evaluate, job {job.id}"


def plot(report: dict[str, Any]) -> bytes:
    """The report's PNG plot, drawn anew (the report is what is kept)."""
    with tempfile.TemporaryDirectory(prefix="evaluation-plot-") as folder:
        path = Path(folder, "report.png")
        plot_png(report, path)
        return path.read_bytes()


@dataclass(frozen=True)
class Evaluations:
    """The `evaluation` job kind: the stored question set evaluated on the base, the report kept
    in the job's `result` (`{"report", "stored"}`) and, unless a dry run, its fusion stored."""

    es: Elasticsearch
    retriever: Retriever
    kbs: KnowledgeBases
    _one_at_a_time: threading.Lock = field(default_factory=threading.Lock)

    def kind(self) -> JobKind:
        return JobKind(EVALUATION, self.run)

    def run(self, job: Job, progress: Progress) -> None:
        params = EvaluationParams.model_validate(job.params)
        stored = load_questions(self.es, self.kbs.settings.questions_index, job.kb)
        if stored is None or stored.uploaded_at != params.questions_uploaded_at:
            raise JobFailed("the base's question set changed since this evaluation was asked for: evaluate again")

        def advance(done: int, total: int) -> None:
            progress.set(done=done, total=total)
            if done % 20 == 0:
                progress.check()  # cancelled, out of time or taken over: stop between questions

        previous = self.kbs.read(job.kb).fusion  # what the base uses now: the report says what would change
        before = config_of(self.retriever.params.with_fusion(previous))
        with self._one_at_a_time:
            try:
                scope = Scope(job.kb, params.reader.access)
                report = run_evaluation(self.retriever, scope, stored.parsed, advance, before=before)
            except EvaluationError as err:
                raise JobFailed(str(err)) from None
        keep = not params.dry_run
        if keep:
            self.kbs.write_fusion(job.kb, chosen_setting(report, note=stored_note(job)))
        # As report.json has it: list names are JSON keys, tuples lists. `previous`: what an undo restores.
        progress.result = {
            "report": json.loads(json.dumps(report)),
            "stored": keep,
            "previous": previous.to_meta() if previous else None,
        }
