"""The knowledge-base index: its mapping, the fields queries read, chunk ids, the search modes.

Indexing writes exactly what `chunk_source` returns and the service reads the fields named
here, so both sides agree on one schema.
"""

import hashlib
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from core.embeddings import Embedder
from core.text import ChineseTokenizer, bigram_terms, join_terms

SCHEMA_VERSION = 3  # 2: page, section and file-hash fields; 3: filterable metadata (added to older indices in place)

# The `_source` fields a search hit carries back (never the embedding or the analysed terms).
HIT_SOURCE_FIELDS = [
    "text",
    "title",
    "source",
    "doc_id",
    "chunk_index",
    "chapter",
    "chapter_title",
    "page_start",
    "page_end",
    "section",
    "metadata",
]

# Provenance of a chunk (pages of a PDF, heading path) and the hash of the file it came from.
PROVENANCE_PROPERTIES: dict[str, Any] = {
    "page_start": {"type": "integer"},
    "page_end": {"type": "integer"},
    "section": {"type": "keyword"},
    "file_hash": {"type": "keyword"},
}

# A filterable copy of the document's metadata (`metadata` itself is stored, not indexed): every
# leaf value a keyword under its dotted key (`metadata_terms.author`), longer values unindexed.
# Chunks written before schema 3 have no copy until they are indexed again.
METADATA_PROPERTIES: dict[str, Any] = {"metadata_terms": {"type": "flattened", "ignore_above": 1024}}

# Fields added after the first schema: `core.store.ensure_index` puts them into older indices.
ADDED_PROPERTIES: dict[str, Any] = {**PROVENANCE_PROPERTIES, **METADATA_PROPERTIES}


class Mode(StrEnum):
    """A retrieval mode: one ranked list, or `hybrid`, the fusion of several."""

    VECTOR = "vector"
    BM25 = "bm25"
    BIGRAM = "bigram"
    STANDARD = "standard"
    HYBRID = "hybrid"

    @classmethod
    def from_str(cls, value: str) -> "Mode":
        """The mode named `value`; the error lists every valid name."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"unknown mode {value!r}: use one of {', '.join(m.value for m in cls)}") from None


LIST_MODES: tuple[Mode, ...] = (Mode.VECTOR, Mode.BM25, Mode.BIGRAM, Mode.STANDARD)


def index_body(embedder: Embedder, shards: int = 1, replicas: int = 0) -> dict[str, Any]:
    """Settings and mapping of one knowledge-base index (server features only)."""
    whitespace_text = {"type": "text", "analyzer": "whitespace"}
    return {
        "settings": {"number_of_shards": shards, "number_of_replicas": replicas},
        "mappings": {
            "_meta": {"embedder": embedder.name, "dim": embedder.dim, "schema_version": SCHEMA_VERSION},
            "dynamic": "strict",
            "properties": {
                # Original text; `standard` analysis only serves the single-character baseline.
                "text": {"type": "text", "analyzer": "standard"},
                "tokens": whitespace_text,
                "bigrams": whitespace_text,
                "title": {"type": "text", "analyzer": "standard"},
                "title_tokens": whitespace_text,
                "embedding": {
                    "type": "dense_vector",
                    "dims": embedder.dim,
                    "index": True,
                    "similarity": "cosine",
                    "index_options": {"type": "hnsw", "m": 16, "ef_construction": 100},
                },
                "doc_id": {"type": "keyword"},
                "source": {"type": "keyword"},
                "chunk_index": {"type": "integer"},
                "chapter": {"type": "integer"},
                "chapter_title": {"type": "keyword"},
                "content_hash": {"type": "keyword"},
                "indexed_at": {"type": "date"},
                "metadata": {"type": "object", "enabled": False},
                **ADDED_PROPERTIES,
            },
        },
    }


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def chunk_id(doc_id: str, chunk_index: int, text_hash: str) -> str:
    """Deterministic: the same document, position and content always give the same id."""
    return hashlib.sha1(f"{doc_id}\x1f{chunk_index}\x1f{text_hash}".encode()).hexdigest()


# The doc-value fields a chunk's id is derived from (`chunk_id_from_fields`).
ID_FIELDS = ["doc_id", "chunk_index", "content_hash"]


def chunk_id_from_fields(fields: dict[str, list[Any]]) -> str:
    """A hit's chunk id from its `ID_FIELDS` doc values, without reading its stored fields.

    Reading `_id` makes Elasticsearch decompress the stored document (with its embedding) of
    every hit; the three doc values cost a fraction of that on a 50-deep list.
    """
    return chunk_id(fields["doc_id"][0], fields["chunk_index"][0], fields["content_hash"][0])


def chunk_source(
    *,
    tokenizer: ChineseTokenizer,
    text: str,
    embedding: list[float],
    doc_id: str,
    chunk_index: int,
    source: str,
    title: str = "",
    chapter: int | None = None,
    chapter_title: str | None = None,
    metadata: dict[str, Any] | None = None,
    page_start: int | None = None,
    page_end: int | None = None,
    section: str | None = None,
    file_hash: str | None = None,
) -> dict[str, Any]:
    """The `_source` of one chunk: analysis done here so every node indexes the same terms."""
    return {
        "text": text,
        "tokens": join_terms(tokenizer.index_terms(text)),
        "bigrams": join_terms(bigram_terms(text)),
        "title": title,
        "title_tokens": join_terms(tokenizer.index_terms(title)) if title else "",
        "embedding": embedding,
        "doc_id": doc_id,
        "source": source,
        "chunk_index": chunk_index,
        "chapter": chapter,
        "chapter_title": chapter_title,
        "content_hash": content_hash(text),
        "indexed_at": datetime.now(UTC).isoformat(),
        "metadata": metadata or {},
        "metadata_terms": metadata or {},
        "page_start": page_start,
        "page_end": page_end,
        "section": section,
        "file_hash": file_hash,
    }
