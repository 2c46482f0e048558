"""PDF with a text layer (pdfplumber, on pdfminer.six): pages, headings, paragraphs, tables.

- Every line keeps its page; a chunk knows the pages it spans.
- Lines that repeat at the top or bottom of most pages (running headers, footers, page
  numbers; digits ignored when comparing) are removed.
- Lines are joined into paragraphs by layout (a line that reaches the right margin continues
  into the next unless that one is indented or far below), across page breaks too; CJK
  lines join without a space, Latin words with one, a hyphenated word is made whole.
- Headings come from the outline (bookmarks) when the file has one, else from font size:
  lines clearly larger than the body text, the largest size being level 1.
- Ruled tables become one line per row, cells separated by ` | `.

Why pdfplumber: docs/indexing.md has the measurement against pypdf and bare pdfminer.six.
"""

import io
import logging
import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from core.documents import Document
from indexing.loaders.base import BadFileError
from indexing.loaders.structure import CELL_SEPARATOR, Block, build_document

logger = logging.getLogger(__name__)

_CJK = "\u2e80-\u2fff\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_CJK_CHAR = re.compile(f"[{_CJK}]")
_DIGITS = re.compile(r"\d+")
_CID = re.compile(r"\(cid:\d+\)")  # pdfminer's stand-in for a glyph that maps to no character
_MAX_CID_SHARE = 0.05
_EDGE_LINES = 2  # lines at the top and at the bottom of a page that may be running headers/footers
_HEADING_RATIO = 1.1  # a heading's font is at least this much larger than the body's (12 pt over 10.5 pt)
_MAX_HEADING_CHARS = 40


@dataclass(frozen=True)
class _Line:
    text: str
    page: int
    x0: float
    x1: float
    top: float
    bottom: float
    size: float
    table: bool = False
    level: int = 0


def parse_pdf(data: bytes, source: str, stem: str) -> list[Document]:
    """One document of the whole file; raises `BadFileError` for files that cannot be read."""
    if b"%%EOF" not in data.rstrip()[-1024:]:
        raise BadFileError("corrupt", "truncated PDF: the end-of-file marker is missing (the copy was cut short)")
    pages, outline, meta_title = _read(data)
    if not any(pages):
        raise BadFileError(
            "no_text_layer",
            f"no text layer on any of its {len(pages)} pages (a scanned PDF?): OCR is not supported, "
            "run the file through an OCR tool first",
        )
    text = "".join(line.text for lines in pages for line in lines)
    if undecodable_share(text) > _MAX_CID_SHARE:
        raise BadFileError(
            "undecodable_text",
            "its text layer cannot be decoded (fonts without a Unicode map): OCR is not supported, "
            "export the PDF again with embedded Unicode fonts or run it through an OCR tool",
        )
    blank = [number for number, lines in enumerate(pages, start=1) if not lines]
    if blank:
        logger.warning(
            "%s: pages %s have no text layer (scanned?); OCR is not supported, they are skipped", source, blank
        )
    pages = _drop_running_lines(pages)
    pages = _mark_headings(pages, outline)
    title = _title(meta_title, pages, stem)
    document = build_document(_blocks(pages), doc_id=source, source=source, title=title)
    if blank:
        document.metadata["pages_without_text"] = blank
    return [document]


def undecodable_share(text: str) -> float:
    """Share of `text` made of `(cid:N)` placeholders (glyphs without a character)."""
    return sum(len(match) for match in _CID.findall(text)) / len(text) if text else 0.0


def _read(data: bytes) -> tuple[list[list[_Line]], list[tuple[int, str]], str]:
    """Lines of every page, the outline as (level, title), and the metadata title."""
    import pdfplumber
    from pdfminer.pdfdocument import PDFPasswordIncorrect
    from pdfplumber.utils.exceptions import PdfminerException

    try:
        with pdfplumber.open(io.BytesIO(data)) as pdf:
            pages = [_page_lines(page, number) for number, page in enumerate(pdf.pages, start=1)]
            outline = _outline(pdf.doc)
            title = pdf.metadata.get("Title")
    except PdfminerException as err:
        cause = err.args[0] if err.args else err
        if isinstance(cause, PDFPasswordIncorrect):
            raise BadFileError(
                "encrypted", "encrypted PDF (it needs a password to open): save an unprotected copy and index that"
            ) from err
        raise BadFileError("corrupt", f"corrupt PDF: {type(cause).__name__}: {cause}") from err
    except Exception as err:  # pdfminer raises many kinds on broken objects
        raise BadFileError("corrupt", f"corrupt PDF: {type(err).__name__}: {err}") from err
    return pages, outline, title if isinstance(title, str) else ""


def _outline(doc: Any) -> list[tuple[int, str]]:
    from pdfminer.pdfdocument import PDFNoOutlines

    try:
        return [(level, str(title).strip()) for level, title, *_ in doc.get_outlines()]
    except PDFNoOutlines:
        return []


def _page_lines(page: Any, number: int) -> list[_Line]:
    """Text lines (tables excluded) and table rows of one page, top to bottom."""
    tables = page.find_tables() if page.rects or page.lines else []
    text_page = page
    for table in tables:
        text_page = text_page.outside_bbox(table.bbox)
    lines = [
        _Line(
            text=raw["text"].strip(),
            page=number,
            x0=raw["x0"],
            x1=raw["x1"],
            top=raw["top"],
            bottom=raw["bottom"],
            size=Counter(round(char["size"] * 2) / 2 for char in raw["chars"]).most_common(1)[0][0],
        )
        for raw in text_page.extract_text_lines(return_chars=True)
        if raw["text"].strip()
    ]
    for table in tables:
        top = table.bbox[1]
        for row, cells in enumerate(table.extract()):
            text = CELL_SEPARATOR.join(_join_cell(cell) for cell in cells if cell and cell.strip())
            if text:
                lines.append(_Line(text, number, table.bbox[0], table.bbox[2], top + row, top + row, 0.0, table=True))
    return sorted(lines, key=lambda line: line.top)


def _join_cell(cell: str) -> str:
    parts = [part.strip() for part in cell.splitlines() if part.strip()]
    text = parts[0] if parts else ""
    for part in parts[1:]:
        text = join_lines(text, part)
    return text


def join_lines(left: str, right: str) -> str:
    """Two lines of one paragraph: CJK without a space, Latin with one, a hyphenated word made whole."""
    if left.endswith("-") and left[-2:-1].isalpha() and right[:1].islower():
        return left[:-1] + right
    return left + _glue(left, right) + right


def _glue(left: str, right: str) -> str:
    if not left or not right or _CJK_CHAR.match(left[-1]) or _CJK_CHAR.match(right[0]):
        return ""
    return " "


def _drop_running_lines(pages: list[list[_Line]]) -> list[list[_Line]]:
    """Remove lines that repeat (digits ignored) among the first or last lines of most pages."""
    if len(pages) < 2:
        return pages

    def edges(lines: list[_Line]) -> set[str]:
        return {_DIGITS.sub("#", line.text.replace(" ", "")) for line in lines[:_EDGE_LINES] + lines[-_EDGE_LINES:]}

    counts = Counter(key for lines in pages for key in edges(lines))
    running = {key for key, count in counts.items() if count >= max(2, len(pages) / 2)}
    kept = []
    for lines in pages:
        edge = set(map(id, lines[:_EDGE_LINES] + lines[-_EDGE_LINES:]))
        kept.append(
            [
                line
                for line in lines
                if id(line) not in edge or _DIGITS.sub("#", line.text.replace(" ", "")) not in running
            ]
        )
    return kept


def _body_size(pages: list[list[_Line]]) -> float:
    sizes: Counter[float] = Counter()
    for line in (line for lines in pages for line in lines if not line.table):
        sizes[line.size] += len(line.text)
    return sizes.most_common(1)[0][0] if sizes else 0.0


def _mark_headings(pages: list[list[_Line]], outline: list[tuple[int, str]]) -> list[list[_Line]]:
    """Headings from the outline when most of its titles are found as lines, else by font size."""
    levels = {title.replace(" ", ""): level for level, title in reversed(outline)}
    found = {line.text.replace(" ", "") for lines in pages for line in lines} & levels.keys()
    if outline and len(found) >= len(levels) / 2:
        marked, used = [], set()
        for lines in pages:
            page = []
            for line in lines:
                key = line.text.replace(" ", "")
                if key in levels and key not in used and not line.table:
                    used.add(key)
                    line = replace(line, level=levels[key])
                page.append(line)
            marked.append(page)
        return marked
    body = _body_size(pages)

    def heading(line: _Line) -> bool:
        return (
            not line.table
            and line.size >= body * _HEADING_RATIO
            and len(line.text) <= _MAX_HEADING_CHARS
            and not line.text.endswith(("。", "，", "；", "."))
        )

    sizes = sorted({line.size for lines in pages for line in lines if heading(line)}, reverse=True)
    rank = {size: min(position + 1, 3) for position, size in enumerate(sizes)}
    return [[replace(line, level=rank[line.size]) if heading(line) else line for line in lines] for lines in pages]


def _title(meta_title: str, pages: list[list[_Line]], stem: str) -> str:
    """The metadata title unless it is empty or a file name, else the first level-1 heading, else the stem."""
    meta_title = meta_title.strip()
    if meta_title and not re.search(r"\.(docx?|pdf|txt|wps)$|^untitled$", meta_title, re.IGNORECASE):
        return meta_title
    first = next((line.text for lines in pages for line in lines if line.level == 1), None)
    return first or stem


def _blocks(pages: list[list[_Line]]) -> list[Block]:
    """Paragraphs (lines joined by layout, across pages too), headings and table rows, in order."""
    lines = [line for page in pages for line in page]
    body = [line for line in lines if not line.table and not line.level]
    left = min((line.x0 for line in body), default=0.0)
    right = max((line.x1 for line in body), default=0.0)
    blocks: list[Block] = []
    current: Block | None = None
    previous: _Line | None = None
    for line in lines:
        if current is None or previous is None or not _continues(previous, line, left, right):
            if current is not None:
                blocks.append(current)
            current = Block(line.text, line.level, line.page)
        elif line.page == previous.page:
            current = replace(current, text=join_lines(current.text, line.text))
        else:  # the paragraph goes on after a page break: a piece glued to it, on the new page
            blocks.append(current)
            current = Block(line.text, 0, line.page, glue=_glue(current.text, line.text))
        previous = line
    if current is not None:
        blocks.append(current)
    return blocks


def _continues(previous: _Line, line: _Line, left: float, right: float) -> bool:
    """Whether `line` goes on with the paragraph that `previous` ends."""
    if previous.table or line.table or previous.level or line.level:
        return False
    if abs(previous.size - line.size) > 0.5:
        return False
    reaches_margin = previous.x1 >= right - 2 * previous.size
    indented = line.x0 > left + line.size / 2
    if line.page == previous.page and line.top - previous.bottom > line.size:
        return False
    return reaches_margin and not indented
