"""/query, /query/stream and /gaps over real HTTP, with the real workflow and clients talking to
fake OpenAI and Bocha servers on 127.0.0.1 and a real Elasticsearch."""

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch

from core.config import Settings
from core.embeddings import Embedder
from service.app import create_app
from tests.conftest import knowledge_base
from tests.fakes.bocha_server import API_KEY, FakeBochaServer, page
from tests.fakes.openai_server import ANSWER, FakeChatServer
from tests.serving import serve
from tests.test_api import DOCS as API_DOCS
from tests.test_workflow import SEED_PATH

DOCS = [document for document in API_DOCS if document.doc_id in {"c5", "c6"}]  # 孟获, 五丈原
QUESTION = "诸葛亮怎样收服孟获？孟获后来做了什么官？"
MISSING = "孟获后来的官职"
# Contexts are numbered local passages first (two in this corpus), then web results.
ANSWER_TEXT = "诸葛亮七擒七纵，使孟获心服[1]；孟获后来官至御史中丞[3]。"


@pytest.fixture(scope="module")
def alias(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    with knowledge_base(es, embedder, DOCS, "test-api-query") as name:
        yield name


@pytest.fixture
def judgements(es: Elasticsearch) -> Iterator[str]:
    name = f"test-judgements-{uuid.uuid4().hex[:8]}"
    yield name
    es.options(ignore_status=404).indices.delete(index=name)


@pytest.fixture
def llm() -> Iterator[FakeChatServer]:
    with FakeChatServer() as server:
        server.on("RouteDecision", {"strategy": "complex", "reason": "需要知识库中的情节"})
        server.on(
            "Decomposition", {"sub_questions": ["诸葛亮怎样收服孟获？", "孟获后来担任什么官职？"], "reason": "两问"}
        )
        server.on("PlanDecision", {"next_action": "retrieve", "reason": "继续"})
        server.on(
            "Evaluation",
            {"enough": False, "missing": [MISSING], "reason": "知识库没有写官职", "web_query": "孟获 御史中丞"},
        )
        server.on("EvaluationWithWeb", {"enough": True, "missing": [], "reason": "网络资料补足了官职"})
        server.on(ANSWER, ANSWER_TEXT)
        yield server


@pytest.fixture
def bocha() -> Iterator[FakeBochaServer]:
    pages = [page("孟获 - 百科", "https://example.org/menghuo", "孟获归顺蜀汉后官至御史中丞。")]
    with FakeBochaServer(pages) as server:
        yield server


def settings_for(
    es_url: str,
    alias: str,
    judgements: str,
    llm: FakeChatServer | None,
    bocha: FakeBochaServer | None,
    **extra: Any,
) -> Settings:
    if llm is not None:
        extra.update(openai_base_url=llm.base_url, model_name="fake-model")
    if bocha is not None:
        extra.update(bocha_api_key=API_KEY, bocha_api_url=bocha.api_url)
    return Settings(
        _env_file=None, es_url=es_url, es_index=alias, judgements_index=judgements, max_question_chars=100, **extra
    )


@pytest.fixture
def url(
    es_url: str, alias: str, judgements: str, llm: FakeChatServer, bocha: FakeBochaServer, embedder: Embedder
) -> Iterator[str]:
    with serve(create_app(settings_for(es_url, alias, judgements, llm, bocha), embedder=embedder)) as base:
        yield base


@pytest.fixture(scope="module")
def idle() -> Iterator[FakeChatServer]:
    """A model server without scripts: requests refused before the workflow must never reach it."""
    with FakeChatServer() as server:
        yield server


@pytest.fixture(scope="module")
def idle_url(es_url: str, alias: str, idle: FakeChatServer, embedder: Embedder) -> Iterator[str]:
    settings = settings_for(es_url, alias, "test-judgements-unused", idle, None)
    with serve(create_app(settings, embedder=embedder)) as base:
        yield base


def sse(response: httpx.Response) -> list[tuple[str, Any]]:
    """(event, data) pairs of a server-sent-event body (comment lines are keep-alives)."""
    events = []
    for block in response.text.replace("\r\n", "\n").split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        fields = dict(line.split(": ", 1) for line in lines)
        events.append((fields.get("event", "message"), json.loads(fields["data"])))
    return events


EXPECTED_TRACE = SEED_PATH  # two sub-questions, one web search, a second evaluation


def test_query_runs_the_workflow_with_web_fallback(
    url: str, bocha: FakeBochaServer, es: Elasticsearch, judgements: str
) -> None:
    response = httpx.post(f"{url}/query", json={"question": QUESTION, "mode": "hybrid", "k": 4}, timeout=120)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["answer"] == ANSWER_TEXT
    assert (result["mode"], result["route"]) == ("llm", "complex")
    assert result["sub_questions"] == ["诸葛亮怎样收服孟获？", "孟获后来担任什么官职？"]
    assert [step["node"] for step in result["trace"]] == EXPECTED_TRACE
    assert [e["enough"] for e in result["evaluations"]] == [False, True]
    assert result["evaluations"][0]["missing"] == [MISSING]
    assert result["web_used"] is True and result["web_calls"] == 1
    cited = {c["number"]: c for c in result["citations"]}
    assert sorted(cited) == [1, 3]
    assert cited[1]["kind"] == "local" and cited[1]["chapter"] == 90
    assert cited[3]["kind"] == "web" and cited[3]["url"] == "https://example.org/menghuo"
    assert result["timings"]["total"] > 0
    assert bocha.requests[0].body["query"] == "孟获 御史中丞"

    metrics = httpx.get(f"{url}/metrics").text
    assert 'rag_workflow_paths_total{route="complex",web_used="true"} 1.0' in metrics
    assert f"rag_llm_calls_total {float(result['llm_calls'])}" in metrics
    assert "rag_web_calls_total 1.0" in metrics

    es.indices.refresh(index=judgements)  # the verdict log is written without a refresh
    gaps = httpx.get(f"{url}/gaps", params={"top": 5})
    assert gaps.status_code == 200
    report = gaps.json()
    assert report["total_questions"] == 1 and report["questions_needing_web"] == 1
    assert report["top_missing"] == [{"aspect": MISSING, "count": 1}]


def test_query_stream_sends_nodes_then_tokens_then_final(url: str) -> None:
    response = httpx.post(f"{url}/query/stream", json={"question": QUESTION, "k": 4}, timeout=120)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse(response)
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "mode" and events[0][1]["mode"] == "llm"
    assert kinds[-1] == "final" and "error" not in kinds
    nodes = [data["node"] for kind, data in events if kind == "node"]
    assert nodes == EXPECTED_TRACE
    assert all(isinstance(data["ms"], float) and data["outcome"] for kind, data in events if kind == "node")
    # Tokens arrive after the generate step starts and before the final event, and add up to the answer.
    first_token = kinds.index("token")
    assert kinds.index("node") < first_token and "final" not in kinds[:first_token]
    assert "".join(data["text"] for kind, data in events if kind == "token") == ANSWER_TEXT
    final = events[-1][1]
    assert final["answer"] == ANSWER_TEXT and [c["kind"] for c in final["citations"]] == ["local", "web"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"question": ""}, "question"),
        ({"question": "  \n　"}, "question"),
        ({"question": "问" * 101}, "question"),
        ({"question": "孟获", "k": 0}, "k"),
        ({"question": "孟获", "k": 51}, "k"),
        ({"question": "孟获", "mode": "fuzzy"}, "mode"),
        ({"question": "孟获", "max_retrievals": 0}, "max_retrievals"),
        ({"question": "孟获", "web": "maybe"}, "web"),
        ({"question": "孟获", "history": [{"role": "system", "content": "x"}]}, "history.0.role"),
        ({"question": "孟获", "temperature": 2}, "temperature"),
        ({"query": "孟获"}, "question"),  # a /search body sent to /query
    ],
)
@pytest.mark.parametrize("path", ["/query", "/query/stream"])
def test_query_bad_input_is_422_naming_the_field(
    idle_url: str, idle: FakeChatServer, path: str, body: dict[str, Any], field: str
) -> None:
    response = httpx.post(f"{idle_url}{path}", json=body)
    assert response.status_code == 422
    assert response.json()["message"].startswith(f"{field}:")
    errors = [(tuple(e["loc"]), e["type"]) for e in response.json()["detail"]]
    assert len(errors) == len(set(errors)), errors  # each error told once
    assert idle.requests == []  # refused before any model call


def test_query_malformed_json_is_400(idle_url: str) -> None:
    for path in ("/query", "/query/stream"):
        response = httpx.post(
            f"{idle_url}{path}", content=b'{"question": ', headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 400
        assert response.json()["detail"].startswith("body: malformed JSON")


def test_gaps_bad_top_is_422(idle_url: str) -> None:
    response = httpx.get(f"{idle_url}/gaps", params={"top": 0})
    assert response.status_code == 422
    assert response.json()["message"].startswith("query.top:")


def test_without_llm_answers_are_extractive_and_marked_so(
    es_url: str, alias: str, judgements: str, embedder: Embedder
) -> None:
    with serve(create_app(settings_for(es_url, alias, judgements, None, None), embedder=embedder)) as base:
        result = httpx.post(f"{base}/query", json={"question": QUESTION}, timeout=120).json()
        assert (result["mode"], result["llm_calls"]) == ("extractive", 0) and "未配置大模型" in result["mode_reason"]
        assert "七擒孟获" in result["answer"] and result["citations"][0]["chapter"] == 90
        stream = sse(httpx.post(f"{base}/query/stream", json={"question": QUESTION}, timeout=120))
        assert stream[0] == ("mode", {"mode": "extractive", "reason": result["mode_reason"]})
        assert stream[-1][0] == "final" and stream[-1][1]["answer"] == result["answer"]
        assert "".join(data["text"] for kind, data in stream if kind == "token") == result["answer"]
        ready = httpx.get(f"{base}/readyz").json()
        assert (ready["llm_configured"], ready["answer_mode"]) == (False, "auto")


def test_answer_mode_llm_without_a_model_is_503_naming_the_settings(
    es_url: str, alias: str, judgements: str, embedder: Embedder
) -> None:
    settings = settings_for(es_url, alias, judgements, None, None, answer_mode="llm")
    with serve(create_app(settings, embedder=embedder)) as base:
        for path in ("/query", "/query/stream"):
            response = httpx.post(f"{base}{path}", json={"question": QUESTION})
            assert response.status_code == 503
            assert response.headers["content-type"] == "application/json"
            assert "OPENAI_BASE_URL" in response.json()["detail"] and "MODEL_NAME" in response.json()["detail"]
            # Bad input is judged first: 422 naming the field, not 503.
            bad = httpx.post(f"{base}{path}", json={"question": ""})
            assert bad.status_code == 422 and bad.json()["message"].startswith("question:")
        assert httpx.post(f"{base}/search", json={"query": "孟获"}).status_code == 200  # search needs no LLM


def test_model_down_in_auto_mode_answers_extractively_and_says_why(
    es_url: str, alias: str, judgements: str, embedder: Embedder
) -> None:
    llm = FakeChatServer()
    llm.models_status = 503
    with llm, serve(create_app(settings_for(es_url, alias, judgements, llm, None), embedder=embedder)) as base:
        result = httpx.post(f"{base}/query", json={"question": QUESTION}, timeout=120).json()
        assert result["mode"] == "extractive" and "HTTP 503" in result["mode_reason"]
        assert llm.requests == [] and [g.path for g in llm.gets] == ["/v1/models"]
        httpx.post(f"{base}/query", json={"question": QUESTION}, timeout=120)
        assert len(llm.gets) == 1  # the probe's verdict is reused for LLM_PROBE_TTL_S


def test_web_failure_degrades_to_a_local_answer(
    es_url: str, alias: str, judgements: str, llm: FakeChatServer, embedder: Embedder
) -> None:
    with (
        FakeBochaServer(500) as broken,
        serve(create_app(settings_for(es_url, alias, judgements, llm, broken), embedder=embedder)) as base,
    ):
        response = httpx.post(f"{base}/query", json={"question": QUESTION}, timeout=120)
        assert response.status_code == 200
        result = response.json()
        assert result["web_used"] is False and result["answer"].startswith(ANSWER_TEXT)
        # The failed web search is said in the answer and the warnings, not hidden.
        assert "无法从上下文确认" in result["answer"] and "网络搜索失败" in result["answer"]
        assert result["warnings"]


def test_answer_model_failure_in_auto_mode_falls_back_to_quotes_and_says_why(
    url: str, llm: FakeChatServer, bocha: FakeBochaServer
) -> None:
    llm.on(ANSWER, 500)
    response = httpx.post(f"{url}/query", json={"question": QUESTION}, timeout=120)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["mode"] == "extractive" and result["mode_reason"] == "大模型服务返回 HTTP 500，改用抽取式回答"
    assert "七擒孟获" in result["answer"] and result["citations"]
    assert llm.base_url not in result["mode_reason"]
    # The failure counts as a failed probe: the next question does not try the model again.
    calls = len(llm.requests)
    stream = sse(httpx.post(f"{url}/query/stream", json={"question": QUESTION}, timeout=120))
    assert len(llm.requests) == calls
    assert stream[0] == ("mode", {"mode": "extractive", "reason": result["mode_reason"]})
    assert stream[-1][0] == "final" and stream[-1][1]["mode"] == "extractive"


def test_answer_model_failure_in_llm_mode_is_502_naming_the_endpoint(
    es_url: str,
    alias: str,
    judgements: str,
    llm: FakeChatServer,
    bocha: FakeBochaServer,
    embedder: Embedder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    llm.on(ANSWER, 500)
    settings = settings_for(es_url, alias, judgements, llm, bocha, answer_mode="llm")
    with serve(create_app(settings, embedder=embedder)) as url:
        response = httpx.post(f"{url}/query", json={"question": QUESTION}, timeout=120)
        assert response.status_code == 502
        assert llm.base_url in response.json()["detail"]
        caplog.clear()
        stream = httpx.post(f"{url}/query/stream", json={"question": QUESTION}, timeout=120)
        assert stream.status_code == 200  # already streaming when the model failed: an error event ends it
        kind, data = sse(stream)[-1]
        # The client learns the status and an error id, not the endpoint or the exception's text.
        assert kind == "error" and "HTTP 500" in data["message"] and data["error_id"] in data["message"]
        assert llm.base_url not in data["message"] and "scripted" not in data["message"]
        # The log has the failure once, with its traceback and the same id.
        [logged] = [r for r in caplog.records if r.exc_info]
        assert data["error_id"] in logged.getMessage()
