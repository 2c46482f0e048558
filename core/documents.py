"""Documents and their chunks: what a loader produces and what one index entry holds.

`document_chunks` is the one place that decides how a document is cut and what id each
chunk gets, so the indexing job, the evaluation and the tests always agree. A document with
sections (headings) is cut section by section, so every chunk belongs to exactly one section
path; a document without sections is cut as one text, exactly as before sections existed.
A table in a document (`TableSpan`: a spreadsheet's sheet, a table of a PDF, Word or HTML file)
is cut on its rows instead, and every chunk of it begins with its header row, so that row 35
still says what its columns are. `source_label` is the one wording of a chunk's provenance
(「《指南》第 3 页 · 3.2 用药」, 「《差旅标准》工作表「住宿」第 35-52 行」, 「《计划》第 3 张幻灯片」)
that search hits, citations and the generation prompt all show.
"""

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

from core.chunking import split_spans
from core.schema import chunk_id, content_hash

SECTION_SEPARATOR = " / "


@dataclass(frozen=True)
class TableSpan:
    """A table in a document's text: from its header line at `start` to the end of its last row
    (`end`, exclusive), and where each row after the header starts with its number in its sheet
    (None outside spreadsheets), in order."""

    start: int
    end: int
    header: str
    rows: tuple[tuple[int, int | None], ...] = ()


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
    # A deck's slides, as (offset, slide number), and the tables of the text, in order.
    slide_starts: list[tuple[int, int]] = field(default_factory=list)
    tables: list[TableSpan] = field(default_factory=list)
    # The sheet a spreadsheet's document is (one document per sheet).
    sheet: str | None = None
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
    row_start: int | None = None
    row_end: int | None = None
    slide: int | None = None


@dataclass(frozen=True)
class _Piece:
    """A chunk's text and where it lies in its document; a table's chunk begins with the table's
    header (not at `start`) and knows its rows."""

    start: int
    end: int
    text: str
    rows: tuple[int | None, int | None] = (None, None)


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


def _prose(text: str, start: int, end: int, chunk_size: int, chunk_overlap: int) -> list[_Piece]:
    return [
        _Piece(start + span.start, start + span.end, span.text)
        for span in split_spans(text[start:end], chunk_size, chunk_overlap)
    ]


def _table_rows(text: str, table: TableSpan, room: int) -> list[tuple[int, int, str, int | None]]:
    """(start, end, text, number) of each row of `table`, a row longer than `room` cut into pieces of it."""
    bounds = [offset for offset, _ in table.rows[1:]] + [table.end]
    rows: list[tuple[int, int, str, int | None]] = []
    for (start, number), end in zip(table.rows, bounds, strict=True):
        row = text[start:end].strip()
        rows.extend((start, end, row[at : at + room], number) for at in range(0, len(row), room))
    return rows


def _table(text: str, table: TableSpan, chunk_size: int) -> list[_Piece]:
    """A table's chunks: whole rows packed up to `chunk_size` behind the header row (at most half a chunk)."""
    header = table.header[: chunk_size // 2]
    room = chunk_size - len(header) - 1
    groups: list[list[tuple[int, int, str, int | None]]] = []
    for row in _table_rows(text, table, room):
        if groups and sum(len(kept[2]) + 1 for kept in groups[-1]) + len(row[2]) <= room:
            groups[-1].append(row)
        else:
            groups.append([row])
    if not groups:
        return [_Piece(table.start, table.end, header)]
    return [
        _Piece(
            table.start if number == 0 else group[0][0],
            group[-1][1],
            "\n".join([header, *(row[2] for row in group)]),
            (group[0][3], group[-1][3]),
        )
        for number, group in enumerate(groups)
    ]


def _pieces(document: Document, start: int, end: int, chunk_size: int, chunk_overlap: int) -> list[_Piece]:
    """The chunks of `document.text[start:end]`: one when it fits (a slide, a small sheet), else prose
    by sentences and each table inside it by rows."""
    tables = [table for table in document.tables if start <= table.start < end]
    whole = _prose(document.text, start, end, chunk_size, chunk_overlap)
    if len(whole) <= 1:
        numbers = [number for table in tables for _, number in table.rows if number is not None]
        rows = (min(numbers), max(numbers)) if numbers else (None, None)
        return [_Piece(piece.start, piece.end, piece.text, rows) for piece in whole]
    pieces: list[_Piece] = []
    cursor = start
    for table in tables:
        pieces += _prose(document.text, cursor, table.start, chunk_size, chunk_overlap)
        pieces += _table(document.text, table, chunk_size)
        cursor = max(cursor, table.end)
    return pieces + _prose(document.text, cursor, end, chunk_size, chunk_overlap)


def document_chunks(document: Document, chunk_size: int, chunk_overlap: int) -> list[Chunk]:
    """The chunks of `document` with their deterministic ids, exactly as the job indexes them."""
    chunks: list[Chunk] = []
    for start, end, section in _segments(document):
        for piece in _pieces(document, start, end, chunk_size, chunk_overlap):
            index = len(chunks)
            first = _page_at(document.page_starts, piece.start)
            last = _page_at(document.page_starts, piece.end - 1)
            text_hash = content_hash(f"{document.id_space}\x1e{piece.text}" if document.id_space else piece.text)
            id_ = chunk_id(document.doc_id, index, text_hash)
            slide = _page_at(document.slide_starts, piece.end - 1)  # a title-only slide joins the next
            chunks.append(
                Chunk(document, index, piece.text, id_, text_hash, first, last, section, *piece.rows, slide=slide)
            )
    return chunks


def page_label(page_start: int | None, page_end: int | None) -> int | str | None:
    """3 for one page (or row), "3-4" for a chunk that spans pages, None when the format has no pages."""
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
    sheet: str | None = None,
    rows: int | str | None = None,
    slide: int | None = None,
) -> str:
    """How a chunk is cited: 《title》第 3 页 · 3.2 用药 (the deepest section only), 《title》工作表「住宿」
    第 35-52 行, 《title》第 3 张幻灯片 · its title, or for a chapter of a novel `第12章 title · section ·
    source`; unknown parts are left out."""
    leaf = section.rsplit(SECTION_SEPARATOR, 1)[-1] if section else ""
    if chapter is not None:
        return " · ".join(part for part in (f"第{chapter}章 {chapter_title or ''}".strip(), leaf, source) if part)
    where = f"《{title or source}》" + (f"第 {page} 页" if page is not None else "")
    where += f"第 {slide} 张幻灯片" if slide is not None else ""
    where += f"工作表「{sheet}」" if sheet else ""
    where += f"第 {rows} 行" if rows is not None else ""
    return " · ".join(part for part in (where, leaf) if part)
