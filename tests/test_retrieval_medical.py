"""Medical fixture (tests/data): passages that differ mainly by 高/低血糖, 高/低血压, 甲亢/甲减, 1型/2型.

Hybrid must put the right passage first for every query; vector-only is printed (and named
in the failure message) so a reader sees what keyword matching adds.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from bench.datasets import load_medical
from core.access import Scope
from core.embeddings import Embedder
from core.text import ChineseTokenizer
from retrieval.retriever import Retriever
from tests.conftest import PARAMS, knowledge_base

FIXTURE = Path(__file__).resolve().parent / "data"
# The small fixture, not bench/data's evaluation set: that one is measured (dev/test) by bench.retrieval_eval.
DATASET = load_medical(FIXTURE / "medical_fixture_passages.jsonl", FIXTURE / "medical_fixture_queries.jsonl")


@pytest.fixture(scope="module")
def medical_kb(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    assert len(DATASET.chunks) == len(DATASET.documents)  # one chunk per passage
    with knowledge_base(es, embedder, DATASET.documents, "test-medical") as alias:
        yield alias


def test_fixture_pairs_cover_the_confusable_terms() -> None:
    texts = " ".join(document.text for document in DATASET.documents)
    for a, b in (("高血糖", "低血糖"), ("高血压", "低血压"), ("甲亢", "甲减"), ("1型", "2型")):
        assert a in texts and b in texts
    assert len(DATASET.queries) >= 16


def test_hybrid_top1_is_right_for_every_query(es: Elasticsearch, embedder: Embedder, medical_kb: str) -> None:
    retriever = Retriever(es, embedder, ChineseTokenizer(), PARAMS)
    report, wrong = [], []
    for query in DATASET.queries:
        hybrid = retriever.search(Scope.whole(medical_kb), query.text, "hybrid", 3).hits
        vector = retriever.search(Scope.whole(medical_kb), query.text, "vector", 1).hits
        vector_ok = vector[0].id in query.relevant
        flag = "" if vector_ok else "  (vector wrong)"
        report.append(f"{query.text}  hybrid→{hybrid[0].title}  vector→{vector[0].title}{flag}")
        if hybrid[0].id not in query.relevant:
            wrong.append(f"{query.text}: hybrid→{hybrid[0].title}, vector→{vector[0].title}")
    print("\n".join(report))
    vector_errors = sum("(vector wrong)" in line for line in report)
    print(f"vector-only top-1 wrong on {vector_errors}/{len(report)} queries; hybrid wrong on {len(wrong)}")
    assert not wrong, "hybrid top-1 wrong:\n" + "\n".join(wrong) + "\n\nall queries:\n" + "\n".join(report)
