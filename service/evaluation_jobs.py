"""Question sets kept in Elasticsearch, and evaluation jobs run one at a time in the background.

A base's question set is the JSONL text as uploaded, one document per base in `QUESTIONS_INDEX`,
so it survives a restart and an evaluation reads exactly what was uploaded. An evaluation is
`retrieval.evaluate.run_evaluation` on a thread of its own (one runs at a time: it embeds every
question and the cores are shared with the searches); its progress and report live in this
process (`EvaluationJobs`), its report files in a temporary folder until the job is forgotten.
"""

import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from elasticsearch import Elasticsearch, NotFoundError

from retrieval.evaluate import run_evaluation, store_chosen, write_report
from retrieval.questions import QuestionSet, parse_questions
from retrieval.retriever import Retriever

# Not a knowledge base: its documents have no `_meta.embedder`, so `core.kbs.list_kb_names` skips it.
QUESTIONS_INDEX = "rag-evaluation-questions"
_KEEP_JOBS = 50  # finished jobs remembered per process (the oldest are forgotten first)


@dataclass(frozen=True)
class StoredQuestions:
    kb: str
    text: str
    uploaded_at: str

    @property
    def parsed(self) -> QuestionSet:
        return parse_questions(self.text.splitlines())


def save_questions(es: Elasticsearch, kb: str, text: str) -> StoredQuestions:
    """Keep `text` as the base's question set (replacing the last one)."""
    if not es.indices.exists(index=QUESTIONS_INDEX):
        es.options(ignore_status=400).indices.create(  # 400: another request created it first
            index=QUESTIONS_INDEX,
            mappings={"dynamic": False, "properties": {"kb": {"type": "keyword"}, "uploaded_at": {"type": "date"}}},
            settings={"number_of_shards": 1, "auto_expand_replicas": "0-1"},
        )
    stored = StoredQuestions(kb, text, datetime.now(UTC).isoformat())
    es.index(index=QUESTIONS_INDEX, id=kb, document=stored.__dict__, refresh="wait_for")
    return stored


def load_questions(es: Elasticsearch, kb: str) -> StoredQuestions | None:
    """The base's uploaded question set (None: nothing uploaded)."""
    try:
        source = es.get(index=QUESTIONS_INDEX, id=kb)["_source"]
    except NotFoundError:
        return None
    return StoredQuestions(source["kb"], source["text"], source["uploaded_at"])


Status = Literal["queued", "running", "done", "failed"]


@dataclass
class EvaluationJob:
    id: str
    kb: str
    dry_run: bool
    status: Status = "queued"
    done: int = 0
    total: int = 0
    error: str | None = None
    stored: bool = False
    report: dict[str, Any] | None = None
    folder: Path | None = None
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    finished_at: str | None = None

    @property
    def plot(self) -> Path | None:
        return self.folder / "report.png" if self.folder and self.status == "done" else None


class EvaluationJobs:
    """The evaluations of this process: queued, running and the last `_KEEP_JOBS` finished."""

    def __init__(self) -> None:
        self._jobs: dict[str, EvaluationJob] = {}
        self._lock = threading.Lock()
        self._one_at_a_time = threading.Lock()

    def get(self, kb: str, job_id: str) -> EvaluationJob | None:
        with self._lock:
            job = self._jobs.get(job_id)
        return job if job and job.kb == kb else None

    def active(self, kb: str) -> EvaluationJob | None:
        with self._lock:
            return next((j for j in self._jobs.values() if j.kb == kb and j.status in ("queued", "running")), None)

    def submit(
        self, retriever: Retriever, kb: str, questions: QuestionSet, *, dry_run: bool, on_stored: Callable[[], None]
    ) -> EvaluationJob:
        job = EvaluationJob(uuid.uuid4().hex[:16], kb, dry_run)
        with self._lock:
            self._jobs[job.id] = job
            self._forget_old()
        # A daemon thread: a process that stops does not wait for an evaluation to end.
        threading.Thread(
            target=self._run, args=(job, retriever, questions, on_stored), name=f"evaluation-{job.id}", daemon=True
        ).start()
        return job

    def _run(
        self, job: EvaluationJob, retriever: Retriever, questions: QuestionSet, on_stored: Callable[[], None]
    ) -> None:
        def progress(done: int, total: int) -> None:
            job.done, job.total = done, total

        try:
            with self._one_at_a_time:
                job.status = "running"
                report = run_evaluation(retriever, job.kb, questions, progress)
            job.folder = Path(tempfile.mkdtemp(prefix=f"evaluation-{job.id}-"))
            write_report(report, job.folder)
            if not job.dry_run:
                store_chosen(retriever.es, job.kb, report, note=f"POST /kbs/{job.kb}/evaluate, job {job.id}")
                on_stored()
                job.stored = True
            job.report, job.status = report, "done"
        except Exception as err:  # the job's outcome, shown by its status; the process goes on
            job.error, job.status = f"{type(err).__name__}: {err}", "failed"
        finally:
            job.finished_at = datetime.now(UTC).isoformat()

    def _forget_old(self) -> None:
        finished = [j for j in self._jobs.values() if j.status in ("done", "failed")]
        for job in finished[: max(0, len(finished) - _KEEP_JOBS)]:
            del self._jobs[job.id]
            if job.folder:
                shutil.rmtree(job.folder, ignore_errors=True)
