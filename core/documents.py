"""Documents and their chunks: what a loader produces and what one index entry holds.

`document_chunks` is the one place that decides how a document is cut and what id each
chunk gets, so the indexing job, the evaluation and the tests always agree. A document with
sections (headings) is cut section by section, so every chunk belongs to exactly one section
path; a document without sections is cut as one text, exactly as before sections existed.
`source_label` is the one wording of a chunk's provenance (「《指南》第 3 页 · 3.2 用药」) that
search hits, citations and the generation prompt all show.
"""

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

from core.chunking import split_spans
from core.schema import chunk_id, content_hash

SECTION_SEPARATOR = " / "


@dataclass
class Document:
    doc_id: str
    text: str
    source: str
    title: str = ""
    chapter: int | None = None
    chapter_title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # Where each page and each section path starts, as (character offset in `text`, value),
    # sorted by offset; empty when the format has no pages or no headings.
    page_starts: list[tuple[int, int]] = field(default_factory=list)
    section_starts: list[tuple[int, str]] = field(default_factory=list)
    # Hash of the whole file the document came from: `--sync` skips files the index holds.
    file_hash: str | None = None
    # The groups that may read it (core.access.DocumentAccess); empty: whoever may read the base.
    access: list[str] = field(default_factory=list)
    # Whose reach wrote it ("": the whole base's, as the indexing job and admins write). An upload by
    # a caller with document groups hashes its chunks within its own space, so they never take the
    # id of a chunk that caller may not read (docs/api.md, "Uploads and hidden documents").
    id_space: str = ""


@dataclass(frozen=True)
class Chunk:
    """One chunk of a document, with the id the index gives it and where it came from."""

    document: Document
    index: int
    text: str
    id: str
    text_hash: str
    page_start: int | None = None
    page_end: int | None = None
    section: str | None = None


def _segments(document: Document) -> list[tuple[int, int, str | None]]:
    """(start, end, section path) of each section; the whole text when there are none."""
    starts = [(offset, section) for offset, section in document.section_starts if offset < len(document.text)]
    if not starts:
        return [(0, len(document.text), None)]
    bounds = [(0, None), *starts] if starts[0][0] > 0 else starts
    ends = [offset for offset, _ in bounds[1:]] + [len(document.text)]
    return [(start, end, section) for (start, section), end in zip(bounds, ends, strict=True) if end > start]


def _page_at(page_starts: list[tuple[int, int]], offset: int) -> int | None:
    position = bisect_right([start for start, _ in page_starts], offset) - 1
    return page_starts[position][1] if position >= 0 else None


def document_chunks(document: Document, chunk_size: int, chunk_overlap: int) -> list[Chunk]:
    """The chunks of `document` with their deterministic ids, exactly as the job indexes them."""
    chunks: list[Chunk] = []
    for start, end, section in _segments(document):
        for span in split_spans(document.text[start:end], chunk_size, chunk_overlap):
            index = len(chunks)
            first = _page_at(document.page_starts, start + span.start)
            last = _page_at(document.page_starts, start + span.end - 1)
            text_hash = content_hash(f"{document.id_space}\x1e{span.text}" if document.id_space else span.text)
            id_ = chunk_id(document.doc_id, index, text_hash)
            chunks.append(Chunk(document, index, span.text, id_, text_hash, first, last, section))
    return chunks


def page_label(page_start: int | None, page_end: int | None) -> int | str | None:
    """3 for one page, "3-4" for a chunk that spans pages, None when the format has no pages."""
    if page_start is None:
        return None
    return page_start if page_end in (None, page_start) else f"{page_start}-{page_end}"


def source_label(
    *,
    title: str,
    source: str,
    chapter: int | None = None,
    chapter_title: str | None = None,
    page: int | str | None = None,
    section: str | None = None,
) -> str:
    """How a chunk is cited: 《title》第 3 页 · 3.2 用药 (the deepest section only), or for a
    chapter of a novel `第12章 title · section · source`; unknown parts are left out."""
    leaf = section.rsplit(SECTION_SEPARATOR, 1)[-1] if section else ""
    if chapter is not None:
        return " · ".join(part for part in (f"第{chapter}章 {chapter_title or ''}".strip(), leaf, source) if part)
    where = f"《{title or source}》" + (f"第 {page} 页" if page is not None else "")
    return " · ".join(part for part in (where, leaf) if part)
