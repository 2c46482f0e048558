"""The job runner on the real Elasticsearch: a kind's result is kept with the job, and a result that
cannot be stored fails the job with the reason instead of leaving it `running`."""

from collections.abc import Callable
from typing import Any

from elasticsearch import Elasticsearch

from service.jobs import Job, JobKind, JobRunner, JobStore, Progress


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
