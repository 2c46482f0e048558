"""Documents and their chunks: what a loader produces and what one index entry holds.

`document_chunks` is the one place that decides how a document is cut and what id each
chunk gets, so the indexing job, the evaluation and the tests always agree.
"""

from dataclasses import dataclass, field
from typing import Any

from core.chunking import split_text
from core.schema import chunk_id, content_hash


@dataclass
class Document:
    doc_id: str
    text: str
    source: str
    title: str = ""
    chapter: int | None = None
    chapter_title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Chunk:
    """One chunk of a document, with the id the index gives it."""

    document: Document
    index: int
    text: str
    id: str


def document_chunks(document: Document, chunk_size: int, chunk_overlap: int) -> list[Chunk]:
    """The chunks of `document` with their deterministic ids, exactly as the job indexes them."""
    return [
        Chunk(document, i, text, chunk_id(document.doc_id, i, content_hash(text)))
        for i, text in enumerate(split_text(document.text, chunk_size, chunk_overlap))
    ]
