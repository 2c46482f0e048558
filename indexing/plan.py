"""Plan: which chunks a run adds, which are already indexed, and which it deletes or re-hashes.

Chunk ids are deterministic (`core.schema.chunk_id`: document id, position, content hash), so
one `doc_id` lookup per group of documents tells which chunks are already indexed (skipped,
never re-embedded, but brought to their document's file hash and access groups) and which
indexed chunks are stale; `orphans` finds the chunks of documents
the run does not give that its `RunScope` removes. Everything is read from doc values.
"""

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from core.documents import Chunk, Document, document_chunks
from core.reader import Reader
from indexing.options import Chunking, Partition, RunScope

_LOOKUP_GROUP = 256  # documents per existing-chunk lookup

T = TypeVar("T")


@dataclass(frozen=True)
class Indexed:
    """A chunk already in the index, from doc values."""

    id: str
    doc_id: str
    source: str = ""
    file_hash: str | None = None
    access: tuple[str, ...] = ()  # sorted and distinct, as doc values give them


@dataclass
class Plan:
    """New chunks to embed and write; indexed ones unchanged, stale, or with outdated fields."""

    chunks: int = 0
    unchanged: int = 0
    new: list[Chunk] = field(default_factory=list)
    stale: list[Indexed] = field(default_factory=list)
    # Unchanged chunks with the fields to update: an older file hash (their file changed
    # elsewhere) or other access groups (the same text uploaded with new groups).
    outdated: list[tuple[Indexed, dict[str, Any]]] = field(default_factory=list)


def batched(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def scan_ids(reader: Reader, query: dict[str, Any]) -> Iterator[Indexed]:
    """Every chunk matching `query` that the reader sees, from doc values only."""
    body = {"query": query, "_source": False, "docvalue_fields": ["doc_id", "source", "file_hash", "access"]}
    for hit in reader.scan(body):
        fields = hit.get("fields", {})
        yield Indexed(
            hit["_id"],
            fields.get("doc_id", [""])[0],
            fields.get("source", [""])[0],
            fields.get("file_hash", [None])[0],
            tuple(fields.get("access", ())),
        )


def indexed_files(reader: Reader) -> dict[str, set[str | None]]:
    """source → the file hashes its chunks carry (None: indexed before hashes were kept); {} when no index.

    One hash means the file is indexed whole as that version; more mean a run was interrupted.
    """
    if not reader.es.indices.exists(index=reader.scope.kb):
        return {}
    files: dict[str, set[str | None]] = {}
    sources = [
        {"source": {"terms": {"field": "source"}}},
        {"hash": {"terms": {"field": "file_hash", "missing_bucket": True}}},
    ]
    after: dict[str, Any] | None = None
    while True:
        composite: dict[str, Any] = {"size": 1000, "sources": sources, **({"after": after} if after else {})}
        result = reader.search({"size": 0, "aggs": {"files": {"composite": composite}}})["aggregations"]["files"]
        for bucket in result["buckets"]:
            files.setdefault(bucket["key"]["source"], set()).add(bucket["key"]["hash"])
        after = result.get("after_key")
        if not result["buckets"] or after is None:
            return files


def outdated_fields(found: Indexed, document: Document) -> dict[str, Any]:
    """What an unchanged chunk must be updated with to match its document (empty: nothing)."""
    update: dict[str, Any] = {}
    if document.file_hash and found.file_hash != document.file_hash:
        update["file_hash"] = document.file_hash
    if found.access != tuple(sorted(set(document.access))):
        update["access"] = document.access
    return update


def plan_chunks(
    reader: Reader, documents: list[Document], chunking: Chunking, empty: bool, rewrite_outdated: bool = False
) -> Plan:
    """What indexing `documents` into the reader's base adds, keeps, deletes and re-hashes (`empty`: no
    lookups). Only chunks the reader sees count: a chunk it may not read is neither kept nor deleted.
    `rewrite_outdated`: a chunk with outdated fields is written anew rather than updated in place (a
    base whose `_source` lacks its passage vectors, core.schema.index_body)."""
    plan = Plan()
    for group in batched(documents, _LOOKUP_GROUP):
        existing: dict[str, dict[str, Indexed]] = {}
        if not empty:
            query = {"terms": {"doc_id": [document.doc_id for document in group]}}
            for found in scan_ids(reader, query):
                existing.setdefault(found.doc_id, {})[found.id] = found
        for document in group:
            chunks = document_chunks(document, chunking.size, chunking.overlap)
            indexed = existing.get(document.doc_id, {})
            ids = {chunk.id for chunk in chunks}
            outdated = {
                id_: u for id_, found in indexed.items() if id_ in ids and (u := outdated_fields(found, document))
            }
            rewritten = outdated.keys() if rewrite_outdated else set()
            plan.chunks += len(chunks)
            plan.new.extend(chunk for chunk in chunks if chunk.id not in indexed or chunk.id in rewritten)
            plan.unchanged += len(ids & indexed.keys()) - len(rewritten)
            plan.stale.extend(found for id_, found in sorted(indexed.items()) if id_ not in ids)
            if not rewrite_outdated:
                plan.outdated.extend((indexed[id_], update) for id_, update in sorted(outdated.items()))
    return plan


def orphans(reader: Reader, documents: list[Document], scope: RunScope) -> list[Indexed]:
    """Chunks of documents not given that `scope` removes: from the given sources
    (`replace_sources`: all, or those named), of removed sources, or anywhere (`prune`).

    With a partition, only documents of that partition count: the others belong to other workers.
    """
    given = {document.doc_id for document in documents}
    sources = {document.source for document in documents}
    replaced = sources if scope.replace_sources is True else sources & set(scope.replace_sources or ())
    targets = sorted(replaced | set(scope.remove_sources))
    if not (targets or scope.prune):
        return []
    query: dict[str, Any] = {"match_all": {}} if scope.prune else {"terms": {"source": targets}}
    partition = scope.partition
    return [
        found
        for found in scan_ids(reader, query)
        if found.doc_id not in given and (partition is None or partition.contains(found.doc_id))
    ]


def checked_documents(documents: Iterable[Document], partition: Partition | None) -> list[Document]:
    """The documents of this run (of `partition`), refusing duplicate ids."""
    documents = list(documents)
    duplicates = sorted(doc_id for doc_id, n in Counter(d.doc_id for d in documents).items() if n > 1)
    if duplicates:
        raise ValueError(f"duplicate document ids: {duplicates[:5]}")
    return [d for d in documents if partition.contains(d.doc_id)] if partition else documents
