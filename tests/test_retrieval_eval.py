"""The evaluation's own correctness: metrics, the bootstrap, splits, the fusion choice."""

import json
import math

import pytest

from bench.datasets import BENCH_DATA, Query, load_cmrc, load_medical, load_sanguo
from core.config import FusionMethod
from evaluation.metrics import choose, fused_ids, mean_metrics, paired_bootstrap, query_metrics, seeded_split
from retrieval.fusion import FusionParams, QueryWords, fuse, list_coverage
from retrieval.retriever import COVERAGE_KEY
from tests.conftest import SANGUO_PATH


def test_metrics_on_hand_computed_rankings() -> None:
    # First relevant at rank 3.
    m = query_metrics(["a", "b", "r1", "c", "d", "r2", "e"], {"r1", "r2"})
    assert (m["R@1"], m["R@5"], m["R@10"]) == (0.0, 1.0, 1.0)
    assert m["MRR@10"] == pytest.approx(1 / 3)
    # Only the first 10 count: a relevant chunk at rank 11 is a miss.
    # nDCG@10: gains at ranks 3 and 6 over the ideal ranks 1 and 2.
    assert m["nDCG@10"] == pytest.approx((1 / math.log2(4) + 1 / math.log2(7)) / (1 + 1 / math.log2(3)))
    miss = query_metrics([str(i) for i in range(10)] + ["r"], {"r"})
    assert miss == {"R@1": 0.0, "R@5": 0.0, "R@10": 0.0, "MRR@10": 0.0, "nDCG@10": 0.0}
    assert mean_metrics([m, miss])["MRR@10"] == pytest.approx(round(1 / 6, 4))


def test_paired_bootstrap_interval() -> None:
    mean, low, high = paired_bootstrap([1.0] * 50, [0.0] * 50)
    assert (mean, low, high) == (1.0, 1.0, 1.0)  # no spread: the interval is the point
    mean, low, high = paired_bootstrap([1.0, 0.0] * 50, [0.0, 1.0] * 50)
    assert mean == 0.0 and low < 0 < high  # a coin flip: level
    assert paired_bootstrap([1.0, 0.0] * 50, [0.0, 1.0] * 50) == (mean, low, high)  # seeded


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


def test_offline_fusion_is_the_services_fusion() -> None:
    lists = {
        "vector": [("a", 0.9), ("b", 0.8), ("c", 0.7)],
        "bm25": [("c", 9.0), ("a", 5.0)],
        "bigram": [("c", 3.0)],
    }
    config = {"method": "rrf", "k": 60, "lists": ("vector", "bm25"), "vector_weight": 2.0}
    expected = fuse(
        {"vector": lists["vector"], "bm25": lists["bm25"]}, FusionParams(FusionMethod.RRF, 60, {"vector": 2.0})
    )
    assert fused_ids(lists, config) == [hit.id for hit in expected] == ["a", "c", "b"]


def test_fusion_choice_never_picks_a_setting_below_a_single_list_on_dev() -> None:
    # Two questions; vector finds both at rank 1, bm25 finds neither. Fusions that let bm25's
    # junk outrank vector's hit lose R@1, so the choice must be one that keeps it.
    lists = {
        "q1": {
            "vector": [("r1", 0.9), ("x", 0.89)],
            "bm25": [("x", 20.0), ("y", 1.0)],
            "bigram": [("x", 9.0)],
            "standard": [("x", 5.0)],
        },
        "q2": {
            "vector": [("r2", 0.9), ("x", 0.5)],
            "bm25": [("z", 3.0)],
            "bigram": [("z", 3.0)],
            "standard": [("r2", 4.0)],
        },
    }
    questions = [Query("q1", "", {"r1"}, "dev"), Query("q2", "", {"r2"}, "dev")]
    config, rows = choose({"toy": (questions, lists)}, tolerance=0.0)
    chosen = next(row for row in rows if row["config"] == config)
    assert chosen["worst_margin"] >= 0
    assert chosen["mean_MRR@10"] == max(row["mean_MRR@10"] for row in rows if row["worst_margin"] >= 0)


def test_fusion_depth_is_the_shallowest_within_the_cost_tolerance() -> None:
    # The relevant chunk is 11th in every list: no single list has it in its top 10, a fusion of
    # lists cut at depth 10 never sees it, and every deeper fusion puts it first (it is the only
    # chunk all four lists share).
    def ranked(prefix: str) -> list[tuple[str, float]]:
        return [(f"{prefix}{i}", 20.0 - i) for i in range(10)] + [("r", 9.5)]

    lists = {"q": {name: ranked(name) for name in ("vector", "bm25", "bigram", "standard")}}
    questions = [Query("q", "", {"r"}, "dev")]
    exact, rows = choose({"toy": (questions, lists)}, tolerance=0.0, cost_tolerance=0.0)
    assert exact["depth"] > 10
    assert next(row for row in rows if row["config"] == exact)["mean_MRR@10"] == 1.0
    cheap, _ = choose({"toy": (questions, lists)}, tolerance=0.0, cost_tolerance=1.0)
    assert cheap["depth"] == 10


def test_cmrc_split_keeps_a_paragraph_whole_and_is_fixed() -> None:
    cmrc = load_cmrc()
    assert len(cmrc.documents) == 1104 and len(cmrc.queries) + len(cmrc.skipped) == 4221
    assert sorted(cmrc.skipped) == ["TRIAL_20_QUERY_0", "TRIAL_776_QUERY_4"]  # blank in the source
    by_paragraph: dict[str, set[str]] = {}
    for query in cmrc.queries:
        by_paragraph.setdefault(query.id.split("_QUERY_")[0], set()).add(query.split)
    assert all(len(splits) == 1 for splits in by_paragraph.values())
    dev = sum(query.split == "dev" for query in cmrc.queries)
    assert 0.4 < dev / len(cmrc.queries) < 0.6
    assert seeded_split("DEV_0") == seeded_split("DEV_0") in ("dev", "test")


def test_medical_questions_have_a_split_and_one_passage() -> None:
    dataset = load_medical()
    assert len(dataset.documents) == len(dataset.chunks)
    assert {query.split for query in dataset.queries} == {"dev", "test"}
    assert all(len(query.relevant) == 1 for query in dataset.queries)


def test_a_keyword_list_matching_only_incidental_words_steps_back_for_the_vector_list() -> None:
    # 「突然叫不醒，能灌糖水吗」: the keyword lists' top hit shares only the common 突然 with the question,
    # the vector list's top hit holds the rare 糖水 and 叫不醒 ... as a person asked them.
    words = QueryWords({"突然": 8.3, "叫不醒": 16.0, "灌": 12.0, "糖水": 14.4})
    texts = {"high": "血糖突然升高时多喝水", "low": "叫不醒时切勿喂食物或糖水"}
    keyword = [("high", 5.0), ("low", 4.0), ("x", 1.0)]
    lists = {"vector": [("low", 0.93), ("high", 0.90), ("x", 0.80)], "bm25": keyword, "bigram": keyword}
    coverage = {name: list_coverage(lists[name], texts, words, top=1) for name in ("bm25", "bigram")}
    assert coverage["bm25"] == pytest.approx(8.3 / (8.3 + 16.0 + 12.0 + 14.4))  # under COVERAGE_FULL: weighed down
    plain = FusionParams(FusionMethod.ZSCORE, 60, {})
    weighted = FusionParams(FusionMethod.ZSCORE, 60, {}, coverage=1.0)
    assert fuse(lists, plain, top=1, coverage=coverage)[0].id == "high"  # coverage off: outvoted
    assert fuse(lists, weighted, top=1, coverage=coverage)[0].id == "low"
    # A keyword list that matched what the question is about keeps its full weight.
    assert weighted.weight("bm25", {"bm25": 1.0}) == plain.weight("bm25", {}) == 1.0
    assert QueryWords({}).coverage("任何文字") == 1.0 and list_coverage([], texts, words) == 0.0


def test_offline_fusion_weighs_coverage_as_the_service_does() -> None:
    lists = {
        "vector": [("a", 0.9), ("b", 0.8), ("c", 0.7)],
        "bm25": [("b", 9.0), ("c", 1.0), ("a", 0.5)],
        COVERAGE_KEY: [("bm25", 0.25)],
    }
    config = {"method": "zscore", "k": 60, "lists": ("vector", "bm25"), "vector_weight": 1.0, "coverage": 2.0}
    expected = fuse(
        {"vector": lists["vector"], "bm25": lists["bm25"]},
        FusionParams(FusionMethod.ZSCORE, 60, {"vector": 1.0}, 2.0),
        top=10,
        coverage={"bm25": 0.25},
    )
    assert fused_ids(lists, config) == [hit.id for hit in expected]
    assert fused_ids(lists, config | {"coverage": 0.0})[0] == "b" != fused_ids(lists, config)[0]
    with pytest.raises(ValueError, match="coverage"):
        FusionParams(FusionMethod.ZSCORE, 60, {}, coverage=-1.0)
