"""Fuzz the loaders (hypothesis): truncated and mutated PDF, DOCX, EPUB and HTML files.

The seeds are the generated documents of bench/doc_fixtures.py (the guide as PDF, Word and a
web page, a short notice page, a small EPUB). Each example is one seed mutated by one of:
- `truncate`: cut short anywhere;
- `bytes`: 1-8 edits (a byte flipped, bytes inserted, a span deleted or repeated);
- `number`: one number of the file's text replaced (`/Count 4`, `/Length 812`, `w:val="2"`:
  the sizes, counts and offsets parsers trust);
- `markup`: 1-4 pieces of markup spliced in (unclosed, deeply nested or chrome tags, entities,
  CDATA, an encoding declaration), for HTML and for the XML inside the ZIP packages;
- `member`: for DOCX and EPUB, one member of the ZIP package mutated by one of the above and
  the package rebuilt, so the parsers behind the ZIP layer are reached (a byte edit of the
  archive mostly breaks its checksums).

Every mutated file goes through `load_paths` as the indexing job loads it (a worker process,
a time limit per file). The property: the call returns; the file gives documents whose text
chunks, or errors of that file with a known reason and a message; none is a timeout or a
crashed parser. Errors that a parser raised unexpectedly and the loaders' last safety net
turned into `unreadable .x file: <exception>` are counted per exception type: each one is a
finding to turn into a clear message.

    python -m bench.fuzz_loaders --examples 500 --seed 23     # per format; bench/results/fuzz_loaders.json
"""

import argparse
import io
import json
import re
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from bench import doc_fixtures as fx
from core.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE
from core.config import Settings
from core.documents import document_chunks, page_label
from indexing.loaders import LoadLimits, LoadResult, load_paths

RESULTS = Path(__file__).resolve().parent / "results"
FORMATS = (".pdf", ".docx", ".epub", ".html")
REASONS = {
    "empty",
    "too_large",
    "wrong_type",
    "encrypted",
    "no_text_layer",
    "undecodable_text",
    "corrupt",
    "ocr_time_budget",  # a damaged PDF whose pages lost their text layer goes to OCR, within its budget
    "too_many_pixels",
}
SAFETY_NET = re.compile(r"^unreadable \.\w+ file: (\w+)")
MARKUP = [
    "<div>" * 300,
    "</div></p></table>",
    "<table><tr><td>",
    "<nav>首页</nav>",
    "<header><h1>标题</h1>",
    "<article><main>",
    "<!--",
    "<![CDATA[",
    "&#0;&#xD800;&#x110000;&amp",
    '<?xml version="1.0" encoding="utf-16"?>',
    '<meta charset="x-unknown">',
    "<h1>" + "长" * 2000,
    "\x00\x01\ufeff",
    "<w:p><w:r><w:t>",
    '<w:pStyle w:val="Heading9"/>',
    '<item id="x" href="../../etc/passwd" media-type="application/xhtml+xml"/>',
    '<itemref idref="missing"/>',
]
_NUMBER = re.compile(rb"\d+")


def seeds(folder: Path) -> dict[str, list[bytes]]:
    """The documents every mutation starts from, by suffix."""
    return {
        ".pdf": [fx.write_pdf(folder / "guide.pdf", outline=True).read_bytes()],
        ".docx": [fx.write_docx(folder / "guide.docx").read_bytes()],
        ".epub": [fx.write_epub(folder / "book.epub").read_bytes()],
        ".html": [fx.guide_html().encode(), fx.short_page("all", 2).encode()],
    }


@st.composite
def _bytes_edits(draw: st.DrawFn, data: bytes) -> bytes:
    for _ in range(draw(st.integers(1, 8))):
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        span = draw(st.integers(1, 64))
        edit = draw(st.sampled_from(["flip", "insert", "delete", "repeat"]))
        if edit == "flip" and data:
            data = data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
        elif edit == "insert":
            data = data[:at] + draw(st.binary(min_size=1, max_size=span)) + data[at:]
        elif edit == "delete":
            data = data[:at] + data[at + span :]
        else:
            data = data[:at] + data[at : at + span] * draw(st.integers(2, 50)) + data[at:]
    return data


@st.composite
def _number(draw: st.DrawFn, data: bytes) -> bytes:
    numbers = list(_NUMBER.finditer(data))
    if not numbers:
        return data
    match = draw(st.sampled_from(numbers))
    value = draw(st.sampled_from([0, 1, -1, 2**31, 2**63, 10**100])) if draw(st.booleans()) else draw(st.integers())
    return data[: match.start()] + str(value).encode() + data[match.end() :]


@st.composite
def _markup(draw: st.DrawFn, data: bytes) -> bytes:
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from(MARKUP)).encode() + data[at:]
    return data


def _plain(data: bytes) -> st.SearchStrategy[bytes]:
    """One mutation of a file as a whole (not looking inside a ZIP)."""
    return st.one_of(
        st.integers(0, max(len(data) - 1, 0)).map(lambda n: data[:n]),
        _bytes_edits(data),
        _number(data),
        _markup(data),
    )


@st.composite
def _member(draw: st.DrawFn, data: bytes) -> bytes:
    """One member of a ZIP package mutated; the package rebuilt around it."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = [(info, archive.read(info)) for info in archive.infolist()]
    target = draw(st.sampled_from([info.filename for info, _ in members]))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info, content in members:
            archive.writestr(info, draw(_plain(content)) if info.filename == target else content)
    return out.getvalue()


@st.composite
def mutated(draw: st.DrawFn, suffix: str, originals: list[bytes]) -> bytes:
    """A seed of `suffix` cut short or mutated (a ZIP's member too, for DOCX and EPUB)."""
    data = draw(st.sampled_from(originals))
    if suffix in (".docx", ".epub") and draw(st.booleans()):
        return draw(_member(data))
    return draw(_plain(data))


def outcome(path: Path, result: LoadResult) -> tuple[str, str]:
    """(`loaded` | `error:<reason>` | `net:<exception>` | `violation`, what was wrong)."""
    for error in result.errors:
        if error.path != str(path) or not error.message or error.reason not in REASONS:
            return "violation", str(error)
    if result.errors:
        if result.documents:
            return "violation", f"documents and errors both: {result.errors}"
        net = SAFETY_NET.match(result.errors[0].message)
        return (f"net:{net.group(1)}" if net else f"error:{result.errors[0].reason}"), result.errors[0].message
    if not result.documents or not all(document.text.strip() for document in result.documents):
        return "violation", "no error, and no document or one without text"
    for document in result.documents:
        for chunk in document_chunks(document, DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_OVERLAP):
            page_label(chunk.page_start, chunk.page_end)
    return "loaded", ""


def fuzz(
    suffix: str, originals: list[bytes], folder: Path, *, examples: int, seed: int | None, timeout_s: float
) -> dict[str, Any]:
    """`examples` mutated files of one format through the loaders: what became of them, and findings.

    A finding (`net:`, `violation`, `escaped:` an exception out of `load_paths`) keeps its
    first file in `folder/findings/` and its message in the report.
    """
    tally: Counter[str] = Counter()
    limits = replace(LoadLimits.from_settings(Settings()), timeout_s=timeout_s)
    findings: dict[str, str] = {}
    path = folder / f"fuzzed{suffix}"
    (folder / "findings").mkdir(exist_ok=True)

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=seed is None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(mutated(suffix, originals))
    def run(data: bytes) -> None:
        path.write_bytes(data)
        try:
            kind, detail = outcome(path, load_paths([path], limits))
        except Exception as err:  # the property's worst failure: the job itself would stop
            kind, detail = f"escaped:{type(err).__name__}", str(err)
        tally[kind] += 1
        if kind != "loaded" and not kind.startswith("error:") and kind not in findings:
            findings[kind] = detail[:300]
            (folder / "findings" / f"{kind.replace(':', '-')}{suffix}").write_bytes(data)

    test: Callable[[], None] = run if seed is None else hypothesis_seed(seed)(run)
    started = time.perf_counter()
    test()
    seconds = round(time.perf_counter() - started, 1)
    return {
        "examples": sum(tally.values()),
        "seconds": seconds,
        "outcomes": dict(sorted(tally.items())),
        "findings": findings,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz_loaders", description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=500, help="mutated files per format")
    parser.add_argument("--seed", type=int, default=23, help="hypothesis seed (the run is reproducible)")
    parser.add_argument("--timeout", type=float, default=30.0, help="LOAD_TIMEOUT_S for each file")
    parser.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"seed": args.seed, "timeout_s": args.timeout, "formats": {}}
    folder = Path(tempfile.mkdtemp(prefix="fuzz-loaders-"))
    originals = seeds(folder)
    for suffix in args.formats:
        report["formats"][suffix] = fuzz(
            suffix, originals[suffix], folder, examples=args.examples, seed=args.seed, timeout_s=args.timeout
        )
        print(suffix, json.dumps(report["formats"][suffix], ensure_ascii=False), flush=True)
    print(f"files of the findings: {folder / 'findings'}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fuzz_loaders.json").write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
