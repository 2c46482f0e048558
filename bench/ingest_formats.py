"""PDF and HTML extraction measured on generated Chinese files, and parse time against embedding.

`quality`: each candidate library on the generated guide (bench/doc_fixtures.py, whose text
is known): paragraphs found whole (no line break or stray space inside), table rows whose
cells stay on one line in order, running header/footer lines left, boilerplate lines left
(HTML), headings kept as their own line, and milliseconds per file (median of 5). The HTML
candidates also read the short pages (a notice of one or two paragraphs in site chrome: nav,
header, footer, aside, role=navigation, a menu list, a breadcrumb, all at once), summed over
the pages; the goal is 0 boilerplate lines left.
`share`: a corpus of the guide as PDF, Word, HTML and Markdown plus the first chapters of
《三国演义》 laid out as PDF, Word and HTML, indexed by `python -m indexing --recreate`; the
JSON summary's `parse_seconds` against `embed_seconds`.

    python -m bench.ingest_formats quality
    python -m bench.ingest_formats share --chapters 5 --alias bench-ingest
"""

import argparse
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import doc_fixtures as fx
from bench.datasets import sanguo_book
from core.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE
from core.config import Settings
from core.documents import document_chunks
from indexing.loaders import LoadLimits, load_paths, split_chapters
from indexing.loaders.epub import html_to_text

RESULTS = Path(__file__).resolve().parent / "results"
_CJK_SPACE = re.compile(r"(?<=[\u4e00-\u9fff，。；：、“”（）]) (?=[\u4e00-\u9fff，。；：、“”（）])")
_BOILERPLATE_TAGS = ["nav", "header", "footer", "aside", "script", "style", "noscript", "form", "iframe"]
_BOILERPLATE_NAMES = re.compile(r"nav|menu|banner|ad\b|ads|advert|footer|copyright|sidebar|share|related|comment")

Extractor = Callable[[bytes], str]
# Spaces between CJK characters that the guide itself has (「第一章 总论」): not stray.
_TRUE_CJK_SPACES = sum(len(_CJK_SPACE.findall(block.text)) for page in fx.GUIDE for block in page)


def _pypdf(data: bytes) -> str:
    import pypdf

    return "\n".join(page.extract_text() for page in pypdf.PdfReader(io.BytesIO(data)).pages)


def _pdfminer(data: bytes) -> str:
    from pdfminer.high_level import extract_text

    return str(extract_text(io.BytesIO(data)))


def _pdfplumber(data: bytes) -> str:
    import pdfplumber

    with pdfplumber.open(io.BytesIO(data)) as pdf:
        return "\n".join(page.extract_text() for page in pdf.pages)


def _pypdfium2(data: bytes) -> str:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(data)
    try:
        return "\n".join(page.get_textpage().get_text_range() for page in pdf)
    finally:
        pdf.close()


def _trafilatura(data: bytes) -> str:
    import trafilatura

    return str(trafilatura.extract(data.decode("utf-8"), include_tables=True, favor_recall=True) or "")


def _readability(data: bytes) -> str:
    from bs4 import BeautifulSoup
    from readability import Document as Readable

    summary = Readable(data.decode("utf-8")).summary(html_partial=True)
    return html_to_text(BeautifulSoup(summary, "html.parser"))


def _soup_rules(data: bytes) -> str:
    """BeautifulSoup with the usual hand-written rules: drop boilerplate tags and class/id names."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(data.decode("utf-8"), "html.parser")
    for element in soup(_BOILERPLATE_TAGS):
        element.decompose()
    for element in soup.find_all(True):
        if element.decomposed or element.attrs is None:
            continue
        names = " ".join([str(element.get("id") or ""), *map(str, element.get("class") or [])])
        if names.strip() and _BOILERPLATE_NAMES.search(names.lower()):
            element.decompose()
    return html_to_text(soup.body or soup)


def _loader(suffix: str) -> Extractor:
    """This project's loader (the chosen library plus its rules) on bytes written to a file."""

    def extract(data: bytes) -> str:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder, f"file{suffix}")
            path.write_bytes(data)
            [document] = load_paths([path], LoadLimits.from_settings(Settings())).documents
            return document.text

    return extract


def _scores(text: str, *, boilerplate: list[str]) -> dict[str, Any]:
    lines = [line.strip() for line in text.splitlines()]
    paragraphs = fx.paragraphs()
    rows = fx.table_rows()
    headings = [block.text for page in fx.GUIDE for block in page if block.level]
    row_patterns = [re.compile(r"\s*\S*\s*".join(map(re.escape, row))) for row in rows]
    return {
        "paragraphs_whole": sum(p in lines for p in paragraphs) / len(paragraphs),
        "table_rows_on_one_line": sum(any(pat.search(line) for line in lines) for pat in row_patterns) / len(rows),
        "headings_own_line": sum(h in lines for h in headings) / len(headings),
        "boilerplate_lines_left": sum(
            any(b.replace(" ", "") in line.replace(" ", "") for b in boilerplate) for line in lines
        ),
        "stray_cjk_spaces": len(_CJK_SPACE.findall(text.replace(fx.HEADER, ""))) - _TRUE_CJK_SPACES,
    }


def _timed(extract: Extractor, data: bytes, repeats: int = 5) -> tuple[str, float]:
    extract(data)  # imports and caches outside the timing
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        text = extract(data)
        times.append(time.perf_counter() - started)
    return text, statistics.median(times) * 1000


def quality() -> dict[str, Any]:
    """Every candidate on the generated PDF (with and without outline) and HTML pages (two layouts)."""
    with tempfile.TemporaryDirectory() as folder:
        pdfs = {
            "pdf, outline": fx.write_pdf(Path(folder, "a.pdf"), outline=True).read_bytes(),
            "pdf, no outline": fx.write_pdf(Path(folder, "b.pdf")).read_bytes(),
        }
    pages = {f"html, {layout} layout": fx.guide_html(layout=layout).encode() for layout in fx.LAYOUTS}
    running = [fx.HEADER, "第 1 页 共", "第 2 页 共", "第 3 页 共", "第 4 页 共"]
    candidates: list[tuple[dict[str, bytes], dict[str, Extractor], list[str]]] = [
        (
            pdfs,
            {
                "pypdf": _pypdf,
                "pdfminer.six": _pdfminer,
                "pdfplumber": _pdfplumber,
                "pypdfium2 (PDFium)": _pypdfium2,
                "this loader (PDFium + rules, pdfplumber tables)": _loader(".pdf"),
            },
            running,
        ),
        (
            pages,
            {
                "BeautifulSoup + tag/class rules": _soup_rules,
                "readability-lxml": _readability,
                "trafilatura": _trafilatura,
                "this loader (trafilatura XML)": _loader(".html"),
            },
            fx.BOILERPLATE,
        ),
    ]
    rows = []
    for name, extract in candidates[1][1].items():
        rows.append(_short_pages_row(name, extract))
    for files, extractors, boilerplate in candidates:
        for file_name, data in files.items():
            for name, extract in extractors.items():
                text, ms = _timed(extract, data)
                rows.append(
                    {"file": file_name, "candidate": name, **_scores(text, boilerplate=boilerplate), "ms": round(ms, 1)}
                )
    return {"rows": rows}


def _short_pages_row(name: str, extract: Extractor) -> dict[str, Any]:
    """One candidate on every short page (each chrome variant, one and two paragraphs), summed."""
    pages = [fx.short_page(variant, n).encode() for variant in fx.SHORT_VARIANTS for n in (1, 2)]
    timed = [_timed(extract, page) for page in pages]
    line_lists = [[line.strip() for line in text.splitlines()] for text, _ms in timed]
    wanted = [fx.NOTICE[:n] for _variant in fx.SHORT_VARIANTS for n in (1, 2)]
    return {
        "file": f"short pages ({len(pages)}: {len(fx.SHORT_VARIANTS)} chrome variants x 1-2 paragraphs)",
        "candidate": name,
        "paragraphs_whole": sum(p in lines for lines, ps in zip(line_lists, wanted, strict=True) for p in ps)
        / sum(map(len, wanted)),
        "table_rows_on_one_line": None,
        "headings_own_line": sum(fx.NOTICE_TITLE in lines for lines in line_lists) / len(pages),
        "boilerplate_lines_left": sum(
            any(b in line for b in fx.SHORT_BOILERPLATE) for lines in line_lists for line in lines
        ),
        "stray_cjk_spaces": sum(len(_CJK_SPACE.findall(text)) for text, _ms in timed),
        "ms": round(statistics.median(ms for _text, ms in timed), 1),
    }


def _book_pages(chapters: int) -> list[list[fx.Block]]:
    text = sanguo_book().read_text(encoding="utf-8")
    pages = []
    for chapter in split_chapters(text, source="sanguo", marks="章回")[:chapters]:
        heading, *body = chapter.text.splitlines()
        paragraphs = [fx.Block(line.strip()) for line in body if line.strip()]
        pages.append([fx.Block(heading.strip(), 1), *paragraphs])
    return pages


def share(chapters: int, alias: str) -> dict[str, Any]:
    """Index the corpus with the real CLI into a scratch alias (deleted afterwards); parse vs embed."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder, "kb")
        root.mkdir()
        fx.write_pdf(root / "guide.pdf", outline=True)
        fx.write_docx(root / "guide.docx")
        fx.write_html(root / "guide.html", "gbk", layout="classes")
        (root / "guide.md").write_text("\n\n".join(fx.paragraphs()), encoding="utf-8")
        book = _book_pages(chapters)
        fx.write_pdf(root / "sanguo.pdf", book)
        fx.write_docx(root / "sanguo.docx", book, comment=False)
        fx.write_html(root / "sanguo.html", pages=book)
        per_file = _parse_per_file(sorted(root.iterdir()))
        command = [
            sys.executable,
            "-m",
            "indexing",
            str(root),
            "--index",
            alias,
            "--recreate",
            "--no-progress",
            "--json",
        ]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, cwd=folder, env=os.environ, check=False)
        wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"indexing failed ({done.returncode}):\n{done.stderr}")
    summary = json.loads(done.stdout.splitlines()[-1])
    _delete_alias(alias)
    embed_per_chunk = summary["embed_seconds"] / summary["indexed"]
    for row in per_file.values():
        row["share_of_its_embedding"] = round(row["parse_seconds"] / (row["chunks"] * embed_per_chunk), 4)
    return {
        "chapters": chapters,
        "files": per_file,
        "embed_seconds_per_chunk": round(embed_per_chunk, 3),
        "summary": summary,
        "wall_seconds": round(wall, 1),
        "parse_share_of_embedding": round(summary["parse_seconds"] / summary["embed_seconds"], 4),
        "load_average_at_end": os.getloadavg(),
    }


def _parse_per_file(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """Each file loaded alone in this process (imports already done): bytes, chunks, parse seconds."""
    load_paths(paths, LoadLimits.from_settings(Settings()))  # imports and first-call caches
    rows = {}
    for path in paths:
        started = time.perf_counter()
        documents = load_paths([path], LoadLimits.from_settings(Settings())).documents
        seconds = time.perf_counter() - started
        chunks = sum(len(document_chunks(d, DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_OVERLAP)) for d in documents)
        rows[path.name] = {"bytes": path.stat().st_size, "chunks": chunks, "parse_seconds": round(seconds, 3)}
    return rows


def _delete_alias(alias: str) -> None:
    from core.store import create_client

    es = create_client(Settings())
    try:
        es.options(ignore_status=404).indices.delete(index=f"{alias}*", expand_wildcards="all")
    finally:
        es.close()


def _markdown(rows: list[dict[str, Any]]) -> str:
    header = (
        "| file | candidate | paragraphs whole | table rows | headings | boilerplate left | stray CJK spaces | ms |"
    )
    lines = [header, "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['file']} | {r['candidate']} | {r['paragraphs_whole']:.0%} | {_share(r['table_rows_on_one_line'])} | "
            f"{r['headings_own_line']:.0%} | {r['boilerplate_lines_left']} | {r['stray_cjk_spaces']} | {r['ms']} |"
        )
    return "\n".join(lines)


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest_formats", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("quality", help="candidate libraries on the generated guide")
    run = sub.add_parser("share", help="parse time against embedding time, through the CLI")
    run.add_argument("--chapters", type=int, default=5, help="chapters of 三国 laid out in each format")
    run.add_argument("--alias", default="bench-ingest", help="scratch alias (deleted afterwards)")
    args = parser.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    if args.command == "quality":
        result = quality()
        (RESULTS / "ingest_quality.json").write_text(json.dumps(result, ensure_ascii=False, indent=1), encoding="utf-8")
        table = _markdown(result["rows"])
        (RESULTS / "ingest_quality.md").write_text(table + "\n", encoding="utf-8")
        print(table)
    else:
        result = share(args.chapters, args.alias)
        (RESULTS / "ingest_share.json").write_text(json.dumps(result, ensure_ascii=False, indent=1), encoding="utf-8")
        print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
