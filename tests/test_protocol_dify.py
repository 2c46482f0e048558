"""`POST /retrieval` checked against Dify's External Knowledge API, field by field, over real HTTP
and a real Elasticsearch: its request example, its response shape, its error codes, the
metadata conditions, and the score that `score_threshold` compares."""

import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from elasticsearch import Elasticsearch

from core.embeddings import Embedder, cosine_similarities
from tests.protocols import KEY, STRANGER_KEY, protocol_settings, service

AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def url(es_url: str, protocol_kb: str, embedder: Embedder) -> Iterator[str]:
    with service(protocol_settings(es_url, protocol_kb, None), embedder) as base:
        yield base


def retrieve(url: str, body: dict[str, Any], headers: dict[str, str] = AUTH) -> httpx.Response:
    return httpx.post(f"{url}/retrieval", json=body, headers=headers, timeout=60)


def ask(protocol_kb: str, query: str, top_k: int = 5, threshold: float = 0.0, **extra: Any) -> dict[str, Any]:
    return {
        "knowledge_id": protocol_kb,
        "query": query,
        "retrieval_setting": {"top_k": top_k, "score_threshold": threshold},
        **extra,
    }


def test_dify_request_example_gets_records_of_dify_shape(url: str, protocol_kb: str) -> None:
    # Dify's published example request, with our knowledge id and a question this base answers.
    body = {
        "knowledge_id": protocol_kb,
        "query": "诸葛亮七擒孟获",
        "retrieval_setting": {"top_k": 2, "score_threshold": 0.5},
    }
    response = retrieve(url, body)
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    payload = response.json()
    assert list(payload) == ["records"] and 1 <= len(payload["records"]) <= 2
    for record in payload["records"]:
        assert set(record) == {"content", "score", "title", "metadata"}
        assert isinstance(record["content"], str) and record["content"]
        assert isinstance(record["score"], float) and 0.5 <= record["score"] <= 1.0
        assert isinstance(record["title"], str) and record["title"]
        assert isinstance(record["metadata"], dict)
    top = payload["records"][0]
    assert "孟获" in top["content"] and top["metadata"]["chapter"] == 90 and top["metadata"]["source"] == "sanguo"
    assert top["metadata"]["label"] == "第90章 七擒孟获 · sanguo"


def test_metadata_is_an_object_with_pages_sections_and_the_documents_own(url: str, protocol_kb: str) -> None:
    manual = retrieve(url, ask(protocol_kb, "高血糖 胰岛素", 1)).json()["records"][0]
    assert manual["title"] == "糖尿病指南"
    assert (manual["metadata"]["page"], manual["metadata"]["section"]) == (3, "第三章 治疗 / 3.2 用药")
    assert "chapter" not in manual["metadata"]  # None is left out, never null
    record = retrieve(url, ask(protocol_kb, "赤壁之战 建安十三年", 1)).json()["records"][0]
    assert (record["metadata"]["category"], record["metadata"]["year"]) == ("战役", "208")


def test_score_is_the_query_chunk_cosine_whatever_else_is_returned(
    url: str, protocol_kb: str, es: Elasticsearch, embedder: Embedder
) -> None:
    query = "赤壁火攻"
    five = retrieve(url, ask(protocol_kb, query, 5)).json()["records"]
    one = retrieve(url, ask(protocol_kb, query, 1)).json()["records"]
    assert one[0]["content"] == five[0]["content"] and one[0]["score"] == five[0]["score"]
    filtered = retrieve(
        url,
        ask(
            protocol_kb,
            query,
            5,
            metadata_condition={"conditions": [{"name": "chapter", "comparison_operator": "=", "value": "49"}]},
        ),
    ).json()["records"]
    by_content = {r["content"]: r["score"] for r in five}
    assert filtered and by_content.get(filtered[0]["content"]) == filtered[0]["score"]
    stored = es.mget(index=protocol_kb, ids=[r["metadata"]["id"] for r in five], source=["embedding"])["docs"]
    vectors = {doc["_id"]: doc["_source"]["embedding"] for doc in stored}
    expected = cosine_similarities(
        np.asarray([vectors[r["metadata"]["id"]] for r in five]), embedder.embed_query(query)
    )
    assert [r["score"] for r in five] == pytest.approx([max(0.0, float(v)) for v in expected], abs=1e-5)


def test_score_threshold_drops_records_below_it(url: str, protocol_kb: str) -> None:
    records = retrieve(url, ask(protocol_kb, "诸葛亮", 5)).json()["records"]
    scores = sorted(r["score"] for r in records)
    cut = (scores[0] + scores[-1]) / 2
    kept = retrieve(url, ask(protocol_kb, "诸葛亮", 5, cut)).json()["records"]
    assert kept and all(r["score"] >= cut for r in kept)
    assert len(kept) == sum(score >= cut for score in scores)


def test_empty_result_is_an_empty_list(url: str, protocol_kb: str) -> None:
    assert retrieve(url, ask(protocol_kb, "诸葛亮", 5, 1.0)).json() == {"records": []}
    condition = {
        "logical_operator": "and",
        "conditions": [{"name": "source", "comparison_operator": "is", "value": "无此来源"}],
    }
    assert retrieve(url, ask(protocol_kb, "诸葛亮", 5, metadata_condition=condition)).json() == {"records": []}


def test_dify_error_codes(url: str, protocol_kb: str) -> None:
    body = ask(protocol_kb, "诸葛亮")
    for headers, code in (({}, 1001), ({"Authorization": KEY}, 1001), ({"Authorization": "Basic abc"}, 1001)):
        response = retrieve(url, body, headers)
        assert (response.status_code, response.json()["error_code"]) == (403, code), headers
        assert response.json()["error_msg"].startswith("Invalid Authorization header format")
    wrong = retrieve(url, body, {"Authorization": "Bearer wrong-key"})
    assert (wrong.status_code, wrong.json()) == (403, {"error_code": 1002, "error_msg": "Authorization failed"})
    missing = retrieve(url, ask("no-such-kb", "诸葛亮"))
    assert (
        missing.status_code == 404
        and missing.json()["error_code"] == 2001
        and set(missing.json()) == {"error_code", "error_msg"}
    )
    # A principal of another base: this knowledge_id is the same "does not exist", with nothing of it.
    hidden = retrieve(url, body, {"Authorization": f"Bearer {STRANGER_KEY}"})
    assert (hidden.status_code, hidden.json()["error_code"]) == (404, 2001) and "孟获" not in hidden.text


def test_bad_input_is_a_4xx_in_difys_shape(url: str, protocol_kb: str) -> None:
    no_setting = retrieve(url, {"knowledge_id": protocol_kb, "query": "诸葛亮"})
    assert no_setting.status_code == 422 and "retrieval_setting" in no_setting.json()["error_msg"]
    # JSON types as the schema says (the contract run found `score_threshold: false` taken as 0)
    for setting in ({"top_k": 1, "score_threshold": False}, {"top_k": True}, {"top_k": "3"}):
        wrong_type = retrieve(url, {"knowledge_id": protocol_kb, "query": "诸葛亮", "retrieval_setting": setting})
        assert wrong_type.status_code == 422 and set(wrong_type.json()) == {"error_code", "error_msg"}, setting
    unsupported = ask(
        protocol_kb,
        "诸葛亮",
        metadata_condition={"conditions": [{"name": "title", "comparison_operator": "is", "value": "x"}]},
    )
    response = retrieve(url, unsupported)
    assert response.status_code == 422 and response.json()["error_code"] == 422
    assert "'title' does not take 'is'" in response.json()["error_msg"]


def chapters(
    url: str, protocol_kb: str, *conditions: dict[str, Any], logical: str = "and", query: str = "诸葛亮"
) -> set[Any]:
    body = ask(protocol_kb, query, 10, metadata_condition={"logical_operator": logical, "conditions": list(conditions)})
    response = retrieve(url, body)
    assert response.status_code == 200, response.text
    return {r["metadata"].get("chapter") or r["metadata"]["doc_id"] for r in response.json()["records"]}


def test_metadata_conditions_filter_inside_the_search(url: str, protocol_kb: str) -> None:
    assert chapters(url, protocol_kb, {"name": "chapter", "comparison_operator": "≥", "value": "90"}) == {90, 104}
    assert chapters(
        url,
        protocol_kb,
        {"name": "chapter", "comparison_operator": "<", "value": 10},
        {"name": "chapter", "comparison_operator": ">", "value": 100},
        logical="or",
    ) == {5, 104}
    assert chapters(url, protocol_kb, {"name": ["chapter"], "comparison_operator": "in", "value": ["21", "38"]}) == {
        21,
        38,
    }
    assert chapters(url, protocol_kb, {"name": "category", "comparison_operator": "is", "value": "战役"}) == {
        "record-1"
    }
    assert chapters(url, protocol_kb, {"name": "date", "comparison_operator": "before", "value": "0209-01-01"}) == {
        "record-1"
    }
    assert chapters(url, protocol_kb, {"name": "page", "comparison_operator": "=", "value": 3}) == {"manual"}
    assert chapters(url, protocol_kb, {"name": "section", "comparison_operator": "contains", "value": "3.2"}) == {
        "manual"
    }
    assert chapters(url, protocol_kb, {"name": "source", "comparison_operator": "end with", "value": ".jsonl"}) == {
        "record-1"
    }
    assert chapters(url, protocol_kb, {"name": "title", "comparison_operator": "contains", "value": "指南"}) == {
        "manual"
    }
    assert 90 not in chapters(url, protocol_kb, {"name": "chapter", "comparison_operator": "≠", "value": 90})
    # k = 1 with the only allowed chunk ranked low without the filter: the filter is inside every list.
    only = retrieve(
        url,
        ask(
            protocol_kb,
            "诸葛亮七擒孟获",
            1,
            metadata_condition={"conditions": [{"name": "category", "comparison_operator": "not empty"}]},
        ),
    ).json()["records"]
    assert [r["metadata"]["doc_id"] for r in only] == ["record-1"]


def test_metadata_condition_null_is_no_condition(url: str, protocol_kb: str) -> None:
    assert retrieve(url, ask(protocol_kb, "诸葛亮", 3, metadata_condition=None)).json()["records"]


def test_dates_are_compared_as_dify_sends_them_unix_seconds_or_iso(url: str, protocol_kb: str) -> None:
    """Dify compares dates as Unix seconds: 1900000000 is 2030, not 1970 as milliseconds would be."""

    def indexed(operator: str, value: object) -> set[Any]:
        return chapters(url, protocol_kb, {"name": "indexed_at", "comparison_operator": operator, "value": value})

    every = chapters(url, protocol_kb, {"name": "chapter", "comparison_operator": "not empty"}) | {"manual", "record-1"}
    for past in (int(time.time()) - 86400 * 365, "946684800", "2000-01-01", "2000-01-01T08:00:00+08:00"):
        assert indexed("after", past) == every and indexed("before", past) == set(), past
    for future in (1900000000, "1900000000", "2030-03-17T17:46:40Z"):
        assert indexed("after", future) == set() and indexed("before", future) == every, future
    # A metadata date is text: a number is compared as its ISO date-time.
    assert chapters(url, protocol_kb, {"name": "date", "comparison_operator": "before", "value": -55000000000}) == {
        "record-1"
    }
    bad = retrieve(
        url,
        ask(
            protocol_kb,
            "诸葛亮",
            metadata_condition={
                "conditions": [{"name": "indexed_at", "comparison_operator": "after", "value": "next tuesday"}]
            },
        ),
    )
    assert bad.status_code == 422 and "Unix seconds or an ISO 8601 date" in bad.json()["error_msg"]


def test_the_body_size_limit_is_in_difys_shape(url: str, protocol_kb: str) -> None:
    response = retrieve(url, ask(protocol_kb, "孟获" * 40000))
    assert response.status_code == 413
    assert response.json() == {"error_code": 413, "error_msg": "request body larger than MAX_REQUEST_BYTES=65536 bytes"}
