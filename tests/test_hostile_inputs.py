"""Bad input is a 4xx on every path and protocol, before anything is stored (issue 30): JSON nested
past any reason, bodies counted while they stream in, one validation of questions and queries for
HTTP, OpenAI, Dify and MCP, and Dify conditions Elasticsearch would refuse, never an outage."""

import asyncio
import json
import logging
import socket
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import httpx2
import pytest
from elasticsearch import Elasticsearch
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from core.config import Settings
from core.embeddings import Embedder
from core.kbs import create_kb
from service.app import create_app
from tests.conftest import TEST_INDICES, delete_indices
from tests.fakes.openai_server import FakeChatServer
from tests.protocols import KEY, protocol_settings, service
from tests.serving import serve

UPLOAD_MB = 1  # the JSON limit of an upload here; its files' limit is 20 × 1 MB + MAX_REQUEST_BYTES


@pytest.fixture(scope="module")
def kb(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    name = f"test-hostile-{uuid.uuid4().hex[:8]}"
    create_kb(es, name, embedder, chunk_size=800, chunk_overlap=50)
    yield name
    delete_indices(es, name)
    es.options(ignore_status=404).delete(index=TEST_INDICES["QUESTIONS_INDEX"], id=name)


@pytest.fixture(scope="module")
def url(es: Elasticsearch, es_url: str, kb: str, embedder: Embedder) -> Iterator[str]:
    """An open service (every caller writes) over `kb`."""
    jobs = f"test-jobs-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        _env_file=None,
        es_url=es_url,
        es_index=kb,
        jobs_index=jobs,
        max_upload_mb=UPLOAD_MB,
        max_upload_json_mb=UPLOAD_MB,
    )
    with serve(create_app(settings, embedder=embedder)) as base:
        yield base
    es.options(ignore_status=404).indices.delete(index=jobs)


def nested(depth: int, leaf: str = '"x"') -> str:
    return '{"a": ' * depth + leaf + "}" * depth


def test_a_question_set_nested_5000_deep_is_a_422_and_the_last_set_stays(url: str, kb: str) -> None:
    """It was stored, then every read of it was a 500 (RecursionError) until a writer replaced it."""
    with httpx.Client(base_url=url, timeout=60) as client:
        good = json.dumps({"question": "谁是丞相？", "doc_id": "notes"}, ensure_ascii=False)
        kept = client.put(f"/kbs/{kb}/questions", json={"text": good})
        assert kept.status_code == 200, kept.text
        for bomb in ("[" * 5000 + "]" * 5000, f"{good}\n" + nested(300)):
            refused = client.put(f"/kbs/{kb}/questions", json={"text": bomb})
            assert refused.status_code == 422, refused.text
            assert refused.json()["message"].endswith(
                "JSON nested deeper than 200 levels, which no question line is: nothing stored"
            )
        again = client.get(f"/kbs/{kb}/questions")
        assert again.status_code == 200 and again.json()["uploaded_at"] == kept.json()["uploaded_at"]
        # Any other bad line is reported, the set kept.
        typo = client.put(f"/kbs/{kb}/questions", json={"text": f"{good}\n{{x"})
        assert typo.status_code == 200 and typo.json()["bad_lines"][-1]["line"] == 2


def test_a_set_stored_before_the_refusal_is_read_and_never_a_500(
    es: Elasticsearch, es_url: str, kb: str, embedder: Embedder
) -> None:
    """Such a set made every read, draft and evaluation a 500 until a writer replaced it."""
    bomb = {"kb": kb, "text": "[" * 5000 + "]" * 5000, "uploaded_at": "2026-11-30T00:00:00+00:00", "owner": ""}
    es.index(index=TEST_INDICES["QUESTIONS_INDEX"], id=kb, document=bomb, refresh=True)
    with FakeChatServer() as llm:
        settings = Settings(
            _env_file=None, es_url=es_url, es_index=kb, openai_base_url=llm.base_url, model_name="fake-model"
        )
        with serve(create_app(settings, embedder=embedder)) as url, httpx.Client(base_url=url, timeout=60) as client:
            read = client.get(f"/kbs/{kb}/questions")
            assert read.status_code == 200 and read.json()["bad_lines"][0]["error"].startswith("not JSON")
            appended = client.post(f"/kbs/{kb}/questions/draft", json={"count": 1})  # the base has no chunk
            assert appended.status_code == 409 and "replace it first" in appended.json()["detail"]
    es.options(ignore_status=404).delete(index=TEST_INDICES["QUESTIONS_INDEX"], id=kb)


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (nested(10_000), 400, "body: malformed JSON: recursion limit exceeded"),
        ('{"texts": [{"text": "甲", "metadata": ' + nested(3000) + "}]}", 400, "recursion limit exceeded"),
        (
            '{"texts": [{"text": "甲", "metadata": ' + nested(25) + "}]}",
            422,
            "texts.0.metadata: Value error, metadata nests deeper than 20 levels",
        ),
        (  # the contract run's admin phase: a 202, then the chunk failed at write (the JSON writer's limit)
            '{"texts": [{"text": "甲", "metadata": {"n": [-458559759291753299968]}}]}',
            422,
            "texts.0.metadata: Value error, metadata holds an integer outside",
        ),
    ],
    ids=["body-10000-deep", "metadata-3000-deep", "metadata-deeper-than-elasticsearch-takes", "metadata-huge-integer"],
)
def test_texts_nested_too_deep_are_a_4xx_and_no_job(url: str, kb: str, body: str, status: int, words: str) -> None:
    with httpx.Client(base_url=url, timeout=60) as client:
        response = client.post(
            f"/kbs/{kb}/documents", content=body.encode(), headers={"content-type": "application/json"}
        )
        assert response.status_code == status, response.text
        assert words in (response.json()["message"] if status == 422 else response.json()["detail"])
        assert client.get("/jobs", params={"kb": kb}).json()["jobs"] == []


def first_answer(url: str, head: bytes, body: bytes) -> bytes:
    """The status line the service answers after `head` and the start of a `body` it never finishes
    (the client stalls): only a limit checked while the body streams in can answer it."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as connection:
        connection.sendall(head + body)
        return connection.recv(200).split(b"\r\n", 1)[0]


def test_json_to_the_upload_route_is_refused_at_its_own_limit_while_it_streams(url: str, kb: str) -> None:
    """Not read up to the files' limit (21 MB here; ~1 GB by default) before the JSON's (1 MB)."""
    request = f"POST /kbs/{kb}/documents HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    # Declared over the JSON limit, under the files': refused from the header, the body not awaited.
    declared = (request + f"Content-Length: {3 * 2**20}\r\n\r\n").encode()
    assert first_answer(url, declared, b'{"texts": [') == b"HTTP/1.1 413 Request Entity Too Large"
    # Chunked: refused by the read that goes over 1 MB, the rest never sent.
    chunk = b'{"texts": [{"text": "' + b"x" * (2**20) + b'"'
    chunked = (request + "Transfer-Encoding: chunked\r\n\r\n").encode()
    answer = first_answer(url, chunked, f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
    assert answer == b"HTTP/1.1 413 Request Entity Too Large"
    with httpx.Client(base_url=url, timeout=60) as client:
        over = client.post(f"/kbs/{kb}/documents", json={"texts": [{"text": "x" * (2 * 2**20)}]})
        assert over.status_code == 413 and "MAX_UPLOAD_JSON_MB (1 MB)" in over.json()["detail"]


@pytest.fixture(scope="module")
def protocols_url(es_url: str, protocol_kb: str, embedder: Embedder) -> Iterator[str]:
    with FakeChatServer() as llm, service(protocol_settings(es_url, protocol_kb, llm), embedder) as base:
        yield base


def mcp_errors(url: str, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The tool error of each MCP call."""

    async def run() -> list[str]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
        ):
            results = [await client.call_tool(tool, arguments) for tool, arguments in calls]
        assert all(result.is_error for result in results), results
        # The SDK puts "Error executing tool <name>: " before the tool's own message.
        return [
            result.content[0].text.removeprefix(f"Error executing tool {tool}: ")  # type: ignore[union-attr]
            for (tool, _), result in zip(calls, results, strict=True)
        ]

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("孟" * 2001, "2001 characters, more than MAX_QUESTION_CHARS=2000"),
        ("\u3000 \n", "must contain a non-space character"),
    ],
    ids=["too-long", "blank"],
)
def test_every_protocol_refuses_a_question_or_query_with_the_same_limit_and_message(
    protocols_url: str, protocol_kb: str, text: str, problem: str
) -> None:
    """MCP skipped MAX_QUESTION_CHARS: a 60,000-character query ran 138 s and ended "Elasticsearch 暂时不可用"."""
    auth = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=protocols_url, headers=auth, timeout=60) as client:
        search = client.post("/search", json={"query": text}).json()["message"]
        query = client.post("/query", json={"question": text}).json()["message"]
        chat = client.post(
            "/v1/chat/completions", json={"model": "rag", "messages": [{"role": "user", "content": text}]}
        )
        dify = client.post(
            "/retrieval",
            json={"knowledge_id": protocol_kb, "query": text, "retrieval_setting": {"top_k": 3}},
        )
    tool_search, tool_ask = mcp_errors(protocols_url, [("search", {"query": text}), ("ask", {"question": text})])
    assert search == tool_search == dify.json()["error_msg"] == f"query: {problem}"
    assert query == tool_ask == f"question: {problem}"
    assert (dify.status_code, dify.json()["error_code"]) == (422, 422)
    # OpenAI's message holds the same, in the user's language, with what to do when the question is too long.
    assert chat.status_code == 400 and f"messages: {problem}" in chat.json()["error"]["message"]


def condition(name: str, operator: str, value: Any) -> dict[str, Any]:
    return {"conditions": [{"name": name, "comparison_operator": operator, "value": value}]}


@pytest.mark.parametrize(
    ("metadata_condition", "words"),
    [
        (condition("indexed_at", "before", "yesterday"), "'before' needs a date"),
        (condition("source", "contains", "赤" * 20_000), "at most 1024 characters"),
        (condition("source", "contains", "赤" * 600), "'contains' takes at most 64 characters, got 600"),
        (condition("category", "in", ",".join(map(str, range(200)))), "'in' takes at most 100 values, got 200"),
        (condition("chapter", "=", 2.5), "'=' needs a whole number here, got 2.5"),
        (condition("page", ">", 1e300), "'>' needs a number from -2147483647 to 2147483647"),
        (condition("chapter", "≥", 10**400), "'≥' needs a number"),
        ({"conditions": [condition("chapter", "=", 1)["conditions"][0]] * 33}, "at most 32 items"),
    ],
    ids=["date", "contains-20000", "contains-600", "in-200", "chapter-2.5", "page-1e300", "chapter-10e400", "33"],
)
def test_a_bad_dify_condition_is_a_422_in_difys_shape_never_an_outage(
    protocols_url: str,
    protocol_kb: str,
    metadata_condition: dict[str, Any],
    words: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """It was a 503 "retry in 5 s" and logged as an Elasticsearch outage."""
    body = {
        "knowledge_id": protocol_kb,
        "query": "诸葛亮",
        "retrieval_setting": {"top_k": 3},
        "metadata_condition": metadata_condition,
    }
    with caplog.at_level(logging.WARNING):
        response = httpx.post(
            f"{protocols_url}/retrieval", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60
        )
    assert response.status_code == 422, response.text
    assert response.json()["error_code"] == 422 and words in response.json()["error_msg"]
    assert not [r for r in caplog.records if r.name == "service.outage" or "elasticsearch" in r.name.lower()]
