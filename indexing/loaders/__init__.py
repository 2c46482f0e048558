"""Loaders: files and folders to `Document`s; a bad file is reported with its path, never fatal.

One module per format: `text` (.txt, .md), `jsonl`, `epub`, `pdf`, `word` (.docx), `webpage`
(.html, .htm). Before a parser runs, every file is checked (`base`): larger than MAX_FILE_MB,
empty, or not what its extension says are errors with their own message. A file either loads
whole (its documents carry the file's content hash) or gives no document at all, so its
chunks in the index are only ever replaced by a complete new version.

Document ids are stable: `<source>#ch<N>` for chapters, `<source>` for a whole file, the line's
own `id` for JSONL, where `source` is the file name (for a file argument) or its path
relative to the folder argument.
"""

import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from core.documents import Document
from indexing.loaders.base import BadFileError, LoadError, LoadResult, SourceFile, check_content, check_size
from indexing.loaders.epub import html_to_text, parse_epub
from indexing.loaders.jsonl import parse_jsonl
from indexing.loaders.pdf import parse_pdf
from indexing.loaders.text import chinese_number, decode_bytes, load_text, parse_text, split_chapters
from indexing.loaders.webpage import parse_html
from indexing.loaders.word import parse_docx

__all__ = [
    "SUPPORTED_SUFFIXES",
    "Document",
    "LoadError",
    "LoadResult",
    "SourceFile",
    "chinese_number",
    "decode_bytes",
    "find_files",
    "html_to_text",
    "load_files",
    "load_paths",
    "load_text",
    "split_chapters",
]

logger = logging.getLogger(__name__)

# Parsers of whole files: (bytes, source, file stem) -> documents; JSONL also reports lines.
_PARSERS: dict[str, Callable[[bytes, str, str], list[Document]]] = {
    ".txt": lambda data, source, stem: parse_text(data, source, markdown=False, stem=stem),
    ".md": lambda data, source, stem: parse_text(data, source, markdown=True, stem=stem),
    ".epub": parse_epub,
    ".pdf": parse_pdf,
    ".docx": parse_docx,
    ".html": parse_html,
    ".htm": parse_html,
}
SUPPORTED_SUFFIXES = (*_PARSERS, ".jsonl")


def _parse(file: SourceFile, errors: list[LoadError], max_file_mb: float) -> list[Document]:
    """Documents of one file; raises `BadFileError` (or a parser's own error) when it is unusable."""
    check_size(file.path, max_file_mb)
    data = file.path.read_bytes()
    check_content(file.path, data)
    suffix = file.path.suffix.lower()
    if suffix == ".jsonl":
        documents = parse_jsonl(data, file.path, file.source, errors)
    else:
        documents = _PARSERS[suffix](data, file.source, file.path.stem)
    if not documents and not errors:
        raise BadFileError("empty", "no text to index in the file")
    return documents


def load_file(file: SourceFile, errors: list[LoadError], max_file_mb: float) -> list[Document]:
    """Documents of one file, each with the file's hash; an unusable file is one error, no document."""
    suffix = file.path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        message = f"unsupported file type {suffix!r}: use {', '.join(SUPPORTED_SUFFIXES)}"
        errors.append(LoadError(path=str(file.path), message=message, reason="unsupported"))
        return []
    line_errors: list[LoadError] = []
    try:
        documents = _parse(file, line_errors, max_file_mb)
    except BadFileError as err:
        errors.append(LoadError(path=str(file.path), message=str(err), reason=err.reason))
        return []
    except Exception as err:  # any parser's failure on one file must not stop the others
        message = f"unreadable {suffix} file: {type(err).__name__}: {err}"
        errors.append(LoadError(path=str(file.path), message=message, reason="corrupt"))
        return []
    errors.extend(line_errors)
    digest = file.digest()
    for document in documents:
        document.file_hash = digest
    return documents


def find_files(paths: Iterable[str | Path], result: LoadResult) -> list[SourceFile]:
    """Files to load, folders expanded recursively in sorted order; others recorded in `result`."""
    files: list[SourceFile] = []
    for given in map(Path, paths):
        if given.is_dir():
            for path in sorted(p for p in given.rglob("*") if p.is_file()):
                if path.suffix.lower() in SUPPORTED_SUFFIXES:
                    files.append(SourceFile(path, path.relative_to(given).as_posix()))
                else:
                    result.skipped.append(str(path))
        elif given.is_file():
            files.append(SourceFile(given, given.name))
        else:
            result.errors.append(LoadError(path=str(given), message="no such file or folder", reason="missing"))
    for skipped in result.skipped:
        logger.warning("skipped %s: not one of %s", skipped, ", ".join(SUPPORTED_SUFFIXES))
    return files


def load_files(files: Iterable[SourceFile], result: LoadResult, max_file_mb: float) -> LoadResult:
    """Load `files` into `result` (documents, errors, the files that loaded whole, parse time)."""
    seen: dict[str, str] = {}
    started = time.perf_counter()
    for file in files:
        errors_before = len(result.errors)
        for document in load_file(file, result.errors, max_file_mb):
            if document.doc_id in seen:
                message = f"duplicate document id {document.doc_id!r} (already from {seen[document.doc_id]}): skipped"
                result.errors.append(LoadError(path=str(file.path), message=message, reason="duplicate_id"))
                continue
            seen[document.doc_id] = str(file.path)
            result.documents.append(document)
        if len(result.errors) == errors_before:
            result.loaded.append(file)
    result.parse_seconds += time.perf_counter() - started
    return result


def load_paths(paths: Iterable[str | Path], max_file_mb: float) -> LoadResult:
    """Load files and folders (recursively); errors and skipped files are collected, not raised.

    Files over `max_file_mb` (the `MAX_FILE_MB` setting) are refused unread."""
    result = LoadResult()
    return load_files(find_files(paths, result), result, max_file_mb)
