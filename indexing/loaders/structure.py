"""Structured formats (PDF, Word, HTML, sheets, slides) to one `Document` with page, section,
slide and table offsets.

A loader turns its file into `Block`s in reading order: headings (level 1-3...), paragraphs and
table rows, each with its page (or slide) when the format has them. Blocks are joined by line
breaks (a block with `glue` continues the previous paragraph, e.g. across a page break); headings
build the section path 「第三章 药物治疗 / 3.2 用药」 that every chunk after them carries.
Consecutive rows of one table (the same `table` key) make a `TableSpan` whose first row is its
header: every chunk of the table begins with it (core/documents.py).
"""

from collections.abc import Iterable
from dataclasses import dataclass

from core.documents import SECTION_SEPARATOR, Document, TableSpan

CELL_SEPARATOR = " | "  # between the cells of a table row


@dataclass(frozen=True)
class Block:
    text: str
    level: int = 0  # 0: body text or table row; 1, 2, 3...: heading level
    page: int | None = None
    glue: str | None = None  # joins to the previous block instead of a line break ("" or " ")
    table: str | None = None  # the table a row belongs to (any key unique in the file); None: not a row
    row: int | None = None  # a spreadsheet row's number in its sheet
    slide: int | None = None


class _Tables:
    """The tables of a text being built: rows with one `table` key in a row, the first one the header."""

    def __init__(self) -> None:
        self.spans: list[TableSpan] = []
        self._key: str | None = None

    def add(self, block: Block, start: int, end: int) -> None:
        if block.table is None:
            self._key = None
        elif block.table != self._key:
            self._key = block.table
            self.spans.append(TableSpan(start, end, block.text.strip()))
        else:
            last = self.spans[-1]
            self.spans[-1] = TableSpan(last.start, end, last.header, (*last.rows, (start, block.row)))


def section_starts(text: str, headings: Iterable[tuple[int, int, int, str]], title: str) -> list[tuple[int, str]]:
    """(offset, section path) of `text` from its headings (start, end, level, heading text), in order.

    A first level-1 heading that repeats the document title is not a section. Headings with
    nothing but white space between them (「第三章」 then 「3.1」) start one section, from the first
    heading's offset, with the path of the last.
    """
    starts: list[tuple[int, str]] = []
    path: list[tuple[int, str]] = []
    run_start, previous_end = 0, None
    for offset, end, level, heading in headings:
        consecutive = previous_end is not None and not text[previous_end:offset].strip()
        if not consecutive:
            run_start = offset
        previous_end = end
        if level == 1 and heading == title and not path:
            continue
        path = [(lvl, part) for lvl, part in path if lvl < level] + [(level, heading)]
        if consecutive and starts and starts[-1][0] == run_start:
            starts.pop()
        starts.append((run_start, SECTION_SEPARATOR.join(part for _, part in path)))
    return starts


def _starts(starts: list[tuple[int, int]], offset: int, value: int | None) -> None:
    if value is not None and (not starts or starts[-1][1] != value):
        starts.append((offset, value))


def build_document(blocks: Iterable[Block], *, doc_id: str, source: str, title: str) -> Document:
    """One document of `blocks` (empty ones dropped) with its page, slide, section and table offsets."""
    parts: list[str] = []
    pages: list[tuple[int, int]] = []
    slides: list[tuple[int, int]] = []
    headings: list[tuple[int, int, int, str]] = []
    tables = _Tables()
    length = 0
    for block in blocks:
        content = block.text.strip()
        if not content:
            continue
        if parts:
            joiner = block.glue if block.glue is not None else "\n"
            parts.append(joiner)
            length += len(joiner)
        _starts(pages, length, block.page)
        _starts(slides, length, block.slide)
        if block.level:
            headings.append((length, length + len(content), block.level, content))
        tables.add(block, length, length + len(content))
        parts.append(content)
        length += len(content)
    text = "".join(parts)
    return Document(
        doc_id=doc_id,
        text=text,
        source=source,
        title=title,
        page_starts=pages,
        section_starts=section_starts(text, headings, title),
        slide_starts=slides,
        tables=tables.spans,
    )
