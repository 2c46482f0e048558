"""Loaders under bad input: a time limit per file, a crashed parser, and a bounded fuzz run.

The fuzz run is bench/fuzz_loaders.py's, with a fixed seed and a few examples per format (the
longer run: `python -m bench.fuzz_loaders`).
"""

import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

import indexing.loaders
from bench import fuzz_loaders
from core.documents import Document
from indexing.loaders import LoadLimits, load_paths
from tests.conftest import LOAD_LIMITS

EXAMPLES = 25  # per format: about a minute in all on a loaded 2-core machine


def test_a_file_over_the_time_limit_and_a_crashing_parser_are_their_files_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parse_text = indexing.loaders._PARSERS[".txt"]

    def pathological(data: bytes, source: str, stem: str, limits: LoadLimits) -> list[Document]:
        if source == "slow.txt":
            time.sleep(60)
        if source == "segfault.txt":
            os.kill(os.getpid(), signal.SIGSEGV)
        return parse_text(data, source, stem, limits)

    monkeypatch.setitem(indexing.loaders._PARSERS, ".txt", pathological)  # the forked worker inherits it
    for name in ("slow.txt", "segfault.txt", "z-fine.txt"):
        (tmp_path / name).write_text("一句话。", encoding="utf-8")
    started = time.perf_counter()
    result = load_paths([tmp_path], replace(LOAD_LIMITS, timeout_s=2))
    assert time.perf_counter() - started < 30  # the sleeping worker was stopped, not waited for
    assert [(Path(e.path).name, e.reason) for e in result.errors] == [
        ("segfault.txt", "crashed"),
        ("slow.txt", "timeout"),
    ]
    assert "LOAD_TIMEOUT_S=2 s" in result.errors[1].message
    assert "signal 11" in result.errors[0].message
    assert [d.doc_id for d in result.documents] == ["z-fine.txt"]  # a new worker went on with the next file
    assert [f.source for f in result.loaded] == ["z-fine.txt"]


@pytest.mark.parametrize("suffix", fuzz_loaders.FORMATS)
def test_fuzzed_files_load_or_fail_each_with_a_clear_error(tmp_path: Path, suffix: str) -> None:
    originals = fuzz_loaders.seeds(tmp_path)[suffix]
    report = fuzz_loaders.fuzz(suffix, originals, tmp_path, examples=EXAMPLES, seed=23, timeout_s=60)
    assert report["examples"] == EXAMPLES
    assert report["findings"] == {}, report
    assert report["outcomes"].get("loaded", 0) > 0  # mutations that keep a file readable are read
    assert set(report["outcomes"]) - {"loaded"}, report  # and some of them are errors, each a clear one
