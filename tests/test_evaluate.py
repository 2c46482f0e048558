"""A knowledge base's own evaluation: question sets and their bad lines, the fixed split, the report's
figures against hand-computed ones, the fusion the rule picks, and the fusion stored with the base."""

import hashlib
import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from bench.datasets import load_medical
from core.access import Scope
from core.config import Settings
from core.documents import Document
from core.embeddings import Embedder
from core.kbs import FusionSetting, read_kb, write_fusion
from core.reader import Reader
from core.schema import LIST_MODES
from evaluation.metrics import choose, config_of, fused_ids, seeded_split
from evaluation.questions import Corpus, base_corpus, parse_questions, resolve
from evaluation.run import chosen_setting, report_of, run_evaluation
from retrieval.retriever import Retriever, build_retriever
from tests.conftest import PARAMS, REPO_ROOT, knowledge_base, subprocess_env

FIXTURE = Path(__file__).resolve().parent / "data"
MEDICAL = load_medical(FIXTURE / "medical_fixture_passages.jsonl", FIXTURE / "medical_fixture_queries.jsonl")
# A question no keyword list can match (English words, Chinese passages) but the multilingual vector can.
ENGLISH = "What should a person with high blood sugar eat?"


def question_lines() -> list[str]:
    """The fixture's questions with alternating fixed splits, the English one in test, and five bad lines."""
    lines = [
        json.dumps({"id": q.id, "question": q.text, "doc_id": sorted(q.relevant_docs), "split": ("dev", "test")[i % 2]})
        for i, q in enumerate(FIXTURE_QUESTIONS)
    ]
    lines.append(json.dumps({"id": "en", "question": ENGLISH, "doc_id": "hyperglycemia_diet", "split": "test"}))
    lines.append(json.dumps({"id": "ev", "question": "低血糖怎么办", "evidence": "立即吃15克葡萄糖", "split": "dev"}))
    return [
        *lines,
        "{not json",  # bad
        json.dumps({"question": "没有证据的问题"}),  # bad: no evidence
        json.dumps({"question": "未知的块", "chunk_ids": ["no-such-chunk"]}),  # bad: unknown chunk id
        json.dumps({"question": "找不到的证据", "evidence": "这句话不在任何一段里"}),  # bad: evidence nowhere
        json.dumps({"id": "en", "question": "重复", "doc_id": "hyperglycemia_diet"}),  # bad: repeated id
    ]


class _FixtureQuestion:
    def __init__(self, id_: str, text: str, docs: set[str]) -> None:
        self.id, self.text, self.relevant_docs = id_, text, docs


FIXTURE_QUESTIONS = [
    _FixtureQuestion(item["id"], item["question"], set(item["relevant"]))
    for item in map(json.loads, (FIXTURE / "medical_fixture_queries.jsonl").read_text(encoding="utf-8").splitlines())
]


@pytest.fixture(scope="module")
def medical_kb(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    with knowledge_base(es, embedder, MEDICAL.documents, "test-eval") as alias:
        yield alias


@pytest.fixture(scope="module")
def retriever(es: Elasticsearch, embedder: Embedder) -> Retriever:
    return build_retriever(Settings(_env_file=None), es, embedder)


# --- question sets --------------------------------------------------------------------------


def test_every_bad_line_is_reported_and_the_rest_are_kept() -> None:
    corpus = Corpus({"c1": ("d1", "低血糖时立即吃15克葡萄糖。"), "c2": ("d2", "高血压患者少吃盐。")})
    lines = [
        json.dumps({"question": "低血糖怎么办", "evidence": ["15克葡萄糖"]}),
        "",  # blank: skipped, not bad
        "{not json",
        json.dumps(["a list"]),
        json.dumps({"question": "  ", "evidence": "x"}),
        json.dumps({"question": "没有证据"}),
        json.dumps({"question": "q", "chunk_ids": ["c9"]}),
        json.dumps({"question": "q", "doc_id": "d9"}),
        json.dumps({"question": "q", "evidence": "不在这里"}),
        json.dumps({"question": "q", "evidence": "少吃盐", "split": "train"}),
        json.dumps({"id": 7, "question": "高血压吃什么", "doc_id": "d2", "generated": True}),
        json.dumps({"id": 7, "question": "重复的 id", "chunk_ids": ["c1"]}),
    ]
    parsed = parse_questions(lines)
    ready, bad = resolve(parsed, corpus)
    assert parsed.lines == 11
    assert [(q.line, q.id, set(q.relevant), q.generated) for q in ready] == [
        (1, "line-1", {"c1"}, False),
        (11, "7", {"c2"}, True),
    ]
    errors = {b.line: b.error for b in bad}
    assert sorted(errors) == [3, 4, 5, 6, 7, 8, 9, 10, 12]
    assert errors[3].startswith("not JSON") and "JSON object" in errors[4] and "`question`" in errors[5]
    assert errors[6].startswith("no evidence") and "unknown chunk id 'c9'" in errors[7]
    assert "unknown document 'd9'" in errors[8] and "in no chunk" in errors[9] and "split" in errors[10]
    assert "repeats" in errors[12]


def test_the_split_is_fixed_by_a_seed() -> None:
    # The split of a question never changes: not between runs, machines or edits of other lines.
    keys = [f"q{i}" for i in range(40)]
    digest = hashlib.sha256("".join(seeded_split(key)[0] for key in keys).encode()).hexdigest()[:16]
    assert digest == "e39fef3d4b3907e0"
    lines = [json.dumps({"question": f"问题{i}", "evidence": "证据"}) for i in range(30)]
    first = [e.split for e in parse_questions(lines).entries]
    again = [e.split for e in parse_questions([json.dumps({"question": "新问题", "evidence": "证据"}), *lines]).entries]
    assert again[1:] == first and 8 < first.count("dev") < 22


# --- the report from known lists ------------------------------------------------------------


def toy_lists(vector: list[str], bm25: list[str]) -> dict[str, list[tuple[str, float]]]:
    """The vector list and one ranking shared by the three keyword lists, scored 10, 9, 8 …"""
    ranked = {"vector": vector, "bm25": bm25, "bigram": bm25, "standard": bm25}
    return {name: [(id_, 10.0 - i) for i, id_ in enumerate(ids)] for name, ids in ranked.items()}


# Four test questions and two dev questions; the relevant chunk of each is "r<n>".
TOY_FOUND = {
    "t1": toy_lists(["r1", "x"], ["r1", "y"]),  # both lists: rank 1
    "t2": toy_lists(["x", "y", "r2"], []),  # vector rank 3; the keyword lists return nothing
    "t3": toy_lists(["x"], ["y", "r3"]),  # only the keyword lists find it, at rank 2
    "t4": toy_lists(["x"], ["y"]),  # nobody finds it
    "d1": toy_lists(["r5", "x"], ["x", "r5"]),
    "d2": toy_lists(["x", "r6"], ["r6"]),
}


def test_report_figures_equal_hand_computed_ones() -> None:
    found = TOY_FOUND
    lines = [
        json.dumps({"id": id_, "question": id_, "chunk_ids": [f"r{i}"], "split": "dev" if id_[0] == "d" else "test"})
        for i, id_ in enumerate(found, start=1)
    ]
    parsed = parse_questions(lines)
    corpus = Corpus({f"r{i}": ("d", "") for i in range(1, 7)} | {"x": ("d", ""), "y": ("d", "")})
    ready, bad = resolve(parsed, corpus)
    report = report_of("toy", parsed, ready, bad, found, config_of(PARAMS))

    assert report["questions"] | {"bad_lines": None} == {
        "total": 6,
        "usable": 6,
        "dev": 2,
        "test": 4,
        "generated": 0,
        "bad_lines": None,
    }
    # vector: ranks 1, 3, -, -; the keyword lists: 1, -, 2, -.
    assert report["test"]["vector"] == {
        "R@1": 0.25,
        "R@5": 0.5,
        "R@10": 0.5,
        "MRR@10": round((1 + 1 / 3) / 4, 4),
        "nDCG@10": round((1 + 1 / math.log2(4)) / 4, 4),
    }
    assert report["test"]["bm25"] == {
        "R@1": 0.25,
        "R@5": 0.5,
        "R@10": 0.5,
        "MRR@10": round((1 + 1 / 2) / 4, 4),
        "nDCG@10": round((1 + 1 / math.log2(3)) / 4, 4),
    }

    dev = [q for q in ready if q.split == "dev"]
    chosen, _rows = choose({"toy": (dev, {q.id: found[q.id] for q in dev})}, 0.0, 0.002)
    assert {k: report["chosen"][k] for k in chosen} == chosen  # the rule's pick
    hybrid_ranks = {
        q.id: next((r for r, id_ in enumerate(fused_ids(found[q.id], chosen), 1) if id_ in q.relevant), None)
        for q in ready
        if q.split == "test"
    }
    assert hybrid_ranks["t1"] == 1 and hybrid_ranks["t4"] is None
    assert report["test"]["hybrid"]["R@1"] == sum(r == 1 for r in hybrid_ranks.values()) / 4
    # Misses: every test question hybrid does not rank first, complete misses first, with each list's rank.
    assert report["misses"][0]["id"] == "t4"
    by_id = {m["id"]: m for m in report["misses"]}
    assert by_id["t4"]["ranks"] == {"vector": None, "bm25": None, "bigram": None, "standard": None, "hybrid": None}
    if "t2" in by_id:
        assert by_id["t2"]["found_by"] == ["vector"] and by_id["t2"]["ranks"]["bm25"] is None
    assert by_id.get("t3", {"found_by": ["bm25", "bigram", "standard"]})["found_by"] == ["bm25", "bigram", "standard"]
    # Intervals: hybrid minus each list, per metric, with `diff` and `interval`.
    assert set(report["intervals"]) == {f"hybrid-{m}" for m in LIST_MODES}
    low, high = report["intervals"]["hybrid-vector"]["R@1"]["interval"]
    assert low <= report["intervals"]["hybrid-vector"]["R@1"]["diff"] <= high
    assert report["ranks"]["vector"] == {"1": 1, "2-3": 1, "4-5": 0, "6-10": 0, "11-50": 0, "none": 2}


# --- on a real base -------------------------------------------------------------------------


def _first(ranked: list[str], relevant: frozenset[str]) -> int | None:
    return next((rank for rank, id_ in enumerate(ranked[:10], 1) if id_ in relevant), None)


def test_evaluation_of_a_bundled_base(es: Elasticsearch, retriever: Retriever, medical_kb: str) -> None:
    lines = question_lines()
    steps: list[tuple[int, int]] = []
    report = run_evaluation(
        retriever, Scope.whole(medical_kb), parse_questions(lines), lambda done, total: steps.append((done, total))
    )
    good = len(FIXTURE_QUESTIONS) + 2
    assert [b["line"] for b in report["questions"]["bad_lines"]] == list(range(good + 1, good + 6))
    assert report["questions"]["usable"] == good and steps[-1] == (good, good) and len(steps) == good

    # Hand-computed: every test question's lists fetched again, R@1 and MRR@10 by hand.
    ready, _bad = resolve(parse_questions(lines), base_corpus(Reader(es, Scope.whole(medical_kb))))
    test = [q for q in ready if q.split == "test"]
    assert report["questions"]["test"] == len(test) == sum(i % 2 for i in range(len(FIXTURE_QUESTIONS))) + 1
    fetched = {q.id: retriever.ranked_lists(Scope.whole(medical_kb), q.text, LIST_MODES, 50) for q in test}
    for mode in LIST_MODES:
        firsts = [_first([id_ for id_, _ in fetched[q.id][mode]], q.relevant) for q in test]
        assert report["test"][mode]["R@1"] == round(sum(f == 1 for f in firsts) / len(test), 4), mode
        assert report["test"][mode]["MRR@10"] == round(sum(1 / f for f in firsts if f) / len(test), 4), mode
    # One list finds what the others miss: no keyword list can match the English question.
    english = fetched["en"]
    assert english["bm25"] == english["bigram"] == english["standard"] == []
    assert _first([id_ for id_, _ in english["vector"]], next(q for q in test if q.id == "en").relevant)
    chosen = {k: v for k, v in report["chosen"].items() if k != "label"}
    firsts = [_first(fused_ids(fetched[q.id], chosen), q.relevant) for q in test]
    assert report["test"]["hybrid"]["R@1"] == round(sum(f == 1 for f in firsts) / len(test), 4)
    assert {m["id"] for m in report["misses"]} == {q.id for q, f in zip(test, firsts, strict=True) if f != 1}

    # The rule's pick over the dev lists.
    dev = [q for q in ready if q.split == "dev"]
    dev_lists = {q.id: retriever.ranked_lists(Scope.whole(medical_kb), q.text, LIST_MODES, 50) for q in dev}
    assert chosen == {k: v for k, v in choose({medical_kb: (dev, dev_lists)}, 0.0, 0.002)[0].items()}


def test_the_command_reports_and_a_stored_fusion_is_used_by_search_of_that_base_only(
    es: Elasticsearch, es_url: str, embedder: Embedder, medical_kb: str, tmp_path: Path
) -> None:
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(question_lines()) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "evaluation",
            "--kb",
            medical_kb,
            "--questions",
            questions,
            "--out",
            out,
            "--dry-run",
        ],
        cwd=tmp_path,
        env=subprocess_env(ES_URL=es_url, PYTHONPATH=str(REPO_ROOT)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "not stored (--dry-run)" in done.stderr and "# Retrieval evaluation" in done.stdout
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / "report.md").exists()
    # The contract: figures by mode and metric, intervals named `interval`.
    metrics = {"R@1", "R@5", "R@10", "MRR@10", "nDCG@10"}
    assert set(report["test"]) == {"vector", "bm25", "bigram", "standard", "hybrid"}
    assert all(set(figures) == metrics for figures in report["test"].values())
    assert all(len(d["interval"]) == 2 for pair in report["intervals"].values() for d in pair.values())
    assert len(report["questions"]["bad_lines"]) == 5
    settings = Settings(_env_file=None)
    assert read_kb(es, medical_kb, settings).fusion is None  # --dry-run stored nothing

    other_docs = [Document(doc_id="note", text="高血压患者每天食盐不超过5克。", source="note")]
    with knowledge_base(es, embedder, other_docs, "test-eval-other") as other:
        write_fusion(es, medical_kb, chosen_setting(report, note="test"))
        stored = read_kb(es, medical_kb, settings).fusion
        assert stored is not None and stored.origin == "evaluation"
        assert (str(stored.method), stored.depth) == (report["chosen"]["method"], report["chosen"]["depth"])
        retriever = Retriever(es, embedder, build_retriever(settings, es, embedder).tokenizer, PARAMS)
        used = retriever.search(Scope.whole(medical_kb), "高血糖吃什么", "hybrid", 3).fusion
        assert used is not None and used.origin == "evaluation" and used.method == stored.method
        assert used.depth == stored.depth and used.weights == stored.weights
        untouched = retriever.search(Scope.whole(other), "高血压", "hybrid", 3).fusion
        assert untouched is not None and untouched.origin == "default" and untouched.method == PARAMS.fusion
        write_fusion(es, medical_kb, FusionSetting(method=PARAMS.fusion, depth=30))  # pinned by a person
        retriever.forget(medical_kb)
        pinned = retriever.search(Scope.whole(medical_kb), "高血糖吃什么", "hybrid", 3).fusion
        assert pinned is not None and (pinned.origin, pinned.depth) == ("pinned", 30)
        write_fusion(es, medical_kb, None)
        retriever.forget(medical_kb)
        assert retriever.search(Scope.whole(medical_kb), "高血糖吃什么", "hybrid", 3).fusion.origin == "default"  # type: ignore[union-attr]


def test_the_old_entry_point_says_where_it_went_and_runs_it(tmp_path: Path) -> None:
    """`python -m retrieval.evaluate` (users' scripts) runs `python -m evaluation` with the same arguments."""
    done = subprocess.run(
        [sys.executable, "-m", "retrieval.evaluate", "--help"],
        cwd=tmp_path,
        env=subprocess_env(PYTHONPATH=str(REPO_ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "moved to python -m evaluation" in done.stderr and "--questions" in done.stdout
