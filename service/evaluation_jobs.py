"""Question sets kept in Elasticsearch, and evaluations as background jobs of service/jobs.py.

A base's question set is the JSONL text as uploaded, one document per base in `QUESTIONS_INDEX`,
so it survives a restart and an evaluation reads exactly what was uploaded. An evaluation is a
job of kind `evaluation` (`Evaluations`): `retrieval.evaluate.run_evaluation` in a job worker,
one at a time (it embeds every question and the cores are shared with the searches). Its
progress and its report are kept with the job in `JOBS_INDEX`, so they outlive the process; one
interrupted by a restart runs again, and fails with the reason when the question set changed
in between. The plot is drawn from the stored report when asked for.
"""

import json
import tempfile
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from elasticsearch import Elasticsearch, NotFoundError

from retrieval.evaluate import EvaluationError, plot_png, run_evaluation, store_chosen
from retrieval.questions import QuestionSet, parse_questions
from retrieval.retriever import Retriever
from service.jobs import UNFINISHED, Job, JobFailed, JobKind, JobStore, Progress

# Not a knowledge base: its documents have no `_meta.embedder`, so `core.kbs.list_kb_names` skips it.
QUESTIONS_INDEX = "rag-evaluation-questions"
EVALUATION = "evaluation"


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


def evaluation_params(stored: StoredQuestions, *, dry_run: bool) -> dict[str, Any]:
    """The job's input: which upload of the question set it evaluates, and whether it stores its choice."""
    return {"questions_uploaded_at": stored.uploaded_at, "dry_run": dry_run}


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
    _one_at_a_time: threading.Lock = field(default_factory=threading.Lock)

    def kind(self) -> JobKind:
        return JobKind(EVALUATION, self.run)

    def run(self, job: Job, progress: Progress) -> None:
        stored = load_questions(self.es, job.kb)
        if stored is None or stored.uploaded_at != job.params["questions_uploaded_at"]:
            raise JobFailed("the base's question set changed since this evaluation was asked for: evaluate again")

        def advance(done: int, total: int) -> None:
            progress.set(done=done, total=total)

        with self._one_at_a_time:
            try:
                report = run_evaluation(self.retriever, job.kb, stored.parsed, advance)
            except EvaluationError as err:
                raise JobFailed(str(err)) from None
        keep = not job.params["dry_run"]
        if keep:
            store_chosen(self.es, job.kb, report, note=f"POST /kbs/{job.kb}/evaluate, job {job.id}")
            self.retriever.forget(job.kb)
        # As report.json has it: list names are JSON keys, tuples lists.
        progress.result = {"report": json.loads(json.dumps(report)), "stored": keep}
