"""Word `.docx` (python-docx): body paragraphs and tables in order, headings as section paths.

Heading 1-3 (English or Chinese style names, or styles based on them) become section paths;
tables become one line per row (cells separated by ` | `, merged cells once), their first row the
header every chunk of the table repeats. Headers,
footers, footnotes and comments live in other parts of the package and are not read.
"""

import io
import re
from collections.abc import Iterator
from typing import Any

from core.documents import Document
from indexing.loaders.base import BadFileError
from indexing.loaders.structure import CELL_SEPARATOR, Block, build_document

_HEADING_STYLE = re.compile(r"^(?:heading|标题)\s*(\d)$", re.IGNORECASE)


def prepare() -> None:
    """Import python-docx (before a worker process is forked)."""
    import docx  # noqa: F401


def parse_docx(data: bytes, source: str, stem: str) -> list[Document]:
    """One document of the whole file; raises `BadFileError` for files that cannot be read."""
    import docx

    try:
        word = docx.Document(io.BytesIO(data))
        blocks = list(_blocks(word))
    except Exception as err:  # zipfile, lxml and python-docx errors on damaged packages
        raise BadFileError("corrupt", f"corrupt or truncated Word file: {type(err).__name__}: {err}") from err
    title = (word.core_properties.title or "").strip()
    title = title or next((b.text for b in blocks if b.level == 1), "") or stem
    return [build_document(blocks, doc_id=source, source=source, title=title)]


def _blocks(word: Any) -> Iterator[Block]:
    from docx.table import Table

    for number, item in enumerate(word.iter_inner_content()):
        if isinstance(item, Table):
            yield from _rows(item, f"t{number}")
        else:
            yield Block(item.text, _heading_level(item.style))


def _heading_level(style: Any) -> int:
    """1-3 for Heading 1-3 (or a style based on one); the title style counts as no heading."""
    while style is not None:
        match = _HEADING_STYLE.match(style.name or "")
        if match:
            return min(int(match.group(1)), 3)
        style = style.base_style
    return 0


def _rows(table: Any, key: str) -> Iterator[Block]:
    for row in table.rows:
        cells, seen = [], set()
        for cell in row.cells:
            if id(cell._tc) in seen:  # a merged cell is repeated once per grid column
                continue
            seen.add(id(cell._tc))
            if text := " ".join(cell.text.split()):
                cells.append(text)
        yield Block(CELL_SEPARATOR.join(cells), table=key)
