"""Elasticsearch nodes of a test's own, run by `scripts/es-local` on ports and in a data folder of
their own (a fresh folder under /tmp), so the shared node on 9200 and its data are never touched.

`own_nodes()` stops them, kills any node left behind and deletes the folder, even when the test
fails; the cluster fault tests (`tests/cluster`) and the es-local test (`tests/test_es_local.py`)
both run their nodes through it.
"""

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from elasticsearch import Elasticsearch

REPO_ROOT = Path(__file__).resolve().parent.parent
HEAP = "512m"
TRANSPORT_OFFSET = 100  # node i: HTTP base+i, transport base+100+i


def es_local(*args: str, env: dict[str, str] | None = None) -> str:
    """`scripts/es-local ARGS` (the environment: this process's, or `env`); its stdout, or the test fails."""
    done = subprocess.run(
        [str(REPO_ROOT / "scripts" / "es-local"), *args], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/es-local {' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return done.stdout


class EsLocalNodes:
    """`scripts/es-local` with this test's ports (HTTP `port`+i, transport `transport_port`+i) and data folder."""

    def __init__(self, data: Path, port: int, transport_port: int, heap: str = HEAP) -> None:
        self.data, self.port, self.transport_port, self.heap = data, port, transport_port, heap

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "ES_LOCAL_PORT": str(self.port),
            "ES_LOCAL_TRANSPORT_PORT": str(self.transport_port),
            "ES_LOCAL_HEAP": self.heap,
            "ES_LOCAL_DATA": str(self.data),
            "ES_LOCAL_TIMEOUT": "600",  # a loaded 2-core machine has taken 250 s to boot 3 nodes
        }

    def run(self, *args: str) -> str:
        """`scripts/es-local ARGS`: its stdout, or the test fails with its stderr."""
        return es_local(*args, env=self.env())

    def attempt(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`scripts/es-local ARGS` whatever its exit status (for the commands that must refuse)."""
        script = str(REPO_ROOT / "scripts" / "es-local")
        return subprocess.run([script, *args], env=self.env(), capture_output=True, text=True, check=False)

    def urls(self, nodes: int) -> list[str]:
        return [f"http://127.0.0.1:{self.port + i}" for i in range(nodes)]

    def client(self, nodes: int) -> Elasticsearch:
        return Elasticsearch(self.urls(nodes), request_timeout=30, retry_on_timeout=True, max_retries=3)

    def running_pids(self) -> dict[int, int]:
        """HTTP port -> pid of every node of this folder that is running, whichever cluster it belongs to."""
        pids: dict[int, int] = {}
        for pid_file in self.data.rglob("es.pid"):
            try:
                pid = int(pid_file.read_text())
                os.kill(pid, 0)
            except (OSError, ValueError):
                continue
            pids[int(pid_file.parent.name.removeprefix("node-"))] = pid
        return pids

    def kill_leftovers(self) -> None:
        """kill -9 every node still running from this folder (after a `stop` that failed)."""
        for pid in self.running_pids().values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


Nodes = TypeVar("Nodes", bound=EsLocalNodes)


def free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def claim_ports(stack: contextlib.ExitStack, first: int, nodes: int) -> int:
    """The first HTTP base port from `first` (step 10) that this session can own for `nodes` nodes.

    A block is owned through an exclusive lock on /tmp/es-cluster-test-<port>.lock, held until
    `stack` closes, so test sessions of several checkouts (and the fault tests and the es-local
    test) never pick the same ports; ports another program already listens on are skipped too.
    """
    for base in range(first, first + 50, 10):
        lock_path = Path(tempfile.gettempdir(), f"es-cluster-test-{base}.lock")
        lock = stack.enter_context(lock_path.open("w"))  # held until the stack closes
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue
        ports = [port for i in range(nodes) for port in (base + i, base + TRANSPORT_OFFSET + i)]
        if all(free(port) for port in ports):
            return base
        fcntl.flock(lock, fcntl.LOCK_UN)
    pytest.fail(f"no free block of ports for test nodes between {first} and {first + 50}")


@contextlib.contextmanager
def own_nodes(make: Callable[[Path], Nodes]) -> Iterator[Nodes]:
    """`make(folder)` for a fresh data folder; whatever runs from it at the end is stopped, the folder deleted."""
    # Directly under /tmp: when the tests run as root, the nodes run as another user who must reach it.
    data = Path(tempfile.mkdtemp(prefix="es-local-test-"))
    nodes = make(data)
    try:
        yield nodes
    finally:
        try:
            nodes.attempt("stop")
        finally:
            nodes.kill_leftovers()
            shutil.rmtree(data, ignore_errors=True)


@contextlib.contextmanager
def throwaway_node(first_port: int, heap: str = "2g") -> Iterator[tuple[str, float]]:
    """One node of the caller's own (ports from `first_port`, a fresh folder): its URL and the
    seconds it took to start; stopped and deleted at the end whatever happened. 2 GB of heap: the
    whole suite leaves it hundreds of small indices (the contract runs create bases), and with 1 GB
    a new index's shard was at times unavailable late in a CI run (a 503 where a 404 was due)."""
    with contextlib.ExitStack() as stack:
        port = claim_ports(stack, first_port, 1)
        nodes = stack.enter_context(own_nodes(lambda data: EsLocalNodes(data, port, port + TRANSPORT_OFFSET, heap)))
        started = time.monotonic()
        url = nodes.run("start").strip().splitlines()[-1]
        yield url, time.monotonic() - started
