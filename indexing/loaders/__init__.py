"""Loaders: files and folders to `Document`s; a bad file is reported with its path, never fatal.

One module per format: `text` (.txt, .md), `jsonl`, `epub`, `pdf` (text layer, OCR for scanned
pages), `word` (.docx), `webpage` (.html, .htm), `sheet` (.xlsx, .xls, .csv, .tsv: a document
per sheet), `slides` (.pptx), `image` (.png, .jpg, .jpeg, .webp, .tif, .tiff by OCR, the `ocr`
extra). `SUPPORTED_SUFFIXES` is the one list of what is read (the upload route and the page's
file picker take it from here). Before a parser runs, every file is checked (`base`): larger than MAX_FILE_MB,
empty, or not what its extension says are errors with their own message. A file either loads
whole (its documents carry the file's content hash) or gives no document at all, so its
chunks in the index are only ever replaced by a complete new version.

Parsers run in a worker process (pebble), one file at a time: a file that takes longer than
LOAD_TIMEOUT_S is stopped there (the worker is killed and replaced) and reported as that
file's `timeout` error, and a parser that crashes its process (a segfault in a C library, the
kernel's OOM killer) is that file's `crashed` error; the job goes on with the next file. The
worker's memory is limited (LOAD_MEMORY_MB, RLIMIT_AS): a parse that needs more is that file's
`out_of_memory` error. What a file becomes is limited too: a .docx or .epub whose members inflate
past MAX_UNZIPPED_MB or MAX_ZIP_RATIO times its size (.xlsx and .pptx too), a PDF of more than MAX_PDF_PAGES pages, is
refused before it is parsed; a sheet over MAX_SHEET_ROWS rows, an image or scanned page over
MAX_IMAGE_PIXELS and OCR that would not fit in LOAD_TIMEOUT_S as they are read; a file giving
more than MAX_FILE_CHARS characters once it is.

Document ids are stable: `<source>#ch<N>` for chapters, `<source>` for a whole file, the line's
own `id` for JSONL, where `source` is the file name (for a file argument) or its path
relative to the folder argument.
"""

import logging
import multiprocessing
import os
import resource
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import TimeoutError as FutureTimeoutError
from contextlib import contextmanager
from pathlib import Path

from pebble import ProcessExpired, ProcessPool

from core.documents import Document
from indexing.loaders import epub, image, pdf, sheet, slides, webpage, word
from indexing.loaders.base import (
    IMAGE_SUFFIXES,
    BadFileError,
    LoadError,
    LoadLimits,
    LoadResult,
    SourceFile,
    check_chars,
    check_content,
    check_size,
    check_unzipped,
)
from indexing.loaders.epub import html_to_text, parse_epub
from indexing.loaders.image import parse_image
from indexing.loaders.jsonl import parse_jsonl
from indexing.loaders.pdf import parse_pdf
from indexing.loaders.sheet import parse_csv, parse_tsv, parse_xls, parse_xlsx
from indexing.loaders.slides import parse_pptx
from indexing.loaders.text import (
    CHAPTER_MARKS,
    chapters_of,
    chinese_number,
    decode_bytes,
    load_text,
    parse_text,
    split_chapters,
)
from indexing.loaders.webpage import parse_html
from indexing.loaders.word import parse_docx

__all__ = [
    "CHAPTER_MARKS",
    "IMAGE_SUFFIXES",
    "SUPPORTED_SUFFIXES",
    "Document",
    "LoadError",
    "LoadLimits",
    "LoadResult",
    "SourceFile",
    "chapters_of",
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
_MB = 1024 * 1024

# Parsers of whole files: (bytes, source, file stem, limits) -> documents; JSONL also reports lines.
Parser = Callable[[bytes, str, str, LoadLimits], list[Document]]


def _unlimited(parse: Callable[[bytes, str, str], list[Document]]) -> Parser:
    """A parser whose file is bounded by the checks made before it runs."""
    return lambda data, source, stem, _limits: parse(data, source, stem)


_PARSERS: dict[str, Parser] = {
    ".txt": _unlimited(lambda data, source, stem: parse_text(data, source, markdown=False, stem=stem)),
    ".md": _unlimited(lambda data, source, stem: parse_text(data, source, markdown=True, stem=stem)),
    ".epub": _unlimited(parse_epub),
    ".pdf": parse_pdf,
    ".docx": _unlimited(parse_docx),
    ".html": _unlimited(parse_html),
    ".htm": _unlimited(parse_html),
    ".xlsx": parse_xlsx,
    ".xls": parse_xls,
    ".csv": parse_csv,
    ".tsv": parse_tsv,
    ".pptx": _unlimited(parse_pptx),
    **dict.fromkeys(IMAGE_SUFFIXES, parse_image),
}
# Every suffix the loaders read: the upload route's accepted types and the page's file picker.
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
    **dict.fromkeys((".xlsx", ".xls", ".csv", ".tsv"), sheet.prepare),
    ".pptx": slides.prepare,
    **dict.fromkeys(IMAGE_SUFFIXES, image.prepare),
}
# Checks of what a file would become, made on its bytes before its parser runs.
_BEFORE_PARSING: dict[str, Callable[[bytes, LoadLimits], None]] = {
    ".docx": check_unzipped,
    ".epub": check_unzipped,
    ".xlsx": check_unzipped,
    ".pptx": check_unzipped,
    ".pdf": pdf.check_pages,
}


def _parse(file: SourceFile, errors: list[LoadError], limits: LoadLimits) -> list[Document]:
    """Documents of one file; raises `BadFileError` (or a parser's own error) when it is unusable."""
    check_size(file.path, limits.max_file_mb)
    data = file.path.read_bytes()
    check_content(file.path, data)
    suffix = file.path.suffix.lower()
    if suffix in _BEFORE_PARSING:
        _BEFORE_PARSING[suffix](data, limits)
    if suffix == ".jsonl":
        documents = parse_jsonl(data, file.path, file.source, errors)
    else:
        documents = _PARSERS[suffix](data, file.source, file.path.stem, limits)
    if not documents and not errors:
        raise BadFileError("empty", "no text to index in the file")
    check_chars(documents, limits)
    return documents


def load_file(file: SourceFile, errors: list[LoadError], limits: LoadLimits) -> list[Document]:
    """Documents of one file, each with the file's hash; an unusable file is one error, no document."""
    suffix = file.path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        message = f"unsupported file type {suffix!r}: use {', '.join(SUPPORTED_SUFFIXES)}"
        errors.append(LoadError(path=str(file.path), message=message, reason="unsupported"))
        return []
    line_errors: list[LoadError] = []
    try:
        documents = _parse(file, line_errors, limits)
    except Exception as err:  # any parser's failure on one file must not stop the others
        errors.append(_failure(file.path, err, limits))
        return []
    errors.extend(line_errors)
    digest = file.digest()
    for document in documents:
        document.file_hash = digest
    return documents


def _failure(path: Path, err: Exception, limits: LoadLimits) -> LoadError:
    """A failed parse as the file's error: over LOAD_MEMORY_MB (however the library said so), a bad
    file's own reason, else the parser's exception."""
    if isinstance(err, MemoryError) or isinstance(err.__cause__, MemoryError) or _near_memory_limit():
        message = (
            f"parsing needed more than LOAD_MEMORY_MB={limits.memory_mb:g} MB and was stopped: "
            "split the file or raise LOAD_MEMORY_MB"
        )
        return LoadError(path=str(path), message=message, reason="out_of_memory")
    if isinstance(err, BadFileError):
        return LoadError(path=str(path), message=str(err), reason=err.reason)
    message = f"unreadable {path.suffix.lower()} file: {type(err).__name__}: {err}"
    return LoadError(path=str(path), message=message, reason="corrupt")


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


def _load_alone(file: SourceFile, limits: LoadLimits) -> tuple[list[Document], list[LoadError], bool]:
    """`load_file` in the worker process: its documents and errors travel back together, with
    whether the worker's memory is spent (it is then replaced before the next file)."""
    errors: list[LoadError] = []
    return load_file(file, errors, limits), errors, _near_memory_limit()


# In a worker: the address space it started with and its limit, in bytes (`_limit_memory`).
_memory: tuple[int, int] | None = None


def _limit_memory(memory_mb: float) -> None:
    """In a new worker: its address space may grow by `memory_mb` beyond what the fork gave it
    (a limit below that would fail at once), so an allocation past it fails there, not in the service."""
    global _memory
    statm = Path("/proc/self/statm")  # Linux: the size in pages comes first
    if not statm.exists():
        return  # no /proc (macOS): no limit, as its kernel would not enforce RLIMIT_AS anyway
    size = int(statm.read_text(encoding="ascii").split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = size + int(memory_mb * _MB)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    _memory = (size, limit)


def _near_memory_limit() -> bool:
    """Whether this worker's peak address space came within an eighth of its budget of its limit: a
    parse that fails there ran out of memory, whether the library raised `MemoryError` or not."""
    if _memory is None:
        return False
    size, limit = _memory
    with open("/proc/self/status", encoding="ascii") as status:
        peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmPeak:"))
    return peak >= limit - (limit - size) // 8


class _Worker:
    """The worker process files are parsed in, one at a time, under LOAD_TIMEOUT_S and LOAD_MEMORY_MB,
    forked once their parsers' libraries are imported. A worker whose memory is spent is replaced
    before the next file, so that each file's peak is its own."""

    def __init__(self, files: list[SourceFile], limits: LoadLimits) -> None:
        suffixes = {file.path.suffix.lower() for file in files}
        for prepare in {_PREPARE[suffix] for suffix in suffixes if suffix in _PREPARE}:
            prepare()
        self.limits = limits
        self.pool = self._start()

    def _start(self) -> ProcessPool:
        fork = multiprocessing.get_context("fork")
        return ProcessPool(max_workers=1, context=fork, initializer=_limit_memory, initargs=(self.limits.memory_mb,))

    def close(self) -> None:
        self.pool.stop()
        self.pool.join()

    def load(self, file: SourceFile, errors: list[LoadError]) -> list[Document]:
        """`load_file` in the worker; a timeout or a crashed worker is the file's error."""
        limits = self.limits
        future = self.pool.schedule(_load_alone, args=(file, limits), timeout=limits.timeout_s)
        try:
            documents, file_errors, spent = future.result()
        except FutureTimeoutError:
            message = f"parsing took longer than LOAD_TIMEOUT_S={limits.timeout_s:g} s and was stopped: split the file or raise LOAD_TIMEOUT_S"
            errors.append(LoadError(path=str(file.path), message=message, reason="timeout"))
            return []
        except ProcessExpired as err:
            code = err.exitcode
            how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            message = (
                f"the {file.path.suffix.lower()} parser crashed ({how}): the file is damaged or too complex "
                f"(or its parse needed more than LOAD_MEMORY_MB={limits.memory_mb:g} MB)"
            )
            errors.append(LoadError(path=str(file.path), message=message, reason="crashed"))
            return []
        if spent:
            self.close()
            self.pool = self._start()
        errors.extend(file_errors)
        return documents


@contextmanager
def _worker(files: list[SourceFile], limits: LoadLimits) -> Iterator[_Worker]:
    worker = _Worker(files, limits)
    try:
        yield worker
    finally:
        worker.close()


def load_files(
    files: Iterable[SourceFile], result: LoadResult, limits: LoadLimits, go_on: Callable[[], bool] = lambda: True
) -> LoadResult:
    """Load `files` into `result` (documents, errors, the files that loaded whole, parse time);
    `go_on` is asked before each file (an upload job stops there when it is cancelled or out of time)."""
    seen: dict[str, str] = {}
    started = time.perf_counter()
    files = list(files)
    with _worker(files, limits) as worker:
        for file in files:
            if not go_on():
                break
            errors_before = len(result.errors)
            for document in worker.load(file, result.errors):
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
