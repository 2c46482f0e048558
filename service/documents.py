"""The documents of a knowledge base, as the caller may see them: list one page, delete one.

A document is its chunks (same `doc_id`); what a list shows of it is read from doc values and
one chunk's `_source`, in one composite aggregation per page. Both the list and the deletion
apply the caller's scope (`core.access.Scope`) inside the query, so a
document restricted to groups the caller lacks is absent from the list and is a 404 to delete,
exactly like a document that does not exist. Both read through `core.reader.Reader`.
"""

from typing import Any

from pydantic import BaseModel, Field

from core.reader import Reader
from indexing.plan import scan_ids
from indexing.write import ErrorLog, bulk_ops

MAX_PAGE = 100


class DocumentInfo(BaseModel):
    doc_id: str
    source: str = Field(description="the file (its uploaded name) or text it came from")
    title: str
    chunks: int
    pages: int | None = Field(None, description="the last page any chunk is on (PDF); none for formats without pages")
    file_hash: str | None = Field(None, description="content hash of the whole file (none for texts)")
    chapter: int | None = Field(None, description="its chapter number, when the file was split into chapters")
    chapter_title: str | None = Field(None, description="its chapter's title (without the number)")
    indexed_at: str | None = Field(None, description="when its latest chunk was written")


class DocumentList(BaseModel):
    kb: str
    total: int = Field(description="documents the caller may read in the base (approximate above 3000)")
    documents: list[DocumentInfo]
    next: str | None = Field(None, description="pass as `after` for the next page; none on the last page")


class DocumentDeleted(BaseModel):
    kb: str
    doc_id: str
    deleted: int = Field(description="chunks deleted")


def list_documents(reader: Reader, size: int, after: str | None) -> DocumentList:
    """One page of `size` documents in doc_id order, those after `after`."""
    composite: dict[str, Any] = {"size": size, "sources": [{"doc_id": {"terms": {"field": "doc_id"}}}]}
    if after is not None:
        composite["after"] = {"doc_id": after}
    first = {
        "size": 1,
        "sort": [{"chunk_index": "asc"}],
        "_source": ["source", "title", "file_hash", "chapter", "chapter_title"],
    }
    per_document = {
        "first": {"top_hits": first},
        "indexed_at": {"max": {"field": "indexed_at"}},
        "pages": {"max": {"field": "page_end"}},
    }
    response = reader.search(
        {
            "size": 0,
            "aggs": {
                "documents": {"composite": composite, "aggs": per_document},
                "total": {"cardinality": {"field": "doc_id"}},
            },
        }
    )
    aggregations = response["aggregations"]
    buckets = aggregations["documents"]["buckets"]
    documents = []
    for bucket in buckets:
        source = bucket["first"]["hits"]["hits"][0]["_source"]
        pages = bucket["pages"]["value"]
        documents.append(
            DocumentInfo(
                doc_id=bucket["key"]["doc_id"],
                source=source.get("source", ""),
                title=source.get("title", ""),
                chunks=bucket["doc_count"],
                pages=int(pages) if pages is not None else None,
                file_hash=source.get("file_hash"),
                chapter=source.get("chapter"),
                chapter_title=source.get("chapter_title"),
                indexed_at=bucket["indexed_at"].get("value_as_string"),
            )
        )
    more = len(buckets) == size and "after_key" in aggregations["documents"]
    return DocumentList(
        kb=reader.scope.kb,
        total=int(aggregations["total"]["value"]),
        documents=documents,
        next=aggregations["documents"]["after_key"]["doc_id"] if more else None,
    )


class DeleteIncomplete(Exception):
    """Some chunks of a document could not be deleted (the deletion can be repeated)."""


def delete_document(reader: Reader, doc_id: str) -> int | None:
    """Delete the document's chunks, by id in bulk (the way the indexing job deletes stale chunks:
    Elasticsearch's minimal distribution has no `_delete_by_query`); None when it is absent or the
    caller may not read it."""
    es, kb = reader.es, reader.scope.kb
    ids = [found.id for found in scan_ids(reader, {"term": {"doc_id": doc_id}})]
    if not ids:
        return None
    errors = ErrorLog(None)
    deleted = bulk_ops(es, [{"_op_type": "delete", "_index": kb, "_id": id_} for id_ in ids], "delete", errors)
    es.indices.refresh(index=kb)
    if errors.count:
        raise DeleteIncomplete(f"{errors.count} of {len(ids)} chunks of {doc_id!r} could not be deleted: try again")
    return deleted
