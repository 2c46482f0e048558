"""OCR character accuracy and speed on pages rendered from known Chinese text (issue 60).

Paragraphs of CMRC 2018 (data/cmrc2018, modern Chinese prose with digits and Latin words) are laid
out as A4-like pages in the installed CJK font (12 pt at 200 dpi) and read by the loaders' OCR
(indexing/loaders/ocr.py) in four conditions: clean, light noise (2 % of pixels speckled), rotated
1-2°, and rendered at 150 dpi. Character accuracy is 1 - edit distance / reference length, white
space ignored, summed over the pages; pages per second is OCR time only. The load average is
written beside every figure (the machine is shared).

    python -m bench.ocr_accuracy --pages 4
"""

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from bench import format_fixtures as ff
from bench.datasets import DATA
from indexing.loaders import ocr

RESULTS = Path(__file__).resolve().parent / "results"
CONDITIONS = ("clean", "noise", "rotated", "150dpi")
_LINE_CHARS = 32
_LINES_PER_PAGE = 24


def known_pages(count: int) -> list[list[str]]:
    """`count` pages of `_LINES_PER_PAGE` lines of CMRC paragraphs, in order."""
    data = json.loads((DATA / "cmrc2018" / "cmrc2018_dev.json").read_text(encoding="utf-8"))
    text = "".join(
        "".join(paragraph["context"].split()) for article in data["data"] for paragraph in article["paragraphs"]
    )
    lines = [text[at : at + _LINE_CHARS] for at in range(0, _LINE_CHARS * _LINES_PER_PAGE * count, _LINE_CHARS)]
    return [lines[at : at + _LINES_PER_PAGE] for at in range(0, len(lines), _LINES_PER_PAGE)]


def edit_distance(reference: str, hypothesis: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions), one row at a time."""
    previous = list(range(len(hypothesis) + 1))
    for row, expected in enumerate(reference, start=1):
        current = [row]
        for column, got in enumerate(hypothesis, start=1):
            current.append(min(previous[column] + 1, current[-1] + 1, previous[column - 1] + (expected != got)))
        previous = current
    return previous[-1]


def _page_image(lines: list[str], condition: str, seed: int) -> Any:
    image = ff.text_image(lines, size=33, dpi=150 if condition == "150dpi" else 200)
    return ff.degrade(image, condition if condition != "150dpi" else "clean", seed)


def measure(pages: list[list[str]], condition: str) -> dict[str, Any]:
    errors = chars = 0
    seconds = 0.0
    confidences = []
    for number, lines in enumerate(pages, start=1):
        image = _page_image(lines, condition, number)
        started = time.perf_counter()
        page = ocr.read_page(image, number)
        seconds += time.perf_counter() - started
        reference, got = "".join(lines), "".join(page.text.split())
        errors += edit_distance(reference, got)
        chars += len(reference)
        confidences.append(page.confidence)
    return {
        "condition": condition,
        "pages": len(pages),
        "chars": chars,
        "accuracy": round(1 - errors / chars, 4),
        "pages_per_s": round(len(pages) / seconds, 3),
        "mean_confidence": round(sum(confidences) / len(confidences), 4),
        "load": os.getloadavg()[0],
    }


def _markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| condition | pages | characters | accuracy | pages/s | mean confidence | load (1 min) |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['condition']} | {r['pages']} | {r['chars']} | {r['accuracy']:.4f} | {r['pages_per_s']:.3f} | "
        f"{r['mean_confidence']:.3f} | {r['load']:.1f} |"
        for r in rows
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=4, help="pages per condition")
    args = parser.parse_args(argv)
    pages = known_pages(args.pages)
    ocr.read_page(_page_image(pages[0][:2], "clean", 0), 0)  # the engine's one-time load, not timed
    rows = [measure(pages, condition) for condition in CONDITIONS]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ocr_accuracy.json").write_text(json.dumps(rows, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(_markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
