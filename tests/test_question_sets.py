"""The hand-written evaluation sets are well formed: evidence really is in the book, ids are unique,
the dev/test split is stored and frozen, and each set is as large as the evaluation needs."""

import hashlib
import re
from collections import Counter
from typing import Any

import pytest

from bench.datasets import BENCH_DATA, CMRC_SMALL, MODERN, load_cmrc, modern_documents, read_jsonl
from retrieval.extractive import split_question
from tests.conftest import SANGUO_PATH

SANGUO_FROZEN = 207  # sg01..sg207 were split when the set was written; their split never changes
MEDICAL_TEST_PAIRS = {  # whole term pairs are test; the split of these pairs never changes
    "blood_pressure",
    "diabetes_type",
    "heart_rate",
    "tumor",
    "heart_failure",
    "anemia",
    "thyroid_nodule",
    "peptic_ulcer",
    "stroke",
    "hemorrhoids",
}
SANGUO_SPLIT_DIGEST = "6925092083f8cc3ac3dd06eca4e4cc5be103eb8c4f7d79568cfe5362eda26141"


def chapters(book: str) -> dict[int, str]:
    """Chapter number -> its text; the book heads each chapter `第N章 …` on its own line."""
    heads = [(m.start(), int(m.group(1))) for m in re.finditer(r"^第(\d+)章", book, re.MULTILINE)]
    ends = [start for start, _ in heads[1:]] + [len(book)]
    return {number: book[start:end] for (start, number), end in zip(heads, ends, strict=True)}


def split_digest(rows: list[dict[str, Any]], prefix: str, frozen: int) -> str:
    pairs = sorted(f"{r['id']}:{r['split']}" for r in rows if int(r["id"].removeprefix(prefix)) <= frozen)
    return hashlib.sha256("\n".join(pairs).encode()).hexdigest()


SANGUO = read_jsonl(BENCH_DATA / "sanguo_questions.jsonl")


def test_sanguo_evidence_is_verbatim_once_in_its_chapter() -> None:
    book = SANGUO_PATH.read_text(encoding="utf-8")
    by_chapter = chapters(book)
    assert sorted(by_chapter) == list(range(1, 121))
    for q in SANGUO:
        evidence = q["evidence"]
        assert 6 <= len(evidence) <= 40, q
        assert book.count(evidence) == 1, f"{q['id']}: evidence occurs {book.count(evidence)} times"
        assert evidence in by_chapter[q["chapter"]], f"{q['id']}: evidence is not in chapter {q['chapter']}"
        assert evidence not in q["question"], f"{q['id']} gives its evidence away"
        assert q["question"].strip() and q["answer"].strip(), q


def test_sanguo_ids_styles_splits_and_counts() -> None:
    assert len({q["id"] for q in SANGUO}) == len(SANGUO) >= 150
    assert {q["style"] for q in SANGUO} == {"literal", "paraphrase"}
    assert {q["split"] for q in SANGUO} == {"dev", "test"}
    counts = Counter((q["split"], q["style"]) for q in SANGUO)
    assert sum(n for (_, style), n in counts.items() if style == "paraphrase") >= 0.4 * len(SANGUO)
    assert counts["test", "literal"] + counts["test", "paraphrase"] >= 60
    assert all(counts[split, style] >= 30 for split in ("dev", "test") for style in ("literal", "paraphrase"))
    assert {q["chapter"] for q in SANGUO} == set(range(1, 121))  # the whole book, not only its start


def test_sanguo_split_is_frozen() -> None:
    assert split_digest(SANGUO, "sg", SANGUO_FROZEN) == SANGUO_SPLIT_DIGEST


@pytest.mark.parametrize("split", ["dev", "test"])
def test_sanguo_each_split_spans_the_book(split: str) -> None:
    chapters_of_split = {q["chapter"] for q in SANGUO if q["split"] == split}
    for start in range(1, 121, 20):  # every sixth of the book has questions in both parts
        assert chapters_of_split & set(range(start, start + 20)), (split, start)


PASSAGES = read_jsonl(BENCH_DATA / "medical_passages.jsonl")
MEDICAL = read_jsonl(BENCH_DATA / "medical_queries.jsonl")


def bigrams(text: str) -> set[str]:
    return {text[i : i + 2] for i in range(len(text) - 1)}


def test_medical_passages_come_in_look_alike_pairs() -> None:
    by_pair: dict[str, list[dict[str, Any]]] = {}
    for passage in PASSAGES:
        assert 80 <= len(passage["text"]) <= 250, passage["id"]
        assert passage["term"] in passage["title"] and passage["term"] in passage["text"], passage["id"]
        by_pair.setdefault(passage["pair"], []).append(passage)
    assert len({p["id"] for p in PASSAGES}) == len(PASSAGES)
    assert len(by_pair) >= 15 and len(PASSAGES) >= 80  # >= 40 passage pairs
    for pair, passages in by_pair.items():
        terms = sorted({p["term"] for p in passages})
        assert len(terms) == 2, pair
        first, second = ([p for p in passages if p["term"] == term] for term in terms)
        assert len(first) == len(second) >= 2, pair
        titles = {p["title"].replace(terms[0], "·") for p in first}
        # Each passage has its twin: the same title with the other term, and a shared wording.
        for twin in second:
            title = twin["title"].replace(terms[1], "·")
            assert title in titles, (pair, twin["title"])
            mate = next(p for p in first if p["title"].replace(terms[0], "·") == title)
            a, b = bigrams(mate["text"]), bigrams(twin["text"])
            assert len(a & b) / len(a | b) >= 0.07, (mate["id"], twin["id"])


def test_medical_queries_ids_relevance_and_split_by_term_pair() -> None:
    passages = {p["id"]: p for p in PASSAGES}
    assert len({q["id"] for q in MEDICAL}) == len(MEDICAL) >= 120
    split_of_pair: dict[str, set[str]] = {}
    for q in MEDICAL:
        assert q["style"] in {"plain", "colloquial"} and q["split"] in {"dev", "test"}, q
        assert len(q["relevant"]) == 1 and all(passages[r]["pair"] == q["pair"] for r in q["relevant"]), q
        split_of_pair.setdefault(q["pair"], set()).add(q["split"])
    assert all(len(splits) == 1 for splits in split_of_pair.values())  # a term pair is wholly dev or wholly test
    assert set(split_of_pair) == {p["pair"] for p in PASSAGES}
    assert set(split_of_pair) >= MEDICAL_TEST_PAIRS
    assert all(split_of_pair[pair] == {"test" if pair in MEDICAL_TEST_PAIRS else "dev"} for pair in split_of_pair)
    counts = Counter((q["split"], q["style"]) for q in MEDICAL)
    assert counts["test", "plain"] + counts["test", "colloquial"] >= 60
    assert all(counts[split, "colloquial"] > counts[split, "plain"] > 0 for split in ("dev", "test"))


UNANSWERABLE = read_jsonl(BENCH_DATA / "sanguo_unanswerable.jsonl")


def test_unanswerable_questions_ask_for_what_the_book_lacks() -> None:
    book = SANGUO_PATH.read_text(encoding="utf-8")
    assert len({q["id"] for q in UNANSWERABLE}) == len(UNANSWERABLE)
    for q in UNANSWERABLE:
        assert q["kind"] in {"unanswerable", "compound"}, q
        assert (q.get("trap") in {"modern", "plausible", "false_premise", "out_of_domain"}) == (
            q["kind"] == "unanswerable"
        )
        assert q["split"] == ("test" if int(q["id"][2:]) % 2 == 0 else "dev"), q  # fixed: even numbers are test
        # The word the question hinges on (血型, 手机, 孙悟空, 文学奖, …) occurs nowhere in the book.
        assert q["absent"] in q["question"] and q["absent"] not in book, q
    counts = Counter((q["kind"], q["split"]) for q in UNANSWERABLE)
    assert counts["unanswerable", "dev"] >= 30 and counts["unanswerable", "test"] >= 30
    assert counts["compound", "dev"] >= 15 and counts["compound", "test"] >= 15
    traps = Counter((q["trap"], q["split"]) for q in UNANSWERABLE if q["kind"] == "unanswerable")
    for trap in ("modern", "plausible", "false_premise", "out_of_domain"):
        assert traps[trap, "dev"] >= 6 and traps[trap, "test"] >= 6, trap


def test_a_false_premise_names_the_passage_that_contradicts_it() -> None:
    """ "关羽在麦城打败吕蒙之后…": the book says otherwise, in one verbatim place the answer should quote."""
    book = SANGUO_PATH.read_text(encoding="utf-8")
    premises = [q for q in UNANSWERABLE if q.get("trap") == "false_premise"]
    assert len(premises) >= 12
    for q in premises:
        assert book.count(q["contradicted_by"]) == 1, q
        assert q["contradicted_by"] not in q["question"], q
    assert all(("contradicted_by" in q) == (q.get("trap") == "false_premise") for q in UNANSWERABLE)


def test_compound_questions_have_an_answerable_first_part() -> None:
    book = SANGUO_PATH.read_text(encoding="utf-8")
    by_chapter = chapters(book)
    for q in (q for q in UNANSWERABLE if q["kind"] == "compound"):
        assert q["question"].startswith(q["answerable"]) and q["question"].endswith(q["missing"]), q
        assert q["absent"] in q["missing"], q
        assert book.count(q["evidence"]) == 1 and q["evidence"] in by_chapter[q["chapter"]], q


def test_distributive_questions_have_one_verbatim_evidence_per_subject() -> None:
    """Each question splits into as many parts as it names subjects (`retrieval.extractive.distribute`),
    and each part's evidence is in the book: the set measures distribution, not the splitter."""
    book = SANGUO_PATH.read_text(encoding="utf-8")
    rows = read_jsonl(BENCH_DATA / "sanguo_distributive.jsonl")
    assert len({q["id"] for q in rows}) == len(rows)
    assert Counter(q["split"] for q in rows) == {"dev": 12, "test": 12}
    for q in rows:
        assert q["kind"] == "distributive", q
        assert len(split_question(q["question"])) == len(q["evidence_per_part"]) >= 2, q
        assert all(evidence in book for evidence in q["evidence_per_part"]), q


def test_handbook_questions_are_answered_once_or_hinge_on_what_it_lacks() -> None:
    """The modern made-up corpus (bench/extractive_eval.py --set handbook): each evidence is verbatim
    once in it, each unanswerable question names what it lacks, each false premise the sentence that
    contradicts it; 36 + 35 answerable, 31 + 31 unanswerable (hb2…: 30 written and run once on 2026-12-07
    before any rule saw them; hb3…: 23 more, 16 of them answerable naming their attribute by a word the
    documents do not use, 车重 for 整车重量), dev/test fixed by id."""
    corpus = "\n".join(doc["text"] for doc in read_jsonl(BENCH_DATA / "handbook_corpus.jsonl"))
    rows = read_jsonl(BENCH_DATA / "handbook_questions.jsonl")
    assert len({q["id"] for q in rows}) == len(rows)
    for q in rows:
        if q["kind"] == "answerable":
            assert corpus.count(q["evidence"]) == 1 and q["evidence"] not in q["question"], q
        else:
            assert q["trap"] in {"plausible", "false_premise", "out_of_domain"}, q
            assert q["absent"] in q["question"] and q["absent"] not in corpus, q
            assert ("contradicted_by" in q) == (q["trap"] == "false_premise"), q
            assert q.get("contradicted_by", "") in corpus, q
    counts = Counter((q["kind"], q["split"]) for q in rows)
    assert counts == {
        ("answerable", "dev"): 36,
        ("answerable", "test"): 35,
        ("unanswerable", "dev"): 31,
        ("unanswerable", "test"): 31,
    }


@pytest.mark.parametrize("name", MODERN)
def test_modern_corpora_questions_quote_once_hinge_on_what_is_absent_and_plant_conflicts(name: str) -> None:
    """bench/data/NAME/*.md and NAME_questions.jsonl (bench/data/README.md): evidence verbatim once and not
    in its question, `absent` in the question and nowhere in the corpus, each false premise's contradiction
    verbatim, each conflict's two sides verbatim and different; every kind, style and premise type on both
    splits, about half the answerable ones paraphrased."""
    corpus = "\x1e".join(doc.text for doc in modern_documents(name))
    rows = read_jsonl(BENCH_DATA / f"{name}_questions.jsonl")
    assert len({q["id"] for q in rows}) == len(rows)
    for q in rows:
        assert q["split"] in {"dev", "test"}, q
        if q["kind"] in {"answerable", "conflict"}:
            assert corpus.count(q["evidence"]) == 1 and q["evidence"] not in q["question"], q
        if q["kind"] == "conflict":
            newer, older = q["conflict"]
            assert newer == q["evidence"] and newer != older and corpus.count(older) == 1, q
        elif q["kind"] == "unanswerable":
            assert q["absent"] in q["question"] and q["absent"] not in corpus, q
            assert q.get("contradicted_by", "") in corpus, q
            assert ("premise" in q) == (q["trap"] == "false_premise"), q
    kinds = Counter((q["kind"], q.get("trap"), q["split"]) for q in rows)
    for kind, trap in [("answerable", None), ("unanswerable", "plausible"), ("unanswerable", "false_premise")]:
        assert kinds[(kind, trap, "dev")] >= 3 and kinds[(kind, trap, "test")] >= 3, (kind, trap)
    assert kinds[("unanswerable", "out_of_domain", "test")] >= 3 and kinds[("conflict", None, "test")] >= 2
    premises = Counter((q["premise"], q["split"]) for q in rows if "premise" in q)
    assert {p for p, split in premises if split == "test"} >= {"number", "forbidden", "nonexistent"}
    styles = Counter(q["style"] for q in rows if q["kind"] == "answerable")
    assert 0.4 <= styles["paraphrase"] / sum(styles.values()) <= 0.7


def test_cmrc_unanswerables_are_about_the_small_set_and_absent_from_it() -> None:
    text = "\x1e".join(doc.text for doc in load_cmrc(paragraphs_kept=CMRC_SMALL).documents)
    rows = read_jsonl(BENCH_DATA / "cmrc_unanswerable.jsonl")
    assert Counter(q["split"] for q in rows) == {"dev": 6, "test": 6}
    for q in rows:
        assert q["absent"] in q["question"] and q["absent"] not in text, q
        assert text.count(q.get("contradicted_by", "")) >= 1, q
