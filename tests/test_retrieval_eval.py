"""The evaluation's own correctness: metrics on hand-computed rankings, and the question sets."""

import json
import math

import pytest

from bench.datasets import BENCH_DATA, load_cmrc, load_medical, load_sanguo
from bench.retrieval_eval import fuse, mean_metrics, query_metrics
from service.retrieval import rrf
from tests.conftest import SANGUO_PATH


def test_metrics_on_hand_computed_rankings() -> None:
    # First relevant at rank 3; a second relevant chunk at rank 6; two relevant in all.
    m = query_metrics(["a", "b", "r1", "c", "d", "r2", "e"], {"r1", "r2"})
    assert (m["R@1"], m["R@5"], m["R@10"]) == (0.0, 1.0, 1.0)
    assert m["MRR@10"] == pytest.approx(1 / 3)
    assert m["nDCG@10"] == pytest.approx((1 / math.log2(4) + 1 / math.log2(7)) / (1 + 1 / math.log2(3)))
    # Only the first 10 count: a relevant chunk at rank 11 is a miss.
    miss = query_metrics([str(i) for i in range(10)] + ["r"], {"r"})
    assert miss == {"R@1": 0.0, "R@5": 0.0, "R@10": 0.0, "MRR@10": 0.0, "nDCG@10": 0.0}
    assert query_metrics(["r"], {"r"})["nDCG@10"] == 1.0
    assert mean_metrics([m, miss])["MRR@10"] == pytest.approx(round(1 / 6, 4))


def test_offline_fusion_is_the_services_rrf() -> None:
    ranked = {"vector": [["a", "b", "c"]], "bm25": [["c", "a"]], "bigram": [["c"]]}
    config = {"lists": ("vector", "bm25"), "rrf_k": 60, "vector_weight": 2.0, "depth": 2}
    expected = [doc for doc, _ in rrf({"vector": ["a", "b"], "bm25": ["c", "a"]}, 60, {"vector": 2.0})]
    assert fuse(ranked, config, 0) == expected == ["a", "b", "c"]


def test_sanguo_questions_have_evidence_in_the_book_and_in_chunks() -> None:
    book = SANGUO_PATH.read_text(encoding="utf-8")
    questions = [
        json.loads(line) for line in (BENCH_DATA / "sanguo_questions.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert len(questions) >= 30 and len({q["id"] for q in questions}) == len(questions)
    for q in questions:
        assert q["evidence"] in book, q
        assert q["evidence"] not in q["question"], f"{q['id']} gives its evidence away"
    dataset = load_sanguo(500, 50)
    for query in dataset.queries:
        assert 1 <= len(query.relevant) <= 2  # evidence strings are short: one chunk, two if it sits in an overlap


def test_cmrc_subset_is_deterministic_and_self_relevant() -> None:
    subset = load_cmrc(100)
    assert [d.doc_id for d in subset.documents] == [d.doc_id for d in load_cmrc(100).documents]
    # Every 12th of the 1,104 paragraphs (ceil(1104 / 100) = 12): 92, one chunk each.
    assert len(subset.documents) == 92 == len(subset.chunks) and subset.name == "cmrc92"
    for query in subset.queries:
        assert len(query.relevant) == 1
        doc_id = query.id.split("_QUERY_")[0]
        paragraph = next(d.text for d in subset.documents if d.doc_id == doc_id)
        assert "".join(subset.chunks[next(iter(query.relevant))].split()) == "".join(paragraph.split())


def test_medical_queries_point_at_one_passage() -> None:
    dataset = load_medical()
    assert len(dataset.documents) == len(dataset.chunks)
    assert all(len(query.relevant) == 1 for query in dataset.queries)
