"""`/jobs`: a job's status, the list of jobs, and cancelling a queued one.

A job is seen by its owner (while they may read its base) and by its base's admins, and is a 404
to everyone else, exactly like a job that does not exist: its file names, errors and report may
name documents of groups other readers do not hold (`Caller.sees_work_of`).
"""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi import Path as PathParam
from pydantic import BaseModel, Field

from core.kbs import KB_NAME_PATTERN
from service.deps import CallerDep, ServicesDep, get_caller
from service.documents import MAX_PAGE
from service.http.openapi import error_responses
from service.jobs.store import JobState, JobView

JOB_ID_PATTERN = r"^[0-9a-f]{32}$"
JobId = Annotated[str, PathParam(pattern=JOB_ID_PATTERN, description="the id `POST` answered")]

router = APIRouter(tags=["jobs"], dependencies=[Depends(get_caller)], responses=error_responses(401, 404, 503))


@router.get("/jobs/{job_id}", response_model=JobView)
def job_status(job_id: JobId, caller: CallerDep, services: ServicesDep) -> JobView:
    """A job's state, counts and per-file errors; 404 unless the caller started it or is an admin of its
    base (its file names and errors may name documents of groups other readers do not hold)."""
    job = services.jobs.store.get(job_id)
    if job is None or not caller.sees_work_of(job.kb, job.owner):
        raise HTTPException(404, f"no job {job_id!r}")
    return JobView.of(job)


@router.delete("/jobs/{job_id}", response_model=JobView, responses=error_responses(409))
def cancel_job(job_id: JobId, caller: CallerDep, services: ServicesDep) -> JobView:
    """Cancel a job: a queued one ends `failed` ("cancelled by …") at once and its files are deleted; a
    running one stops before its next file, with nothing indexed (`cancel_requested_by` says so until
    then). An ended job is a 409; unseen ones a 404."""
    job = services.jobs.store.get(job_id)
    if job is None or not caller.sees_work_of(job.kb, job.owner):
        raise HTTPException(404, f"no job {job_id!r}")
    cancelled = services.jobs.cancel(job, caller.name)
    if cancelled is None:
        raise HTTPException(409, f"job {job_id!r} has ended: only a queued or running job can be cancelled")
    return JobView.of(cancelled)


class JobList(BaseModel):
    jobs: list[JobView] = Field(description="newest first")


@router.get("/jobs", response_model=JobList, responses=error_responses(422))
def jobs(
    caller: CallerDep,
    services: ServicesDep,
    kb: Annotated[
        str | None, Query(pattern=KB_NAME_PATTERN, max_length=100, description="only this base's jobs")
    ] = None,
    state: Annotated[JobState | None, Query(description="only jobs in this state")] = None,
    size: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
) -> JobList:
    """The newest jobs the caller may see (`/jobs/{id}`'s rule: its own, and every job of the bases it
    administers), e.g. to follow uploads again after reloading the page. `kb` is checked as every
    `?kb=` is: a name no base may have is a 422, a base the caller may not read (or none) a 404."""
    if kb is not None:
        services.kbs.open(caller, kb)
    filters: list[dict[str, Any]] = [
        {"term": {field: value}} for field, value in (("kb", kb), ("state", state)) if value
    ]
    if not caller.admin:
        mine = [{"term": {"owner": caller.name}}, {"terms": {"kb": caller.administered}}]
        filters.append({"bool": {"should": mine, "minimum_should_match": 1}})
    found = services.jobs.store.recent(filters, size)
    return JobList(jobs=[JobView.of(job) for job in found if caller.sees_work_of(job.kb, job.owner)])
