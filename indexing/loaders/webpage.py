"""Saved web pages (`.html`, `.htm`): the main text without navigation, ads and footers.

Site chrome is removed from the page before anything reads it, whatever the page's length:
`<nav>`, `<aside>`, the page's `<header>` and `<footer>` (a header inside `<article>` or
`<main>` keeps only its headings), the ARIA landmarks of the same (`role="navigation"`,
`banner`, `contentinfo`, `complementary`, `menu`, `menubar`, `search`), and menus and
breadcrumbs named so (`class`/`id` tokens such as `menu`, `main-nav`, `breadcrumb`,
`aria-label="breadcrumb"`). Boilerplate removal on what is left is trafilatura's
(Apache-2.0; chosen by measurement, docs/indexing.md); its XML output keeps `<h1>`-`<h3>` as
headings (section paths) and tables (one line per row). On a short page its extractor finds
less than its own minimum (`MIN_EXTRACTED_SIZE`, 250 characters) and would dump the whole
body as one paragraph; the page is then read by the main-content rule instead: `<main>`,
`role="main"` or the `<article>`s, else the body, block by block.

The charset comes from the document (`<meta charset>` or the http-equiv content type), GBK
read as its superset GB18030; without a declaration UTF-8, else detection. The title is
`<title>` (without a trailing ` - site name`).
"""

import copy
import logging
import re
from collections.abc import Iterator
from typing import Any

from core.documents import Document
from indexing.loaders.base import BadFileError
from indexing.loaders.structure import CELL_SEPARATOR, Block, build_document
from indexing.loaders.text import decode_bytes, decode_damaged

logger = logging.getLogger(__name__)

_SUPERSETS = {"gbk": "gb18030", "gb2312": "gb18030", "x-gbk": "gb18030"}
_CHROME_TAGS = ("nav", "aside", "header", "footer")
_CHROME_ROLES = {"navigation", "banner", "contentinfo", "complementary", "menu", "menubar", "search"}
# A class or id token (split at spaces, `-` and `_`) that names a menu, a navigation bar or a breadcrumb.
_CHROME_NAMES = {"nav", "navbar", "navigation", "menu", "menubar", "breadcrumb", "breadcrumbs", "crumb", "crumbs"}
_CONTENT = ("main", "article")  # an element that holds these is a wrapper of the page, never chrome
_INVISIBLE = ("script", "style", "noscript", "template", "iframe", "svg")
_HEADING_LEVELS = {"h1": 1, "h2": 2, "h3": 3, "h4": 3, "h5": 3, "h6": 3}
# Elements that start a line of their own in the main-content rule (everything else is inline).
_BLOCK_TAGS = frozenset(
    [
        "address",
        "article",
        "blockquote",
        "body",
        "caption",
        "dd",
        "div",
        "dl",
        "dt",
        "figcaption",
        "figure",
        "li",
        "main",
        "ol",
        "p",
        "pre",
        "section",
        "table",
        "ul",
    ]
)
_TOKEN = re.compile(r"[\s_-]+")


def decode_html(data: bytes) -> str:
    """The page's text in the charset it declares (else UTF-8, else detected)."""
    from bs4.dammit import EncodingDetector

    declared = EncodingDetector.find_declared_encoding(data, is_html=True, search_entire_document=False)
    if declared:
        encoding = _SUPERSETS.get(declared.lower(), declared)
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            if (damaged := decode_damaged(data, encoding)) is not None:
                return damaged
        except LookupError:
            pass
        logger.warning("declared charset %r does not decode the page: detecting instead", declared)
    return decode_bytes(data)


def prepare() -> None:
    """Parse a tiny page once: the imports and caches of a first call (≈1 s) are then done, before a fork."""
    parse_html("<title>预热</title><nav>首页</nav><h1>预热</h1><p>预热段落。</p>".encode(), "prepare.html", "prepare")


def parse_html(data: bytes, source: str, stem: str) -> list[Document]:
    """One document of the page's main content (chrome never included)."""
    html = decode_html(data)
    page = _page_tree(html)
    title = _page_title(page)
    for element in list(page.iter(_INVISIBLE)):
        element.drop_tree()
    strip_chrome(page)
    extracted_title, blocks = _trafilatura_blocks(page)
    if not blocks:
        blocks = list(_rule_blocks(_main_content(page)))
        if not blocks:
            raise BadFileError("empty", "the page has no visible text outside its navigation, header and footer")
        logger.info("%s: short page, read by the main-content rule", source)
    return [build_document(blocks, doc_id=source, source=source, title=extracted_title or title or stem)]


def _page_tree(html: str) -> Any:
    """The page as an lxml tree (parsed from UTF-8 so an `<?xml encoding?>` line cannot mislead it)."""
    import lxml.html
    from lxml.etree import ParserError

    try:
        return lxml.html.document_fromstring(html.encode("utf-8"), parser=lxml.html.HTMLParser(encoding="utf-8"))
    except ParserError as err:  # nothing but white space, comments or a doctype
        raise BadFileError("empty", "the page has no visible text") from err


def _page_title(page: Any) -> str:
    title = page.find(".//title")
    return " ".join((title.text_content() if title is not None else "").split())


def strip_chrome(page: Any) -> None:
    """Remove navigation, headers, footers, sidebars, menus and breadcrumbs from `page` in place."""
    for element in list(page.iter(_CHROME_TAGS)):
        if element.getparent() is None:
            continue  # already removed with an enclosing chrome element
        if element.tag == "header" and any(
            a.tag in _CONTENT or a.get("role") == "main" for a in element.iterancestors()
        ):
            headings = [copy.deepcopy(h) for h in element.iter(*_HEADING_LEVELS)]
            for heading in headings:
                heading.tail = None
            if headings:
                element.addprevious(_wrap(headings))
        element.drop_tree()  # lxml keeps the text that follows it (its tail)
    for element in list(page.iter()):
        if isinstance(element.tag, str) and element.getparent() is not None and _named_chrome(element):
            element.drop_tree()


def _wrap(headings: list[Any]) -> Any:
    from lxml.html import Element

    holder = Element("div")
    holder.extend(headings)
    return holder


def _named_chrome(element: Any) -> bool:
    """A landmark role or a class/id token of navigation, unless the element wraps the page's content."""
    if element.tag in ("html", "body", *_CONTENT):
        return False
    role = (element.get("role") or "").strip().lower()
    label = (element.get("aria-label") or "").strip().lower()
    tokens = set(_TOKEN.split(f"{element.get('class') or ''} {element.get('id') or ''}".lower()))
    if role not in _CHROME_ROLES and "breadcrumb" not in label and not tokens & _CHROME_NAMES:
        return False
    holds_content = element.find(".//main") is not None or element.find(".//article") is not None
    return not holds_content and not element.xpath(".//*[@role='main']")


def _trafilatura_blocks(page: Any) -> tuple[str, list[Block]]:
    """trafilatura's main text of the chrome-free page; no blocks where it gave up on the page.

    It gives up when its extractor finds less than its minimum: it then answers with that
    little, or with its baseline (the body's text as one paragraph, headings merged in).
    """
    import trafilatura
    from lxml import etree

    extracted = trafilatura.extract(
        copy.deepcopy(page),
        output_format="xml",
        include_tables=True,
        include_comments=False,
        favor_recall=True,
        with_metadata=True,
    )
    if not extracted:
        return "", []
    root = etree.fromstring(extracted.encode("utf-8"))
    title, blocks = (root.get("title") or "").strip(), list(_blocks(root.find("main")))
    text = "".join("".join(block.text for block in blocks).split())
    if len(text) < _min_extracted_size() or text == "".join(trafilatura.baseline(copy.deepcopy(page))[1].split()):
        return title, []
    return title, blocks


def _min_extracted_size() -> int:
    from trafilatura.settings import DEFAULT_CONFIG

    return DEFAULT_CONFIG.getint("DEFAULT", "MIN_EXTRACTED_SIZE")


def _blocks(main: Any) -> Iterator[Block]:
    if main is None:
        return
    for element in main.iter("head", "p", "item", "row", "quote", "code"):
        if element.tag == "row":
            yield _row(element, "cell")
            continue
        if element.getparent() is not None and element.getparent().tag in ("cell", "item", "quote"):
            continue  # its text is part of the enclosing row, list item or quote
        text = " ".join("".join(element.itertext()).split())
        rend = element.get("rend") or ""
        level = int(rend[1]) if element.tag == "head" and rend[:1] == "h" and rend[1:2].isdigit() else 0
        yield Block(text, min(level, 3) if element.tag == "head" else 0)


def _row(row: Any, cell_tag: str | tuple[str, ...]) -> Block:
    """A table row, keyed by its table (its path in the page), so the table's header repeats on its chunks."""
    cells = (" ".join("".join(cell.itertext()).split()) for cell in row.iter(cell_tag))
    table = next(row.iterancestors("table"), None)
    key = row.getroottree().getpath(table) if table is not None else None
    return Block(CELL_SEPARATOR.join(cell for cell in cells if cell), table=key)


def _main_content(page: Any) -> Any:
    """`<main>` or `role="main"`, else the page's outermost `<article>`s, else the body (chrome already gone)."""
    from lxml.html import Element

    for main in page.xpath("//main | //*[@role='main']"):
        if main.text_content().strip():
            return main
    articles = [a for a in page.xpath("//article[not(ancestor::article)]") if a.text_content().strip()]
    if articles:
        holder = Element("div")
        holder.extend(copy.deepcopy(articles))
        return holder
    body = page.find("body")
    return body if body is not None else page


def _rule_blocks(root: Any) -> Iterator[Block]:
    """Headings, table rows and one line per block element of `root`, in document order."""
    from lxml import etree

    line: list[str] = []
    skip: Any = None  # a heading or row already read whole: its descendants are not read again

    def flush() -> Iterator[Block]:
        text = " ".join("".join(line).split())
        line.clear()
        if text:
            yield Block(text)

    for event, element in etree.iterwalk(root, events=("start", "end")):
        tag = element.tag if isinstance(element.tag, str) else ""
        if skip is not None:
            if event == "end" and element is skip:
                skip = None
                line.append(element.tail or "")
            continue
        if event == "start":
            if tag in _HEADING_LEVELS or tag == "tr":
                yield from flush()
                yield (
                    _row(element, ("td", "th"))
                    if tag == "tr"
                    else Block(" ".join(element.text_content().split()), _HEADING_LEVELS[tag])
                )
                skip = element
                continue
            if tag in _BLOCK_TAGS or tag == "br":
                yield from flush()
            if tag:
                line.append(element.text or "")
        else:
            if tag in _BLOCK_TAGS:
                yield from flush()
            if element is not root:
                line.append(element.tail or "")
    yield from flush()
