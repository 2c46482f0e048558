"""`.epub`: the spine's documents in reading order (navigation page, images, styles skipped)."""

import io
from typing import Any

from core.documents import Document
from indexing.loaders.base import BadFileError

_BLOCKS = ["p", "div", "br", "li", "tr", "blockquote", "pre", "h1", "h2", "h3", "h4", "h5", "h6"]


def html_to_text(element: Any) -> str:
    """Text with one line per block element; inline markup (<b>, <a>) stays inside its line."""
    for block in element.find_all(_BLOCKS):
        block.append("\n")
    lines = (line.strip() for line in element.get_text().splitlines())
    return "\n".join(line for line in lines if line)


def prepare() -> None:
    """Import ebooklib and BeautifulSoup (before a worker process is forked)."""
    import bs4  # noqa: F401
    from ebooklib import epub  # noqa: F401


def parse_epub(data: bytes, source: str, stem: str) -> list[Document]:
    """One document per spine item with text, numbered in reading order."""
    import ebooklib
    from bs4 import BeautifulSoup
    from ebooklib import epub

    try:
        book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": True})
    except Exception as err:  # zipfile, lxml and ebooklib errors on damaged packages
        raise BadFileError("corrupt", f"corrupt or truncated EPUB file: {type(err).__name__}: {err}") from err
    book_title = next(iter(book.get_metadata("DC", "title")), (stem,))[0]
    documents: list[Document] = []
    for idref, _linear in book.spine:
        item = book.get_item_with_id(idref)
        if item is None or item.get_type() != ebooklib.ITEM_DOCUMENT or not item.is_chapter():
            continue  # images, styles, the navigation page
        soup = BeautifulSoup(item.get_content(), "html.parser")
        heading = soup.find(["h1", "h2", "h3"]) or soup.find("title")
        text = html_to_text(soup.body or soup)
        if not text:
            continue
        number = len(documents) + 1
        chapter_title = heading.get_text(" ", strip=True) if heading else None
        documents.append(
            Document(
                doc_id=f"{source}#ch{number}",
                text=text,
                source=source,
                title=chapter_title or book_title,
                chapter=number,
                chapter_title=chapter_title,
                metadata={"book": book_title, "href": item.get_name()},
            )
        )
    return documents
