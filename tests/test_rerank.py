"""The reranking stage over a real index and fake rerank servers in each API shape (real HTTP).

Order: the reranker's order is applied at weight 1, the fused order at weight 0, and the documented
combination in between. Failures: every kind gives the fused order and a warning, never an
exception (these tests fail when the fallback is taken out). The breaker and the retry layer.
"""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch

from core.access import Scope
from core.config import RerankApi
from core.documents import Document
from core.embeddings import Embedder
from core.schema import Mode
from core.text import get_tokenizer
from retrieval.rerank import HttpScorer, Reranker, RerankFailure, RerankLimits, combine, excerpt, scores_by_index
from retrieval.results import Hit, PassageMatch
from retrieval.retriever import Retriever
from tests.conftest import PARAMS, knowledge_base
from tests.fakes.rerank_server import API_KEY, BAD_JSON, RULE, TIMEOUT, FakeRerankServer

DOCS = [
    Document(f"d{i}", text, f"d{i}.md", title=f"资料{i}")
    for i, text in enumerate(
        [
            "赤壁之战，孙刘联军以火攻大破曹军，赤壁火攻名垂青史。",
            "赤壁一役，周瑜用火攻之计，曹操败走华容道。",
            "火攻须借东风，诸葛亮设坛祭风，赤壁大火。",
            "黄盖献苦肉计诈降曹操，火船直冲曹营，赤壁之战遂胜。",
            "曹操统一北方后南下，于赤壁与孙刘对峙。",
            "庞统献连环计，曹军战船首尾相连，为火攻埋下伏笔。",
        ],
        start=1,
    )
]
QUERY = "赤壁 火攻"
MARKER = "黄盖"  # the rule's favourite: d4, which fusion does not rank first


def marker_first(query: str, text: str) -> float:
    """A known rule: the text with the marker first, then by length (shorter first)."""
    return (100.0 if MARKER in text else 0.0) - len(text) / 100


LIMITS = RerankLimits(candidates=30, weight=1.0, timeout_s=2.0, max_chars=400, breaker_failures=3, breaker_pause_s=30)


@pytest.fixture(scope="module")
def kb(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    with knowledge_base(es, embedder, DOCS, "test-rerank") as alias:
        yield alias


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def retriever_for(
    es: Elasticsearch, embedder: Embedder, server: FakeRerankServer, clock: Clock | None = None, **limits: Any
) -> Retriever:
    scorer = HttpScorer(RerankApi(server.api), server.base_url, "fake-reranker", API_KEY, 32, httpx.Client())
    reranker = Reranker(scorer, RerankLimits(**(vars(LIMITS) | limits)), clock or Clock())
    return Retriever(es, embedder, get_tokenizer(), PARAMS, reranker)


def fused_ids(retriever: Retriever, kb: str) -> list[str]:
    return [hit.id for hit in retriever.search(Scope.whole(kb), QUERY, Mode.HYBRID, 10, rerank=False).hits]


@pytest.mark.parametrize("api", ["cohere", "tei", "dashscope"])
def test_the_rerankers_order_is_applied_in_each_api_shape(
    es: Elasticsearch, embedder: Embedder, kb: str, api: str
) -> None:
    with FakeRerankServer(api, rule=marker_first) as server:
        retriever = retriever_for(es, embedder, server)
        fused = retriever.search(Scope.whole(kb), QUERY, Mode.HYBRID, 10, rerank=False).hits
        assert not server.requests  # rerank=False sends nothing
        result = retriever.search(Scope.whole(kb), QUERY, Mode.HYBRID, 3)
    assert result.rerank is not None and result.rerank.applied and result.warnings == []
    order = sorted(range(len(fused)), key=lambda i: (-marker_first(QUERY, fused[i].text), i))
    assert [hit.id for hit in result.hits] == [fused[i].id for i in order[:3]]
    assert MARKER in result.hits[0].text and fused[0].id != result.hits[0].id
    for hit in result.hits:  # each hit explains itself: the reranker's score and its fused rank
        assert hit.rerank is not None and fused[hit.rerank.fused_rank - 1].id == hit.id
        assert hit.rerank.fused_score == fused[hit.rerank.fused_rank - 1].score
    body = server.requests[0].body
    assert len(server.query_and_texts(body)[1]) == len(fused)  # all candidates in one request
    if api == "cohere":
        assert body["model"] == "fake-reranker" and body["top_n"] == len(fused)
    if api == "dashscope":
        assert body["model"] == "fake-reranker" and body["parameters"]["top_n"] == len(fused)


def test_the_weight_combines_normalised_scores_as_documented(es: Elasticsearch, embedder: Embedder, kb: str) -> None:
    reverse = {doc.text: float(i) for i, doc in enumerate(DOCS)}  # d6 best, d1 worst: against fusion

    with FakeRerankServer("cohere", rule=lambda q, text: reverse[text]) as server:
        fused = fused_ids(retriever_for(es, embedder, server), kb)
        at_zero = retriever_for(es, embedder, server, weight=0.0).search(Scope.whole(kb), QUERY, Mode.HYBRID, 10)
        assert not server.requests and at_zero.rerank is not None and not at_zero.rerank.applied
        at_one = retriever_for(es, embedder, server, weight=1.0).search(Scope.whole(kb), QUERY, Mode.HYBRID, 10)
        half = retriever_for(es, embedder, server, weight=0.5).search(Scope.whole(kb), QUERY, Mode.HYBRID, 10)
    assert [hit.id for hit in at_zero.hits] == fused
    assert [hit.doc_id for hit in at_one.hits] == [doc.doc_id for doc in reversed(DOCS) if _in(doc, at_one.hits)]
    # weight w: w * minmax(reranker) + (1 - w) * minmax(fused), over the candidates
    evidence = sorted((hit.rerank for hit in half.hits if hit.rerank), key=lambda e: e.fused_rank)
    r = [e.score for e in evidence]
    f = [e.fused_score for e in evidence]
    expected = {
        fused[i]: 0.5 * (r[i] - min(r)) / (max(r) - min(r)) + 0.5 * (f[i] - min(f)) / (max(f) - min(f))
        for i in range(len(fused))
    }
    assert [hit.score for hit in half.hits] == sorted(expected.values(), reverse=True)
    assert all(abs(hit.score - expected[hit.id]) < 1e-9 for hit in half.hits)
    assert [hit.id for hit in half.hits] not in ([hit.id for hit in at_one.hits], fused)  # in between


def _in(doc: Document, hits: list[Hit]) -> bool:
    return any(hit.doc_id == doc.doc_id for hit in hits)


def _missing(body: dict[str, Any]) -> dict[str, Any]:
    return {"results": [{"index": i, "relevance_score": 1.0} for i in range(len(body["documents"]) - 1)]}


def _repeated(body: dict[str, Any]) -> dict[str, Any]:
    return {"results": [{"index": 0, "relevance_score": 1.0} for _ in body["documents"]]}


def _out_of_range(body: dict[str, Any]) -> dict[str, Any]:
    return {"results": [{"index": i + 1, "relevance_score": 1.0} for i in range(len(body["documents"]))]}


def _not_numbers(body: dict[str, Any]) -> dict[str, Any]:
    return {"results": [{"index": str(i), "relevance_score": "high"} for i in range(len(body["documents"]))]}


def _no_results(body: dict[str, Any]) -> dict[str, Any]:
    return {"error": "model not loaded"}


FAILURES = {
    "timeout": (TIMEOUT, "超时"),
    "error": (500, "出错"),
    "rate_limited": (429, "429"),
    "not_json": (BAD_JSON, "无法使用"),
    "missing_index": (_missing, "无法使用"),
    "repeated_index": (_repeated, "无法使用"),
    "out_of_range_index": (_out_of_range, "无法使用"),
    "non_numeric_index": (_not_numbers, "无法使用"),
    "no_results": (_no_results, "无法使用"),
}


@pytest.mark.parametrize("failure", list(FAILURES))
def test_every_failure_gives_the_fused_order_and_a_warning(
    es: Elasticsearch, embedder: Embedder, kb: str, failure: str
) -> None:
    reply, words = FAILURES[failure]
    with FakeRerankServer("cohere", reply, rule=marker_first, delay=1.0) as server:
        retriever = retriever_for(es, embedder, server, timeout_s=0.3)
        fused = fused_ids(retriever, kb)
        result = retriever.search(Scope.whole(kb), QUERY, Mode.HYBRID, 10)
    assert [hit.id for hit in result.hits] == fused
    assert result.rerank is not None and not result.rerank.applied
    assert len(result.warnings) == 1 and words in result.warnings[0] and "融合排序" in result.warnings[0]
    assert all(hit.rerank is None for hit in result.hits)
    assert len(server.requests) == (2 if failure == "error" else 1)  # a 5xx is retried once, nothing else


def test_a_transient_error_is_retried_and_then_reranks(es: Elasticsearch, embedder: Embedder, kb: str) -> None:
    with FakeRerankServer("tei", 503, RULE, rule=marker_first) as server:
        result = retriever_for(es, embedder, server).search(Scope.whole(kb), QUERY, Mode.HYBRID, 3)
    assert result.rerank is not None and result.rerank.applied and MARKER in result.hits[0].text
    assert len(server.requests) == 2


def test_repeated_failures_pause_the_stage(es: Elasticsearch, embedder: Embedder, kb: str) -> None:
    clock = Clock()
    with FakeRerankServer("cohere", 429, 429, RULE, rule=marker_first) as server:
        retriever = retriever_for(es, embedder, server, clock, breaker_failures=2, breaker_pause_s=30)
        for _ in range(2):
            retriever.search(Scope.whole(kb), QUERY, Mode.HYBRID, 3)
        paused = retriever.search(Scope.whole(kb), QUERY, Mode.HYBRID, 3)
        assert len(server.requests) == 2  # no call while paused
        assert "暂停" in paused.warnings[0]
        clock.now += 31
        after = retriever.search(Scope.whole(kb), QUERY, Mode.HYBRID, 3)
    assert len(server.requests) == 3 and after.rerank is not None and after.rerank.applied and not after.warnings


def test_a_bases_own_weight_applies(es: Elasticsearch, embedder: Embedder, kb: str) -> None:
    from core.kbs import FusionSetting, write_fusion

    with FakeRerankServer("cohere", rule=marker_first) as server:
        retriever = retriever_for(es, embedder, server)
        write_fusion(es, kb, FusionSetting(method=PARAMS.fusion, depth=PARAMS.depth, rerank_weight=0.0))
        retriever.forget(kb)
        try:
            result = retriever.search(Scope.whole(kb), QUERY, Mode.HYBRID, 3)
        finally:
            es.indices.put_mapping(index=kb, meta={"kb": {}})  # (the test base only) no own fusion
            retriever.forget(kb)
    assert not server.requests and result.rerank is not None and result.rerank.weight == 0.0


def test_a_hit_is_sent_as_its_best_passages_else_a_bounded_excerpt() -> None:
    text = "甲" * 300 + "。诸葛亮借东风。" + "乙" * 300 + "。黄盖诈降，火烧赤壁。" + "丙" * 300
    start = text.index("黄盖")
    with_passages = Hit(
        id="x",
        score=1.0,
        text=text,
        doc_id="d",
        chunk_index=0,
        title="t",
        source="s",
        passages=[PassageMatch(start=start, end=start + 10, score=0.9), PassageMatch(start=301, end=308, score=0.5)],
    )
    assert excerpt(with_passages, "黄盖", 400) == "黄盖诈降，火烧赤壁。…诸葛亮借东风。"
    assert excerpt(with_passages, "黄盖", 12) == "黄盖诈降，火烧赤壁。…诸葛"  # within the limit
    plain = with_passages.model_copy(update={"passages": []})
    shown = excerpt(plain, "黄盖诈降", 400)
    assert len(shown) <= 400 and "黄盖诈降，火烧赤壁。" in shown
    assert excerpt(plain.model_copy(update={"text": "短文。"}), "黄盖", 400) == "短文。"


def test_scores_are_read_strictly() -> None:
    assert scores_by_index([(1, 0.2), (0, 0.9)], 2) == [0.9, 0.2]
    for bad in ([(0, 1.0)], [(0, 1.0), (0, 1.0)], [(0, 1.0), (2, 1.0)], [(0, 1.0), (True, 1.0)], [(0, 1.0), (1, "x")]):
        with pytest.raises(RerankFailure):
            scores_by_index(bad, 2)
    hits = [Hit(id=str(i), score=s) for i, s in enumerate([3.0, 2.0, 1.0])]
    assert [h.id for h in combine(hits, [0.0, 0.0, 5.0], 1.0)] == ["2", "0", "1"]  # ties keep the fused order
    assert [h.id for h in combine(hits, [0.0, 0.0, 5.0], 0.4)] == ["0", "2", "1"]  # .6 vs .4+.0 vs .3


class Refusing:
    """A scorer whose endpoint refuses every request of one base's queries (a tenant's bad input)."""

    name = "refusing"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def score(self, query: str, texts: Any, timeout_s: float) -> list[float]:
        self.calls.append(query)
        if query.startswith("bad"):
            raise RerankFailure("error", "HTTP 400")
        return [1.0] * len(texts)


def test_failures_met_on_one_base_pause_reranking_for_that_base_only() -> None:
    """Issue 58: three requests the endpoint refused paused reranking for every tenant for 30 s."""
    scorer, hits = Refusing(), [Hit(id=str(i), score=3.0 - i, text=f"文本{i}") for i in range(3)]
    reranker = Reranker(scorer, LIMITS, Clock())
    for _ in range(LIMITS.breaker_failures):
        reranker.rerank("bad query", hits, 3, 1.0, "attacker-base")
    paused = reranker.rerank("bad query", hits, 3, 1.0, "attacker-base")[1]
    other = reranker.rerank("good query", hits, 3, 1.0, "victim-base")[1]
    assert paused.warning is not None and "暂停" in paused.warning and not paused.applied
    assert other.applied and other.warning is None and scorer.calls[-1] == "good query"
