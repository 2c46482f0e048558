"""Images (`.png`, `.jpg`, `.webp`, `.tiff`): scans and photos read by OCR (indexing/loaders/ocr.py).

An image is one document; a multi-page TIFF gives a page per frame, each with its page number.
The size is read from the header and checked against MAX_IMAGE_PIXELS before any pixel is
decoded (a decompression bomb is refused, not inflated); a photo's EXIF rotation is applied.
Each page's confidence is in the document's metadata (`ocr_confidence`), the pages under
OCR_MIN_CONFIDENCE in `ocr_low_confidence_pages`, which the job's report names.
"""

import io

from core.documents import Document
from indexing.loaders import ocr
from indexing.loaders.base import BadFileError, LoadLimits
from indexing.loaders.structure import Block, build_document


def prepare() -> None:
    """Import Pillow (before a worker process is forked; the OCR engine is built in the worker)."""
    import PIL.Image  # noqa: F401


def parse_image(data: bytes, source: str, stem: str, limits: LoadLimits) -> list[Document]:
    """One document of the image's text, page by page; `BadFileError` when it cannot be read."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    if not ocr.available():
        raise ocr.missing("an image")
    Image.MAX_IMAGE_PIXELS = limits.max_image_pixels  # Pillow's own guard, should a frame lie about its size
    try:
        image = Image.open(io.BytesIO(data))
        ocr.check_pixels(*image.size, limits)
        pages = []
        for index in range(getattr(image, "n_frames", 1)):
            image.seek(index)
            ocr.check_pixels(*image.size, limits)
            pages.append(ocr.read_page(ImageOps.exif_transpose(image), index + 1))
    except Image.DecompressionBombError as err:
        raise BadFileError(
            "too_many_pixels", f"{err} (MAX_IMAGE_PIXELS={limits.max_image_pixels}): scale it down or raise it"
        ) from err
    except (UnidentifiedImageError, OSError, SyntaxError) as err:
        raise BadFileError("corrupt", f"unreadable image: {type(err).__name__}: {err}") from err
    blocks = [Block(line.text, page=page.number) for page in pages for line in page.lines]
    document = build_document(blocks, doc_id=source, source=source, title=stem)
    document.metadata.update(ocr.report(pages, limits))
    return [document] if document.text else []
