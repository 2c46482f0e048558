"""What the protocol tests share (a pytest plugin of tests/conftest.py): a small knowledge base with
pages and JSONL metadata, a scripted model (fake OpenAI server), the service under uvicorn with an API key."""

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from core.config import Settings
from core.documents import Document
from core.embeddings import Embedder
from service.app import create_app
from tests.conftest import delete_indices, knowledge_base
from tests.fakes.openai_server import ANSWER, FakeChatServer
from tests.serving import serve
from tests.test_api import DOCS as API_DOCS

KEY = "protocol-test-key"
STRANGER_KEY = "protocol-stranger-key"  # a principal of another base: the protocols must hide this one
QUESTION = "诸葛亮怎样收服孟获？"
ANSWER_TEXT = "诸葛亮七擒七纵孟获，使南中归心[1]。"
# The chapters of tests/test_api.py, plus a paged manual and a JSONL-like record with metadata.
DOCS = [
    *API_DOCS,
    Document(
        "manual",
        "高血糖患者应控制饮食，定期监测血糖，遵医嘱使用胰岛素。",
        "guide.pdf",
        title="糖尿病指南",
        page_starts=[(0, 3)],
        section_starts=[(0, "第三章 治疗 / 3.2 用药")],
    ),
    Document(
        "record-1",
        "赤壁之战发生在建安十三年，孙刘联军以火攻大败曹军。",
        "battles.jsonl",
        title="赤壁之战",
        metadata={"category": "战役", "year": "208", "date": "0208-12-01"},
    ),
]


def script_answer(server: FakeChatServer) -> FakeChatServer:
    """One sub-question, enough local context, a cited answer: route, decompose, retrieve, evaluate, generate."""
    server.on("StandaloneQuestion", {"question": QUESTION})
    server.on("RouteDecision", {"strategy": "complex", "reason": "需要知识库"})
    server.on("Decomposition", {"sub_questions": [QUESTION], "reason": "一问"})
    server.on("Evaluation", {"enough": True, "missing": [], "reason": "资料足够"})
    server.on(ANSWER, ANSWER_TEXT)
    return server


def write_keys_file(principals: list[dict[str, Any]]) -> str:
    """A KEYS_FILE holding `principals` (in the temporary folder; the service reads it once, at start)."""
    handle, path = tempfile.mkstemp(prefix="keys-", suffix=".json")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        json.dump({"principals": principals}, file)
    return path


def protocol_settings(es_url: str, alias: str, llm: FakeChatServer | None, **extra: Any) -> Settings:
    """The service over `alias` whose one key, `KEY`, may read `alias` only (the cluster holds other bases)."""
    if llm is not None:
        extra.update(openai_base_url=llm.base_url, model_name="fake-model")
    principals = [
        {"name": "client", "key": KEY, "kbs": {alias: "read"}},
        {"name": "stranger", "key": STRANGER_KEY, "kbs": {f"{alias}-elsewhere": "admin"}},
    ]
    extra.setdefault("keys_file", write_keys_file(principals))
    return Settings(
        _env_file=None,
        es_url=es_url,
        es_index=alias,
        judgements_index=f"{alias}-judgements",
        **extra,
    )


@contextmanager
def service(settings: Settings, embedder: Embedder) -> Iterator[str]:
    with serve(create_app(settings, embedder=embedder)) as base:
        yield base


@pytest.fixture(scope="session")
def protocol_kb(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    """`DOCS` indexed once for the protocol tests (OpenAI, Dify, MCP); they only read it."""
    with knowledge_base(es, embedder, DOCS, "test-protocols") as alias:
        yield alias
        delete_indices(es, f"{alias}-judgements")


@pytest.fixture
def protocol_llm() -> Iterator[FakeChatServer]:
    """The model server, scripted for one cited answer."""
    with FakeChatServer() as server:
        yield script_answer(server)


@pytest.fixture
def protocol_url(es_url: str, protocol_kb: str, protocol_llm: FakeChatServer, embedder: Embedder) -> Iterator[str]:
    """The service under uvicorn with an API key, over `protocol_kb`, answering with `protocol_llm`."""
    with service(protocol_settings(es_url, protocol_kb, protocol_llm), embedder) as base:
        yield base
