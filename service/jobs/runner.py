"""Background jobs run in a few threads and resumed after a restart (their records: service/jobs/store.py).

A job is a record in `JOBS_INDEX` (`Job`: its kind, its knowledge base, its state
`queued` → `running` → `done` | `failed`, counts, per-item errors and a result). What a job does
is its kind's `run(job, progress)` callable (`JobKind`): uploads (service/jobs/upload.py) and
evaluations (service/jobs/evaluation.py) share the store, the runner and the job list.

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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from service.jobs.store import Job, JobError, JobFailed, JobState, JobStore, new_job_id

logger = logging.getLogger(__name__)

_RESUME_RETRY_S = 5.0  # Elasticsearch unreachable at start: look for unfinished jobs again after this


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
