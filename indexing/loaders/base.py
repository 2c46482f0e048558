"""What every loader shares: the file it reads, the errors it reports, the checks made before parsing.

A file that cannot be indexed raises `BadFileError` with a short `reason` code (written to the
error file) and a message that says what is wrong and what to do; the other files go on.
"""

import hashlib
import io
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core.config import Settings
from core.documents import Document

_MB = 1024 * 1024


class BadFileError(ValueError):
    """One file that cannot be indexed as a whole (no document of it is kept)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class LoadLimits:
    """What one file may weigh (`MAX_FILE_MB`), take to parse (`LOAD_TIMEOUT_S`, `LOAD_MEMORY_MB`) and
    become: the total a .docx or .epub inflates to (`MAX_UNZIPPED_MB`, `MAX_ZIP_RATIO` times its size),
    the pages of a PDF (`MAX_PDF_PAGES`) and the characters of text it gives (`MAX_FILE_CHARS`)."""

    max_file_mb: float
    timeout_s: float
    max_unzipped_mb: float
    max_zip_ratio: float
    max_pdf_pages: int
    max_chars: int
    memory_mb: float
    max_sheet_rows: int = 100_000
    max_image_pixels: int = 40_000_000
    ocr_min_confidence: float = 0.8

    def __post_init__(self) -> None:
        if min(asdict(self).values()) <= 0:
            raise ValueError(f"every load limit must be positive, got {self}")

    @classmethod
    def from_settings(cls, settings: Settings) -> "LoadLimits":
        return cls(
            max_file_mb=settings.max_file_mb,
            timeout_s=settings.load_timeout_s,
            max_unzipped_mb=settings.max_unzipped_mb,
            max_zip_ratio=settings.max_zip_ratio,
            max_pdf_pages=settings.max_pdf_pages,
            max_chars=settings.max_file_chars,
            memory_mb=settings.load_memory_mb,
            max_sheet_rows=settings.max_sheet_rows,
            max_image_pixels=settings.max_image_pixels,
            ocr_min_confidence=settings.ocr_min_confidence,
        )


@dataclass(frozen=True)
class LoadError:
    path: str
    message: str
    line: int | None = None
    # empty, too_large, wrong_type, encrypted, no_text_layer, undecodable_text, corrupt, unsupported,
    # missing, duplicate_id, bad_line, timeout (LOAD_TIMEOUT_S), crashed (the parser killed its process),
    # unzipped_too_large (MAX_UNZIPPED_MB), zip_ratio (MAX_ZIP_RATIO), too_many_pages (MAX_PDF_PAGES),
    # too_much_text (MAX_FILE_CHARS), out_of_memory (LOAD_MEMORY_MB), too_many_rows (MAX_SHEET_ROWS),
    # too_many_pixels (MAX_IMAGE_PIXELS), ocr_time_budget (LOAD_TIMEOUT_S), no_ocr (the `ocr` extra missing)
    reason: str | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else self.path
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class SourceFile:
    """A file to load and its `source`: the name under which its chunks are indexed."""

    path: Path
    source: str

    def digest(self) -> str:
        """Content hash of the file (what `--sync` compares), read in blocks."""
        sha = hashlib.sha256()
        with self.path.open("rb") as stream:
            while block := stream.read(_MB):
                sha.update(block)
        return sha.hexdigest()[:32]


@dataclass
class LoadResult:
    documents: list[Document] = field(default_factory=list)
    errors: list[LoadError] = field(default_factory=list)
    # Files inside folders that no loader handles (named, so nothing vanishes unexplained).
    skipped: list[str] = field(default_factory=list)
    # Files that loaded completely (their chunks may replace what the index holds for them).
    loaded: list[SourceFile] = field(default_factory=list)
    # Seconds spent reading and parsing files (reported beside embedding time).
    parse_seconds: float = 0.0

    def doubtful_pages(self) -> dict[str, list[int]]:
        """Per source, the pages OCR read with a confidence under OCR_MIN_CONFIDENCE (the report names them)."""
        return {
            document.source: pages
            for document in self.documents
            if (pages := document.metadata.get("ocr_low_confidence_pages"))
        }


_KINDS = {
    "pdf": "a PDF document",
    "zip": "a ZIP archive (.docx, .xlsx, .pptx, .epub or .zip)",
    "ole": "an old binary Office file",
    "image": "an image",
}
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff")
_EXPECTED = {
    ".pdf": "pdf",
    ".docx": "zip",
    ".epub": "zip",
    ".xlsx": "zip",
    ".pptx": "zip",
    ".xls": "ole",
    **dict.fromkeys(IMAGE_SUFFIXES, "image"),
}
_FORMAT_NAMES = {
    ".pdf": "PDF",
    ".docx": "Word (.docx)",
    ".epub": "EPUB",
    ".xlsx": "Excel (.xlsx)",
    ".xls": "Excel 97-2003 (.xls)",
    ".pptx": "PowerPoint (.pptx)",
    **{suffix: f"an image ({suffix})" for suffix in IMAGE_SUFFIXES},
}
# The first bytes of the image formats OCR reads (PNG, JPEG, WebP's RIFF, TIFF in both byte orders).
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"RIFF", b"II*\x00", b"MM\x00*")


def sniff(head: bytes) -> str:
    """`pdf`, `zip`, `ole` (.doc/.xls), `image`, `binary` or `text`, from the first bytes of a file."""
    if b"%PDF-" in head[:1024]:
        return "pdf"
    if head.startswith(_IMAGE_MAGIC):
        return "image"
    if head.startswith(b"PK\x03\x04"):
        return "zip"
    if head.startswith(b"\xd0\xcf\x11\xe0"):
        return "ole"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16 text has NUL bytes but a byte-order mark
        return "text"
    return "binary" if b"\x00" in head[:4096] else "text"


def check_content(path: Path, data: bytes) -> None:
    """Refuse, before any parser runs, a file that is empty or not what its extension says."""
    if not data.strip():
        raise BadFileError("empty", "empty file: nothing to index")
    suffix = path.suffix.lower()
    kind, expected = sniff(data[:4096]), _EXPECTED.get(suffix, "text")
    if kind != expected:
        name = _FORMAT_NAMES.get(suffix, f"a {suffix} text file")
        found = _KINDS.get(kind, "binary data") if kind != "text" else "plain text"
        raise BadFileError("wrong_type", f"not {name} as its extension says: the content is {found}")


def check_size(path: Path, max_file_mb: float) -> None:
    """Refuse a file over the limit before reading it into memory."""
    size = path.stat().st_size
    if size > max_file_mb * _MB:
        raise BadFileError(
            "too_large",
            f"file is {size / _MB:.3g} MB, larger than MAX_FILE_MB={max_file_mb:g}: split it or raise MAX_FILE_MB",
        )


def check_unzipped(data: bytes, limits: LoadLimits) -> None:
    """Refuse, before a parser inflates it, a .docx or .epub whose members add up to more than
    MAX_UNZIPPED_MB, or to more than MAX_ZIP_RATIO times the file (a zip bomb). The sizes are the
    zip directory's: Python's zipfile (python-docx's and ebooklib's reader) never inflates a member
    past its stated size, so they bound what parsing can inflate."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            inflated = sum(member.file_size for member in archive.infolist())
    except zipfile.BadZipFile:
        return  # the parser says what is damaged, in its format's words
    if inflated > limits.max_zip_ratio * len(data):
        raise BadFileError(
            "zip_ratio",
            f"it inflates to {inflated / len(data):.0f} times its size ({inflated / _MB:.3g} MB unzipped), more than "
            f"MAX_ZIP_RATIO={limits.max_zip_ratio:g} (a zip bomb?): raise MAX_ZIP_RATIO if the file is genuine",
        )
    if inflated > limits.max_unzipped_mb * _MB:
        raise BadFileError(
            "unzipped_too_large",
            f"it inflates to {inflated / _MB:.3g} MB unzipped, more than MAX_UNZIPPED_MB={limits.max_unzipped_mb:g}: "
            "split it or raise MAX_UNZIPPED_MB",
        )


def check_chars(documents: list[Document], limits: LoadLimits) -> None:
    """Refuse a file whose text is longer than MAX_FILE_CHARS (a small file can expand into a huge text)."""
    chars = sum(len(document.text) for document in documents)
    if chars > limits.max_chars:
        raise BadFileError(
            "too_much_text",
            f"it gives {chars} characters of text, more than MAX_FILE_CHARS={limits.max_chars}: "
            "split it or raise MAX_FILE_CHARS",
        )
