"""Loaders: files and folders to `Document`s; a bad file is reported with its path, never fatal.

One module per format: `text` (.txt, .md), `jsonl`, `epub`, `pdf`, `word` (.docx), `webpage`
(.html, .htm). Before a parser runs, every file is checked (`base`): larger than MAX_FILE_MB,
empty, or not what its extension says are errors with their own message. A file either loads
whole (its documents carry the file's content hash) or gives no document at all, so its
chunks in the index are only ever replaced by a complete new version.

Parsers run in a worker process (pebble), one file at a time: a file that takes longer than
LOAD_TIMEOUT_S is stopped there (the worker is killed and replaced) and reported as that
file's `timeout` error, and a parser that crashes its process (a segfault in a C library, the
kernel's OOM killer) is that file's `crashed` error; the job goes on with the next file.

Document ids are stable: `<source>#ch<N>` for chapters, `<source>` for a whole file, the line's
own `id` for JSONL, where `source` is the file name (for a file argument) or its path
relative to the folder argument.
"""

import logging
import multiprocessing
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import TimeoutError as FutureTimeoutError
from contextlib import contextmanager
from pathlib import Path

from pebble import ProcessExpired, ProcessPool

from core.documents import Document
from indexing.loaders import epub, pdf, webpage, word
from indexing.loaders.base import BadFileError, LoadError, LoadLimits, LoadResult, SourceFile, check_content, check_size
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
    "LoadLimits",
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
# What each parser imports (and, for trafilatura, the caches its first call builds: ≈1 s),
# done by the parent before it forks a worker, so that a new worker (one per `load_files`
# call, or after a timeout) starts warm.
_PREPARE: dict[str, Callable[[], None]] = {
    ".epub": epub.prepare,
    ".pdf": pdf.prepare,
    ".docx": word.prepare,
    ".html": webpage.prepare,
    ".htm": webpage.prepare,
}


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


def _load_alone(file: SourceFile, max_file_mb: float) -> tuple[list[Document], list[LoadError]]:
    """`load_file` in the worker process: its documents and errors travel back together."""
    errors: list[LoadError] = []
    return load_file(file, errors, max_file_mb), errors


@contextmanager
def _worker(files: list[SourceFile]) -> Iterator[ProcessPool]:
    """One worker process for parsing `files`, forked once their parsers' libraries are imported."""
    for prepare in {_PREPARE[suffix] for suffix in (file.path.suffix.lower() for file in files) if suffix in _PREPARE}:
        prepare()
    pool = ProcessPool(max_workers=1, context=multiprocessing.get_context("fork"))
    try:
        yield pool
    finally:
        pool.stop()
        pool.join()


def _load_in_worker(
    pool: ProcessPool, file: SourceFile, errors: list[LoadError], max_file_mb: float, timeout_s: float
) -> list[Document]:
    """`load_file` under a time limit in `pool`; a timeout or a crashed worker is the file's error."""
    future = pool.schedule(_load_alone, args=(file, max_file_mb), timeout=timeout_s)
    try:
        documents, file_errors = future.result()
    except FutureTimeoutError:
        message = f"parsing took longer than LOAD_TIMEOUT_S={timeout_s:g} s and was stopped: split the file or raise LOAD_TIMEOUT_S"
        errors.append(LoadError(path=str(file.path), message=message, reason="timeout"))
        return []
    except ProcessExpired as err:
        code = err.exitcode
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        message = f"the {file.path.suffix.lower()} parser crashed ({how}): the file is damaged or too complex"
        errors.append(LoadError(path=str(file.path), message=message, reason="crashed"))
        return []
    errors.extend(file_errors)
    return documents


def load_files(
    files: Iterable[SourceFile], result: LoadResult, limits: LoadLimits, go_on: Callable[[], bool] = lambda: True
) -> LoadResult:
    """Load `files` into `result` (documents, errors, the files that loaded whole, parse time);
    `go_on` is asked before each file (an upload job stops there when it is cancelled or out of time)."""
    seen: dict[str, str] = {}
    started = time.perf_counter()
    files = list(files)
    with _worker(files) as pool:
        for file in files:
            if not go_on():
                break
            errors_before = len(result.errors)
            for document in _load_in_worker(pool, file, result.errors, limits.max_file_mb, limits.timeout_s):
                if document.doc_id in seen:
                    message = (
                        f"duplicate document id {document.doc_id!r} (already from {seen[document.doc_id]}): skipped"
                    )
                    result.errors.append(LoadError(path=str(file.path), message=message, reason="duplicate_id"))
                    continue
                seen[document.doc_id] = str(file.path)
                result.documents.append(document)
            if len(result.errors) == errors_before:
                result.loaded.append(file)
    result.parse_seconds += time.perf_counter() - started
    return result


def load_paths(paths: Iterable[str | Path], limits: LoadLimits) -> LoadResult:
    """Load files and folders (recursively); errors and skipped files are collected, not raised."""
    result = LoadResult()
    return load_files(find_files(paths, result), result, limits)
