"""PDF with a text layer: PDFium (pypdfium2) for characters, pdfplumber for ruled tables.

- Every line keeps its page; a chunk knows the pages it spans.
- Lines that repeat at the top or bottom of most pages (running headers, footers, page
  numbers; digits ignored when comparing) are removed.
- Lines are joined into paragraphs by layout (a line that reaches the right margin continues
  into the next unless that one is indented or far below), across page breaks too; CJK
  lines join without a space, Latin words with one, a hyphenated word is made whole.
- Headings come from the outline (bookmarks) when the file has one, else from font size:
  lines clearly larger than the body text, the largest size being level 1.
- Ruled tables become one line per row, cells separated by ` | ` (pdfplumber, only on pages
  that draw lines: it is ten times slower than PDFium at reading characters); the first row is
  the header every chunk of the table repeats, also on the pages a table goes on to.

- A page without a text layer (a scan) is rendered at 200 dpi and read by OCR (indexing/loaders/
  ocr.py, the `ocr` extra), page by page: a mixed PDF keeps its text layer where it has one. The
  OCR is held to a time budget (a share of LOAD_TIMEOUT_S): when the pages read so far say the
  rest would not fit, the file is refused at once with the estimate, not killed at the timeout.
  Each OCR page's confidence is in the metadata (`ocr_confidence`, `ocr_low_confidence_pages`).

Why these libraries: docs/indexing.md has the measurement against pypdf and pdfminer.six.
"""

import io
import logging
import re
import time
import unicodedata
from collections import Counter
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

from core.documents import Document
from indexing.loaders import ocr
from indexing.loaders.base import BadFileError, LoadLimits
from indexing.loaders.structure import CELL_SEPARATOR, Block, build_document

logger = logging.getLogger(__name__)

_CJK = "\u2e80-\u2fff\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_CJK_CHAR = re.compile(f"[{_CJK}]")
_DIGITS = re.compile(r"\d+")
_EDGE_LINES = 2  # lines at the top and at the bottom of a page that may be running headers/footers
_HEADING_RATIO = 1.1  # a heading's font is at least this much larger than the body's (12 pt over 10.5 pt)
_MAX_HEADING_CHARS = 40
_MAX_UNDECODABLE_SHARE = 0.05
_TABLE_PATHS = 4  # a page drawing at least this many paths may hold a ruled table
_WORD_GAP = 0.25  # a gap wider than this many em between two Latin characters is a space
_OCR_DPI = 200
_OCR_BUDGET_SHARE = 0.8  # of LOAD_TIMEOUT_S: the rest is left for the text layer and the layout


@dataclass(frozen=True)
class _Char:
    text: str
    left: float
    top: float
    right: float
    bottom: float
    size: float


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
    table_key: str | None = None  # which table of the file a row belongs to


def prepare() -> None:
    """Import the PDF libraries (before a worker process is forked)."""
    import pdfplumber  # noqa: F401
    import pypdfium2  # noqa: F401


def check_pages(data: bytes, limits: LoadLimits) -> None:
    """Refuse a PDF of more than MAX_PDF_PAGES pages before any page is read (PDFium counts them
    from the page tree): a small file of many empty pages would hold the worker for minutes."""
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError:
        return  # `parse_pdf` says what is wrong with it
    try:
        pages = len(pdf)
    finally:
        pdf.close()
    if pages > limits.max_pdf_pages:
        raise BadFileError(
            "too_many_pages",
            f"{pages} pages, more than MAX_PDF_PAGES={limits.max_pdf_pages}: split it or raise MAX_PDF_PAGES",
        )


def parse_pdf(data: bytes, source: str, stem: str, limits: LoadLimits) -> list[Document]:
    """One document of the whole file; raises `BadFileError` for files that cannot be read."""
    if b"%%EOF" not in data.rstrip()[-1024:]:
        raise BadFileError("corrupt", "truncated PDF: the end-of-file marker is missing (the copy was cut short)")
    pages, outline, meta_title, scanned = _read(data, limits)
    if not any(pages):
        raise BadFileError(
            "no_text_layer",
            f"no text on any of its {len(pages)} pages, OCR included (blank pages or unreadable scans)",
        )
    if undecodable_share("".join(line.text for lines in pages for line in lines)) > _MAX_UNDECODABLE_SHARE:
        raise BadFileError(
            "undecodable_text",
            "its text layer cannot be decoded (fonts without a Unicode map): OCR is not supported, "
            "export the PDF again with embedded Unicode fonts or run it through an OCR tool",
        )
    blank = [number for number, lines in enumerate(pages, start=1) if not lines]
    if blank:
        logger.warning("%s: pages %s have no text, OCR included; they are skipped", source, blank)
    pages = _join_tables(_drop_running_lines(pages))
    pages = _mark_headings(pages, outline)
    title = _title(meta_title, pages, stem)
    document = build_document(_blocks(pages), doc_id=source, source=source, title=title)
    if blank:
        document.metadata["pages_without_text"] = blank
    if scanned:
        document.metadata.update(ocr.report(scanned, limits))
    return [document]


def undecodable_share(text: str) -> float:
    """Share of `text` that is glyph numbers rather than characters (control, private-use, U+FFFD)."""
    bad = sum(1 for char in text if char == "\ufffd" or unicodedata.category(char) in ("Cc", "Co"))
    return bad / len(text) if text else 0.0


def _read(data: bytes, limits: LoadLimits) -> tuple[list[list[_Line]], list[tuple[int, str]], str, list[ocr.OcrPage]]:
    """Lines of every page (OCR's on pages without a text layer), the outline as (level, title), the
    metadata title and the pages OCR read."""
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as err:
        if "password" in str(err).lower():
            raise BadFileError(
                "encrypted", "encrypted PDF (it needs a password to open): save an unprotected copy and index that"
            ) from err
        raise BadFileError("corrupt", f"corrupt PDF: {err}") from err
    tables = _Tables(data)
    try:
        pages = [_page_lines(pdf[index], index + 1, tables) for index in range(len(pdf))]
        scanned = _ocr_pages(pdf, [index for index, lines in enumerate(pages) if not lines], limits)
        for page in scanned:
            pages[page.number - 1] = _ocr_lines(page)
        outline = [(item.level + 1, (item.get_title() or "").strip()) for item in pdf.get_toc()]
        title = pdf.get_metadata_dict().get("Title", "")
    except pdfium.PdfiumError as err:
        raise BadFileError("corrupt", f"corrupt PDF: {err}") from err
    finally:
        tables.close()
        pdf.close()
    return pages, outline, title, scanned


def _ocr_pages(pdf: Any, indices: list[int], limits: LoadLimits) -> list[ocr.OcrPage]:
    """OCR of the pages at `indices` (0-based), within the budget; the file is refused as soon as the
    pages read so far say the others would not fit in it."""
    if not indices:
        return []
    if not ocr.available():
        raise ocr.missing(f"a PDF with {len(indices)} pages without a text layer (scanned)")
    budget = limits.timeout_s * _OCR_BUDGET_SHARE
    started, pages = time.perf_counter(), []
    scale = _OCR_DPI / 72
    for done, index in enumerate(indices, start=1):
        width, height = pdf[index].get_size()
        ocr.check_pixels(int(width * scale), int(height * scale), limits)
        pages.append(ocr.read_page(pdf[index].render(scale=scale).to_pil(), index + 1))
        elapsed = time.perf_counter() - started
        logger.info("OCR: page %d read (%d of %d scanned pages, %.1f s)", index + 1, done, len(indices), elapsed)
        if done < len(indices) and elapsed / done * len(indices) > budget:
            raise BadFileError(
                "ocr_time_budget",
                f"{len(indices)} scanned pages need OCR at {elapsed / done:.1f} s a page (about "
                f"{elapsed / done * len(indices):.0f} s), more than {budget:.0f} s "
                f"({_OCR_BUDGET_SHARE:.0%} of LOAD_TIMEOUT_S={limits.timeout_s:g}); {done} read: "
                "split the file or raise LOAD_TIMEOUT_S",
            )
    return pages


def _ocr_lines(page: ocr.OcrPage) -> list[_Line]:
    """OCR lines as text lines in PDF points (the rendering's scale undone), for the same layout rules."""
    scale = _OCR_DPI / 72
    return [
        _Line(
            line.text,
            page.number,
            line.left / scale,
            line.right / scale,
            line.top / scale,
            line.bottom / scale,
            round((line.bottom - line.top) / scale / 1.3 * 2) / 2,
        )
        for line in page.lines
    ]


class _Tables:
    """Ruled tables found by pdfplumber, opened only when a page draws enough lines to hold one."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pdf: Any = None

    def find(self, index: int) -> list[tuple[tuple[float, float, float, float], list[list[str | None]]]]:
        import pdfplumber

        try:
            if self._pdf is None:
                self._pdf = pdfplumber.open(io.BytesIO(self._data))
            return [(table.bbox, table.extract()) for table in self._pdf.pages[index].find_tables()]
        except Exception as err:  # pdfminer is stricter than PDFium: keep the text, lose the table layout
            logger.warning(
                "page %d: tables not read (%s: %s); their cells stay as text lines", index + 1, type(err).__name__, err
            )
            return []

    def close(self) -> None:
        """Close pdfplumber's file; its `close` reads every page, so a page pdfminer cannot parse fails it.

        The text (PDFium's) stands either way: that failure is logged, not the file's error.
        """
        if self._pdf is None:
            return
        try:
            self._pdf.close()
        except Exception as err:
            logger.warning(
                "pdfplumber could not close the file (%s: %s); the text is unaffected", type(err).__name__, err
            )
            self._pdf.stream.close()


def _chars(page: Any) -> list[_Char]:
    """The page's characters in content order (PDFium's inserted spaces and line breaks left out)."""
    import pypdfium2.raw as raw

    textpage = page.get_textpage()
    height = page.get_height()
    chars = []
    for index in range(textpage.count_chars()):
        char = chr(raw.FPDFText_GetUnicode(textpage, index))
        if raw.FPDFText_IsGenerated(textpage, index) or char in "\r\n":
            continue
        left, bottom, right, top = textpage.get_charbox(index, loose=True)
        size = raw.FPDFText_GetFontSize(textpage, index) or top - bottom
        chars.append(_Char(char, left, height - top, right, height - bottom, round(size * 2) / 2))
    textpage.close()
    return chars


def _line(chars: list[_Char], page: int) -> _Line:
    """One line of characters on a baseline, left to right; spaces where Latin words have a gap."""
    chars = sorted(chars, key=lambda char: char.left)
    text = chars[0].text
    for previous, char in pairwise(chars):
        gap = char.left - previous.right
        cjk = _CJK_CHAR.match(previous.text) or _CJK_CHAR.match(char.text)
        if gap > _WORD_GAP * char.size and not cjk and " " not in (previous.text, char.text):
            text += " "
        text += char.text
    sizes = Counter(char.size for char in chars if not char.text.isspace())
    return _Line(
        text=" ".join(text.split()),
        page=page,
        x0=chars[0].left,
        x1=max(char.right for char in chars),
        top=min(char.top for char in chars),
        bottom=max(char.bottom for char in chars),
        size=sizes.most_common(1)[0][0] if sizes else chars[0].size,
    )


def _page_lines(page: Any, number: int, tables: _Tables) -> list[_Line]:
    """Text lines (tables excluded) and table rows of one page, top to bottom."""
    import pypdfium2.raw as raw

    groups: list[list[_Char]] = []
    for char in _chars(page):  # consecutive characters on one baseline make a line
        if groups and abs(char.bottom - groups[-1][-1].bottom) <= 0.3 * max(char.size, 1.0):
            groups[-1].append(char)
        else:
            groups.append([char])
    lines = [line for line in (_line(group, number) for group in groups) if line.text]
    paths = sum(1 for _ in page.get_objects(filter=[raw.FPDF_PAGEOBJ_PATH]))
    for table_number, (bbox, rows) in enumerate(tables.find(number - 1) if paths >= _TABLE_PATHS else []):
        x0, top, x1, bottom = bbox
        lines = [line for line in lines if not (x0 <= (line.x0 + line.x1) / 2 <= x1 and top <= line.top < bottom)]
        for row_number, cells in enumerate(rows):
            text = CELL_SEPARATOR.join(_join_cell(cell) for cell in cells if cell and cell.strip())
            if text:
                row_top = top + row_number * 0.01  # rows keep their order among the page's lines
                key = f"p{number}t{table_number}"
                lines.append(_Line(text, number, x0, x1, row_top, row_top, 0.0, table=True, table_key=key))
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


def _join_tables(pages: list[list[_Line]]) -> list[list[_Line]]:
    """A table that goes on over a page break (its rows open the page, as many cells as the rows that
    ended the last one) stays one table, its header kept once (a repeated header row is dropped)."""
    headers: dict[str, str] = {}  # a table's key: its header row
    continued: dict[str, str] = {}  # a page's piece of a table: the key of the table
    joined: list[list[_Line]] = []
    previous: _Line | None = None
    for lines in pages:
        kept = []
        for line in lines:
            key = line.table_key
            if key is not None and key not in headers and key not in continued:
                if (
                    previous is not None
                    and previous.table_key
                    and previous.page != line.page
                    and (previous.text.count(CELL_SEPARATOR) == line.text.count(CELL_SEPARATOR))
                ):
                    continued[key] = previous.table_key
                else:
                    headers[key] = line.text
            if key in continued:
                if line.text == headers[continued[key]]:
                    continue
                line = replace(line, table_key=continued[key])
            kept.append(line)
            previous = line
        joined.append(kept)
    return joined


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


def _margins(pages: list[list[_Line]]) -> dict[int, tuple[float, float]]:
    """Left and right edge of the body text, page by page (books mirror their margins)."""
    margins = {}
    for lines in pages:
        body = [line for line in lines if not line.table and not line.level]
        if body:
            margins[body[0].page] = (min(line.x0 for line in body), max(line.x1 for line in body))
    return margins


def _blocks(pages: list[list[_Line]]) -> list[Block]:
    """Paragraphs (lines joined by layout, across pages too), headings and table rows, in order."""
    margins = _margins(pages)
    blocks: list[Block] = []
    current: Block | None = None
    previous: _Line | None = None
    for line in (line for lines in pages for line in lines):
        if current is None or previous is None or not _continues(previous, line, margins):
            if current is not None:
                blocks.append(current)
            current = Block(line.text, line.level, line.page, table=line.table_key)
        elif line.page == previous.page:
            current = replace(current, text=join_lines(current.text, line.text))
        else:  # the paragraph goes on after a page break: a piece glued to it, on the new page
            blocks.append(current)
            current = Block(line.text, 0, line.page, glue=_glue(current.text, line.text))
        previous = line
    if current is not None:
        blocks.append(current)
    return blocks


def _continues(previous: _Line, line: _Line, margins: dict[int, tuple[float, float]]) -> bool:
    """Whether `line` goes on with the paragraph that `previous` ends (each judged on its own page)."""
    if previous.table or line.table or previous.level or line.level:
        return False
    if abs(previous.size - line.size) > 0.5:
        return False
    reaches_margin = previous.x1 >= margins[previous.page][1] - 2 * previous.size
    indented = line.x0 > margins[line.page][0] + line.size / 2
    if line.page == previous.page and line.top - previous.bottom > line.size:
        return False
    return reaches_margin and not indented
