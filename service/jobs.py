"""Background jobs: kept in Elasticsearch, run in a few threads, resumed after a restart.

A job is a record in `JOBS_INDEX` (`Job`: its kind, its knowledge base, its state
`queued` → `running` → `done` | `failed`, counts, per-item errors and a result). What a job does
is its kind's `run(job, progress)` callable (`JobKind`): uploads (service/uploads.py) and
evaluations (service/evaluation_jobs.py) share the store, the runner and the job list.

- **Bounded**: `JOB_CONCURRENCY` worker threads take queued jobs in order; the rest wait in the
  queue (and in the index, as `queued`).
- **Never silently half-done**: the record is written before the request is answered, and a
  job's end (done, or failed with the reason) is written when it ends. A process that stops
  (a crash, SIGKILL, a graceful shutdown mid-job) leaves the job `queued` or `running`; the
  next start (`JobRunner.start`) runs every such job again. A kind's `run` must therefore be
  idempotent (uploads are: chunk ids are deterministic) or fail with the reason it cannot.
- **Progress** (`Progress`) is written at most every `JOB_PROGRESS_INTERVAL_S`, and at the end.
- Workers are daemon threads: at shutdown the process does not wait for a job to finish
  (it is resumed instead), and an error the shutdown causes in a job (the Elasticsearch client
  closed under it) is not recorded as the job's failure.

One service process per `JOBS_INDEX`: a starting process resumes every unfinished job it finds
(two processes starting together never run the same job: the claim is a conditional write).
"""

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from elasticsearch import ConflictError, Elasticsearch, NotFoundError
from pydantic import BaseModel, Field

logger = logging.getLogger(__name__)

JobState = Literal["queued", "running", "done", "failed"]
UNFINISHED: tuple[JobState, ...] = ("queued", "running")
_RESUME_RETRY_S = 5.0  # Elasticsearch unreachable at start: look for unfinished jobs again after this

_MAPPING: dict[str, Any] = {
    # Only what is searched is indexed; counts, errors and parameters are kept in `_source`.
    "dynamic": False,
    "properties": {
        "kind": {"type": "keyword"},
        "kb": {"type": "keyword"},
        "state": {"type": "keyword"},
        "owner": {"type": "keyword"},
        "created_at": {"type": "date"},
        "updated_at": {"type": "date"},
    },
}


def _now() -> str:
    return datetime.now(UTC).isoformat()


class JobError(BaseModel):
    """One item of a job that failed (an uploaded file), the others going on."""

    file: str | None = Field(None, description="the item (an uploaded file's name); none for the job as a whole")
    reason: str = Field(description="what is wrong and what to do")
    code: str | None = Field(None, description="a short reason code, e.g. corrupt, unsupported, too_large")


class Job(BaseModel):
    """A job as stored; `params` is its kind's input (never shown to clients: it holds paths)."""

    id: str
    kind: str
    kb: str
    owner: str
    state: JobState = "queued"
    created_at: str = Field(default_factory=_now)
    updated_at: str = Field(default_factory=_now)
    started_at: str | None = None
    finished_at: str | None = None
    runs: int = 0  # times a worker started it: more than 1 after a resume
    counts: dict[str, int] = Field(default_factory=dict)
    errors: list[JobError] = Field(default_factory=list)
    error: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    result: dict[str, Any] | None = None  # what the kind's `run` left (an evaluation's report), once ended


class JobView(BaseModel):
    """`GET /jobs/{id}`: the job without its internal parameters."""

    id: str
    kind: str = Field(description="what the job does, e.g. `upload`")
    kb: str = Field(description="the knowledge base it works on")
    state: JobState
    created_at: str
    updated_at: str = Field(description="its last progress write")
    started_at: str | None = None
    finished_at: str | None = None
    runs: int = Field(description="times it was started: more than 1 when it was resumed after a restart")
    counts: dict[str, int] = Field(description="progress figures; an upload's are listed in docs/api.md")
    errors: list[JobError] = Field(description="items that failed while the others went on")
    error: str | None = Field(None, description="why the job failed, when it did")

    @classmethod
    def of(cls, job: Job) -> "JobView":
        return cls.model_validate(job.model_dump(exclude={"params", "owner", "result"}))


class JobFailed(Exception):
    """Raised by a kind's `run` when the job cannot be done; the message is the job's `error`."""


class JobStore:
    """Jobs in one Elasticsearch index (created on first use)."""

    def __init__(self, es: Elasticsearch, index: str) -> None:
        self.es, self.index = es, index
        self._ready = False

    def _ensure(self) -> None:
        if not self._ready:
            if not self.es.indices.exists(index=self.index):
                self.es.options(ignore_status=400).indices.create(index=self.index, mappings=_MAPPING)
            self._ready = True

    def create(self, job: Job) -> None:
        self._ensure()
        self.es.create(index=self.index, id=job.id, document=job.model_dump())

    def get(self, job_id: str) -> Job | None:
        self._ensure()
        try:
            return Job.model_validate(self.es.get(index=self.index, id=job_id)["_source"])
        except NotFoundError:
            return None

    def update(self, job_id: str, **fields: Any) -> None:
        self.es.update(index=self.index, id=job_id, doc={**fields, "updated_at": _now()})

    def _transition(
        self, job_id: str, states: tuple[JobState, ...], change: Callable[[Job], dict[str, Any]]
    ) -> Job | None:
        """The job with the fields `change` gives, if it was in one of `states` and nobody wrote it in
        between (a conditional write); None otherwise, or when there is no such job."""
        try:
            found = self.es.get(index=self.index, id=job_id)
        except NotFoundError:
            return None
        job = Job.model_validate(found["_source"])
        if job.state not in states:
            return None
        job = job.model_copy(update=change(job))
        try:
            self.es.index(
                index=self.index,
                id=job_id,
                document=job.model_dump(),
                if_seq_no=found["_seq_no"],
                if_primary_term=found["_primary_term"],
            )
        except ConflictError:
            return None
        return job

    def claim(self, job_id: str) -> Job | None:
        """The job, now `running`, if it was unfinished and nobody claimed it in between."""
        return self._transition(
            job_id, UNFINISHED, lambda job: {"state": "running", "started_at": _now(), "runs": job.runs + 1}
        )

    def recent(self, filters: list[dict[str, Any]], size: int, *, fresh: bool = False) -> list[Job]:
        """The newest `size` jobs matching every one of `filters` (Elasticsearch query clauses);
        `fresh`: jobs stored a moment ago included (a refresh first)."""
        self._ensure()
        if fresh:
            self.es.indices.refresh(index=self.index)
        response = self.es.search(
            index=self.index, query={"bool": {"filter": filters}}, sort=[{"created_at": "desc"}], size=size
        )
        return [Job.model_validate(hit["_source"]) for hit in response["hits"]["hits"]]

    def cancel(self, job_id: str, reason: str) -> Job | None:
        """The job, now `failed` with `reason`, if it was still `queued` (None: it had started or ended)."""
        now = _now()
        ended = {"state": "failed", "error": reason, "finished_at": now, "updated_at": now}
        return self._transition(job_id, ("queued",), lambda job: ended)

    def unfinished(self) -> list[str]:
        """Ids of queued and running jobs, oldest first."""
        self._ensure()
        self.es.indices.refresh(index=self.index)
        response = self.es.search(
            index=self.index,
            query={"terms": {"state": list(UNFINISHED)}},
            sort=[{"created_at": "asc"}],
            size=10_000,
            source=False,
        )
        return [hit["_id"] for hit in response["hits"]["hits"]]


class Progress:
    """A running job's counts and errors, written to the store at most every `interval_s`; its
    `result`, which a kind's `run` may set, is written when the job ends."""

    def __init__(self, store: JobStore, job: Job, interval_s: float) -> None:
        self._store, self._job, self._interval_s = store, job, interval_s
        self.counts: dict[str, int] = dict(job.counts)
        self.errors: list[JobError] = []
        self.result: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._written = time.monotonic()

    def set(self, **counts: int) -> None:
        with self._lock:
            self.counts.update(counts)
        self._maybe_write()

    def add(self, name: str, amount: int) -> None:
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + amount
        self._maybe_write()

    def error(self, file: str | None, reason: str, code: str | None = None) -> None:
        with self._lock:
            self.errors.append(JobError(file=file, reason=reason, code=code))
        self.write()

    def _maybe_write(self) -> None:
        if time.monotonic() - self._written >= self._interval_s:
            self.write()

    def write(self) -> None:
        with self._lock:
            self._written = time.monotonic()
            fields = {"counts": dict(self.counts), "errors": [e.model_dump() for e in self.errors]}
        try:
            self._store.update(self._job.id, **fields)
        except Exception as err:  # progress is best effort: the end state is written apart
            logger.warning("progress of job %s not written: %s", self._job.id, err)


@dataclass(frozen=True)
class JobKind:
    """What jobs of one kind do: `run` does the work (idempotent: it may run again after a restart)
    and returns nothing or raises (`JobFailed` with the reason); `finish` cleans up after the job
    ended, done or failed (never after an interruption, which is resumed)."""

    name: str
    run: Callable[[Job, Progress], None]
    finish: Callable[[Job], None] | None = None


class JobRunner:
    """Worker threads over a queue of job ids; see the module docstring."""

    def __init__(self, store: JobStore, kinds: list[JobKind], *, concurrency: int, progress_interval_s: float) -> None:
        self.store = store
        self.kinds = {kind.name: kind for kind in kinds}
        self.concurrency, self.progress_interval_s = concurrency, progress_interval_s
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._stopping = threading.Event()

    def start(self) -> None:
        """Start the workers and, in the background, queue every job a previous process left unfinished."""
        for number in range(self.concurrency):
            threading.Thread(target=self._work, name=f"job-worker-{number}", daemon=True).start()
        threading.Thread(target=self._resume, name="job-resume", daemon=True).start()

    def stop(self) -> None:
        """No job starts any more; running ones are abandoned (and resumed by the next process)."""
        self._stopping.set()

    def submit(self, kind: str, kb: str, owner: str, params: dict[str, Any], job_id: str | None = None) -> Job:
        """A new queued job, stored before this returns (so it survives a crash from now on)."""
        if kind not in self.kinds:
            raise ValueError(f"unknown job kind {kind!r}")
        job = Job(id=job_id or new_job_id(), kind=kind, kb=kb, owner=owner, params=params)
        self.store.create(job)
        self._queue.put(job.id)
        return job

    def cancel(self, job: Job, by: str) -> Job | None:
        """Cancel a queued job (it ends `failed`, its kind's `finish` cleans up); None once it has started."""
        cancelled = self.store.cancel(job.id, f"cancelled by {by} before it started")
        kind = self.kinds.get(job.kind)
        if cancelled is not None and kind is not None and kind.finish is not None:
            kind.finish(cancelled)
        return cancelled

    def _resume(self) -> None:
        while not self._stopping.is_set():
            try:
                ids = self.store.unfinished()
            except Exception as err:
                logger.warning("cannot look for unfinished jobs yet (%s): retrying in %g s", err, _RESUME_RETRY_S)
                self._stopping.wait(_RESUME_RETRY_S)
                continue
            for job_id in ids:
                logger.info("resuming job %s", job_id)
                self._queue.put(job_id)
            return

    def _work(self) -> None:
        while not self._stopping.is_set():
            job_id = self._queue.get()
            if self._stopping.is_set():
                return
            try:
                self.run_one(job_id)
            except Exception:
                logger.exception("job %s: its state could not be written", job_id)

    def run_one(self, job_id: str) -> None:
        """Claim and run one job (a job already claimed, or finished, is skipped)."""
        job = self.store.claim(job_id)
        if job is None:
            return
        kind = self.kinds.get(job.kind)
        progress = Progress(self.store, job, self.progress_interval_s)
        state: JobState = "done"
        error: str | None = None
        try:
            if kind is None:
                raise JobFailed(f"this service does not run jobs of kind {job.kind!r}")
            kind.run(job, progress)
        except Exception as err:
            if self._stopping.is_set():
                logger.warning("job %s interrupted by the shutdown (%s): resumed at the next start", job_id, err)
                return
            state = "failed"
            error = str(err) if isinstance(err, JobFailed) else f"internal error: {type(err).__name__}: {err}"
            if not isinstance(err, JobFailed):
                logger.exception("job %s failed", job_id)
        end = {
            "state": state,
            "error": error,
            "finished_at": datetime.now(UTC).isoformat(),
            "counts": progress.counts,
            "errors": [e.model_dump() for e in progress.errors],
        }
        try:
            self.store.update(job_id, **end, result=progress.result)
        except Exception as err:  # never left `running`: without the result, the job failed
            if progress.result is None:
                raise
            logger.exception("job %s: its result could not be stored", job_id)
            self.store.update(
                job_id, **end | {"state": "failed", "error": f"its result could not be stored: {err}"[:500]}
            )
        if kind is not None and kind.finish is not None:
            kind.finish(job)


def new_job_id() -> str:
    return uuid.uuid4().hex
