"""The reranking stage inside the service (uvicorn, a fake rerank endpoint over real HTTP).

A failing reranker answers 200 with the fused order and the warning in every protocol's way (the
API's `warnings`, the chat answer's 说明 line, Dify's `warnings`, MCP's `warnings`) and is counted
in /metrics; every path can turn the stage off; a group-less reader's rerank request holds no
passage of a document it may not read.
"""

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from elasticsearch import Elasticsearch
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from core.documents import Document
from core.embeddings import Embedder
from service.app import create_app
from tests.conftest import knowledge_base
from tests.fakes.rerank_server import API_KEY, RULE, FakeRerankServer
from tests.fakes.server import Script
from tests.protocols import write_keys_file
from tests.serving import serve
from tests.test_api import make_settings

HIDDEN_PHRASE = "黄盖诈降之计"
DOCS = [
    Document("public-1", "赤壁之战，孙刘联军以火攻大破曹军。", "a.md", title="公开史料"),
    Document("public-2", "火攻须借东风，诸葛亮设坛祭风。", "b.md", title="公开演义"),
    Document("hidden", f"赤壁火攻绝密：{HIDDEN_PHRASE}，火船直冲曹营。", "c.md", title="密函", access=["strategists"]),
]
QUERY = "赤壁 火攻"
ADMIN, READER = "rerank-admin", "rerank-reader"


@pytest.fixture(scope="module")
def world(es_url: str, es: Elasticsearch, embedder: Embedder) -> Iterator[tuple[str, FakeRerankServer, str]]:
    with knowledge_base(es, embedder, DOCS, "test-rerank-api") as kb, FakeRerankServer("cohere") as server:
        keys = write_keys_file(
            [
                {"name": "admin", "key": ADMIN, "role": "admin"},
                {"name": "reader", "key": READER, "kbs": {kb: "read"}},  # no groups
            ]
        )
        settings = make_settings(
            es_url,
            kb,
            keys_file=keys,
            judgements_index=f"{kb}-judgements",
            reranker="http",
            rerank_base_url=server.base_url,
            rerank_model="fake-reranker",
            rerank_api_key=API_KEY,
            rerank_breaker_failures=1000,
        )
        with serve(create_app(settings, embedder=embedder)) as url:
            yield url, server, kb


def script(server: FakeRerankServer, *replies: Any) -> None:
    server.script = Script(list(replies))
    server.requests.clear()


def post(url: str, path: str, body: dict[str, Any], key: str = ADMIN) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, headers={"X-API-Key": key}, timeout=120)


def mcp_call(url: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
        ):
            return (await client.call_tool(tool, arguments)).structured_content or {}

    return asyncio.run(run())


def test_a_failing_reranker_answers_200_with_the_fused_order_and_a_warning(
    world: tuple[str, FakeRerankServer, str],
) -> None:
    url, server, kb = world
    script(server, RULE)
    fused = post(url, "/search", {"query": QUERY, "rerank": False}).json()
    script(server, 500)
    found = post(url, "/search", {"query": QUERY})
    assert found.status_code == 200 and server.requests  # it was asked, and failed
    body = found.json()
    assert [hit["id"] for hit in body["hits"]] == [hit["id"] for hit in fused["hits"]]
    assert body["rerank"]["applied"] is False and "融合排序" in body["warnings"][0]
    warning = body["warnings"][0]
    answer = post(url, "/query", {"question": "赤壁之战用了什么计策？", "web": False})
    assert answer.status_code == 200 and warning in answer.json()["warnings"]
    chat = post(url, "/v1/chat/completions", {"model": "rag", "messages": [{"role": "user", "content": "赤壁火攻"}]})
    assert chat.status_code == 200 and f"说明：{warning}" in chat.json()["choices"][0]["message"]["content"]
    dify = httpx.post(
        f"{url}/retrieval",
        json={"knowledge_id": kb, "query": QUERY, "retrieval_setting": {"top_k": 3}},
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=60,
    )
    assert dify.status_code == 200 and dify.json()["warnings"] == [warning] and dify.json()["records"]
    assert mcp_call(url, "search", {"query": QUERY})["warnings"] == [warning]
    metrics = httpx.get(f"{url}/metrics", headers={"X-API-Key": ADMIN}).text
    assert 'rag_rerank_total{outcome="error"}' in metrics and 'rag_rerank_total{outcome="applied"}' not in metrics


def test_every_path_can_turn_reranking_off(world: tuple[str, FakeRerankServer, str]) -> None:
    url, server, kb = world
    script(server, RULE)
    reranked = post(url, "/search", {"query": QUERY}).json()
    assert reranked["rerank"]["applied"] and all(hit["rerank"]["fused_rank"] >= 1 for hit in reranked["hits"])
    assert len(server.requests) == 1
    server.requests.clear()
    assert post(url, "/search", {"query": QUERY, "rerank": False}).json()["rerank"] is None
    post(url, "/compare", {"query": QUERY, "rerank": False})
    post(url, "/query", {"question": "赤壁之战用了什么计策？", "web": False, "rerank": False})
    post(
        url,
        "/v1/chat/completions",
        {"model": "rag", "messages": [{"role": "user", "content": "赤壁"}], "rerank": False},
    )
    setting = {"top_k": 3, "rerank": False}
    httpx.post(
        f"{url}/retrieval",
        json={"knowledge_id": kb, "query": QUERY, "retrieval_setting": setting},
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=60,
    ).raise_for_status()
    mcp_call(url, "search", {"query": QUERY, "rerank": False})
    assert server.requests == []
    post(url, "/compare", {"query": QUERY})  # on by default: the hybrid column is reranked
    assert len(server.requests) == 1


def test_a_group_less_readers_rerank_request_holds_no_hidden_passage(world: tuple[str, FakeRerankServer, str]) -> None:
    url, server, _ = world
    script(server, RULE)
    found = post(url, "/search", {"query": QUERY}, key=READER)
    assert found.status_code == 200 and found.json()["rerank"]["applied"]
    sent = server.texts_sent()
    assert sent and not any(HIDDEN_PHRASE in text for text in sent)
    assert len(sent) == 2  # the two public documents, nothing else
    script(server, RULE)  # the same search by the admin does send it: the check above can fail
    post(url, "/search", {"query": QUERY}, key=ADMIN)
    assert any(HIDDEN_PHRASE in text for text in server.texts_sent())
