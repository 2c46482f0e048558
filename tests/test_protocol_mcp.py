"""The MCP server through the `mcp` SDK's own client, over both transports: streamable HTTP at
`/mcp` on the service under uvicorn (with the API's keys), and stdio (`python -m service.mcp`
as a subprocess). The workflow runs for real against a fake OpenAI server."""

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from elasticsearch import Elasticsearch
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_REQUEST

from service.jobs.store import Job, JobStore, new_job_id
from tests.conftest import TEST_INDICES, subprocess_env
from tests.fakes.openai_server import FakeChatServer
from tests.protocols import ANSWER_TEXT, DOCS, KEY, QUESTION, STRANGER_KEY, protocol_settings

TOOLS = {"list_knowledge_bases", "search", "ask", "rate_answer"}


async def session(client: Client, protocol_kb: str) -> dict[str, Any]:
    """What the tests check of one session: the tools, a search, an answer and a chunk resource."""
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    bases = (await client.call_tool("list_knowledge_bases", {})).structured_content
    found = await client.call_tool("search", {"query": "七擒孟获", "k": 2})
    hits = (found.structured_content or {})["hits"]
    chunk = await client.read_resource(f"chunk://{protocol_kb}/{hits[0]['id']}")
    answer = await client.call_tool("ask", {"question": QUESTION, "web": False})
    unknown = await client.call_tool("search", {"query": "孟获", "kb": "no-such-kb"})
    return {
        "tools": tools,
        "bases": bases,
        "hits": hits,
        "chunk": json.loads(chunk.contents[0].text),  # type: ignore[union-attr]
        "answer": answer.structured_content,
        "unknown": unknown,
    }


def check(seen: dict[str, Any], protocol_kb: str) -> None:
    assert set(seen["tools"]) == TOOLS
    assert set(seen["tools"]["search"].input_schema["properties"]) == {"query", "kb", "mode", "k", "filters", "rerank"}
    assert set(seen["tools"]["ask"].input_schema["properties"]) == {"question", "kb", "web", "rerank"}
    assert seen["bases"] == {"knowledge_bases": [{"name": protocol_kb, "default": True, "chunks": len(DOCS)}]}
    top = seen["hits"][0]
    assert len(seen["hits"]) == 2 and "孟获" in top["text"] and top["label"] == "第90章 七擒孟获 · sanguo"
    assert {"page", "section", "chapter"} <= set(top)
    assert seen["chunk"]["id"] == top["id"] and seen["chunk"]["text"] == top["text"]
    answer = seen["answer"]
    assert answer["answer"].startswith(ANSWER_TEXT) and "[1] 第90章 七擒孟获 · sanguo" in answer["answer"]
    assert answer["citations"][0]["chapter"] == 90 and answer["mode"] == "llm" and answer["web_used"] is False
    assert seen["unknown"].is_error and "no-such-kb" in seen["unknown"].content[0].text


def test_streamable_http_at_mcp_with_the_api_key(protocol_url: str, protocol_kb: str) -> None:
    async def run() -> dict[str, Any]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as http,
            Client(streamable_http_client(f"{protocol_url}/mcp", http_client=http)) as client,
        ):
            return await session(client, protocol_kb)

    check(asyncio.run(run()), protocol_kb)


def test_a_principal_of_another_base_sees_none_of_this_one(protocol_url: str, protocol_kb: str) -> None:
    """Access through MCP: the tools list, search and read only the caller's bases."""

    async def run() -> tuple[Any, Any, Any]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {STRANGER_KEY}"}, timeout=120) as http,
            Client(streamable_http_client(f"{protocol_url}/mcp", http_client=http)) as client,
        ):
            bases = (await client.call_tool("list_knowledge_bases", {})).structured_content
            found = await client.call_tool("search", {"query": "七擒孟获", "kb": protocol_kb})
            default = await client.call_tool("search", {"query": "七擒孟获"})
            return bases, found, default

    bases, found, default = asyncio.run(run())
    assert bases == {"knowledge_bases": []}
    for result in (found, default):
        assert result.is_error and "孟获" not in result.content[0].text


def test_mcp_without_a_key_is_401(protocol_url: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        response = httpx.post(f"{protocol_url}/mcp", json=body, headers=headers)
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
        error = response.json()  # a JSON-RPC error: what MCP clients parse and show
        assert error["jsonrpc"] == "2.0" and error["id"] is None and error["error"]["code"] == INVALID_REQUEST
        assert error["error"]["message"].startswith("missing or invalid API key")


def test_the_sdk_shows_why_a_key_or_a_request_is_refused(protocol_url: str) -> None:
    """The SDK raises the server's JSON-RPC message, not "Server returned an error response"."""

    async def connect(headers: dict[str, str]) -> None:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(f"{protocol_url}/mcp", http_client=http)),
        ):
            pass

    for headers in ({}, {"Authorization": "Bearer wrong"}):
        with pytest.raises(BaseException) as caught:
            asyncio.run(connect(headers))
        assert any(
            "missing or invalid API key: send `Authorization: Bearer <key>`" in m for m in mcp_errors(caught.value)
        )

    async def too_large() -> None:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http,
            Client(streamable_http_client(f"{protocol_url}/mcp", http_client=http)) as client,
        ):
            await client.call_tool("search", {"query": "孟获" * 40000})

    with pytest.raises(BaseException) as large:
        asyncio.run(too_large())
    assert any("MAX_REQUEST_BYTES=65536" in message for message in mcp_errors(large.value))


def mcp_errors(error: BaseException) -> list[str]:
    """The messages of the `MCPError`s in what the SDK raised (its task groups wrap them)."""
    if isinstance(error, BaseExceptionGroup):
        return [message for inner in error.exceptions for message in mcp_errors(inner)]
    found = mcp_errors(error.__context__) if error.__context__ is not None else []
    return [str(error), *found] if isinstance(error, MCPError) else found


def test_stdio_python_m_service_mcp(
    es_url: str, protocol_kb: str, protocol_llm: FakeChatServer, tmp_path: Path
) -> None:
    env = subprocess_env(
        ES_URL=es_url,
        ES_INDEX=protocol_kb,
        JUDGEMENTS_INDEX=f"{protocol_kb}-judgements",
        ANSWERS_INDEX=TEST_INDICES["ANSWERS_INDEX"],  # its answers go to the session's answer log
        OPENAI_BASE_URL=protocol_llm.base_url,
        MODEL_NAME="fake-model",
        LOG_LEVEL="WARNING",
        # The process acts as the principal of MCP_API_KEY: it sees only the bases that key may read.
        KEYS_FILE=protocol_settings(es_url, protocol_kb, None).keys_file or "",
        MCP_API_KEY=KEY,
    )
    server = StdioServerParameters(command=sys.executable, args=["-m", "service.mcp"], env=env, cwd=tmp_path)

    async def run() -> dict[str, Any]:
        async with Client(server, read_timeout_seconds=120) as client:
            return await session(client, protocol_kb)

    check(asyncio.run(run()), protocol_kb)


def test_stdio_runs_no_job(es: Elasticsearch, es_url: str, protocol_kb: str, tmp_path: Path) -> None:
    """A queued upload of the HTTP service stays the HTTP service's: the stdio server never claims it."""
    store = JobStore(es, f"test-jobs-stdio-{uuid.uuid4().hex[:8]}")
    waiting = Job(id=new_job_id(), kind="upload", kb=protocol_kb, owner="someone", params={"spool": str(tmp_path)})
    store.create(waiting)
    env = subprocess_env(ES_URL=es_url, ES_INDEX=protocol_kb, JOBS_INDEX=store.index, LOG_LEVEL="WARNING")
    server = StdioServerParameters(command=sys.executable, args=["-m", "service.mcp"], env=env, cwd=tmp_path)

    async def run() -> set[str]:
        async with Client(server, read_timeout_seconds=120) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            await asyncio.sleep(2)  # a runner would have claimed it by now (it looks at once on start)
            return tools

    try:
        assert asyncio.run(run()) == TOOLS
        assert store.get(waiting.id) == waiting  # still queued, never run
    finally:
        es.options(ignore_status=404).indices.delete(index=store.index)
