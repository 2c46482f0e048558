"""A folder of PDF, Word, HTML and Markdown through `python -m indexing`, then /search and /query
(real Elasticsearch, the fake model server): pages and sections in hits, citations, the prompt
and the trace; bad files in the error file; `--sync` after an add, an edit and a delete."""

import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch

from bench import doc_fixtures as fx
from core.config import Settings
from core.embeddings import Embedder
from service.app import create_app
from tests.conftest import delete_indices, indexing_result, start_indexing
from tests.fakes.openai_server import ANSWER, FakeChatServer
from tests.serving import serve
from tests.test_loaders_formats import bad_files

PAGE_3 = "《糖尿病防治指南》第 3 页 · 3.2 用药"
QUESTION = "二甲双胍每天最多吃多少毫克？"
SMALL = ["--chunk-size", "200", "--chunk-overlap", "20", "--no-progress"]


def run(es_url: str, workdir: Path, *args: str | Path, **env: str) -> tuple[int, dict[str, Any], str]:
    """`python -m indexing ARGS` in `workdir` with an explicit environment: (status, summary, stderr)."""
    return indexing_result(start_indexing(workdir, *args, ES_URL=es_url, **env))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("kb")
    fx.write_pdf(folder / "guide.pdf", outline=True)
    (folder / "word").mkdir()
    fx.write_docx(folder / "word" / "guide.docx")
    fx.write_html(folder / "guide.html", "gbk", layout="classes")
    (folder / "thyroid.md").write_text(
        "# 甲亢饮食\n\n## 碘\n\n甲亢病人应当少吃含碘食物，例如海带和紫菜。\n", encoding="utf-8"
    )
    return folder


@pytest.fixture(scope="module")
def indexed(
    es: Elasticsearch, es_url: str, folder: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The folder indexed by one command (default chunk sizes); (alias, JSON summary)."""
    alias = f"test-ingest-formats-{uuid.uuid4().hex[:8]}"
    workdir = tmp_path_factory.mktemp("cwd")
    code, summary, stderr = run(es_url, workdir, folder, "--index", alias, "--sync", "--no-progress")
    assert code == 0, stderr
    yield alias, summary
    delete_indices(es, alias)


def test_one_command_indexes_a_pdf_a_docx_an_html_page_and_markdown(
    es: Elasticsearch, indexed: tuple[str, dict[str, Any]]
) -> None:
    alias, summary = indexed
    assert summary["files"] == {"added": 4, "changed": 0, "removed": 0, "unchanged": 0}
    assert summary["load_errors"] == 0 and summary["failed"] == 0
    assert summary["indexed"] == summary["chunks"] == es.count(index=alias)["count"]
    assert 0 < summary["parse_seconds"] < summary["seconds"]
    sources = es.search(index=alias, size=0, aggs={"s": {"terms": {"field": "source"}}})["aggregations"]["s"]
    assert sorted(b["key"] for b in sources["buckets"]) == ["guide.html", "guide.pdf", "thyroid.md", "word/guide.docx"]


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeChatServer]:
    """Answers by citing the context the prompt labels as page 3 of the PDF, whatever its number."""

    def answer(body: dict[str, Any]) -> str:
        prompt = "\n".join(str(message["content"]) for message in body["messages"])
        number = re.search(r"\[(\d+)\] 本地资料（" + re.escape(PAGE_3) + "）", prompt)
        return f"二甲双胍每日剂量一般不超过 2000 毫克[{number.group(1)}]。" if number else "资料里没有第 3 页。"

    with FakeChatServer() as server:
        server.on("RouteDecision", {"strategy": "complex", "reason": "需要知识库"})
        server.on("Decomposition", {"sub_questions": [QUESTION], "reason": "一问"})
        server.on("PlanDecision", {"next_action": "evaluate", "reason": "够了"})
        server.on("Evaluation", {"enough": True, "missing": [], "reason": "资料写明剂量"})
        server.on(ANSWER, answer)
        yield server


@pytest.fixture(scope="module")
def url(es_url: str, indexed: tuple[str, dict[str, Any]], llm: FakeChatServer, embedder: Embedder) -> Iterator[str]:
    settings = Settings(
        _env_file=None, es_url=es_url, es_index=indexed[0], openai_base_url=llm.base_url, model_name="fake-model"
    )
    with serve(create_app(settings, embedder=embedder)) as base:
        yield base


def test_search_hits_carry_page_section_and_label(url: str) -> None:
    body = {"query": QUESTION, "k": 3, "filters": {"sources": ["guide.pdf"]}}
    response = httpx.post(f"{url}/search", json=body, timeout=60)
    assert response.status_code == 200, response.text
    top = response.json()["hits"][0]
    assert "2000 毫克" in top["text"]
    assert (top["page"], top["section"], top["label"]) == (3, "第三章 药物治疗 / 3.2 用药", PAGE_3)


def test_a_query_answered_from_page_3_cites_page_3_in_prompt_citation_and_trace(url: str, llm: FakeChatServer) -> None:
    response = httpx.post(f"{url}/query", json={"question": QUESTION, "web": False}, timeout=120)
    assert response.status_code == 200, response.text
    result = response.json()
    assert "2000 毫克[" in result["answer"]  # the model found the page-3 label in its numbered prompt
    [citation] = result["citations"]
    assert (citation["label"], citation["page"], citation["source"]) == (PAGE_3, 3, "guide.pdf")
    assert "第 3 页" in citation["label"] and citation["section"] == "第三章 药物治疗 / 3.2 用药"
    [retrieve] = [step for step in result["trace"] if step["node"] == "retrieve"]
    assert "首条：《糖尿病防治指南》" in retrieve["outcome"]


def test_bad_files_are_one_error_line_each_and_the_good_file_is_indexed(
    es: Elasticsearch,
    es_url: str,
    index_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    folder = tmp_path / "kb"
    folder.mkdir()
    expected = bad_files(folder)
    (folder / "good.md").write_text("# 好文件\n\n## 内容\n\n正常的内容，应当被索引。\n", encoding="utf-8")
    alias, error_file = index_name("test-ingest-bad"), tmp_path / "errors.jsonl"
    args: list[str | Path] = [folder, "--index", alias, "--error-file", error_file, *SMALL]
    code, summary, stderr = run(es_url, tmp_path / "cwd", *args, MAX_FILE_MB="0.1")
    assert code == 1 and summary["load_errors"] == len(expected)
    assert summary["indexed"] == es.count(index=alias)["count"] >= 1
    records = [json.loads(line) for line in error_file.read_text(encoding="utf-8").splitlines()]
    assert sorted(Path(r["path"]).name for r in records) == sorted(expected)
    for record in records:
        assert record["stage"] == "load" and record["reason"]
        assert expected[Path(record["path"]).name] in record["error"]
        assert record["error"] in stderr  # the same message on the console


def chunk_versions(es: Elasticsearch, alias: str, source: str) -> dict[str, int]:
    hits = es.search(index=alias, query={"term": {"source": source}}, size=100, version=True)["hits"]["hits"]
    return {hit["_id"]: hit["_version"] for hit in hits}


def sync(es_url: str, tmp_path: Path, alias: str) -> tuple[int, dict[str, Any], str]:
    """`--sync` of the folder `tmp_path/kb`, run in `tmp_path/cwd`."""
    return run(es_url, tmp_path / "cwd", tmp_path / "kb", "--index", alias, "--sync", *SMALL)


def synced(es_url: str, tmp_path: Path, alias: str) -> dict[str, Any]:
    code, summary, stderr = sync(es_url, tmp_path, alias)
    assert code == 0, stderr
    return summary


def test_sync_mirrors_the_folder_after_an_add_an_edit_and_a_delete(
    es: Elasticsearch, es_url: str, index_name: Callable[[str], str], tmp_path: Path
) -> None:
    alias, kb = index_name("test-ingest-sync"), tmp_path / "kb"
    kb.mkdir()
    (kb / "a.md").write_text("# 甲\n\n## 一节\n\n甲文件的内容。\n", encoding="utf-8")
    (kb / "b.txt").write_text("乙文件原来的内容。", encoding="utf-8")
    (kb / "c.txt").write_text("丙文件从不改变。", encoding="utf-8")
    first = synced(es_url, tmp_path, alias)
    assert first["files"] == {"added": 3, "changed": 0, "removed": 0, "unchanged": 0}
    untouched = chunk_versions(es, alias, "c.txt")

    fx.write_html(kb / "d.html")
    (kb / "b.txt").write_text("乙文件改过的内容。", encoding="utf-8")
    (kb / "a.md").unlink()
    second = synced(es_url, tmp_path, alias)
    assert second["files"] == {"added": 1, "changed": 1, "removed": 1, "unchanged": 1}
    assert chunk_versions(es, alias, "a.md") == {}
    texts = [h["_source"]["text"] for h in es.search(index=alias, query={"term": {"source": "b.txt"}})["hits"]["hits"]]
    assert texts == ["乙文件改过的内容。"]
    assert chunk_versions(es, alias, "c.txt") == untouched  # not rewritten, not re-embedded

    third = synced(es_url, tmp_path, alias)
    assert third["files"] == {"added": 0, "changed": 0, "removed": 0, "unchanged": 3}
    assert third["indexed"] == 0 and third["embed_seconds"] == 0 and third["parse_seconds"] == 0


def test_a_file_that_turns_bad_keeps_its_indexed_version_whole(
    es: Elasticsearch, es_url: str, index_name: Callable[[str], str], tmp_path: Path
) -> None:
    alias, kb = index_name("test-ingest-atomic"), tmp_path / "kb"
    kb.mkdir()
    pdf = fx.write_pdf(kb / "guide.pdf")
    synced(es_url, tmp_path, alias)
    before = chunk_versions(es, alias, "guide.pdf")
    pdf.write_bytes(pdf.read_bytes()[:20000])  # a copy cut short
    code, summary, _ = sync(es_url, tmp_path, alias)
    assert code == 1 and summary["load_errors"] == 1
    assert summary["files"] == {"added": 0, "changed": 0, "removed": 0, "unchanged": 0}
    assert chunk_versions(es, alias, "guide.pdf") == before
