"""The job runner on the real Elasticsearch: a kind's result is kept with the job, a result that
cannot be stored fails the job with the reason instead of leaving it `running`; owners take turns;
a running job stops when cancelled or out of time; a job is run by one process, taken over only
when that process's lease expires; the stdio MCP server runs none."""

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from elasticsearch import Elasticsearch

from service.jobs.runner import FairQueue, JobKind, JobRunner, Progress, RunnerLimits
from service.jobs.store import Job, JobStore, new_job_id
from tests.conftest import REPO_ROOT, subprocess_env

LIMITS = RunnerLimits(concurrency=1, progress_interval_s=0.1)


def runner_of(es: Elasticsearch, index: str, result: dict[str, Any]) -> JobRunner:
    def run(job: Job, progress: Progress) -> None:
        progress.set(done=1)
        progress.result = result

    return JobRunner(JobStore(es, index), [JobKind("test", run)], LIMITS)


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
    runner = JobRunner(JobStore(es, index_name("test-jobs")), kinds, LIMITS)
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


def test_owners_take_turns() -> None:
    queue = FairQueue()
    for n in range(4):
        queue.put("alice", f"a{n}")
    queue.put("bob", "b0")
    queue.put("alice", "a0")  # queued already: once
    order = [queue.get(0.1) for _ in range(5)]
    assert order == ["a0", "b0", "a1", "a2", "a3"] and queue.get(0.01) is None


def test_a_running_job_stops_when_cancelled_or_out_of_time(es: Elasticsearch, index_name: Callable[[str], str]) -> None:
    started, steps = threading.Event(), []

    def items(job: Job, progress: Progress) -> None:
        started.set()
        for step in range(100):
            progress.check()  # between items, as an upload between files
            steps.append(step)
            time.sleep(0.05)

    runner = JobRunner(JobStore(es, index_name("test-jobs")), [JobKind("items", items)], LIMITS)
    job = runner.submit("items", "kb", "alice", {})
    worker = threading.Thread(target=runner.run_one, args=(job.id,))
    worker.start()
    assert started.wait(10)
    asked = runner.cancel(job, "bob")
    assert asked is not None and asked.state == "running" and asked.cancel_requested_by == "bob"
    worker.join(10)
    ended = runner.store.get(job.id)
    assert ended is not None and (ended.state, ended.error) == ("failed", "cancelled by bob while it ran")
    assert 0 < len(steps) < 100

    hurried = JobRunner(runner.store, [JobKind("items", items)], RunnerLimits(progress_interval_s=0.1, budget_s=0.2))
    late = hurried.submit("items", "kb", "alice", {})
    hurried.run_one(late.id)
    ended = hurried.store.get(late.id)
    assert ended is not None and ended.state == "failed" and "JOB_TIME_BUDGET_S=0.2" in (ended.error or "")


def _log_lines(log: Path, count: int, timeout_s: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
        if len(lines) >= count:
            return lines
        time.sleep(0.2)
    raise AssertionError(f"{log}: fewer than {count} lines")


def _ended(store: JobStore, job_id: str, timeout_s: float = 30) -> Job:
    deadline = time.monotonic() + timeout_s
    while (job := store.get(job_id)) is None or job.state not in ("done", "failed"):
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    return job


def _processes(es_url: str, index: str, log: Path, count: int, tmp_path: Path) -> list[subprocess.Popen[bytes]]:
    command = [sys.executable, "-m", "tests.job_process", es_url, index, str(log), "2"]
    env = subprocess_env(PYTHONPATH=str(REPO_ROOT))
    return [subprocess.Popen(command, cwd=tmp_path, env=env) for _ in range(count)]


def test_two_processes_never_run_one_job_and_a_dead_ones_job_is_taken_over(
    es: Elasticsearch, es_url: str, index_name: Callable[[str], str], tmp_path: Path
) -> None:
    store = JobStore(es, index_name("test-jobs-lease"))
    both, log = Job(id=new_job_id(), kind="slow", kb="kb", owner="alice"), tmp_path / "both.log"
    store.create(both)
    processes = _processes(es_url, store.index, log, 2, tmp_path)
    try:
        assert _log_lines(log, 2)[0].endswith(f"started {both.id}")
        ended = _ended(store, both.id)  # the other process looked again (every lease, 2 s) while it ran
        assert (ended.state, ended.runs) == ("done", 1)
        assert len(log.read_text(encoding="utf-8").splitlines()) == 2  # one start, one end
    finally:
        for process in processes:
            process.kill()

    orphan, log = Job(id=new_job_id(), kind="slow", kb="kb", owner="alice"), tmp_path / "orphan.log"
    store.create(orphan)
    [first] = _processes(es_url, store.index, log, 1, tmp_path)
    try:
        started = _log_lines(log, 1)[0]
        [second] = _processes(es_url, store.index, log, 1, tmp_path)
        first.kill()  # its lease is no longer renewed: the second process takes the job over once it expires
        lines = _log_lines(log, 3)
        assert lines[0] == started and lines[1].endswith(f"started {orphan.id}") and lines[1] != started
        assert lines[2] == lines[1].replace("started", "ended")
        ended = _ended(store, orphan.id)
        assert (ended.state, ended.runs) == ("done", 2)
    finally:
        for process in (first, second):
            process.kill()
