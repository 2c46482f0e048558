"""What a file becomes is limited, not only what it weighs (issue 30): a .docx or .epub that
inflates too much is refused before it is parsed (a zip bomb), a PDF of too many pages before any
page is read, a file that gives too much text once parsed, and a parse that needs more memory
than LOAD_MEMORY_MB is stopped in its worker. Each is that file's own error; the others load."""

import json
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

from bench import doc_fixtures as fx
from indexing.loaders import load_paths
from tests.conftest import LOAD_LIMITS, REPO_ROOT, subprocess_env

_PARAGRAPH = b"<w:p><w:r><w:t>x</w:t></w:r></w:p>"
# Peak resident memory (MB) of the process that loads a file, and of its parse worker.
_PEAKS = """
import json, resource, sys
from dataclasses import replace
from pathlib import Path
from core.config import Settings
from indexing.loaders import LoadLimits, load_paths
limits = replace(LoadLimits.from_settings(Settings(_env_file=None)), timeout_s=20)  # the defaults, a shorter time
result = load_paths([Path(sys.argv[1])], limits)
# Its own high-water mark (ru_maxrss of a process keeps the peak of the process it was forked from).
loader_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
worker_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the worker, joined
print(json.dumps({"reasons": [e.reason for e in result.errors], "documents": len(result.documents),
                  "loader_mb": loader_kb // 1024, "worker_mb": worker_kb // 1024}))
"""


def padded(source: Path, path: Path, member: str, megabytes: int) -> Path:
    """`source` (a .docx or .epub) as `path`, with `megabytes` MB of empty paragraphs at the end of
    `member`'s body: a valid file that inflates to hundreds of times its size."""
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bomb:
        for item in original.infolist():
            data = original.read(item)
            if item.filename != member:
                bomb.writestr(item, data)
                continue
            end = data.rindex(b"</w:body>" if member.startswith("word/") else b"</body>")
            with bomb.open(member, "w", force_zip64=True) as out:
                out.write(data[:end])
                for _ in range(megabytes):
                    out.write(_PARAGRAPH * (2**20 // len(_PARAGRAPH)))
                out.write(data[end:])
    return path


def test_a_zip_bomb_is_refused_before_it_inflates_and_memory_stays_flat(tmp_path: Path) -> None:
    """The issue's bomb: a ~190 KB .docx of 48 MB of paragraphs (parsed, it took the worker to
    865 MB and past LOAD_TIMEOUT_S). With the default limits it is refused from its zip directory."""
    bomb = padded(fx.write_docx(tmp_path / "guide.docx"), tmp_path / "bomb.docx", "word/document.xml", 48)
    assert bomb.stat().st_size < 256 * 1024
    run = subprocess.run(
        [sys.executable, "-c", _PEAKS, str(bomb)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=REPO_ROOT,
        env=subprocess_env(PYTHONPATH=str(REPO_ROOT)),
    )
    peaks = json.loads(run.stdout.strip().splitlines()[-1])
    assert peaks["reasons"] == ["zip_ratio"] and peaks["documents"] == 0, peaks
    # The process's imports (~110 MB) and nothing of the 48 MB it would inflate to (x20 parsed).
    assert peaks["worker_mb"] < 200 and peaks["loader_mb"] < 200, peaks


def test_each_limit_on_what_a_file_becomes_is_that_files_error_and_the_others_load(tmp_path: Path) -> None:
    folder = tmp_path / "files"
    folder.mkdir()
    padded(fx.write_epub(tmp_path / "book.epub"), folder / "bomb.epub", "EPUB/c1.xhtml", 2)
    fx.write_docx(folder / "guide.docx")  # inflates to 0.8 MB: 21 times its size, a genuine file
    fx.write_pdf(folder / "guide.pdf")  # 4 pages
    (folder / "long.txt").write_text("很长的文本。" * 1000, encoding="utf-8")  # 6,000 characters
    (folder / "hungry.html").write_text(  # its parse takes ~600 MB
        "<html><body>" + "<p>很大的网页。</p>" * 200_000 + "</body></html>", encoding="utf-8"
    )
    (folder / "good.md").write_text("# 好文件\n\n正常的内容。\n", encoding="utf-8")
    limits = replace(LOAD_LIMITS, max_unzipped_mb=0.5, max_pdf_pages=3, max_chars=5000, memory_mb=64)
    result = load_paths([folder], limits)
    assert [document.source for document in result.documents] == ["good.md"]
    errors = {Path(error.path).name: (error.reason, error.message) for error in result.errors}
    assert errors["bomb.epub"][0] == "zip_ratio" and "MAX_ZIP_RATIO=100" in errors["bomb.epub"][1]
    assert errors["guide.docx"] == (
        "unzipped_too_large",
        "it inflates to 0.797 MB unzipped, more than MAX_UNZIPPED_MB=0.5: split it or raise MAX_UNZIPPED_MB",
    )
    assert errors["guide.pdf"] == (
        "too_many_pages",
        "4 pages, more than MAX_PDF_PAGES=3: split it or raise MAX_PDF_PAGES",
    )
    assert errors["long.txt"] == (
        "too_much_text",
        "it gives 6000 characters of text, more than MAX_FILE_CHARS=5000: split it or raise MAX_FILE_CHARS",
    )
    assert errors["hungry.html"] == (
        "out_of_memory",
        "parsing needed more than LOAD_MEMORY_MB=64 MB and was stopped: split the file or raise LOAD_MEMORY_MB",
    )
    assert len(result.errors) == 5


def test_a_jsonl_line_nested_too_deep_is_a_bad_line_and_the_others_load(tmp_path: Path) -> None:
    """JSON 10,000 deep was a RecursionError (the whole file lost); metadata deeper than a flattened
    field takes failed only when its chunk was written."""
    deep = '{"a": ' * 25 + '"x"' + "}" * 25
    lines = [
        '{"id": "good", "text": "正常的一行。", "metadata": {"kind": "ok"}}',
        "[" * 10_000 + "]" * 10_000,
        '{"id": "deep", "text": "元数据太深。", "metadata": ' + deep + "}",
    ]
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    result = load_paths([path], LOAD_LIMITS)
    assert [document.doc_id for document in result.documents] == ["good"]
    errors = {error.line: (error.reason, error.message) for error in result.errors}
    assert errors[2] == ("bad_line", "recursion limit exceeded at line 1 column 202")
    assert errors[3] == ("bad_line", "metadata nests deeper than 20 levels, the most a chunk's metadata may")
