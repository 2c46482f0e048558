"""Write: bulk requests with the retry policy, the chunk writer, the error log, the clean-up.

Retry policy for bulk writes (`bulk_write`, the only retry layer for them; `core.retry.ES_BULK`):
the request is sent with the client's own retries off and streaming_bulk's 429 retries off;
tenacity re-sends it on a lost connection, a time-out, or a 429/502/503/504 answer (whole request or
single items, e.g. `unavailable_shards_exception` while a replica is being promoted), waiting
1, 2, 4, 8, 16 s (31 s in all, time for a node to restart or a primary to move). The client
marks a node that refused the connection dead, so the next attempt goes to another node of
`ES_URL`. Re-sending is safe: ids are deterministic, so a chunk written twice is one chunk.
Writes are acknowledged once the primary shard has them (`wait_for_active_shards=1`).
"""

import json
import logging
import threading
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from elasticsearch import Elasticsearch, helpers

from core.documents import Chunk
from core.retry import ES_BULK, TRANSIENT_STATUSES, retrying
from core.schema import ChunkRecord
from core.text import ChineseTokenizer
from indexing.plan import Indexed, Plan, batched

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Passage:
    """A passage of a chunk (offsets in its text) and its vector."""

    start: int
    end: int
    vector: np.ndarray

    def to_source(self) -> dict[str, Any]:
        # 4 decimals: the index keeps int8 anyway, and the `_source` every fetch decompresses stays small
        return {"start": self.start, "end": self.end, "vector": np.round(self.vector, 4).tolist()}


@dataclass(frozen=True)
class Embedded:
    """A batch's chunk vectors, and each chunk's passages when the index holds passage vectors."""

    vectors: np.ndarray
    passages: list[list[Passage]] | None = None


class Progress(Protocol):
    """Where finished chunks are counted: the CLI's tqdm bar, or that bar and a run's observer."""

    def update(self, n: float | None = 1) -> bool | None: ...


class ErrorLog:
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


class TransientBulkItems(Exception):
    """Some items of a `_bulk` answered a retryable status (429, 503 ...); they are re-sent."""

    transient = True


def bulk_once(es: Elasticsearch, actions: list[dict[str, Any]]) -> list[tuple[bool, dict[str, Any]]]:
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
    es: Elasticsearch, actions: list[dict[str, Any]], attempts: int = ES_BULK.attempts
) -> list[tuple[bool, dict[str, Any]]]:
    """`actions` in one `_bulk`, with the `ES_BULK` retry policy; (ok, item) per action, in order.

    Items that still fail after the last attempt are returned as failures; a connection that
    never comes back raises.
    """
    results: dict[int, tuple[bool, dict[str, Any]]] = {}
    pending = list(range(len(actions)))

    def send() -> None:
        nonlocal pending
        answers = bulk_once(es, [actions[i] for i in pending])
        results.update(zip(pending, answers, strict=True))
        pending = [i for i in pending if not results[i][0] and results[i][1].get("status") in TRANSIENT_STATUSES]
        if pending:
            statuses = sorted({int(results[i][1]["status"]) for i in pending})
            raise TransientBulkItems(f"{len(pending)} of {len(actions)} items answered {statuses}")

    policy = replace(ES_BULK, attempts=attempts)
    with suppress(TransientBulkItems):  # the last answers stand, reported as failures by the caller
        retrying(policy, "Elasticsearch bulk write", logger)(send)
    return [results[i] for i in range(len(actions))]


class Writer:
    """Analyses and bulk-writes embedded batches; thread-safe counters for the summary."""

    def __init__(
        self, es: Elasticsearch, index: str, tokenizer: ChineseTokenizer, errors: ErrorLog, progress: Progress
    ) -> None:
        self._es, self._index, self._tokenizer = es, index, tokenizer
        self._errors, self._progress = errors, progress
        self._lock = threading.Lock()
        self.indexed = 0
        self.seconds = 0.0

    def _action(self, chunk: Chunk, vector: np.ndarray, passages: list[Passage] | None) -> dict[str, Any]:
        found = [passage.to_source() for passage in passages] if passages is not None else None
        source = ChunkRecord.of_chunk(chunk, vector.tolist(), self._tokenizer, found).to_source()
        return {"_op_type": "index", "_index": self._index, "_id": chunk.id, "_source": source}

    def write(self, batch: Sequence[Chunk], embedded: Embedded) -> None:
        started = time.perf_counter()
        indexed = 0
        passages: list[list[Passage] | None] = [*embedded.passages] if embedded.passages else [None] * len(batch)
        try:
            results = bulk_write(
                self._es,
                [
                    self._action(chunk, vector, found)
                    for chunk, vector, found in zip(batch, embedded.vectors, passages, strict=True)
                ],
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


def bulk_ops(es: Elasticsearch, actions: list[dict[str, Any]], stage: str, errors: ErrorLog) -> int:
    """Delete or update actions in groups of 1000; failures go to the error log; returns the successes."""
    done = 0
    for group in batched(actions, 1000):
        for ok, item in bulk_write(es, list(group)):
            if ok:
                done += 1
            else:
                errors.add(
                    {"stage": stage, "id": item["_id"], "status": item.get("status"), "error": item.get("error")}
                )
    return done


def clean_up(es: Elasticsearch, index: str, plan: Plan, orphans: list[Indexed], errors: ErrorLog) -> int:
    """Delete stale chunks and bring unchanged ones to their document's file hash and access
    groups, but only for documents and sources whose new chunks were all written (a failed file
    keeps its old version whole)."""
    stale = {found.id: found for found in [*plan.stale, *orphans]}
    deletions = [
        {"_op_type": "delete", "_index": index, "_id": id_}
        for id_, found in sorted(stale.items())
        if found.doc_id not in errors.failed_docs and found.source not in errors.failed_sources
    ]
    updates = [
        {"_op_type": "update", "_index": index, "_id": found.id, "doc": update}
        for found, update in plan.outdated
        if found.doc_id not in errors.failed_docs
    ]
    bulk_ops(es, updates, "update", errors)
    return bulk_ops(es, deletions, "delete", errors)
