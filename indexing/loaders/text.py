"""Plain text and Markdown: encoding detection, chapters of novels, sections from `#` headings.

`.txt` and `.md` are UTF-8 (BOM or not), or any encoding charset-normalizer recognises (GB18030,
GBK, UTF-16...). A novel with headings such as `第12章 …` or `第十二回 …` yields one document
per chapter, with `chapter` and `chapter_title` set; Markdown `#`-`######` headings inside a
document give its chunks a section path, as Word headings do.
"""

import logging
import re
from pathlib import Path

from charset_normalizer import from_bytes

from core.documents import Document
from indexing.loaders.base import BadFileError
from indexing.loaders.structure import section_starts

logger = logging.getLogger(__name__)

_CN_DIGITS = dict(zip("零〇一二两三四五六七八九", [0, 0, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9], strict=True))
_CN_UNITS = {"十": 10, "百": 100, "千": 1000}
# `第12章 title`, optionally as a Markdown heading: the number word ends the line or is followed
# by a space or colon, and the line is short, so prose such as `第三章节，…` is not taken for a
# heading. A text profile adds its own marks (a classical novel's `第十二回`: `core.profiles`).
CHAPTER_MARKS = "章"


def chapter_heading(marks: str = CHAPTER_MARKS) -> re.Pattern[str]:
    """A chapter heading line numbered with one of `marks`."""
    return re.compile(
        r"^[ \t\u3000]*(?:#{1,6}[ \t]*)?第[ \t]*([0-9０-９]+|[零〇一二两三四五六七八九十百千]+)[ \t]*"
        rf"[{marks}](?:[ \t\u3000:：、.．]+(?P<title>[^\n]*?))?[ \t\u3000]*$",
        re.MULTILINE,
    )


_HEADING = chapter_heading()
_MAX_HEADING_CHARS = 60
_MAX_REPLACED_SHARE = 0.01  # undecodable characters in a damaged file of one encoding
_MARKDOWN_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


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


def decode_damaged(data: bytes, encoding: str) -> str | None:
    """`data` in `encoding` with its few undecodable bytes (a cut-off character, a stray byte)
    replaced by U+FFFD; None when they are more than a damaged file has (another encoding)."""
    text = data.decode(encoding, errors="replace")
    replaced = text.count("\ufffd")
    if replaced > _MAX_REPLACED_SHARE * len(text):
        return None
    logger.warning("%d bytes that are not %s replaced by U+FFFD", replaced, encoding)
    return text


def decode_bytes(data: bytes) -> str:
    """UTF-8 (with or without BOM; a few damaged bytes replaced), else the encoding charset-normalizer
    detects (GB18030, ...)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    damaged = decode_damaged(data, "utf-8-sig")
    if damaged is not None:
        return damaged
    best = from_bytes(data).best()
    if best is None:
        raise BadFileError(
            "undecodable_text",
            "cannot detect the text encoding (not UTF-8, GB18030/GBK or another known one): save it as UTF-8",
        )
    logger.info("decoded as %s", best.encoding)
    return str(best)


def split_chapters(text: str, *, source: str, title: str = "", marks: str = CHAPTER_MARKS) -> list[Document]:
    """One document per chapter heading (numbered with one of `marks`); text before the first heading
    becomes `<source>#front`."""
    found = chapter_heading(marks).finditer(text)
    headings = [m for m in found if len(m.group().strip()) <= _MAX_HEADING_CHARS]
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


def markdown_sections(document: Document, book_title: str, marks: str = CHAPTER_MARKS) -> None:
    """Section offsets of a Markdown document from its `#` headings (title and chapter headings excluded)."""
    chapter = chapter_heading(marks)
    headings = [
        (m.start(), m.end(), len(m.group(1)), m.group(2).strip())
        for m in _MARKDOWN_HEADING.finditer(document.text)
        if not chapter.match(m.group())  # chapter headings already make chapters
    ]
    document.section_starts = section_starts(document.text, headings, book_title)


def parse_text(data: bytes, source: str, *, markdown: bool, stem: str) -> list[Document]:
    """`.txt` / `.md` bytes: chapters when the text has chapter headings, else one document."""
    text = decode_bytes(data)
    title = stem
    if markdown:
        heading = re.search(r"^#[ \t]+(.+)$", text, re.MULTILINE)
        title = heading.group(1).strip() if heading and not _HEADING.match(heading.group()) else title
    documents = split_chapters(text, source=source, title=title)
    if markdown:
        for document in documents:
            markdown_sections(document, title)
    return documents


def chapters_of(documents: list[Document], marks: str) -> list[Document]:
    """`documents` with each text or Markdown file's single document cut at chapter headings numbered
    with `marks` (a text profile's: 第十二回), as the loader cuts 第12章; the file's hash and access
    kept. A document already a chapter, or of another format, is left as it is."""
    if marks == CHAPTER_MARKS:
        return documents
    result: list[Document] = []
    for document in documents:
        suffix = Path(document.source).suffix.lower()
        parts = (
            split_chapters(document.text, source=document.source, title=document.title, marks=marks)
            if document.chapter is None and document.doc_id == document.source and suffix in (".txt", ".md")
            else []
        )
        if len(parts) < 2:
            result.append(document)
            continue
        for part in parts:
            part.file_hash, part.access, part.id_space = document.file_hash, list(document.access), document.id_space
            if suffix == ".md":
                markdown_sections(part, document.title, marks)
        result += parts
    return result


def load_text(path: Path, source: str) -> list[Document]:
    """A `.txt` or `.md` file (see `parse_text`)."""
    return parse_text(path.read_bytes(), source, markdown=path.suffix.lower() == ".md", stem=path.stem)
