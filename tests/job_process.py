"""A process running jobs of one index (tests/test_jobs.py starts two): `python -m tests.job_process
ES_URL INDEX LOG LEASE_S`. Its kind `slow` appends `<pid> started <job>` to LOG, works for 3 s in
steps, and appends `<pid> ended <job>`; the process runs until it is killed."""

import os
import sys
import threading
import time
from pathlib import Path

from elasticsearch import Elasticsearch

from service.jobs.runner import JobKind, JobRunner, Progress, RunnerLimits
from service.jobs.store import Job, JobStore


def main() -> None:
    es_url, index, log, lease_s = sys.argv[1], sys.argv[2], Path(sys.argv[3]), float(sys.argv[4])

    def slow(job: Job, progress: Progress) -> None:
        with log.open("a", encoding="utf-8") as file:
            file.write(f"{os.getpid()} started {job.id}\n")
        for step in range(30):
            time.sleep(0.1)
            progress.set(step=step)
        with log.open("a", encoding="utf-8") as file:
            file.write(f"{os.getpid()} ended {job.id}\n")

    limits = RunnerLimits(concurrency=1, progress_interval_s=0.2, lease_s=lease_s)
    JobRunner(JobStore(Elasticsearch(es_url), index), [JobKind("slow", slow)], limits).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
