"""PowerPoint `.pptx` (python-pptx): the deck is one document, each slide its own section.

A slide gives its title (the section of its chunks; 「第 3 张」 when it has none),
the text of its other shapes top to bottom, left to right (groups opened), its tables one line per
row with their first row as the header every chunk of the table repeats, and its speaker notes
after 「备注：」. Every chunk knows its slide number (`slide`); no chunk holds two slides.
"""

import io
from collections.abc import Iterator
from typing import Any

from core.documents import Document
from indexing.loaders.base import BadFileError
from indexing.loaders.structure import CELL_SEPARATOR, Block, build_document

NOTES_MARK = "备注："


def prepare() -> None:
    """Import python-pptx (before a worker process is forked)."""
    import pptx  # noqa: F401


def parse_pptx(data: bytes, source: str, stem: str) -> list[Document]:
    """One document of the whole deck; raises `BadFileError` for a file that cannot be read."""
    import pptx

    try:
        deck = pptx.Presentation(io.BytesIO(data))
        blocks = [block for number, slide in enumerate(deck.slides, start=1) for block in _slide(slide, number)]
    except Exception as err:  # zipfile, lxml and python-pptx errors on damaged packages
        raise BadFileError("corrupt", f"corrupt or truncated PowerPoint file: {type(err).__name__}: {err}") from err
    title = (deck.core_properties.title or "").strip() or stem
    return [build_document(blocks, doc_id=source, source=source, title=title)]


def _slide(slide: Any, number: int) -> Iterator[Block]:
    title_shape = slide.shapes.title
    title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None else ""
    yield Block(title or f"第 {number} 张", level=1, slide=number)
    shapes = [shape for shape in _shapes(slide.shapes) if title_shape is None or shape.shape_id != title_shape.shape_id]
    for shape in sorted(shapes, key=lambda shape: (shape.top or 0, shape.left or 0)):
        yield from _shape(shape, number)
    if slide.has_notes_slide:
        notes = slide.notes_slide.notes_text_frame
        text = " ".join(notes.text.split()) if notes is not None else ""
        if text:
            yield Block(NOTES_MARK + text, slide=number)


def _shapes(shapes: Any) -> Iterator[Any]:
    """Every shape, the members of groups in place of their group."""
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    for shape in shapes:
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _shapes(shape.shapes)
        else:
            yield shape


def _shape(shape: Any, number: int) -> Iterator[Block]:
    if shape.has_table:
        key = f"s{number}:{shape.shape_id}"
        for row in shape.table.rows:
            cells = [" ".join(cell.text.split()) for cell in row.cells if not cell.is_spanned]
            yield Block(CELL_SEPARATOR.join(cells), table=key, slide=number)
    elif shape.has_text_frame:
        for paragraph in shape.text_frame.paragraphs:
            yield Block(" ".join(paragraph.text.split()), slide=number)
