"""The job runner on the real Elasticsearch: a kind's result is kept with the job, and a result that
cannot be stored fails the job with the reason instead of leaving it `running`."""

from collections.abc import Callable
from typing import Any

from elasticsearch import Elasticsearch

from service.jobs.runner import JobKind, JobRunner, Progress
from service.jobs.store import Job, JobStore


def runner_of(es: Elasticsearch, index: str, result: dict[str, Any]) -> JobRunner:
    def run(job: Job, progress: Progress) -> None:
        progress.set(done=1)
        progress.result = result

    return JobRunner(JobStore(es, index), [JobKind("test", run)], concurrency=1, progress_interval_s=0.1)


def test_a_kinds_result_is_kept_with_the_job(es: Elasticsearch, index_name: Callable[[str], str]) -> None:
    runner = runner_of(es, index_name("test-jobs"), {"report": {"R@1": 0.5}, "names": ["a", "b"]})
    job = runner.submit("test", "some-base", "alice", {})
    runner.run_one(job.id)  # as a worker thread would
    ended = runner.store.get(job.id)
    assert ended is not None and (ended.state, ended.counts, ended.error) == ("done", {"done": 1}, None)
    assert ended.result == {"report": {"R@1": 0.5}, "names": ["a", "b"]}
    [listed] = runner.store.recent([{"term": {"owner": "alice"}}], 10, fresh=True)
    assert listed.id == job.id and listed.result == ended.result


def test_a_result_that_cannot_be_stored_fails_the_job(es: Elasticsearch, index_name: Callable[[str], str]) -> None:
    runner = runner_of(es, index_name("test-jobs"), {"not json": object()})
    job = runner.submit("test", "some-base", "alice", {})
    runner.run_one(job.id)
    ended = runner.store.get(job.id)
    assert ended is not None and ended.state == "failed" and ended.result is None
    assert ended.error is not None and ended.error.startswith("its result could not be stored")
    assert ended.counts == {"done": 1} and ended.finished_at is not None


def test_only_a_queued_job_can_be_cancelled_and_its_kind_cleans_up(
    es: Elasticsearch, index_name: Callable[[str], str]
) -> None:
    ran: list[str] = []
    finished: list[str] = []
    kinds = [JobKind("test", lambda job, progress: ran.append(job.id), lambda job: finished.append(job.id))]
    runner = JobRunner(JobStore(es, index_name("test-jobs")), kinds, concurrency=1, progress_interval_s=0.1)
    queued, started = runner.submit("test", "kb", "alice", {}), runner.submit("test", "kb", "alice", {})
    runner.run_one(started.id)
    assert runner.cancel(runner.store.get(started.id) or started, "bob") is None  # it has ended: nothing changes

    cancelled = runner.cancel(queued, "bob")
    assert cancelled is not None and (cancelled.state, cancelled.error) == (
        "failed",
        "cancelled by bob before it started",
    )
    assert runner.store.get(queued.id) == cancelled and finished == [started.id, queued.id]
    runner.run_one(queued.id)  # a worker that takes it from the queue afterwards skips it
    assert ran == [started.id] and runner.cancel(cancelled, "bob") is None
