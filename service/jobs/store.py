"""Jobs kept in Elasticsearch: the record of each (`Job`), the store and its conditional claims.

A job is a record in `JOBS_INDEX` (`Job`: its kind, its knowledge base, its owner, its state
`queued` → `running` → `done` | `failed`, counts, per-item errors and a result). The runner
(service/jobs/runner.py) runs them; the record is what outlives the process.

A running job is leased: the process running it (`lease_holder`) renews `lease_until` while it
works, and writes its progress and its end only while it holds the lease (a conditional write
after reading the holder). Another process takes a running job over only once its lease has
expired: its process died. So a job is run by exactly one process at a time.
"""

import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from elasticsearch import ConflictError, Elasticsearch, NotFoundError
from pydantic import BaseModel, Field

from core.access import DocumentAccess
from core.store import wait_until_readable

logger = logging.getLogger(__name__)

JobState = Literal["queued", "running", "done", "failed"]
UNFINISHED: tuple[JobState, ...] = ("queued", "running")

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
# One shard, and a replica only when a second node can hold it: a single node stays green.
_SETTINGS: dict[str, Any] = {"number_of_shards": 1, "auto_expand_replicas": "0-1"}
_HELD_WRITE_ATTEMPTS = 20


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
    lease_holder: str | None = None  # the process running it
    lease_until: float | None = None  # epoch seconds: taken over by another process only after this
    cancel_requested_by: str | None = None  # a running job stops before its next file

    def lease_expired(self, now: float) -> bool:
        return self.lease_until is None or self.lease_until < now


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
    cancel_requested_by: str | None = Field(None, description="who asked a running job to stop before its next file")

    @classmethod
    def of(cls, job: Job) -> "JobView":
        return cls.model_validate(job.model_dump(exclude={"params", "owner", "result", "lease_holder", "lease_until"}))


class Reach(BaseModel):
    """What a job's owner may read of its base, kept with the job: a job resumed after a restart
    reads, replaces and reports only that."""

    groups: list[str] = Field(default_factory=list)
    everything: bool = False

    @classmethod
    def of(cls, access: DocumentAccess) -> "Reach":
        return cls(groups=sorted(access.groups), everything=access.everything)

    @property
    def access(self) -> DocumentAccess:
        return DocumentAccess(groups=frozenset(self.groups), everything=self.everything)


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
                self.es.options(ignore_status=400).indices.create(
                    index=self.index, mappings=_MAPPING, settings=_SETTINGS
                )
            wait_until_readable(self.es, self.index, lambda: self.es.options(ignore_status=404).count(index=self.index))
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
        self, job_id: str, states: tuple[JobState, ...], change: Callable[[Job], dict[str, Any] | None]
    ) -> Job | None:
        """The job with the fields `change` gives (None: it may not change), if it was in one of
        `states` and nobody wrote it in between (a conditional write); None otherwise, or when there
        is no such job."""
        try:
            found = self.es.get(index=self.index, id=job_id)
        except NotFoundError:
            return None
        job = Job.model_validate(found["_source"])
        changed = change(job) if job.state in states else None
        if changed is None:
            return None
        job = job.model_copy(update=changed)
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

    def update_held(self, job_id: str, holder: str, **fields: Any) -> bool:
        """Write `fields` if `holder` still holds the job's lease (False: another process took it over).
        A conditional write: read the holder, write only if nobody wrote in between, else read again."""
        for _ in range(_HELD_WRITE_ATTEMPTS):
            found = self.es.get(index=self.index, id=job_id, source_includes=["lease_holder"])
            if found["_source"].get("lease_holder") != holder:
                return False
            try:
                self.es.update(
                    index=self.index,
                    id=job_id,
                    doc={**fields, "updated_at": _now()},
                    if_seq_no=found["_seq_no"],
                    if_primary_term=found["_primary_term"],
                )
                return True
            except ConflictError:
                continue  # this process's own progress or lease renewal wrote in between: read again
        raise RuntimeError(f"job {job_id}: {_HELD_WRITE_ATTEMPTS} writes in a row lost to others")

    def claim(self, job_id: str, holder: str, lease_s: float) -> Job | None:
        """The job, now `running` under `holder`'s lease, if it was queued, or running under a lease that
        expired (its process died), and nobody claimed it in between."""

        def claimable(job: Job) -> dict[str, Any] | None:
            now = time.time()
            if job.state == "running" and not job.lease_expired(now):
                return None
            lease = {"lease_holder": holder, "lease_until": now + lease_s}
            return {"state": "running", "started_at": _now(), "runs": job.runs + 1, **lease}

        return self._transition(job_id, UNFINISHED, claimable)

    def request_cancel(self, job_id: str, by: str) -> Job | None:
        """The running job, marked to stop before its next file (None: it is not running)."""
        return self._transition(job_id, ("running",), lambda job: {"cancel_requested_by": by})

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

    def unfinished(self) -> list[Job]:
        """Queued jobs, and running ones whose lease expired (their process died), oldest first."""
        self._ensure()
        self.es.indices.refresh(index=self.index)
        response = self.es.search(
            index=self.index,
            query={"terms": {"state": list(UNFINISHED)}},
            sort=[{"created_at": "asc"}],
            size=10_000,
            source_excludes=["params", "result", "errors"],
        )
        jobs = [Job.model_validate(hit["_source"]) for hit in response["hits"]["hits"]]
        now = time.time()
        return [job for job in jobs if job.state == "queued" or job.lease_expired(now)]


def new_job_id() -> str:
    return uuid.uuid4().hex
