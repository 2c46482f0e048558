"""`python -m indexing` as users run it: exit status, JSON summary, error file, kill and resume."""

import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from core.chunking import split_text
from core.config import FusionMethod, Settings
from core.kbs import FusionSetting, read_kb, write_fusion
from core.schema import chunk_id, content_hash
from core.store import create_index
from indexing.loaders import load_paths
from tests.conftest import LOAD_LIMITS, indexing_result, start_indexing, wait_for_chunks
from tests.test_indexing import OtherEmbedder

SMALL = ["--chunk-size", "60", "--chunk-overlap", "10", "--no-progress"]
Cli = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def cli(es_url: str, tmp_path: Path) -> Cli:
    """Starts `python -m indexing ARGS` in an empty working directory with an explicit environment."""

    def start(*args: str | Path, url: str = es_url) -> subprocess.Popen[str]:
        return start_indexing(tmp_path / "cwd", *args, ES_URL=url)

    return start


def write_novel(path: Path, chapters: int, sentences: int) -> None:
    body = "".join(f"第{n}句，说的是天下大势与群雄的第{n}件事情，后来如何不得而知。" for n in range(sentences))
    path.write_text("".join(f"第{c}章 第{c}个标题\n{body}\n" for c in range(1, chapters + 1)), encoding="utf-8")


def test_cli_indexes_a_folder_reports_bad_lines_and_exits_non_zero(
    es: Elasticsearch, cli: Cli, index_name: Callable[[str], str], tmp_path: Path
) -> None:
    folder = tmp_path / "kb"
    folder.mkdir()
    write_novel(folder / "novel.txt", chapters=2, sentences=2)
    (folder / "faq.jsonl").write_text('{"id": "f1", "text": "低血糖时应立即进食。"}\n{broken\n', encoding="utf-8")
    alias, error_file = index_name("cli"), tmp_path / "errors.jsonl"

    code, summary, _ = indexing_result(cli(folder, "--index", alias, "--error-file", error_file, *SMALL))
    assert code == 1  # a malformed line is a failure worth a non-zero status
    assert summary["alias"] == alias and summary["documents"] == 3 and summary["load_errors"] == 1
    assert summary["indexed"] == summary["chunks"] == es.count(index=alias)["count"] > 3
    [record] = [json.loads(line) for line in error_file.read_text(encoding="utf-8").splitlines()]
    assert (record["stage"], record["path"], record["line"]) == ("load", str(folder / "faq.jsonl"), 2)

    (folder / "faq.jsonl").write_text('{"id": "f1", "text": "低血糖时应立即进食。"}\n', encoding="utf-8")
    code, again, _ = indexing_result(cli(folder, "--index", alias, "--error-file", error_file, *SMALL))
    assert code == 0 and again["error_file"] is None and not error_file.exists()
    # Only f1's file changed: its one chunk is written again with the new file hash (a passage base
    # never updates a chunk in place: core.schema.index_body), every other chunk is left as it was.
    assert (again["indexed"], again["unchanged"], again["deleted"]) == (1, summary["chunks"] - 1, 0)


def test_cli_limit_takes_the_first_chapters(
    es: Elasticsearch, cli: Cli, index_name: Callable[[str], str], tmp_path: Path
) -> None:
    write_novel(tmp_path / "novel.txt", chapters=4, sentences=1)
    alias = index_name("limit")
    code, summary, _ = indexing_result(cli(tmp_path / "novel.txt", "--index", alias, "--limit", "2", *SMALL))
    assert code == 0 and summary["documents"] == 2
    chapters = es.search(index=alias, size=0, aggs={"c": {"terms": {"field": "chapter"}}})["aggregations"]["c"]
    assert sorted(bucket["key"] for bucket in chapters["buckets"]) == [1, 2]


def test_a_classical_novels_chapters_are_cut_only_on_a_base_with_its_profile(
    es: Elasticsearch, cli: Cli, index_name: Callable[[str], str], tmp_path: Path
) -> None:
    """第N回 is a classical novel's heading: the classical-novel profile cuts the file there (and
    `--limit` counts those chapters); a base on the default path keeps the file one document."""
    path = tmp_path / "novel.txt"
    write_novel(path, chapters=3, sentences=1)
    path.write_text(path.read_text(encoding="utf-8").replace("章 ", "回 "), encoding="utf-8")
    novel, plain = index_name("profiled"), index_name("plain")
    args = (path, "--limit", "2", *SMALL)
    code, summary, _ = indexing_result(cli(*args, "--index", novel, "--profile", "classical-novel"))
    assert code == 0 and summary["documents"] == 2
    chapters = es.search(index=novel, size=0, aggs={"c": {"terms": {"field": "chapter"}}})["aggregations"]["c"]
    assert sorted(bucket["key"] for bucket in chapters["buckets"]) == [1, 2]
    code, summary, _ = indexing_result(cli(path, "--index", plain, *SMALL))
    assert code == 0 and summary["documents"] == 1
    assert es.count(index=plain, query={"exists": {"field": "chapter"}})["count"] == 0


def test_cli_refuses_an_index_built_by_another_embedder(
    es: Elasticsearch, cli: Cli, index_name: Callable[[str], str], tmp_path: Path
) -> None:
    alias = index_name("cli-mismatch")
    create_index(es, alias, OtherEmbedder())
    write_novel(tmp_path / "novel.txt", chapters=1, sentences=1)
    code, summary, stderr = indexing_result(cli(tmp_path / "novel.txt", "--index", alias, *SMALL))
    assert code == 1 and summary == {}
    assert "built with embedder 'other-8d' (8 dims)" in stderr and "--recreate" in stderr


def test_a_killed_run_completes_on_rerun_with_no_duplicates_and_no_gaps(
    es: Elasticsearch, cli: Cli, index_name: Callable[[str], str], tmp_path: Path
) -> None:
    novel = tmp_path / "novel.txt"
    write_novel(novel, chapters=4, sentences=4)
    # What an uninterrupted run writes (ids are deterministic; tests/test_indexing.py checks
    # the same against a real uninterrupted run).
    expected_ids = {
        chunk_id(document.doc_id, i, content_hash(text))
        for document in load_paths([novel], LOAD_LIMITS).documents
        for i, text in enumerate(split_text(document.text, 60, 10))
    }

    alias = index_name("killed")
    process = cli(novel, "--index", alias, "--batch-size", "1", *SMALL)
    wait_for_chunks(es, alias, 2, process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    es.indices.refresh(index=alias)
    partial = es.count(index=alias)["count"]
    assert 2 <= partial < len(expected_ids)

    code, summary, _ = indexing_result(cli(novel, "--index", alias, "--batch-size", "1", *SMALL))
    assert code == 0
    assert (summary["unchanged"], summary["indexed"]) == (partial, len(expected_ids) - partial)
    ids = {hit["_id"] for hit in es.search(index=alias, size=1000, source=False)["hits"]["hits"]}
    assert es.count(index=alias)["count"] == len(expected_ids) and ids == expected_ids


def test_cli_replaces_a_changed_file_and_prunes_a_removed_one_only_when_all_loaded(
    es: Elasticsearch, cli: Cli, index_name: Callable[[str], str], tmp_path: Path
) -> None:
    folder = tmp_path / "kb"
    folder.mkdir()
    write_novel(folder / "novel.txt", chapters=3, sentences=1)
    (folder / "note.md").write_text("# 笔记\n甲亢病人应少吃海带。\n", encoding="utf-8")
    alias = index_name("prune")
    code, first, _ = indexing_result(cli(folder, "--index", alias, *SMALL))
    assert code == 0 and first["documents"] == 4

    def doc_ids() -> set[str]:
        aggs = es.search(index=alias, size=0, aggs={"d": {"terms": {"field": "doc_id"}}})["aggregations"]
        return {bucket["key"] for bucket in aggs["d"]["buckets"]}

    # The novel lost its third chapter: its chunks go, without --prune.
    write_novel(folder / "novel.txt", chapters=2, sentences=1)
    code, changed, _ = indexing_result(cli(folder, "--index", alias, *SMALL))
    # The remaining chapters' chunks are rewritten with the file's new hash; note.md is untouched.
    assert code == 0 and changed["deleted"] > 0 and changed["indexed"] == 2 and changed["unchanged"] == 1
    assert doc_ids() == {"novel.txt#ch1", "novel.txt#ch2", "note.md"}

    # note.md removed and a broken file present: nothing is pruned (the run saw an error).
    (folder / "note.md").unlink()
    (folder / "broken.jsonl").write_text("{oops\n", encoding="utf-8")
    code, refused, stderr = indexing_result(cli(folder, "--index", alias, "--prune", *SMALL))
    assert code == 1 and refused["deleted"] == 0 and "not pruning" in stderr
    assert "note.md" in doc_ids()

    (folder / "broken.jsonl").unlink()
    code, pruned, _ = indexing_result(cli(folder, "--index", alias, "--prune", *SMALL))
    assert code == 0 and pruned["deleted"] > 0
    assert doc_ids() == {"novel.txt#ch1", "novel.txt#ch2"}


def test_cli_names_an_unreachable_elasticsearch_without_its_password(cli: Cli, tmp_path: Path) -> None:
    write_novel(tmp_path / "novel.txt", chapters=1, sentences=1)
    process = cli(tmp_path / "novel.txt", "--index", "kb", *SMALL, url="http://indexer:s3cret@127.0.0.1:9")
    code, _, stderr = indexing_result(process)
    assert code == 1 and "Elasticsearch at http://127.0.0.1:9 is unreachable" in stderr
    assert "s3cret" not in stderr


def test_a_base_keeps_its_chunking_and_changes_it_only_by_a_rebuild(
    es: Elasticsearch, cli: Cli, index_name: Callable[[str], str], tmp_path: Path
) -> None:
    write_novel(tmp_path / "novel.txt", chapters=2, sentences=3)
    alias, novel = index_name("chunking"), tmp_path / "novel.txt"
    code, first, _ = indexing_result(cli(novel, "--index", alias, *SMALL))
    assert code == 0 and read_kb(es, alias, Settings(_env_file=None)).chunk_size == 60
    write_fusion(es, alias, FusionSetting(method=FusionMethod.RRF))

    # No flags: the stored 60/10, so every chunk is unchanged (the default 800 would replace them all).
    code, again, _ = indexing_result(cli(novel, "--index", alias, "--no-progress"))
    assert code == 0 and (again["indexed"], again["unchanged"]) == (0, first["chunks"])

    code, refused, stderr = indexing_result(cli(novel, "--index", alias, "--chunk-size", "200", "--no-progress"))
    assert code == 2 and refused == {} and "--chunk-size 60 --chunk-overlap 10" in stderr and "--recreate" in stderr

    code, rebuilt, _ = indexing_result(
        cli(novel, "--index", alias, "--chunk-size", "200", "--recreate", "--no-progress")
    )
    base = read_kb(es, alias, Settings(_env_file=None))
    assert code == 0 and rebuilt["swapped"] and rebuilt["chunks"] < first["chunks"]
    assert (base.chunk_size, base.chunk_overlap) == (200, 10)
    assert (
        base.fusion is not None and base.fusion.method == FusionMethod.RRF
    )  # the rest of the base's settings carried over


def test_access_groups_of_a_run_apply_to_unchanged_chunks_too(
    es: Elasticsearch, cli: Cli, index_name: Callable[[str], str], tmp_path: Path
) -> None:
    write_novel(tmp_path / "novel.txt", chapters=2, sentences=2)
    (tmp_path / "faq.jsonl").write_text('{"id": "f1", "text": "低血糖时应立即进食。", "access": ["nurses"]}\n', "utf-8")
    alias = index_name("cli-access")

    def groups() -> dict[str, set[tuple[str, ...]]]:
        hits = es.search(index=alias, size=100, source_includes=["doc_id", "access"])["hits"]["hits"]
        found: dict[str, set[tuple[str, ...]]] = {}
        for hit in hits:
            found.setdefault(hit["_source"]["doc_id"], set()).add(tuple(hit["_source"].get("access", [])))
        return found

    code, first, _ = indexing_result(cli(tmp_path, "--index", alias, "--access", "doctors, ,admins", *SMALL))
    assert code == 0
    assert groups() == {
        "novel.txt#ch1": {("admins", "doctors")},
        "novel.txt#ch2": {("admins", "doctors")},
        "f1": {("nurses",)},
    }

    code, again, _ = indexing_result(cli(tmp_path, "--index", alias, *SMALL))  # no --access: readable by everyone
    # The novel's chunks get the new groups (rewritten whole on a passage base); f1 keeps its own.
    assert code == 0 and (again["indexed"], again["unchanged"]) == (first["chunks"] - 1, 1)
    assert groups() == {"novel.txt#ch1": {()}, "novel.txt#ch2": {()}, "f1": {("nurses",)}}
