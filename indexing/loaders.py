"""Loaders: files and folders to `Document`s; bad input is reported with its path, never fatal.

Supported: `.txt` and `.md` (UTF-8, or any encoding charset-normalizer recognises, such as
GB18030/GBK), `.jsonl` (one `{"id", "text", "title"?, "metadata"?}` object per line) and
`.epub` (the spine's chapters, HTML to text). A novel with headings such as `第12章 …` or
`第十二回 …` yields one document per chapter, with `chapter` and `chapter_title` set.

Document ids are stable: `<source>#ch<N>` for chapters, `<source>` for a whole file,
the line's own `id` for JSONL, where `source` is the file name (for a file argument) or its
path relative to the folder argument.
"""

import json
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from charset_normalizer import from_bytes

from core.documents import Document

logger = logging.getLogger(__name__)

SUPPORTED_SUFFIXES = (".txt", ".md", ".jsonl", ".epub")

_CN_DIGITS = dict(zip("零〇一二两三四五六七八九", [0, 0, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9], strict=True))
_CN_UNITS = {"十": 10, "百": 100, "千": 1000}
# `第12章 title`, `第十二回 title`, optionally as a Markdown heading: the number word ends the
# line or is followed by a space or colon, and the line is short, so prose such as
# `第三回合，张飞又胜` is not taken for a heading.
_HEADING = re.compile(
    r"^[ \t\u3000]*(?:#{1,6}[ \t]*)?第[ \t]*([0-9０-９]+|[零〇一二两三四五六七八九十百千]+)[ \t]*[章回]"
    r"(?:[ \t\u3000:：、.．]+(?P<title>[^\n]*?))?[ \t\u3000]*$",
    re.MULTILINE,
)
_MAX_HEADING_CHARS = 60


@dataclass(frozen=True)
class LoadError:
    path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else self.path
        return f"{where}: {self.message}"


@dataclass
class LoadResult:
    documents: list[Document] = field(default_factory=list)
    errors: list[LoadError] = field(default_factory=list)
    # Files inside folders that no loader handles (named, so nothing vanishes unexplained).
    skipped: list[str] = field(default_factory=list)


def chinese_number(numeral: str) -> int:
    """`12`, `１２` (int() reads any Unicode digits), `十二`, `一百零八` → int."""
    if numeral.isdigit():
        return int(numeral)
    total, digit = 0, 0
    for char in numeral:
        if char in _CN_DIGITS:
            digit = _CN_DIGITS[char]
        else:
            total += (digit or 1) * _CN_UNITS[char]
            digit = 0
    return total + digit


def decode_bytes(data: bytes) -> str:
    """UTF-8 (with or without BOM), else the encoding charset-normalizer detects (GB18030, ...)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    best = from_bytes(data).best()
    if best is None:
        raise ValueError("cannot detect the text encoding (not UTF-8, GB18030/GBK or another known one)")
    logger.info("decoded as %s", best.encoding)
    return str(best)


def split_chapters(text: str, *, source: str, title: str = "") -> list[Document]:
    """One document per chapter heading; text before the first heading becomes `<source>#front`."""
    headings = [m for m in _HEADING.finditer(text) if len(m.group().strip()) <= _MAX_HEADING_CHARS]
    if not headings:
        return [Document(doc_id=source, text=text, source=source, title=title)] if text.strip() else []
    documents: list[Document] = []
    front = text[: headings[0].start()]
    if front.strip():
        documents.append(Document(doc_id=f"{source}#front", text=front, source=source, title=title))
    seen: set[int] = set()
    for match, following in zip(headings, [*headings[1:], None], strict=True):
        number = chinese_number(match.group(1))
        chapter_title = (match.group("title") or "").strip() or None
        body = text[match.start() : following.start() if following else len(text)]
        # A repeated number (a second part of the book restarting at 1) keeps ids unique.
        doc_id = f"{source}#ch{number}" if number not in seen else f"{source}#ch{number}@{match.start()}"
        seen.add(number)
        documents.append(
            Document(
                doc_id=doc_id,
                text=body,
                source=source,
                title=match.group().strip().lstrip("#").strip(),
                chapter=number,
                chapter_title=chapter_title,
                metadata={"book": title} if title else {},
            )
        )
    return documents


def load_text(path: Path, source: str) -> list[Document]:
    """`.txt` / `.md`: chapters when the file has headings, else one document."""
    text = decode_bytes(path.read_bytes())
    title = path.stem
    if path.suffix.lower() == ".md":
        heading = re.search(r"^#[ \t]+(.+)$", text, re.MULTILINE)
        title = heading.group(1).strip() if heading and not _HEADING.match(heading.group()) else title
    return split_chapters(text, source=source, title=title)


def load_jsonl(path: Path, source: str, errors: list[LoadError]) -> list[Document]:
    """One document per line; a malformed line is reported (path, line) and the rest kept."""
    documents: list[Document] = []
    for number, line in enumerate(decode_bytes(path.read_bytes()).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            documents.append(_jsonl_document(json.loads(line), source))
        except (json.JSONDecodeError, ValueError) as err:
            errors.append(LoadError(path=str(path), line=number, message=str(err)))
    return documents


def _jsonl_document(obj: Any, source: str) -> Document:
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    doc_id, text = obj.get("id"), obj.get("text")
    if not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool) or str(doc_id) == "":
        raise ValueError('missing or invalid "id" (a non-empty string or an integer)')
    if not isinstance(text, str) or not text.strip():
        raise ValueError('missing or empty "text"')
    title, metadata = obj.get("title", ""), obj.get("metadata", {})
    if not isinstance(title, str):
        raise ValueError('"title" must be a string')
    if not isinstance(metadata, dict):
        raise ValueError('"metadata" must be an object')
    return Document(doc_id=str(doc_id), text=text, source=source, title=title, metadata=metadata)


_BLOCKS = ["p", "div", "br", "li", "tr", "blockquote", "pre", "h1", "h2", "h3", "h4", "h5", "h6"]


def html_to_text(element: Any) -> str:
    """Text with one line per block element; inline markup (<b>, <a>) stays inside its line."""
    for block in element.find_all(_BLOCKS):
        block.append("\n")
    lines = (line.strip() for line in element.get_text().splitlines())
    return "\n".join(line for line in lines if line)


def load_epub(path: Path, source: str) -> list[Document]:
    """One document per spine item with text, numbered in reading order."""
    import ebooklib
    from bs4 import BeautifulSoup
    from ebooklib import epub

    book = epub.read_epub(str(path), options={"ignore_ncx": True})
    book_title = next(iter(book.get_metadata("DC", "title")), (path.stem,))[0]
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


def load_file(path: Path, source: str, errors: list[LoadError]) -> list[Document]:
    """Documents of one file; an unreadable file becomes one error and no documents."""
    suffix = path.suffix.lower()
    try:
        if suffix in (".txt", ".md"):
            return load_text(path, source)
        if suffix == ".jsonl":
            return load_jsonl(path, source, errors)
        if suffix == ".epub":
            return load_epub(path, source)
    except Exception as err:  # any parser's failure on one file must not stop the others
        errors.append(LoadError(path=str(path), message=f"unreadable {suffix} file: {type(err).__name__}: {err}"))
        return []
    errors.append(
        LoadError(path=str(path), message=f"unsupported file type {suffix!r}: use {', '.join(SUPPORTED_SUFFIXES)}")
    )
    return []


def _expand(paths: Iterable[str | Path], result: LoadResult) -> Iterator[tuple[Path, str]]:
    for given in map(Path, paths):
        if given.is_dir():
            for path in sorted(p for p in given.rglob("*") if p.is_file()):
                relative = path.relative_to(given).as_posix()
                if path.suffix.lower() in SUPPORTED_SUFFIXES:
                    yield path, relative
                else:
                    result.skipped.append(str(path))
        elif given.is_file():
            yield given, given.name
        else:
            result.errors.append(LoadError(path=str(given), message="no such file or folder"))


def load_paths(paths: Iterable[str | Path]) -> LoadResult:
    """Load files and folders (recursively); errors and skipped files are collected, not raised."""
    result = LoadResult()
    seen: dict[str, str] = {}
    for path, source in _expand(paths, result):
        for document in load_file(path, source, result.errors):
            if document.doc_id in seen:
                message = f"duplicate document id {document.doc_id!r} (already from {seen[document.doc_id]}): skipped"
                result.errors.append(LoadError(path=str(path), message=message))
                continue
            seen[document.doc_id] = str(path)
            result.documents.append(document)
    for skipped in result.skipped:
        logger.warning("skipped %s: not one of %s", skipped, ", ".join(SUPPORTED_SUFFIXES))
    return result
