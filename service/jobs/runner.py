"""Background jobs run in a few threads, fairly, by one process each (their records: service/jobs/store.py).

A job is a record in `JOBS_INDEX` (`Job`: its kind, its knowledge base, its state
`queued` → `running` → `done` | `failed`, counts, per-item errors and a result). What a job does
is its kind's `run(job, progress)` callable (`JobKind`): uploads (service/jobs/upload.py) and
evaluations (service/jobs/evaluation.py) share the store, the runner and the job list.

- **Bounded and fair**: `JOB_CONCURRENCY` worker threads take queued jobs owner by owner in
  turn (`FairQueue`), so one principal's twenty uploads do not hold back another's one.
- **One process per job**: a worker claims a job with a lease (`JOB_LEASE_S`) and renews it
  while the job runs; progress and the end are written only under the lease. Every process
  looks for jobs whose lease expired (their process died) every lease period and takes them
  over; a job whose process is alive is never run twice.
- **Stoppable**: a job has a total time budget (`JOB_TIME_BUDGET_S`) and may be cancelled while it
  runs; a kind checks both between its items (`Progress.check`, `Progress.stop_reason`).
- **Never silently half-done**: the record is written before the request is answered, and a
  job's end (done, or failed with the reason) is written when it ends. A kind's `run` must be
  idempotent (uploads are: chunk ids are deterministic) or fail with the reason it cannot.
- **Progress** (`Progress`) is written at most every `JOB_PROGRESS_INTERVAL_S`, and at the end.
- Workers are daemon threads: at shutdown the process does not wait for a job to finish (its
  lease runs out and it is resumed), and an error the shutdown causes in a job is not recorded
  as the job's failure.

Only the HTTP service runs jobs (`service.app.open_services(run_jobs=True)`); `python -m service.mcp` does not.
"""

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from core.config import Settings
from core.scheduling import Ticket, Turns, holding
from service.jobs.store import Job, JobError, JobFailed, JobState, JobStore, new_job_id

logger = logging.getLogger(__name__)

_RESUME_RETRY_S = 5.0  # Elasticsearch unreachable at start: look for unfinished jobs again after this


class Progress:
    """A running job's counts and errors, written under its lease at most every `interval_s`; its
    `result`, which a kind's `run` may set, is written when the job ends."""

    def __init__(self, store: JobStore, job: Job, holder: str, interval_s: float, budget_s: float) -> None:
        self._store, self._job, self._holder, self._interval_s = store, job, holder, interval_s
        self.counts: dict[str, int] = dict(job.counts)
        self.errors: list[JobError] = []
        self.result: dict[str, Any] | None = None
        self.lost = False  # another process took the job over: this one writes nothing more
        self._lock = threading.Lock()
        self._written = time.monotonic()
        self._deadline = time.monotonic() + budget_s
        self._budget_s = budget_s

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

    def stop_reason(self) -> str | None:
        """Why the job must stop before its next item: cancelled, out of time, or taken over (None: go on)."""
        if self.lost:
            return "another process took this job over"
        current = self._store.get(self._job.id)
        if current is not None and current.cancel_requested_by:
            return f"cancelled by {current.cancel_requested_by} while it ran"
        if time.monotonic() > self._deadline:
            return f"its time budget ran out (JOB_TIME_BUDGET_S={self._budget_s:g})"
        return None

    def check(self) -> None:
        """`JobFailed` with the reason when the job must stop (see `stop_reason`)."""
        reason = self.stop_reason()
        if reason is not None:
            raise JobFailed(reason)

    def _maybe_write(self) -> None:
        if time.monotonic() - self._written >= self._interval_s:
            self.write()

    def write(self) -> None:
        with self._lock:
            self._written = time.monotonic()
            fields = {"counts": dict(self.counts), "errors": [e.model_dump() for e in self.errors]}
        try:
            self.lost = self.lost or not self._store.update_held(self._job.id, self._holder, **fields)
        except Exception as err:  # progress is best effort: the end state is written apart
            logger.warning("progress of job %s not written: %s", self._job.id, err)


class FairQueue:
    """Job ids waiting for a worker, served owner by owner in turn (oldest first within an owner)."""

    def __init__(self) -> None:
        self._waiting: Turns[str] = Turns()
        self._queued: set[str] = set()
        self._ready = threading.Condition()

    def put(self, owner: str, job_id: str) -> None:
        with self._ready:
            if job_id in self._queued:
                return
            self._queued.add(job_id)
            self._waiting.put(owner, job_id)
            self._ready.notify()

    def get(self, timeout_s: float) -> str | None:
        """The next job: the first of the owner served longest ago (None after `timeout_s`)."""
        with self._ready:
            if not self._waiting and not self._ready.wait(timeout_s):
                return None
            if not self._waiting:
                return None
            job_id = self._waiting.pop()
            self._queued.discard(job_id)
            return job_id


@dataclass(frozen=True)
class JobKind:
    """What jobs of one kind do: `run` does the work (idempotent: it may run again after a restart)
    and returns nothing or raises (`JobFailed` with the reason); `finish` cleans up after the job
    ended, done or failed (never after an interruption, which is resumed)."""

    name: str
    run: Callable[[Job, Progress], None]
    finish: Callable[[Job], None] | None = None


@dataclass(frozen=True)
class RunnerLimits:
    """How many jobs run at once, how often progress is written, a lease's length and a job's budget."""

    concurrency: int = 1
    progress_interval_s: float = 1.0
    lease_s: float = 30.0
    budget_s: float = 1800.0

    @classmethod
    def of(cls, settings: Settings) -> "RunnerLimits":
        return cls(
            settings.job_concurrency, settings.job_progress_interval_s, settings.job_lease_s, settings.job_time_budget_s
        )


class JobRunner:
    """Worker threads over a fair queue of job ids; see the module docstring."""

    def __init__(self, store: JobStore, kinds: list[JobKind], limits: RunnerLimits) -> None:
        self.store = store
        self.kinds = {kind.name: kind for kind in kinds}
        self.limits = limits
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"  # this process, in leases
        self._queue = FairQueue()
        self._running: dict[str, Progress] = {}
        self._running_lock = threading.Lock()
        self._stopping = threading.Event()

    def start(self) -> None:
        """Start the workers, the lease renewal and the search for jobs to take (at once, then every lease)."""
        for number in range(self.limits.concurrency):
            threading.Thread(target=self._work, name=f"job-worker-{number}", daemon=True).start()
        threading.Thread(target=self._renew_leases, name="job-leases", daemon=True).start()
        threading.Thread(target=self._find_unfinished, name="job-resume", daemon=True).start()

    def stop(self) -> None:
        """No job starts any more; running ones are abandoned (their leases run out: another process resumes them)."""
        self._stopping.set()

    def submit(self, kind: str, kb: str, owner: str, params: dict[str, Any], job_id: str | None = None) -> Job:
        """A new queued job, stored before this returns (so it survives a crash from now on)."""
        if kind not in self.kinds:
            raise ValueError(f"unknown job kind {kind!r}")
        job = Job(id=job_id or new_job_id(), kind=kind, kb=kb, owner=owner, params=params)
        self.store.create(job)
        self._queue.put(owner, job.id)
        return job

    def cancel(self, job: Job, by: str) -> Job | None:
        """Cancel a queued job (it ends `failed`, its kind's `finish` cleans up), or ask a running one to
        stop before its next item (it ends `failed` then); None once it has ended."""
        cancelled = self.store.cancel(job.id, f"cancelled by {by} before it started")
        if cancelled is None:
            return self.store.request_cancel(job.id, by)
        kind = self.kinds.get(job.kind)
        if kind is not None and kind.finish is not None:
            kind.finish(cancelled)
        return cancelled

    def _find_unfinished(self) -> None:
        """Queue every queued job and every running one whose lease expired, now and every lease period."""
        while not self._stopping.is_set():
            try:
                for job in self.store.unfinished():
                    self._queue.put(job.owner, job.id)
            except Exception as err:
                logger.warning("cannot look for unfinished jobs (%s): retrying in %g s", err, self.limits.lease_s)
            self._stopping.wait(self.limits.lease_s)

    def _renew_leases(self) -> None:
        while not self._stopping.wait(self.limits.lease_s / 3):
            with self._running_lock:
                running = dict(self._running)
            for job_id, progress in running.items():
                try:
                    until = time.time() + self.limits.lease_s
                    progress.lost = progress.lost or not self.store.update_held(job_id, self.holder, lease_until=until)
                except Exception as err:  # Elasticsearch away: the next renewal tries again
                    logger.warning("lease of job %s not renewed: %s", job_id, err)

    def _work(self) -> None:
        while not self._stopping.is_set():
            job_id = self._queue.get(timeout_s=1.0)
            if job_id is None or self._stopping.is_set():
                continue
            try:
                self.run_one(job_id)
            except Exception:
                logger.exception("job %s: its state could not be written", job_id)

    def run_one(self, job_id: str) -> None:
        """Claim and run one job (a job another process holds, or one that ended, is skipped)."""
        job = self.store.claim(job_id, self.holder, self.limits.lease_s)
        if job is None:
            return
        progress = Progress(self.store, job, self.holder, self.limits.progress_interval_s, self.limits.budget_s)
        with self._running_lock:
            self._running[job_id] = progress
        try:
            self._run_claimed(job, progress)
        finally:
            with self._running_lock:
                self._running.pop(job_id, None)

    def _run_claimed(self, job: Job, progress: Progress) -> None:
        kind = self.kinds.get(job.kind)
        state: JobState = "done"
        error: str | None = None
        try:
            if kind is None:
                raise JobFailed(f"this service does not run jobs of kind {job.kind!r}")
            with holding(Ticket(principal=f"owner:{job.owner}", bulk=True)):  # after every request's
                kind.run(job, progress)
        except Exception as err:
            if self._stopping.is_set():
                logger.warning("job %s interrupted by the shutdown (%s): resumed later", job.id, err)
                return
            state = "failed"
            error = str(err) if isinstance(err, JobFailed) else f"internal error: {type(err).__name__}: {err}"
            if not isinstance(err, JobFailed):
                logger.exception("job %s failed", job.id)
        if self._write_end(job, progress, state, error) and kind is not None and kind.finish is not None:
            kind.finish(job)

    def _write_end(self, job: Job, progress: Progress, state: JobState, error: str | None) -> bool:
        """The job's end, under its lease (False: another process holds it now, and ends it)."""
        end = {
            "state": state,
            "error": error,
            "finished_at": datetime.now(UTC).isoformat(),
            "counts": progress.counts,
            "errors": [e.model_dump() for e in progress.errors],
            "lease_until": None,
        }
        try:
            written = self.store.update_held(job.id, self.holder, **end, result=progress.result)
        except Exception as err:  # never left `running`: without the result, the job failed
            if progress.result is None:
                raise
            logger.exception("job %s: its result could not be stored", job.id)
            failed = end | {"state": "failed", "error": f"its result could not be stored: {err}"[:500]}
            written = self.store.update_held(job.id, self.holder, **failed)
        if not written:
            logger.warning("job %s was taken over by another process: its end is that process's", job.id)
        return written
