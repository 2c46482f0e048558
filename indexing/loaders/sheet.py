"""Spreadsheets: `.xlsx` (openpyxl), `.xls` (xlrd), `.csv` and `.tsv` (the csv module).

Each sheet is a document (`<source>#<sheet>`, its sheet name in every chunk's `sheet`); a CSV or
TSV file is one. A sheet becomes a table: its first row is the header, repeated at the start of
every chunk (core/documents.py), and every row keeps its number as the sheet shows it, so a hit
says 「工作表「住宿」第 35-52 行」. Merged cells are expanded (each cell of the range holds the
value), formulas are read as the values the file stores for them (openpyxl `data_only`), dates as
dates (2026-03-01), empty rows and columns are dropped. A first row holding one value across
the whole width (a merged title) is the section of the sheet's chunks, not its header. A table wider
than `_MAX_COLUMNS` columns or `_MAX_HEADER_CHARS` characters of header is cut into column groups,
each keeping the key (first) column, each its own section (「列 A、E–H」).

A sheet of more than MAX_SHEET_ROWS rows is refused, counted on a streaming read before the
workbook is loaded (a sheet claiming a million rows costs nothing; one holding them costs a pass).
"""

import csv
import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from typing import Any

from core.documents import SECTION_SEPARATOR, Document
from indexing.loaders.base import BadFileError, LoadLimits
from indexing.loaders.structure import CELL_SEPARATOR, Block, build_document
from indexing.loaders.text import decode_bytes

_MAX_COLUMNS = 12
_MAX_HEADER_CHARS = 240


@dataclass(frozen=True)
class Grid:
    """A sheet's cells as text: `rows[i]` is sheet row `numbers[i]`, every row as wide as the sheet."""

    name: str | None
    numbers: list[int]
    rows: list[list[str]]


def prepare() -> None:
    """Import the spreadsheet libraries (before a worker process is forked)."""
    import openpyxl  # noqa: F401
    import xlrd  # noqa: F401


def cell_text(value: Any, number_format: str = "") -> str:
    """A cell's value as the sheet shows it: dates as dates, 800.0 as 800, 0.15 as 15% when so formatted."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.date().isoformat() if value.time() == time() else value.isoformat(sep=" ", timespec="minutes")
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, bool):
        return "是" if value else "否"
    if isinstance(value, float):
        if "%" in number_format:
            return f"{value * 100:.12g}%"
        return str(int(value)) if value.is_integer() and abs(value) < 2**53 else f"{value:.15g}"
    return " ".join(str(value).split())


def _too_many(name: str | None, rows: int, limits: LoadLimits) -> BadFileError:
    where = f"sheet {name!r} has" if name else "it has"
    return BadFileError(
        "too_many_rows",
        f"{where} more than MAX_SHEET_ROWS={limits.max_sheet_rows} rows ({rows} read): split it or raise MAX_SHEET_ROWS",
    )


def _count_xlsx_rows(data: bytes, limits: LoadLimits) -> None:
    """Stream every sheet's rows (openpyxl read-only, the stated dimensions ignored) and refuse one
    over MAX_SHEET_ROWS before the workbook is loaded whole."""
    import openpyxl

    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        for sheet in book.worksheets:
            sheet.reset_dimensions()  # a stated A1:XFD1048576 must not pad every row to 16,384 cells
            for count, _ in enumerate(sheet.iter_rows(values_only=True), start=1):
                if count > limits.max_sheet_rows:
                    raise _too_many(sheet.title, count, limits)
    finally:
        book.close()


def _xlsx_grids(data: bytes) -> Iterator[Grid]:
    import openpyxl

    book = openpyxl.load_workbook(io.BytesIO(data), data_only=True)
    for sheet in book.worksheets:
        # The cells the sheet holds (`iter_rows` would make every empty cell of the rectangle between
        # A1 and the farthest one: a cell at XFD100000 would cost 1.6 billion of them).
        texts = {
            (cell.row, cell.column): cell_text(cell.value, cell.number_format)
            for cell in sheet._cells.values()
            if cell.value is not None
        }
        for merged in sheet.merged_cells.ranges:
            value = texts.get((merged.min_row, merged.min_col), "")
            for row, column in merged.cells:
                texts[(row, column)] = value
        yield _grid(sheet.title, texts)


def _grid(name: str | None, texts: dict[tuple[int, int], str]) -> Grid:
    """A grid of (row, column) → text with its empty rows and columns dropped."""
    rows = sorted({row for (row, _), text in texts.items() if text})
    columns = sorted({column for (_, column), text in texts.items() if text})
    return Grid(name, rows, [[texts.get((row, column), "") for column in columns] for row in rows])


def _xls_grids(data: bytes, limits: LoadLimits) -> Iterator[Grid]:
    import xlrd

    book = xlrd.open_workbook(file_contents=data, formatting_info=True, on_demand=True)
    for index in range(book.nsheets):
        sheet = book.sheet_by_index(index)
        if sheet.nrows > limits.max_sheet_rows:
            raise _too_many(sheet.name, sheet.nrows, limits)
        texts: dict[tuple[int, int], str] = {}
        for row in range(sheet.nrows):
            for column, cell in enumerate(sheet.row(row)):
                value = cell.value
                if cell.ctype == xlrd.XL_CELL_DATE:
                    value = xlrd.xldate_as_datetime(value, book.datemode)
                elif cell.ctype == xlrd.XL_CELL_BOOLEAN:
                    value = bool(value)
                texts[(row + 1, column + 1)] = cell_text(value)
        for top, bottom, left, right in sheet.merged_cells:
            value = texts.get((top + 1, left + 1), "")
            for row in range(top + 1, bottom + 1):
                for column in range(left + 1, right + 1):
                    texts[(row, column)] = value
        book.unload_sheet(index)
        yield _grid(sheet.name, texts)


def _delimited_grid(data: bytes, delimiter: str, limits: LoadLimits) -> Grid:
    text = decode_bytes(data)
    texts: dict[tuple[int, int], str] = {}
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    for row_number, row in enumerate(reader, start=1):
        if row_number > limits.max_sheet_rows:
            raise _too_many(None, row_number, limits)
        texts.update({(row_number, column): cell_text(value) for column, value in enumerate(row, start=1) if value})
    return _grid(None, texts)


def _column_groups(header: Sequence[str]) -> list[list[int]]:
    """Column indices per group: the whole width when it is narrow, else groups that each begin with the key column."""
    if len(header) <= _MAX_COLUMNS and len(CELL_SEPARATOR.join(header)) <= _MAX_HEADER_CHARS:
        return [list(range(len(header)))]
    groups: list[list[int]] = []
    for column in range(1, len(header)):
        width = len(CELL_SEPARATOR.join(header[index] for index in groups[-1])) if groups else 0
        if not groups or len(groups[-1]) >= _MAX_COLUMNS or width + len(header[column]) > _MAX_HEADER_CHARS:
            groups.append([0])
        groups[-1].append(column)
    return groups


def _letter(index: int) -> str:
    """The spreadsheet's name of column `index` (0: A, 26: AA)."""
    name = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        name = chr(ord("A") + rest) + name
    return name


def _row_text(cells: Sequence[str], columns: Sequence[int]) -> str:
    return CELL_SEPARATOR.join(cells[index] for index in columns).rstrip(" |")


def _title_rows(rows: list[list[str]]) -> int:
    """How many first rows hold one value across a table wider than one column (merged titles)."""
    count = 0
    while count < len(rows) - 1 and len(rows[count]) > 1 and len({cell for cell in rows[count] if cell}) == 1:
        count += 1
    return count


def _blocks(grid: Grid, start: int, groups: list[list[int]]) -> Iterator[Block]:
    """The table from row `start` (its header), once per column group."""
    rows, numbers = grid.rows, grid.numbers
    for number, columns in enumerate(groups):
        key = f"{grid.name}:{number}"
        yield Block(_row_text(rows[start], columns), table=key, row=numbers[start])
        for cells, row in zip(rows[start + 1 :], numbers[start + 1 :], strict=True):
            text = _row_text(cells, columns)
            if text.strip(" |"):
                yield Block(text, table=key, row=row)


def grid_document(grid: Grid, source: str, stem: str) -> Document | None:
    """One sheet's document (None when the sheet is empty); its title rows and column group are the
    sections of its chunks, not text of their own (a chunk holding only a title would answer nothing)."""
    if not grid.rows:
        return None
    start = _title_rows(grid.rows)
    titles = [next(cell for cell in row if cell) for row in grid.rows[:start]]
    used = [column for column in range(len(grid.rows[0])) if any(row[column] for row in grid.rows[start:])]
    grid = Grid(grid.name, grid.numbers, [[row[column] for column in used] for row in grid.rows])  # a title's columns
    groups = _column_groups(grid.rows[start])
    doc_id = f"{source}#{grid.name}" if grid.name is not None else source
    document = build_document(_blocks(grid, start, groups), doc_id=doc_id, source=source, title=stem)
    document.sheet = grid.name
    for table, columns in zip(document.tables, groups, strict=True):
        group = f"列 {_letter(columns[0])}、{_letter(columns[1])}–{_letter(columns[-1])}" if len(groups) > 1 else ""
        section = SECTION_SEPARATOR.join(part for part in (*titles, group) if part)
        if section:
            document.section_starts.append((table.start, section))
    return document


def _documents(grids: Iterator[Grid], source: str, stem: str) -> list[Document]:
    return [document for grid in grids if (document := grid_document(grid, source, stem)) is not None]


def parse_xlsx(data: bytes, source: str, stem: str, limits: LoadLimits) -> list[Document]:
    """One document per non-empty sheet; raises `BadFileError` for a file that cannot be read."""
    try:
        _count_xlsx_rows(data, limits)
        return _documents(_xlsx_grids(data), source, stem)
    except BadFileError:
        raise
    except Exception as err:  # zipfile, lxml and openpyxl errors on damaged packages
        raise BadFileError("corrupt", f"corrupt or truncated Excel file: {type(err).__name__}: {err}") from err


def parse_xls(data: bytes, source: str, stem: str, limits: LoadLimits) -> list[Document]:
    """One document per non-empty sheet of an old binary workbook."""
    import xlrd

    try:
        return _documents(_xls_grids(data, limits), source, stem)
    except xlrd.XLRDError as err:
        raise BadFileError("corrupt", f"corrupt or unreadable .xls file: {err}") from err


def parse_csv(data: bytes, source: str, stem: str, limits: LoadLimits) -> list[Document]:
    document = grid_document(_delimited_grid(data, ",", limits), source, stem)
    return [document] if document else []


def parse_tsv(data: bytes, source: str, stem: str, limits: LoadLimits) -> list[Document]:
    document = grid_document(_delimited_grid(data, "\t", limits), source, stem)
    return [document] if document else []
