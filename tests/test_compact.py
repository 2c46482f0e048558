"""Compaction: a bulk load into an empty passage base does not leave Elasticsearch's recovery copy of
every document behind (most of the index, read with every hit fetched), and the passage vectors
survive the merge."""

import time
from collections.abc import Callable
from pathlib import Path

from elasticsearch import Elasticsearch

from core.access import Scope
from core.chunking import PassageWindows
from core.documents import Document
from core.embeddings import Embedder
from core.schema import Mode
from core.text import ChineseTokenizer
from retrieval.retriever import Retriever
from tests.conftest import PARAMS, delete_indices, indexing_result, start_indexing
from tests.test_passages import passage_base

SENTENCES = "".join(f"第{n}封书信送到了荆州，城外炊烟袅袅，百姓各安其业。" for n in range(40))


def _recovery_source_bytes(es: Elasticsearch, index: str) -> int:
    usage = es.indices.disk_usage(index=index, run_expensive_tasks=True)[index]
    return int(usage["fields"].get("_recovery_source", {}).get("total_in_bytes", 0))


def _segments(es: Elasticsearch, index: str) -> int:
    return len(es.cat.segments(index=index, format="json"))


def test_without_compaction_a_load_leaves_the_recovery_copies(es: Elasticsearch, embedder: Embedder) -> None:
    """What the compaction is for (the pipeline with `compact_wait_s=0`, as uploads and tests run it)."""
    documents = [Document(f"d{n}", SENTENCES, "a.txt", chapter=n) for n in range(1, 4)]
    alias = passage_base(es, embedder, PassageWindows(40, 10), documents)
    try:
        assert _recovery_source_bytes(es, next(iter(es.indices.get_alias(name=alias)))) > 0
    finally:
        delete_indices(es, alias)


def test_the_indexing_job_compacts_a_new_passage_base_and_keeps_its_vectors(
    es: Elasticsearch, embedder: Embedder, es_url: str, index_name: Callable[[str], str], tmp_path: Path
) -> None:
    """`python -m indexing --recreate` (no refresh while it loads), two chunks per batch: the first batch is a
    segment of its own, the job waits for the retention leases, the merge leaves no recovery copy, and
    every chunk keeps its passages."""
    (tmp_path / "book.txt").write_text("".join(f"第{c}章 书信\n{SENTENCES}\n" for c in range(1, 4)), encoding="utf-8")
    alias = index_name("compact")
    job = start_indexing(
        tmp_path / "cwd",
        tmp_path / "book.txt",
        "--index",
        alias,
        "--batch-size",
        "2",
        "--recreate",  # no refresh while loading: one segment, but for the first batch's own
        "--no-progress",
        ES_URL=es_url,
        INDEX_COMPACT_WAIT_S="60",
        PASSAGE_SIZE="40",
        PASSAGE_OVERLAP="10",
    )
    code, summary, stderr = indexing_result(job)
    assert code == 0 and summary["compacted"] is True, stderr
    deadline = time.monotonic() + 30
    while _segments(es, summary["index"]) > 1 and time.monotonic() < deadline:  # the merge runs in the background
        time.sleep(0.5)
    es.indices.refresh(index=alias)
    assert _segments(es, summary["index"]) == 1 and _recovery_source_bytes(es, summary["index"]) == 0
    found = Retriever(es, embedder, ChineseTokenizer(), PARAMS).search(
        Scope.whole(alias), "第3封书信送到了哪里", Mode.VECTOR, 50
    )
    assert len(found.hits) == summary["chunks"] > 2 and all(hit.passages for hit in found.hits)
