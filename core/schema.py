"""The knowledge-base index: the chunk record and its mapping, chunk ids, the search modes.

`ChunkRecord` is the one statement of what a chunk holds: each field carries its mapping, so
the index mapping, the fields a search hit reads back and what indexing writes all come from
it. A new field is added there, once.
"""

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Self

from pydantic import BaseModel, Field

from core.chunking import PassageWindows
from core.config import parse_name
from core.contract import json_depth
from core.embeddings import Embedder
from core.text import ChineseTokenizer, bigram_terms, join_terms

if TYPE_CHECKING:  # core.documents imports this module
    from core.documents import Chunk

# 2: page, section and file-hash fields; 3: filterable metadata; 4: access groups (added to older indices in
# place); 5: passage vectors (a new index only: a base built before keeps one vector per chunk until rebuilt);
# 6: sheet, rows and slide provenance (added to older indices in place)
SCHEMA_VERSION = 6


@dataclass(frozen=True)
class Mapped:
    """A chunk field's Elasticsearch mapping (read from the field's annotation)."""

    type: str
    options: tuple[tuple[str, Any], ...] = ()

    def mapping(self) -> dict[str, Any]:
        return {"type": self.type, **dict(self.options)}


KEYWORD = Mapped("keyword")
INTEGER = Mapped("integer")
STANDARD = Mapped("text", (("analyzer", "standard"),))
WHITESPACE = Mapped("text", (("analyzer", "whitespace"),))  # terms computed in Python, joined by spaces
FLATTENED = Mapped("flattened", (("ignore_above", 1024),))
# A chunk's passages (core.chunking.PassageWindows): offsets in the chunk's `text` and a vector each,
# searched by a nested kNN (its dims, similarity and HNSW: `index_body`).
PASSAGES = Mapped(
    "nested",
    (("properties", {"start": INTEGER.mapping(), "end": INTEGER.mapping(), "vector": {"type": "dense_vector"}}),),
)
# How deep a document's `metadata` may nest: the default `depth_limit` of a flattened field
# (`metadata_terms`); Elasticsearch refuses a deeper one when the chunk is written.
METADATA_DEPTH = 20


def check_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """`metadata`, when it nests no deeper than METADATA_DEPTH levels and every integer fits a
    signed 64-bit long (the JSON writer and Elasticsearch take no larger: the chunk would fail at
    write time, after a 202); else a `ValueError` saying so."""
    if json_depth(metadata) > METADATA_DEPTH:
        raise ValueError(f"metadata nests deeper than {METADATA_DEPTH} levels, the most a chunk's metadata may")
    if _has_huge_integer(metadata):
        raise ValueError(f"metadata holds an integer outside {-(2**63)}..{2**63 - 1}: send it as a string")
    return metadata


def _has_huge_integer(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_huge_integer(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_huge_integer(item) for item in value)
    return isinstance(value, int) and not -(2**63) <= value < 2**63


class ChunkFields(BaseModel):
    """What a search hit reads back of a chunk (never the embedding or the analysed terms)."""

    text: Annotated[str, STANDARD] = ""  # the original; `standard` analysis only serves the single-character list
    title: Annotated[str, STANDARD] = ""
    source: Annotated[str, KEYWORD] = ""
    doc_id: Annotated[str, KEYWORD] = ""
    chunk_index: Annotated[int, INTEGER] = 0
    chapter: Annotated[int | None, INTEGER] = None
    chapter_title: Annotated[str | None, KEYWORD] = None
    page_start: Annotated[int | None, INTEGER] = None
    page_end: Annotated[int | None, INTEGER] = None
    section: Annotated[str | None, KEYWORD] = None  # heading path, e.g. "第三章 药物治疗 / 3.2 用药"
    sheet: Annotated[str | None, KEYWORD] = None  # a spreadsheet's sheet name (one document per sheet)
    row_start: Annotated[int | None, INTEGER] = None  # the sheet's row numbers the chunk holds (as the sheet shows)
    row_end: Annotated[int | None, INTEGER] = None
    slide: Annotated[int | None, INTEGER] = None  # a deck's slide number (1-based)
    # The document's own metadata (a JSONL record's "metadata"), stored, not indexed: `metadata_terms` is.
    metadata: Annotated[dict[str, Any], Mapped("object", (("enabled", False),))] = Field(default_factory=dict)

    @classmethod
    def from_source(cls, source: dict[str, Any], **values: Any) -> Self:
        """The fields of a chunk's `_source` (a null or absent one gets its default); `values`
        are those a subclass adds (a hit's id and score)."""
        known = {name: value for name, value in source.items() if name in cls.model_fields and value is not None}
        return cls.model_validate({**known, **values})


class ChunkRecord(ChunkFields):
    """One chunk as indexed: `of_chunk` does the analysis, so every node indexes the same terms."""

    tokens: Annotated[str, WHITESPACE]  # jieba index terms → BM25
    bigrams: Annotated[str, WHITESPACE]  # CJK character bigrams → the second BM25 field
    title_tokens: Annotated[str, WHITESPACE] = ""
    embedding: Annotated[list[float], Mapped("dense_vector")]  # dims, similarity, HNSW: `index_body`
    content_hash: Annotated[str, KEYWORD]
    indexed_at: Annotated[str, Mapped("date")]
    # `metadata` again, filterable: every leaf value a keyword under its dotted key (`metadata_terms.author`),
    # values over 1024 characters unindexed. Chunks written before schema 3 have none until indexed again.
    metadata_terms: Annotated[dict[str, Any], FLATTENED] = Field(default_factory=dict)
    file_hash: Annotated[str | None, KEYWORD] = None  # of the whole file: `--sync` skips files the index holds
    # The groups that may read the chunk, filtered inside every search (retrieval.lists.DocumentAccess);
    # not a hit field, so a search never shows which groups exist.
    access: Annotated[list[str], KEYWORD] = Field(default_factory=list)
    # `{start, end, vector}` per passage; None (not written) in a base built without passage vectors.
    passages: Annotated[list[dict[str, Any]] | None, PASSAGES] = None

    @classmethod
    def of_chunk(
        cls,
        chunk: "Chunk",
        embedding: list[float],
        tokenizer: ChineseTokenizer,
        passages: list[dict[str, Any]] | None = None,
    ) -> "ChunkRecord":
        """Built without validation: the strict mapping is the check, so Elasticsearch rejects a
        bad chunk (a 400 for that item in the error file) without failing the chunks beside it."""
        document = chunk.document
        return cls.model_construct(
            passages=passages,
            text=chunk.text,
            tokens=join_terms(tokenizer.index_terms(chunk.text)),
            bigrams=join_terms(bigram_terms(chunk.text)),
            title=document.title,
            title_tokens=join_terms(tokenizer.index_terms(document.title)) if document.title else "",
            embedding=embedding,
            doc_id=document.doc_id,
            source=document.source,
            chunk_index=chunk.index,
            chapter=document.chapter,
            chapter_title=document.chapter_title,
            content_hash=chunk.text_hash,
            indexed_at=datetime.now(UTC).isoformat(),
            metadata=document.metadata,
            metadata_terms=document.metadata,
            page_start=chunk.page_start,
            page_end=chunk.page_end,
            section=chunk.section,
            sheet=document.sheet,
            row_start=chunk.row_start,
            row_end=chunk.row_end,
            slide=chunk.slide,
            file_hash=document.file_hash,
            access=document.access,
        )

    def to_source(self) -> dict[str, Any]:
        """The `_source` indexing writes (a bad value is Elasticsearch's to reject, see `of_chunk`)."""
        return self.model_dump(warnings=False, exclude={"passages"} if self.passages is None else None)


def _properties(model: type[BaseModel]) -> dict[str, dict[str, Any]]:
    """Each field's mapping, from the `Mapped` in its annotation."""
    return {
        name: next(m.mapping() for m in info.metadata if isinstance(m, Mapped))
        for name, info in model.model_fields.items()
    }


CHUNK_PROPERTIES = _properties(ChunkRecord)
# The `_source` fields a search hit carries back.
HIT_SOURCE_FIELDS = list(ChunkFields.model_fields)
# Provenance of a chunk (pages of a PDF, heading path) and the hash of the file it came from:
# schema version 2, added to older indices in place.
PROVENANCE_PROPERTIES = {
    name: CHUNK_PROPERTIES[name]
    for name in ("page_start", "page_end", "section", "file_hash", "sheet", "row_start", "row_end", "slide")
}
# Fields added after the first schema: `core.store.ensure_index` puts them into older indices.
ADDED_PROPERTIES = PROVENANCE_PROPERTIES | {name: CHUNK_PROPERTIES[name] for name in ("metadata_terms", "access")}


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
        return parse_name(cls, value, "mode")


LIST_MODES: tuple[Mode, ...] = (Mode.VECTOR, Mode.BM25, Mode.BIGRAM, Mode.STANDARD)


PASSAGE_VECTOR_FIELD = "passages.vector"


def index_body(
    embedder: Embedder, shards: int = 1, replicas: int = 0, passages: PassageWindows | None = None
) -> dict[str, Any]:
    """Settings and mapping of one knowledge-base index (server features only); with `passages`,
    each chunk holds its passage vectors too (int8 HNSW: a quarter of float32's memory) and
    `_meta.passages` records the windows."""
    hnsw = {"m": 16, "ef_construction": 100}
    vector = {"dims": embedder.dim, "index": True, "similarity": "cosine"}
    properties = CHUNK_PROPERTIES | {
        "embedding": CHUNK_PROPERTIES["embedding"] | vector | {"index_options": {"type": "hnsw", **hnsw}}
    }
    meta: dict[str, Any] = {"embedder": embedder.name, "dim": embedder.dim, "schema_version": SCHEMA_VERSION}
    if passages is None:
        del properties["passages"]
    else:
        nested = PASSAGES.mapping()
        passage_vector = vector | {"index_options": {"type": "int8_hnsw", **hnsw}}
        properties["passages"] = nested | {
            "properties": nested["properties"] | {"vector": {"type": "dense_vector"} | passage_vector}
        }
        meta["passages"] = passages.to_meta()
    mappings: dict[str, Any] = {"_meta": meta, "dynamic": "strict", "properties": properties}
    if passages is not None:
        # The passage vectors are indexed, not kept in `_source`: there they were three quarters of
        # the index, and every hit's fetch decompressed and parsed them. A chunk is therefore never
        # updated in place (an update rebuilds it from `_source`): indexing/plan.py rewrites it whole.
        mappings["_source"] = {"excludes": [PASSAGE_VECTOR_FIELD]}
    return {"settings": {"number_of_shards": shards, "number_of_replicas": replicas}, "mappings": mappings}


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
