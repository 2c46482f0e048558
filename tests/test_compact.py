"""Compaction: a bulk load into an empty passage base does not leave Elasticsearch's recovery copy of
every document behind (most of the index, read with every hit fetched), and the passage vectors
survive the merge."""

import time
import uuid
from dataclasses import replace

import pytest
from elasticsearch import Elasticsearch

from core.access import DocumentAccess, Scope
from core.chunking import PassageWindows
from core.documents import Document
from core.embeddings import Embedder
from core.schema import Mode
from core.text import ChineseTokenizer
from indexing.options import Throughput
from indexing.pipeline import IndexSummary, index_documents
from retrieval.retriever import Retriever
from tests.conftest import INDEX_OPTIONS, PARAMS, delete_indices

FILLER = "城外炊烟袅袅，百姓各安其业。" * 6
DOCUMENTS = [Document(f"d{n}", FILLER + f"第{n}封书信送到了荆州。" + FILLER, "a.txt", chapter=n) for n in range(1, 6)]


def _build(es: Elasticsearch, embedder: Embedder, wait_s: float) -> IndexSummary:
    options = replace(
        INDEX_OPTIONS, passages=PassageWindows(40, 10), throughput=Throughput(2, 1), compact_wait_s=wait_s
    )
    return index_documents(
        es,
        DOCUMENTS,
        alias=f"test-compact-{uuid.uuid4().hex[:10]}",
        visible=DocumentAccess(everything=True),
        embedder=embedder,
        tokenizer=ChineseTokenizer(),
        options=options,
    )


def _recovery_source_bytes(es: Elasticsearch, index: str) -> int:
    usage = es.indices.disk_usage(index=index, run_expensive_tasks=True)[index]
    return int(usage["fields"].get("_recovery_source", {}).get("total_in_bytes", 0))


def _segments(es: Elasticsearch, index: str) -> int:
    return len(es.cat.segments(index=index, format="json"))


@pytest.mark.parametrize("wait_s", [0, 60])
def test_a_new_passage_base_sheds_the_recovery_copies_and_keeps_its_vectors(
    es: Elasticsearch, embedder: Embedder, wait_s: float
) -> None:
    summary = _build(es, embedder, wait_s)
    try:
        assert summary.failed == 0 and summary.indexed == len(DOCUMENTS)
        assert summary.compacted is (wait_s > 0)
        if wait_s:
            deadline = time.monotonic() + 30
            while _segments(es, summary.index) > 1 and time.monotonic() < deadline:  # the merge runs in the background
                time.sleep(0.5)
            es.indices.refresh(index=summary.index)
            assert _segments(es, summary.index) == 1
            assert _recovery_source_bytes(es, summary.index) == 0
        else:  # what the compaction is for: the copies stay
            assert _recovery_source_bytes(es, summary.index) > 0
        hits = Retriever(es, embedder, ChineseTokenizer(), PARAMS).search(
            Scope.whole(summary.alias), "第3封书信送到了哪里", Mode.VECTOR, 5
        )
        assert len(hits.hits) == len(DOCUMENTS) and all(hit.passages for hit in hits.hits)
    finally:
        delete_indices(es, summary.alias)
