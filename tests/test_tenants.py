"""Tenants cannot hurt each other (issue 40): text no encoder takes is refused at the edge by every
protocol, a failure in a shared batch is only its owner's, and budgets bound what one request costs."""

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch

from core.config import Settings
from core.embeddings import Embedder
from service.http.errors import internal_error
from service.http.protocols import openai_chat
from service.inputs import InvalidText, valid_text
from tests.conftest import knowledge_base
from tests.fakes.openai_server import FakeChatServer
from tests.protocols import DOCS, KEY, protocol_settings, script_answer, service, write_keys_file

LONE = '"\\ud800"'  # JSON for a lone surrogate: valid JSON, no valid text


ATTACKER_KEY = "tenant-attacker-key"  # a reader of another base, that base only
METRICS_KEY = "tenant-metrics-key"  # a scraper's: /metrics and nothing else


@pytest.fixture(scope="module")
def other_kb(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    with knowledge_base(es, embedder, DOCS[:1], "test-tenants-other") as alias:
        yield alias


@pytest.fixture(scope="module")
def url(es_url: str, protocol_kb: str, other_kb: str, embedder: Embedder) -> Iterator[str]:
    principals = [
        {"name": "client", "key": KEY, "kbs": {protocol_kb: "read"}},
        {"name": "attacker", "key": ATTACKER_KEY, "kbs": {other_kb: "read"}},
    ]
    with FakeChatServer() as llm:
        keys = write_keys_file(principals)
        settings = protocol_settings(es_url, protocol_kb, script_answer(llm), keys_file=keys, metrics_key=METRICS_KEY)
        with service(settings, embedder) as base:
            yield base


def raw(client: httpx.Client, path: str, body: str, key: str = KEY) -> httpx.Response:
    """`body` as it is, UTF-8 (httpx's `json=` cannot encode a lone surrogate, a client in C can)."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json", "Accept": "*/*"}
    return client.post(path, content=body.encode(), headers=headers)


def chat(text: str = '"诸葛亮"', model: str = '"rag"', stream: bool = False) -> str:
    return f'{{"model": {model}, "stream": {json.dumps(stream)}, "messages": [{{"role": "user", "content": {text}}}]}}'


def dify(kb: str, text: str) -> str:
    return f'{{"knowledge_id": "{kb}", "query": {text}, "retrieval_setting": {{"top_k": 3}}}}'


def mcp_call(tool: str, arguments: str) -> str:
    return f'{{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {{"name": "{tool}", "arguments": {arguments}}}}}'


def bad_requests(kb: str) -> list[tuple[str, str, str]]:
    """(protocol, path, body) of every way a lone surrogate reached the embedder or a response."""
    return [
        ("api", "/search", f'{{"query": {LONE}, "kb": "{kb}"}}'),
        ("api", "/compare", f'{{"query": {LONE}, "kb": "{kb}"}}'),
        ("api", "/query", f'{{"question": {LONE}, "kb": "{kb}"}}'),
        ("api", "/query/stream", f'{{"question": {LONE}, "kb": "{kb}"}}'),
        ("api", "/search", f'{{"query": "诸葛亮", "kb": "{kb}", "filters": {{"sources": [{LONE}]}}}}'),
        ("openai", "/v1/chat/completions", chat(LONE, model=f'"kb:{kb}"')),
        ("openai", "/v1/chat/completions", chat(LONE, model=f'"kb:{kb}"', stream=True)),
        ("openai", "/v1/chat/completions", chat(model=LONE)),
        ("openai", "/v1/chat/completions", chat(model='"kb:\\udfff"', stream=True)),
        ("dify", "/retrieval", dify(kb, LONE)),
        ("dify", "/retrieval", dify(kb, '"a\\udc00\\ud800b"')),
        (
            "dify",
            "/retrieval",
            dify(
                kb,
                '"诸葛亮", "metadata_condition": {"conditions": [{"name": "category", "comparison_operator": "is", "value": "\\udc00"}]}',
            ),
        ),
        ("mcp", "/mcp", mcp_call("search", f'{{"query": {LONE}, "kb": "{kb}"}}')),
        ("mcp", "/mcp", mcp_call("ask", f'{{"question": {LONE}, "kb": "{kb}"}}')),
    ]


def message_of(protocol: str, answer: dict[str, Any]) -> str:
    """The message of an error in `protocol`'s own shape."""
    if protocol == "api":
        return str(answer["message"] if "message" in answer else answer["detail"])
    if protocol == "dify":
        return str(answer["error_msg"])
    return str(answer["error"]["message"])  # OpenAI and MCP (JSON-RPC)


def test_a_lone_surrogate_is_a_4xx_in_each_protocols_shape_never_a_500(url: str, protocol_kb: str) -> None:
    """`{"query": "\\ud800"}` passed validation, then failed in the embedder: 500 on /search,
    /compare, /query, /retrieval and /v1/chat/completions (the `model` too), a stream cut short."""
    with httpx.Client(base_url=url, timeout=60) as client:
        for protocol, path, body in bad_requests(protocol_kb):
            response = raw(client, path, body)
            assert 400 <= response.status_code < 500, (path, body, response.status_code, response.text)
            message = message_of(protocol, response.json())
            assert "lone surrogate" in message, (path, message)
        refused = raw(client, "/search", f'{{"query": {LONE}}}').json()
        assert refused["detail"][0]["loc"] == ["body", "query"] and refused["message"].startswith("query: ")
        # A valid pair is one character, and no refusal.
        assert raw(client, "/search", '{"query": "诸葛亮\\ud83d\\ude00"}').status_code == 200


def test_text_that_is_not_utf8_is_a_400_in_body_path_and_query_string(url: str, protocol_kb: str) -> None:
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        body = client.post("/search", content=b'{"query": "\xff\xfe"}')
        path = client.get("/kbs/%ED%A0%80/documents")
        query = client.get("/gaps?kb=%ff")
        upload = client.post(
            f"/kbs/{protocol_kb}/documents", content=b'{"texts": [{"text": "\\ud800"}]}', headers=headers
        )
        openai = client.post("/v1/chat/completions", content=chat().encode().replace("诸葛亮".encode(), b"\xc0\xaf"))
    assert (body.status_code, body.json()["detail"]) == (400, "body: not UTF-8 (byte 11)")
    assert path.status_code == query.status_code == 400, (path.text, query.text)
    assert 400 <= upload.status_code < 500, upload.text  # parse_json refuses it itself (a reader may not upload)
    assert openai.status_code == 400 and "not UTF-8" in openai.json()["error"]["message"]


def test_stdio_mcp_and_every_caller_of_valid_text_refuse_it_too() -> None:
    with pytest.raises(InvalidText, match="query: not Unicode text"):
        valid_text(Settings(_env_file=None), "query", "孟获\ud800")


def test_one_tenants_bad_text_in_a_loop_never_fails_anothers_searches(url: str, other_kb: str) -> None:
    """Three threads of another base's key made 58 of a reader's 60 concurrent searches 500s."""
    stop, refused, statuses = threading.Event(), [], []

    def attacker() -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            while not stop.is_set():
                for _, path, body in bad_requests(other_kb):
                    refused.append(raw(client, path, body, key=ATTACKER_KEY).status_code)

    def reader() -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as client:
            for query in ["诸葛亮", "孟获", "赤壁", "糖尿病", "曹操"] * 4:
                statuses.append(client.post("/search", json={"query": query}).status_code)

    attackers = [threading.Thread(target=attacker) for _ in range(3)]
    readers = [threading.Thread(target=reader) for _ in range(3)]
    for thread in attackers + readers:
        thread.start()
    for thread in readers:
        thread.join(timeout=300)
    stop.set()
    for thread in attackers:
        thread.join(timeout=60)
    assert statuses == [200] * 60
    assert refused and all(400 <= status < 500 for status in refused), sorted(set(refused))


def test_an_unexpected_failure_logs_its_traceback_once_per_cause(caplog: pytest.LogCaptureFixture) -> None:
    """Each failure logged a 10.7 KB traceback: 256 failures wrote 2.75 MB."""

    def fail() -> None:
        raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")

    with caplog.at_level(logging.ERROR, logger="service.http.errors"):
        details = []
        for _ in range(20):
            try:
                fail()
            except UnicodeEncodeError as err:
                details.append(internal_error(err, "/search"))
    records = [record for record in caplog.records if record.name == "service.http.errors"]
    assert len(records) == 20 and [bool(record.exc_info) for record in records] == [True] + [False] * 19
    for detail, record in zip(details, records, strict=True):
        assert detail.split()[2] in record.getMessage()  # each client's error id is in the log
    assert all(len(record.getMessage()) < 400 for record in records[1:])
    assert records[-1].getMessage().endswith("seen 20 times (its traceback was logged the first time)")


def test_a_chat_stream_that_fails_ends_with_an_error_chunk_and_done() -> None:
    """A streamed chat completion was cut mid-body: no error chunk, no `[DONE]`."""

    async def failing() -> AsyncIterator[str]:
        yield 'data: {"choices": []}\n\n'
        raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")

    async def read() -> list[bytes]:
        return [line async for line in openai_chat._ended(failing())]

    lines = b"".join(asyncio.run(read())).decode().split("\n\n")
    assert lines[0] == 'data: {"choices": []}' and lines[-2:] == ["data: [DONE]", ""]
    error = json.loads(lines[1].removeprefix("data: "))["error"]
    assert error["type"] == "server_error" and error["message"].startswith("回答中断")


def test_a_dify_condition_over_the_clause_budget_is_a_422_before_elasticsearch(
    url: str, protocol_kb: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Names were not limited: a 3.7 KB request became about 80,000 clauses (17 MB to Elasticsearch)."""
    names = [f"n{i}" for i in range(40)]
    condition = {"name": names, "comparison_operator": "in", "value": [str(v) for v in range(100)]}
    body = {
        "knowledge_id": protocol_kb,
        "query": "诸葛亮",
        "retrieval_setting": {"top_k": 3},
        "metadata_condition": {"conditions": [condition] * 2},
    }
    with caplog.at_level(logging.WARNING):
        refused = httpx.post(f"{url}/retrieval", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert refused.status_code == 422 and refused.json()["error_code"] == 422, refused.text
    assert "8000 filter clauses (names × values, summed over the conditions), more than 1024" in refused.text
    assert not [r for r in caplog.records if "elasticsearch" in r.name.lower()]
    condition["name"] = names[:10]  # 10 × 100 = 1000 clauses: within the budget
    body["metadata_condition"] = {"conditions": [condition]}
    accepted = httpx.post(f"{url}/retrieval", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert accepted.status_code == 200, accepted.text


def test_get_mcp_is_a_405_in_stateless_mode_not_a_stream_held_open(url: str) -> None:
    """Any key could open an event stream that never closed, and hold descriptors."""
    answer = httpx.get(
        f"{url}/mcp", headers={"Authorization": f"Bearer {KEY}", "Accept": "text/event-stream"}, timeout=10
    )
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"
    assert answer.json()["error"]["code"] < 0  # JSON-RPC's shape


def test_metrics_are_for_admins_or_the_metrics_key(url: str) -> None:
    """Service-wide activity (bases created, uploads) was shown to any key."""
    asked = {
        name: httpx.get(f"{url}/metrics", headers=headers, timeout=10).status_code
        for name, headers in [
            ("none", {}),
            ("reader", {"X-API-Key": KEY}),
            ("scraper", {"Authorization": f"Bearer {METRICS_KEY}"}),
        ]
    }
    assert asked == {"none": 401, "reader": 403, "scraper": 200}


def test_two_credentials_in_one_request_are_a_400(url: str) -> None:
    """Routes used the first `X-API-Key`, the MCP check and /readyz the last: one request, two callers."""
    body = {"query": "诸葛亮"}
    twice = [("X-API-Key", KEY), ("X-API-Key", ATTACKER_KEY)]
    bearers = [("Authorization", f"Bearer {ATTACKER_KEY}"), ("Authorization", f"Bearer {KEY}")]
    one_each = [("X-API-Key", KEY), ("Authorization", f"Bearer {KEY}")]
    with httpx.Client(base_url=url, timeout=60) as client:
        statuses = [
            client.post("/search", json=body, headers=headers).status_code for headers in (twice, bearers, one_each)
        ]
        mcp = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=twice)
    assert statuses == [400, 400, 200]
    assert mcp.status_code == 400 and "send one credential" in mcp.json()["error"]["message"]


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Host": "[::1]evil"}, 421),
        ({"Host": "localhost:80@attacker.example"}, 421),
        ({"Host": "localhost:8000/x"}, 421),
        ({"Origin": "http://localhost:80@attacker.example"}, 403),
        ({"Origin": "http://[::1]evil"}, 403),
        ({"Origin": "http://localhost:8000/path"}, 403),
        ({"Host": "LOCALHOST:8000", "Origin": "http://[::1]:3000"}, 200),
    ],
)
def test_host_and_origin_are_parsed_as_browsers_send_them(url: str, headers: dict[str, str], status: int) -> None:
    """Values browsers never send were read as a local name (`[::1]evil` as `[::1]`)."""
    answer = httpx.get(f"{url}/healthz", headers=headers, timeout=10)
    assert answer.status_code == status, answer.text
