"""Passage vectors: each chunk holds sentence windows with a vector each, searched by a nested kNN;
a hit carries the passages it matched with, filters and access groups hold inside the nested
search, and a base built before passage vectors keeps serving."""

import uuid
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from elasticsearch import Elasticsearch

from core.access import DocumentAccess, Scope
from core.chunking import PassageWindows
from core.config import Settings
from core.documents import Document
from core.embeddings import Embedder
from core.kbs import create_kb, read_kb
from core.reader import Reader
from core.schema import Mode
from core.store import read_index_meta
from core.text import ChineseTokenizer
from indexing.options import IndexOptions
from indexing.pipeline import index_documents
from retrieval.extractive import Thresholds, answer_locally
from retrieval.lists import Filters, envelope, passage_knn
from retrieval.retriever import Retriever
from tests.conftest import INDEX_OPTIONS, PARAMS, delete_indices

WINDOWS = PassageWindows(40, 10)
FILLER = "城外炊烟袅袅，百姓各安其业。" * 6  # sentences no query is about
NEEDLE = "诸葛亮在赤壁借来三日东南风。"
SECRET = "黄盖献苦肉计，诈降曹操，火烧连营。"
DOCUMENTS = [
    Document("wind", FILLER + NEEDLE + FILLER, "a.txt", chapter=49),
    Document("public", FILLER + "刘备三顾茅庐，请孔明出山。" + FILLER, "a.txt", chapter=38),
    Document("secret", FILLER + SECRET + FILLER, "b.txt", chapter=46, access=["strategists"]),
]
QUERY = "黄盖用什么计策诈降曹操"


def test_passage_windows_cut_whole_sentences_with_offsets() -> None:
    text = FILLER + NEEDLE
    spans = WINDOWS.spans(text)
    assert len(spans) > 1 and all(len(span.text) <= WINDOWS.size for span in spans)
    assert all(text[span.start : span.end] == span.text for span in spans)
    assert any(span.text.endswith(NEEDLE) for span in spans)  # a sentence is never cut between two windows
    assert PassageWindows.from_meta(WINDOWS.to_meta()) == WINDOWS and PassageWindows.from_meta(None) is None
    with pytest.raises(ValueError, match="chunk_overlap"):
        PassageWindows(40, 40)


def passage_base(
    es: Elasticsearch, embedder: Embedder, passages: PassageWindows | None, documents: list[Document]
) -> str:
    """`documents` indexed by the pipeline into a new base with `passages` (None: one vector per chunk); its alias."""
    alias = f"test-passages-{uuid.uuid4().hex[:10]}"
    summary = index_documents(
        es,
        documents,
        alias=alias,
        visible=DocumentAccess(everything=True),
        embedder=embedder,
        tokenizer=ChineseTokenizer(),
        options=replace(INDEX_OPTIONS, passages=passages),
    )
    assert summary.failed == 0 and summary.indexed == summary.chunks, summary
    return alias


@pytest.fixture(scope="module")
def base(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    alias = passage_base(es, embedder, WINDOWS, DOCUMENTS)
    yield alias
    delete_indices(es, alias)


@pytest.fixture(scope="module")
def retriever(es: Elasticsearch, embedder: Embedder) -> Retriever:
    return Retriever(es, embedder, ChineseTokenizer(), PARAMS)


def test_a_new_base_holds_its_passages_and_says_so(es: Elasticsearch, base: str) -> None:
    assert read_index_meta(es, base).passages == WINDOWS
    assert read_kb(es, base, Settings(_env_file=None)).passages == WINDOWS
    source = es.search(index=base, size=10, query={"term": {"doc_id": "wind"}})["hits"]["hits"][0]["_source"]
    text, passages = source["text"], source["passages"]
    assert [(p["start"], p["end"]) for p in passages] == [(s.start, s.end) for s in WINDOWS.spans(text)]
    assert all("vector" not in p for p in passages)  # indexed, not kept in `_source` (what every fetch reads)


def test_a_chunk_given_new_groups_is_rewritten_whole_and_keeps_its_passage_vectors(
    es: Elasticsearch, embedder: Embedder, retriever: Retriever
) -> None:
    """An update in place would rebuild the chunk from its `_source`, which lacks the passage vectors:
    the nested kNN would no longer find it."""
    alias = passage_base(es, embedder, WINDOWS, DOCUMENTS[:1])
    try:
        regranted = [replace(DOCUMENTS[0], access=["navy"])]
        summary = index_documents(
            es, regranted, alias=alias, visible=DocumentAccess(everything=True), embedder=embedder,
            tokenizer=ChineseTokenizer(), options=replace(INDEX_OPTIONS, passages=WINDOWS),
        )  # fmt: skip
        assert summary.failed == 0 and summary.indexed == summary.chunks  # written anew, not updated
        navy = Scope(alias, DocumentAccess(frozenset({"navy"})))
        hits = retriever.search(navy, "谁在赤壁借来了东南风", Mode.VECTOR, 3).hits
        assert hits and hits[0].doc_id == "wind" and hits[0].passages
        assert retriever.search(Scope(alias, DocumentAccess()), "谁在赤壁借来了东南风", Mode.VECTOR, 3).hits == []
    finally:
        delete_indices(es, alias)


@pytest.mark.parametrize("mode", [Mode.VECTOR, Mode.HYBRID])
def test_a_hit_carries_the_passages_it_matched(retriever: Retriever, base: str, mode: Mode) -> None:
    hits = retriever.search(Scope.whole(base), "谁在赤壁借来了东南风", mode, 3).hits
    top = hits[0]
    assert top.doc_id == "wind"
    assert 1 <= len(top.passages) <= retriever.params.passage_hits
    assert [p.score for p in top.passages] == sorted((p.score for p in top.passages), reverse=True)
    best = top.passages[0]
    assert NEEDLE in top.text[best.start : best.end]  # the sentence asked about, not the filler around it
    assert all(0 <= p.start < p.end <= len(top.text) for hit in hits for p in hit.passages)


def test_keyword_modes_run_no_passage_search(retriever: Retriever, base: str) -> None:
    assert all(not hit.passages for hit in retriever.search(Scope.whole(base), "东南风", "bm25", 3).hits)


def test_filters_hold_inside_the_nested_search(retriever: Retriever, base: str) -> None:
    for mode in (Mode.VECTOR, Mode.HYBRID):
        hits = retriever.search(Scope.whole(base), "谁在赤壁借来了东南风", mode, 5, Filters(chapter_to=40)).hits
        assert hits and {hit.doc_id for hit in hits} == {"public"}, mode


def test_no_passage_of_a_hidden_document_reaches_a_reader_without_its_group(
    es: Elasticsearch, retriever: Retriever, base: str, embedder: Embedder
) -> None:
    """The hidden chunk is the best match: filtered after the search, k=1 would return nothing or it."""
    public = Scope(base, DocumentAccess())
    allowed = Scope(base, DocumentAccess(frozenset({"strategists"})))
    assert retriever.search(allowed, QUERY, Mode.VECTOR, 1).hits[0].doc_id == "secret"
    for mode in (Mode.VECTOR, Mode.HYBRID):
        hits = retriever.search(public, QUERY, mode, 1 if mode == Mode.VECTOR else 5).hits
        assert hits and "secret" not in {hit.doc_id for hit in hits}, mode
        for hit in hits:
            assert SECRET not in hit.text
            assert all(SECRET[:4] not in hit.text[p.start : p.end] for p in hit.passages)
        if mode == Mode.HYBRID:  # the explanations rank the visible chunks only: 1 and 2, no gap for the hidden one
            assert {(hit.explain or {})["vector"].rank for hit in hits} == {1, 2}
    assert len(retriever.ranked_lists(public, QUERY, [Mode.VECTOR], 10)["vector"]) == 2
    # The raw response, inner hits included: nothing of the hidden chunk.
    body = envelope(10, source=True) | passage_knn(embedder.embed_query(QUERY).tolist(), 10, 100, [], 5)
    raw = Reader(es, public).msearch([body])[0]["hits"]["hits"]
    assert {hit["_source"]["doc_id"] for hit in raw} == {"wind", "public"}
    assert all(inner["_index"] for hit in raw for inner in hit["inner_hits"]["passages"]["hits"]["hits"])


def test_a_base_built_before_passage_vectors_keeps_serving(
    es: Elasticsearch, retriever: Retriever, embedder: Embedder
) -> None:
    alias = passage_base(es, embedder, None, DOCUMENTS[:1])
    try:
        assert read_index_meta(es, alias).passages is None
        assert (
            "passages"
            not in es.indices.get_mapping(index=alias).body[read_index_meta(es, alias).index]["mappings"]["properties"]
        )
        # More documents into it with today's options: written the old way, not refused by the strict mapping.
        summary = index_documents(
            es,
            DOCUMENTS[1:2],
            alias=alias,
            visible=DocumentAccess(everything=True),
            embedder=embedder,
            tokenizer=ChineseTokenizer(),
            options=IndexOptions.from_settings(Settings(_env_file=None)),
        )
        assert summary.failed == 0 and summary.indexed == 1
        hits = retriever.search(Scope.whole(alias), "谁在赤壁借来了东南风", Mode.VECTOR, 2).hits
        assert hits[0].doc_id == "wind" and all(not hit.passages for hit in hits)
        assert retriever.search(Scope.whole(alias), "谁在赤壁借来了东南风", Mode.HYBRID, 2).hits[0].doc_id == "wind"
        assert retriever.scored_passages(Scope.whole(alias), [hits[0].id], "谁在赤壁借来了东南风") == {}
    finally:
        delete_indices(es, alias)


def test_a_base_created_empty_gets_the_configured_passages(es: Elasticsearch, embedder: Embedder) -> None:
    name = f"test-passages-kb-{uuid.uuid4().hex[:8]}"
    try:
        create_kb(es, name, embedder, chunk_size=800, chunk_overlap=50, passages=WINDOWS)
        assert read_kb(es, name, Settings(_env_file=None)).passages == WINDOWS
        assert Settings(_env_file=None, passage_size=0).passage_windows is None
    finally:
        delete_indices(es, name)


def test_every_passage_of_the_asked_chunks_is_scored_and_hidden_ones_are_not(retriever: Retriever, base: str) -> None:
    """The extractive answer's passages: all of each chunk (not only the kNN's best three), best first,
    their cosine the query's to the stored vector; a chunk the reader may not see gives nothing."""
    whole, public = Scope.whole(base), Scope(base, DocumentAccess())
    hits = retriever.search(whole, QUERY, Mode.HYBRID, 3).hits
    ids = [hit.id for hit in hits]
    scored = retriever.scored_passages(whole, ids, QUERY)
    assert set(scored) == set(ids)
    for hit in hits:
        passages = scored[hit.id]
        assert [(p.start, p.end) for p in sorted(passages, key=lambda p: p.start)] == [
            (s.start, s.end) for s in WINDOWS.spans(hit.text)
        ]
        assert [p.score for p in passages] == sorted((p.score for p in passages), reverse=True)
    secret = next(hit for hit in hits if hit.doc_id == "secret")
    assert SECRET in secret.text[scored[secret.id][0].start : scored[secret.id][0].end]
    embedded = retriever.embedder.embed_documents([secret.text[p.start : p.end] for p in scored[secret.id]])
    cosines = embedded @ retriever.embedder.embed_query(QUERY)
    # the stored float vectors (written to 4 decimals), not their int8 quantisation (errors up to .004)
    assert max(abs(p.cosine - c) for p, c in zip(scored[secret.id], cosines, strict=True)) < 0.0005
    assert secret.id not in retriever.scored_passages(public, ids, QUERY)


class CountingEmbedder:
    """The session's embedder, counting the texts it embeds as documents."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name, self.documents = inner, inner.name, 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.documents += len(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


@pytest.mark.parametrize("passages", [True, False])
def test_the_extractive_answer_quotes_the_passage_that_answers(
    es: Elasticsearch, embedder: Embedder, base: str, passages: bool
) -> None:
    """On a passage base the quote is the passage Elasticsearch scored best, and nothing is embedded at
    answer time; a base built before embeds its sentence windows as it always did."""
    alias = base if passages else passage_base(es, embedder, None, DOCUMENTS)
    counting = CountingEmbedder(embedder)
    reader = Retriever(es, counting, ChineseTokenizer(), PARAMS)
    limits = replace(Thresholds.from_settings(Settings(_env_file=None)), min_similarity=0.0, sentences=1)
    try:
        found = answer_locally(
            reader,
            Scope.whole(alias),
            "黄盖是怎样骗过曹操的？",
            mode=Mode.HYBRID,
            k=3,
            max_parts=1,
            passages=3,
            limits=limits,
        )
        assert SECRET in found.answer and found.parts[0].answered
        assert (counting.documents == 0) == passages
    finally:
        if not passages:
            delete_indices(es, alias)
