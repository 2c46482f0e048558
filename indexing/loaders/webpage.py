"""Saved web pages (`.html`, `.htm`): the main text without navigation, ads and footers.

Boilerplate removal is trafilatura's (Apache-2.0; chosen by measurement, docs/indexing.md);
its XML output keeps `<h1>`-`<h3>` as headings (section paths) and tables (one line per row).
The charset comes from the document (`<meta charset>` or the http-equiv content type), GBK
read as its superset GB18030; without a declaration UTF-8, else detection. The title is
`<title>` (without a trailing ` - site name`).
"""

import logging
from collections.abc import Iterator
from typing import Any

from core.documents import Document
from indexing.loaders.base import BadFileError
from indexing.loaders.epub import html_to_text
from indexing.loaders.structure import CELL_SEPARATOR, Block, build_document
from indexing.loaders.text import decode_bytes

logger = logging.getLogger(__name__)

_SUPERSETS = {"gbk": "gb18030", "gb2312": "gb18030", "x-gbk": "gb18030"}


def decode_html(data: bytes) -> str:
    """The page's text in the charset it declares (else UTF-8, else detected)."""
    from bs4.dammit import EncodingDetector

    declared = EncodingDetector.find_declared_encoding(data, is_html=True, search_entire_document=False)
    if declared:
        encoding = _SUPERSETS.get(declared.lower(), declared)
        try:
            return data.decode(encoding)
        except (LookupError, UnicodeDecodeError):
            logger.warning("declared charset %r does not decode the page: detecting instead", declared)
    return decode_bytes(data)


def parse_html(data: bytes, source: str, stem: str) -> list[Document]:
    """One document of the page's main content."""
    import trafilatura
    from lxml import etree

    html = decode_html(data)
    extracted = trafilatura.extract(
        html, output_format="xml", include_tables=True, include_comments=False, favor_recall=True, with_metadata=True
    )
    if extracted:
        root = etree.fromstring(extracted.encode("utf-8"))
        title = (root.get("title") or "").strip()
        blocks = list(_blocks(root.find("main")))
    else:
        title, blocks = "", []
    if not blocks:
        blocks = _whole_page(html, source)
    return [build_document(blocks, doc_id=source, source=source, title=title or _page_title(html) or stem)]


def _blocks(main: Any) -> Iterator[Block]:
    if main is None:
        return
    for element in main.iter("head", "p", "item", "row", "quote", "code"):
        if element.tag == "row":
            cells = (" ".join("".join(cell.itertext()).split()) for cell in element.iter("cell"))
            yield Block(CELL_SEPARATOR.join(cell for cell in cells if cell))
            continue
        if element.getparent() is not None and element.getparent().tag in ("cell", "item", "quote"):
            continue  # its text is part of the enclosing row, list item or quote
        text = " ".join("".join(element.itertext()).split())
        rend = element.get("rend") or ""
        level = int(rend[1]) if element.tag == "head" and rend[:1] == "h" and rend[1:2].isdigit() else 0
        yield Block(text, min(level, 3) if element.tag == "head" else 0)


def _page_title(html: str) -> str:
    from bs4 import BeautifulSoup

    title = BeautifulSoup(html, "html.parser").title
    return title.get_text(" ", strip=True) if title else ""


def _whole_page(html: str, source: str) -> list[Block]:
    """Degraded path: no main content was recognised, so the whole visible text is indexed."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    for element in soup(["script", "style", "noscript", "template"]):
        element.decompose()
    text = html_to_text(soup.body or soup)
    if not text:
        raise BadFileError("empty", "the page has no visible text")
    logger.warning("%s: no main content recognised; indexing the whole page text (boilerplate included)", source)
    return [Block(line) for line in text.splitlines()]
