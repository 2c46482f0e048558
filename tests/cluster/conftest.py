"""A real 3-node Elasticsearch cluster of the tests' own, started with `scripts/es-local`.

It runs on HTTP 9250-9252 and transport 9350-9352 (or the next free block of ten, when another
test session holds those: blocks are claimed with a lock file) with 512 MB heaps and its node
folders in a fresh directory, so the shared single node on 9200 is never touched; it is stopped
and deleted at the end of the session. Every figure a fault test measures goes to `report` and
is printed in pytest's terminal summary.
"""

import contextlib
import fcntl
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from bench.embedding_stub import EmbeddingStub
from tests.conftest import es_local

HTTP_PORT, TRANSPORT_OFFSET, NODES = 9250, 100, 3
REPORT_KEY = pytest.StashKey[list[str]]()


class LocalCluster:
    """`scripts/es-local` for one cluster: start/stop it, kill -9 and restart single nodes."""

    def __init__(self, data: Path, port: int) -> None:
        self.data, self.port = data, port
        self.urls = [f"http://127.0.0.1:{port + i}" for i in range(NODES)]
        self.url = ",".join(self.urls)

    def run(self, *args: str) -> str:
        env = {
            **os.environ,
            "ES_LOCAL_PORT": str(self.port),
            "ES_LOCAL_TRANSPORT_PORT": str(self.port + TRANSPORT_OFFSET),
            "ES_LOCAL_HEAP": "512m",
            "ES_LOCAL_DATA": str(self.data),
            "ES_LOCAL_TIMEOUT": "300",
        }
        return es_local(*args, env=env)

    def running(self, node: int) -> bool:
        pid_file = self.data / f"node-{self.port + node}" / "es.pid"
        try:
            os.kill(int(pid_file.read_text()), 0)
        except (OSError, ValueError):
            return False
        return True

    def client(self) -> Elasticsearch:
        return Elasticsearch(self.urls, request_timeout=30, retry_on_timeout=True, max_retries=3)

    def node_of(self, name: str) -> int:
        """The node number of node `name` (es-local-<http port>)."""
        return int(name.rsplit("-", 1)[1]) - self.port

    def restore(self) -> None:
        """Every node running and the cluster green (restarts the nodes a test stopped)."""
        if not all(self.running(i) for i in range(NODES)):
            self.run("start", "--nodes", str(NODES))


def _claim_block(stack: contextlib.ExitStack) -> int:
    """The first HTTP base port from 9250 (step 10) that this session can own.

    A block is owned through an exclusive lock on /tmp/es-cluster-test-<port>.lock, held until
    the session ends, so test sessions of several checkouts started together never pick the
    same ports; ports another program already listens on are skipped too.
    """
    for base in range(HTTP_PORT, HTTP_PORT + 50, 10):
        lock_path = Path(tempfile.gettempdir(), f"es-cluster-test-{base}.lock")
        lock = stack.enter_context(lock_path.open("w"))  # held until the session ends
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue
        ports = [port for i in range(NODES) for port in (base + i, base + TRANSPORT_OFFSET + i)]
        if all(_free(port) for port in ports):
            return base
        fcntl.flock(lock, fcntl.LOCK_UN)
    pytest.fail(f"no free block of ports for a test cluster between {HTTP_PORT} and {HTTP_PORT + 50}")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    with contextlib.ExitStack() as stack:
        port = _claim_block(stack)
        # Directly under /tmp: when the tests run as root, the nodes run as another user who must reach it.
        data = Path(tempfile.mkdtemp(prefix="es-cluster-test-"))
        cluster = LocalCluster(data, port)
        try:
            cluster.run("start", "--nodes", str(NODES))
            yield cluster
        finally:
            cluster.run("stop")
            shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def whole_cluster(cluster: LocalCluster) -> LocalCluster:
    cluster.restore()
    return cluster


@pytest.fixture(scope="session")
def embedding_stub() -> Iterator[EmbeddingStub]:
    """A fast, deterministic OpenAI-compatible embedder: the faults are Elasticsearch's, not the model's."""
    with EmbeddingStub(delay=0.05) as stub:
        yield stub


@pytest.fixture
def report(request: pytest.FixtureRequest) -> list[str]:
    """Lines for the terminal summary: `report.append("figure ...")`."""
    return request.config.stash.setdefault(REPORT_KEY, [])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    lines = config.stash.get(REPORT_KEY, [])
    if lines:
        terminalreporter.section("cluster fault tests: figures")
        for line in lines:
            terminalreporter.write_line(line)
