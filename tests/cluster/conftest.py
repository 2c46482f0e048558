"""A real 3-node Elasticsearch cluster of the tests' own, started with `scripts/es-local`.

It runs on HTTP 9250-9252 and transport 9350-9352 (or the next free block of ten, when another
test session holds those: `claim_ports`) with 512 MB heaps and its node
folders in a fresh directory, so the shared single node on 9200 is never touched; it is stopped
and deleted at the end of the session. Every figure a fault test measures goes to `report` and
is printed in pytest's terminal summary.
"""

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from bench.embedding_stub import EmbeddingStub
from tests.es_local_nodes import TRANSPORT_OFFSET, EsLocalNodes, claim_ports, own_nodes

HTTP_PORT, NODES = 9250, 3
REPORT_KEY = pytest.StashKey[list[str]]()


class LocalCluster(EsLocalNodes):
    """The 3-node cluster: start/stop it, kill -9 and restart single nodes."""

    def __init__(self, data: Path, port: int) -> None:
        super().__init__(data, port, port + TRANSPORT_OFFSET)
        self.url = ",".join(self.urls(NODES))

    def client(self, nodes: int = NODES) -> Elasticsearch:
        return super().client(nodes)

    def node_of(self, name: str) -> int:
        """The node number of node `name` (es-local-<http port>)."""
        return int(name.rsplit("-", 1)[1]) - self.port

    def restore(self) -> None:
        """Every node running and the cluster green (restarts the nodes a test stopped)."""
        if len(self.running_pids()) < NODES:
            self.run("start", "--nodes", str(NODES))


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    with contextlib.ExitStack() as stack:
        port = claim_ports(stack, HTTP_PORT, NODES)
        cluster = stack.enter_context(own_nodes(lambda data: LocalCluster(data, port)))
        cluster.run("start", "--nodes", str(NODES))
        yield cluster


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
