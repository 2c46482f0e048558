"""OCR of scans and photos: RapidOCR with the PP-OCRv6 Chinese models its wheel ships (the `ocr` extra).

Why RapidOCR 3 (`rapidocr` + `onnxruntime`): its wheel carries the PP-OCRv6 detection and
recognition ONNX weights and the character list inside the recognition model, so nothing is
downloaded at run time (checked: it reads pages with the network cut off); it needs OpenCV's
headless build only. `rapidocr-onnxruntime` 1.4 ships older PP-OCRv4 weights and needs the GUI
OpenCV; PaddleOCR downloads its models on first use. docs/_incoming/issue-60.md has the figures.

The engine is built once per worker process, on first use (never before a fork: onnxruntime's
thread pools do not survive one). A page is read as lines, top to bottom, each with its box and
confidence; a page's confidence is the mean of its lines', weighted by their length.
"""

import logging
from dataclasses import dataclass
from typing import Any

from indexing.loaders.base import BadFileError, LoadLimits

logger = logging.getLogger(__name__)

_engine: Any = None


@dataclass(frozen=True)
class OcrLine:
    text: str
    left: float
    top: float
    right: float
    bottom: float
    confidence: float


@dataclass(frozen=True)
class OcrPage:
    number: int
    lines: list[OcrLine]

    @property
    def confidence(self) -> float:
        """Mean line confidence weighted by length (1.0 for a page without text: nothing to doubt)."""
        chars = sum(len(line.text) for line in self.lines)
        return sum(line.confidence * len(line.text) for line in self.lines) / chars if chars else 1.0

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)


def available() -> bool:
    """Whether the `ocr` extra is installed."""
    try:
        import onnxruntime  # noqa: F401
        import rapidocr  # noqa: F401
    except ImportError:
        return False
    return True


def missing(what: str) -> BadFileError:
    return BadFileError(
        "no_ocr",
        f"{what} needs OCR, which is not installed: pip install 'es-agentic-rag[ocr]' (or run it through an OCR tool first)",
    )


def _get_engine() -> Any:
    global _engine
    if _engine is None:
        from rapidocr import RapidOCR

        # No angle classifier: pages are upright (a 1-2° skew is read without it) and it costs time.
        _engine = RapidOCR(params={"Global.log_level": "error", "Global.use_cls": False})
    return _engine


def check_pixels(width: int, height: int, limits: LoadLimits) -> None:
    """Refuse an image (or a page to render) larger than MAX_IMAGE_PIXELS before it is decoded."""
    if width * height > limits.max_image_pixels:
        raise BadFileError(
            "too_many_pixels",
            f"{width}×{height} = {width * height} pixels, more than MAX_IMAGE_PIXELS={limits.max_image_pixels} "
            "(a decompression bomb?): scale it down or raise MAX_IMAGE_PIXELS",
        )


def read_page(image: Any, number: int) -> OcrPage:
    """The lines of one page image (PIL), top to bottom then left to right."""
    import numpy as np

    result = _get_engine()(np.asarray(image.convert("RGB")))
    if result.txts is None or result.boxes is None or result.scores is None:
        return OcrPage(number, [])
    lines = []
    for box, text, score in zip(result.boxes, result.txts, result.scores, strict=True):
        xs, ys = [float(point[0]) for point in box], [float(point[1]) for point in box]
        if text.strip():
            lines.append(OcrLine(text.strip(), min(xs), min(ys), max(xs), max(ys), float(score)))
    height = sum(line.bottom - line.top for line in lines) / len(lines) if lines else 1.0
    lines.sort(key=lambda line: (round(line.top / max(height * 0.6, 1.0)), line.left))
    return OcrPage(number, lines)


def report(pages: list[OcrPage], limits: LoadLimits) -> dict[str, Any]:
    """What a document records of its OCR: the pages read, each one's confidence, the doubtful ones."""
    return {
        "ocr_pages": [page.number for page in pages],
        "ocr_confidence": {str(page.number): round(page.confidence, 3) for page in pages},
        "ocr_low_confidence_pages": [page.number for page in pages if page.confidence < limits.ocr_min_confidence],
    }
