"""Open WebUI 0.12.4's own requests, replayed byte for byte against the service under uvicorn: the
bodies it sent in a recorded session (tests/fixtures/openwebui/README.md), its 28 tool definitions,
`<attached_files>` block and RAG template included. Without a model (extractive answers), as a
user without a key has it."""

import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from bench.client_requests import recorded
from core.embeddings import Embedder
from tests.protocols import KEY, protocol_settings, service

HEADERS = {"Authorization": f"Bearer {KEY}"}
METRICS_KEY = "openwebui-metrics-key"  # /metrics is for the service's admins and its scraper
SCRAPER = {"Authorization": f"Bearer {METRICS_KEY}"}
FRAGMENTS = ("玄德曰", "蒙兄", "乌牛", "侍中", "<attached_files>", "<file ", "<source", "<context>")


@pytest.fixture(scope="module")
def webui_base(es_url: str, protocol_kb: str, embedder: Embedder) -> Iterator[str]:
    # Open WebUI cannot send TEI's `truncate`: its 1,000-character chunks are cut by the service's setting.
    settings = protocol_settings(es_url, protocol_kb, None, metrics_key=METRICS_KEY, embeddings_truncate=True)
    with service(settings, embedder) as base:
        yield base


@pytest.fixture(scope="module")
def tight_base(es_url: str, protocol_kb: str, embedder: Embedder) -> Iterator[str]:
    """Lower limits, to see each refusal: the given context and the /v1 body."""
    settings = protocol_settings(
        es_url, protocol_kb, None, max_given_chars=10_000, max_openai_request_bytes=200_000, metrics_key=METRICS_KEY
    )
    with service(settings, embedder) as base:
        yield base


def replay(base: str, name: str) -> httpx.Response:
    """The recorded body, as sent (the model `rag` is the service's default base)."""
    return httpx.post(f"{base}/v1/chat/completions", headers=HEADERS, json=recorded(name), timeout=300)


def streamed_text(response: httpx.Response) -> str:
    """The answer as Open WebUI assembles it from the stream's deltas."""
    assert response.status_code == 200, response.text
    parts = []
    for line in response.text.splitlines():
        if line.startswith("data: {"):
            chunk = json.loads(line[6:])
            parts += [choice["delta"].get("content") or "" for choice in chunk.get("choices", [])]
    return "".join(parts)


def task_json(response: httpx.Response) -> Any:
    """What Open WebUI parses of a task's reply: the JSON object in the content."""
    assert response.status_code == 200, response.text
    content = response.json()["choices"][0]["message"]["content"]
    return json.loads(content[content.find("{") : content.rfind("}") + 1])


def refusals(base: str) -> dict[str, float]:
    """`rag_refusals_total` by reason."""
    metrics = httpx.get(f"{base}/metrics", headers=SCRAPER).text
    found: dict[str, float] = {}
    for line in metrics.splitlines():
        if line.startswith("rag_refusals_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            found[reason] = found.get(reason, 0) + float(line.rsplit(" ", 1)[1])
    return found


def test_a_question_with_28_tool_definitions_is_answered(webui_base: str) -> None:
    body = recorded("question")
    assert len(body["tools"]) == 28 and len(json.dumps(body).encode()) > 20_000
    answer = streamed_text(replay(webui_base, "question"))
    assert answer.startswith("（抽取式回答") and "**来源**" in answer
    assert not [fragment for fragment in FRAGMENTS if fragment in answer]


def test_a_file_reference_is_never_the_question_and_the_note_says_how_to_send_the_file(webui_base: str) -> None:
    answer = streamed_text(replay(webui_base, "file_reference"))
    assert not [fragment for fragment in FRAGMENTS if fragment in answer], answer
    assert "无法从上下文确认：年假有几天" in answer  # the question searched is what the user typed
    note = answer.split("> 说明：", 1)[1]
    assert "附件「annual-leave.txt」的内容没有发到本服务" in note and "绕过嵌入和检索" in note
    assert "/v1/embeddings" in note


def test_an_attached_files_content_is_quoted_first_without_unrelated_quotes(webui_base: str) -> None:
    for name, file in (("file_bypass", "annual-leave-2.txt"), ("file_long_bypass", "long.txt")):
        answer = streamed_text(replay(webui_base, name))
        assert not [fragment for fragment in FRAGMENTS if fragment in answer], answer
        body, sources = answer.split("**来源**", 1)
        quotes = [line for line in body.splitlines() if line.startswith("「")]
        assert quotes == ["「员工年假制度：员工每年享有带薪年假十天，入职满五年后每年十五天。年假须提前三天申请。」[1]"]
        assert sources.strip() == f"- [1] {file}（对话中提供）"
        assert "附件" not in answer  # the content came: no note about it


def test_a_file_open_webui_embedded_through_the_service_is_answered_from_its_chunks(
    webui_base: str, embedder: Embedder
) -> None:
    """With Open WebUI's embedding engine set to this service: its chunk batch and its query, as it
    sent them, get the embedder's vectors; then its RAG template with the chosen chunks is answered."""
    for name in ("embeddings_file", "embeddings_query"):  # without prefixes configured: passages, both
        body = recorded(name)
        sent = httpx.post(f"{webui_base}/v1/embeddings", headers=HEADERS, json=body, timeout=120)
        assert sent.status_code == 200, sent.text
        vectors = [item["embedding"] for item in sent.json()["data"]]
        assert np.allclose(vectors, embedder.embed_documents(body["input"]), atol=1e-5)
    answer = streamed_text(replay(webui_base, "file_embedded"))
    assert "「员工年假制度：员工每年享有带薪年假十天，入职满五年后每年十五天。年假须提前三天申请。」[1]" in answer
    assert answer.rstrip().endswith("- [1] annual-leave-3.txt（对话中提供）")


def test_without_the_truncate_setting_open_webuis_long_chunk_is_refused_as_openai_refuses(tight_base: str) -> None:
    """Open WebUI cannot send `truncate`: a chunk over e5's window is OpenAI's 400 unless the service cuts it."""
    sent = httpx.post(f"{tight_base}/v1/embeddings", headers=HEADERS, json=recorded("embeddings_file"), timeout=120)
    assert sent.status_code == 400, sent.text
    assert sent.json()["error"]["code"] == "context_length_exceeded" and sent.json()["error"]["param"] == "input"


def test_a_long_question_is_refused_in_chinese_with_what_to_do_and_counted(webui_base: str) -> None:
    before = refusals(webui_base).get("question_too_long", 0)
    refused = replay(webui_base, "long_question")
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
    assert error["message"].startswith("问题有 70509 字，超过上限 MAX_QUESTION_CHARS=2000：")
    assert "作为文件附上" in error["message"] and "绕过嵌入和检索" in error["message"]
    assert refusals(webui_base)["question_too_long"] == before + 1


def test_the_title_of_a_huge_conversation_comes_from_its_first_sentence(webui_base: str) -> None:
    title = task_json(replay(webui_base, "long_question_title"))["title"]
    assert 0 < len(title) <= 20 and "天下" in title


def test_the_background_tasks_answer_from_real_terms(webui_base: str) -> None:
    assert task_json(replay(webui_base, "title")) == {"title": "刘备关羽张飞地点"}
    tags = task_json(replay(webui_base, "tags"))["tags"]
    follow_ups = task_json(replay(webui_base, "follow_ups"))["follow_ups"]
    queries = task_json(replay(webui_base, "queries"))["queries"]
    assert queries == ["年假有几天？"]
    for text in [*tags, *follow_ups]:
        assert not [fragment for fragment in FRAGMENTS if fragment in text], text
    assert tags and follow_ups and all(item.endswith("？") for item in follow_ups)


def test_too_much_given_context_is_refused_in_chinese_and_counted(tight_base: str) -> None:
    refused = replay(tight_base, "file_long_bypass")
    assert refused.status_code == 400
    message = refused.json()["error"]["message"]
    assert message.startswith("随问题发来的资料（附件或网页）共 ") and "MAX_GIVEN_CHARS=10000" in message
    assert "只附上相关的部分" in message
    assert refusals(tight_base).get("context_too_long") == 1


def test_a_body_over_the_v1_limit_says_what_to_do_in_openais_shape_and_is_counted(tight_base: str) -> None:
    refused = replay(tight_base, "long_question")  # 238 KB: over 200,000 bytes here
    assert refused.status_code == 413
    error = refused.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "MAX_OPENAI_REQUEST_BYTES=200000 bytes: send a shorter question" in error["message"]
    assert "请缩短问题或少附些资料" in error["message"]
    metrics = httpx.get(f"{tight_base}/metrics", headers=SCRAPER).text
    assert 'rag_refusals_total{endpoint="/v1/chat/completions",reason="body_too_large"} 1.0' in metrics, metrics
