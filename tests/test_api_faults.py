"""Elasticsearch going away and coming back, through a TCP proxy in front of the shared node
(the node itself keeps running for the teammates who use it)."""

import logging
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from elasticsearch import Elasticsearch

from core.config import Settings
from core.documents import Document
from core.embeddings import Embedder
from core.store import SearchError
from service.app import create_app
from service.http.errors import OncePerKind
from tests.conftest import knowledge_base
from tests.serving import TcpProxy, serve


@pytest.fixture
def proxy(es_url: str) -> Iterator[TcpProxy]:
    target = urlsplit(es_url)
    tcp = TcpProxy(target.hostname or "127.0.0.1", target.port or 9200)
    tcp.open()
    yield tcp
    tcp.close()


@pytest.fixture
def alias(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    docs = [Document("d1", "诸葛亮七擒孟获，使南中彻底归心。", "sanguo", chapter=90)]
    with knowledge_base(es, embedder, docs, "test-api-faults") as name:
        yield name


def search(url: str, mode: str = "hybrid") -> httpx.Response:
    return httpx.post(f"{url}/search", json={"query": "孟获", "mode": mode}, timeout=60)


def test_elasticsearch_down_is_503_naming_the_url_then_recovers(
    proxy: TcpProxy, alias: str, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING")
    settings = Settings(_env_file=None, es_url=proxy.url, es_index=alias)
    with serve(create_app(settings, embedder=embedder)) as url:
        assert search(url).status_code == 200

        proxy.close()
        for mode in ("hybrid", "bm25"):
            down = search(url, mode)
            assert down.status_code == 503 and down.headers["retry-after"] == "5"
            assert f"Elasticsearch unreachable at {proxy.url}" in down.json()["detail"]
        ready = httpx.get(f"{url}/readyz")
        assert ready.status_code == 503
        assert ready.json()["elasticsearch"]["reachable"] is False
        assert proxy.url in ready.json()["elasticsearch"]["error"]
        assert httpx.get(f"{url}/healthz").status_code == 200  # the process itself is fine
        metrics = httpx.get(f"{url}/metrics").text
        assert 'rag_errors_total{endpoint="/search",kind="elasticsearch_unreachable"} 2.0' in metrics

        # An expected outage: at most one line per kind (rate-limited across the process), no traceback.
        outage = [r for r in caplog.records if r.name == "service.outage"]
        assert len(outage) <= 1 and not any(r.exc_info for r in caplog.records)

        proxy.open()
        # The client may hold the node as dead for its back-off (about a second); the service
        # answers 503 meanwhile and recovers by itself, without a restart.
        deadline = time.monotonic() + 30
        while (response := search(url)).status_code != 200 and time.monotonic() < deadline:
            assert response.status_code == 503
            time.sleep(0.5)
        assert response.status_code == 200
        assert response.json()["hits"][0]["doc_id"] == "d1"
        assert httpx.get(f"{url}/readyz").status_code == 200


def test_no_elasticsearch_at_start_up_still_serves(embedder: Embedder) -> None:
    closed = TcpProxy("127.0.0.1", 9)  # a port nobody listens on, never opened
    settings = Settings(_env_file=None, es_url=closed.url, es_index="kb-that-cannot-be-reached")
    with serve(create_app(settings, embedder=embedder)) as url:
        assert httpx.get(f"{url}/healthz").status_code == 200
        response = search(url)
        assert response.status_code == 503
        assert closed.url in response.json()["detail"]


def test_outage_warnings_are_one_line_per_kind_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    log = logging.getLogger("test.outage.once")
    once = OncePerKind(interval=30, clock=lambda: now[0])
    log.addFilter(once)
    try:
        boom = ConnectionError("refused")
        with caplog.at_level(logging.WARNING, logger=log.name):
            for _ in range(5):
                log.warning("node %s failed", "a", exc_info=boom)
                log.warning("%s", "Elasticsearch unreachable", extra={"kind": "unreachable"})
            now[0] = 31.0
            log.warning("node %s failed", "b", exc_info=boom)
    finally:
        log.removeFilter(once)
    seen = [r for r in caplog.records if r.name == log.name]
    assert [r.getMessage() for r in seen] == [
        "node a failed",
        "Elasticsearch unreachable",
        "node b failed (4 more like it in the last 30 s)",
    ]
    assert all(r.exc_info is None for r in seen)


@pytest.mark.parametrize(
    ("error", "status", "transient"),
    [
        ({"type": "search_phase_execution_exception", "reason": "all shards failed"}, 503, True),
        ({"type": "no_shard_available_action_exception", "reason": "No shard available"}, None, True),
        ({"type": "es_rejected_execution_exception", "reason": "queue full"}, 429, True),
        ({"type": "parsing_exception", "reason": "unknown query [mtch]"}, 400, False),
        # A value Elasticsearch refuses (a date that is none): "all shards failed", but a 400, never an outage.
        ({"type": "search_phase_execution_exception", "reason": "all shards failed"}, 400, False),
    ],
)
def test_search_errors_that_pass_are_told_from_those_that_do_not(
    error: dict, status: int | None, transient: bool
) -> None:
    assert SearchError("kb", error, status).transient is transient


def test_a_search_error_without_a_reason_still_gives_one() -> None:
    error = SearchError("kb", {"type": "search_phase_execution_exception", "root_cause": [], "phase": "query"}, 503)
    assert error.reason == "no reason given (phase query)" and error.transient


def test_a_search_error_names_the_reason_a_failed_shard_gives() -> None:
    body = {
        "type": "search_phase_execution_exception",
        "reason": "",
        "root_cause": [],
        "failed_shards": [
            {"shard": 0, "reason": {"type": "no_shard_available_action_exception", "reason": "shard 0 lost"}}
        ],
    }
    assert SearchError("kb", body, 503).reason == "shard 0 lost"
