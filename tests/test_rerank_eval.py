"""The reranking row of a base's evaluation, with fake rerankers whose rule is known: an oracle
(relevant passages first) must lift the row to R@1 = 1 where every question has a relevant
candidate; its reverse must sink it and leave reranking off; a failing one changes nothing and is
counted. Weight 0 is the chosen fusion's hybrid row exactly. (The closing run on a bigger set,
where the oracle is chosen: docs/retrieval.md, "Reranking".)"""

import json
from collections.abc import Iterator

import httpx
import pytest
from elasticsearch import Elasticsearch

from core.access import Scope
from core.config import RerankApi
from core.embeddings import Embedder
from core.text import get_tokenizer
from evaluation.questions import parse_questions
from evaluation.rerank import WEIGHTS
from evaluation.run import chosen_setting, markdown, run_evaluation
from retrieval.rerank import HttpScorer, Reranker, RerankLimits
from retrieval.retriever import Retriever
from tests.conftest import PARAMS, knowledge_base
from tests.fakes.rerank_server import API_KEY, FakeRerankServer
from tests.test_evaluate import FIXTURE_QUESTIONS, MEDICAL

TEXTS = {doc.doc_id: doc.text for doc in MEDICAL.documents}
RELEVANT = {q.text: {TEXTS[doc] for doc in q.relevant_docs} for q in FIXTURE_QUESTIONS}
LINES = [
    json.dumps({"id": q.id, "question": q.text, "doc_id": sorted(q.relevant_docs), "split": ("dev", "test")[i % 2]})
    for i, q in enumerate(FIXTURE_QUESTIONS)
]


def oracle(query: str, text: str) -> float:
    return float(any(text in relevant for relevant in RELEVANT[query]))


def reverse_oracle(query: str, text: str) -> float:
    return 1.0 - oracle(query, text)


@pytest.fixture(scope="module")
def medical_kb(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    with knowledge_base(es, embedder, MEDICAL.documents, "test-rerank-eval") as alias:
        yield alias


def evaluate(es: Elasticsearch, embedder: Embedder, kb: str, server: FakeRerankServer) -> dict:
    scorer = HttpScorer(RerankApi.COHERE, server.base_url, "m", API_KEY, 32, httpx.Client())
    reranker = Reranker(scorer, RerankLimits(30, 0.7, 5.0, 400, 1000, 30.0))
    retriever = Retriever(es, embedder, get_tokenizer(), PARAMS, reranker)
    return run_evaluation(retriever, Scope.whole(kb), parse_questions(LINES))


def row(report: dict, weight: float, split: str = "test") -> dict[str, float]:
    return next(entry[split] for entry in report["rerank"]["weights"] if entry["weight"] == weight)


def test_the_row_moves_as_the_rule_says(es: Elasticsearch, embedder: Embedder, medical_kb: str) -> None:
    with FakeRerankServer("cohere", rule=oracle) as server:
        lifted = evaluate(es, embedder, medical_kb, server)
    assert [entry["weight"] for entry in lifted["rerank"]["weights"]] == list(WEIGHTS)
    assert row(lifted, 0.0) == lifted["test"]["hybrid"]  # off: the chosen fusion's own figures
    # The oracle puts a relevant candidate first wherever there is one: R@1 = R@5 = 1 here.
    assert row(lifted, 1.0)["R@1"] == row(lifted, 1.0)["R@5"] == row(lifted, 1.0)["MRR@10"] == 1.0
    assert all(row(lifted, w, "dev")["MRR@10"] >= row(lifted, 0.0, "dev")["MRR@10"] for w in WEIGHTS)
    assert lifted["rerank"]["chosen_minus_off"]["MRR@10"]["diff"] >= 0
    assert lifted["rerank"]["failed"] == 0 and lifted["rerank"]["added_ms"]["p50"] >= 0
    assert chosen_setting(lifted, "test").rerank_weight == lifted["rerank"]["chosen_weight"]
    assert "## Reranking" in markdown(lifted)

    with FakeRerankServer("cohere", rule=reverse_oracle) as server:
        sunk = evaluate(es, embedder, medical_kb, server)
    assert row(sunk, 1.0)["R@1"] == 0.0 and row(sunk, 1.0)["MRR@10"] < row(sunk, 0.0)["MRR@10"]
    assert sunk["rerank"]["chosen_weight"] == 0.0 and chosen_setting(sunk, "test").rerank_weight == 0.0

    with FakeRerankServer("cohere", 500) as server:
        failing = evaluate(es, embedder, medical_kb, server)
    assert failing["rerank"]["failed"] == failing["rerank"]["questions"] == len(FIXTURE_QUESTIONS)
    assert all(entry["test"] == failing["test"]["hybrid"] for entry in failing["rerank"]["weights"])
