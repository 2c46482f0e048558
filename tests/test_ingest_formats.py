"""Every new format through both doors (issue 60): `python -m indexing` and the upload route, into
the real Elasticsearch, each chunk with its provenance (sheet and rows, slide, page), each hit and
its label naming them, and a low OCR confidence named in the job's report."""

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch

from bench import format_fixtures as ff
from core.config import Settings
from core.embeddings import Embedder
from core.kbs import create_kb
from service.app import create_app
from tests.conftest import delete_indices, indexing_result, start_indexing
from tests.serving import serve
from tests.test_uploads import files_of, upload

NOTICE = ["进入车间必须佩戴安全帽。", "消防通道严禁堆放杂物。"]


def write_files(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "安全须知.png").write_bytes(ff.png_bytes(ff.text_image(NOTICE)))
    (folder / "巡检.jpg").write_bytes(ff.png_bytes(ff.text_image(["灭火器每月检查一次。"]).convert("RGB"), "JPEG"))  # type: ignore[attr-defined]
    return [
        ff.write_xlsx(folder / "差旅标准.xlsx", count=60),
        ff.write_pptx(folder / "发布计划.pptx"),
        ff.write_delimited(folder / "费率.csv", ",", count=20),
        folder / "安全须知.png",
        folder / "巡检.jpg",
    ]


def check_provenance(chunks: list[dict[str, Any]]) -> None:
    """What the index holds of each format (a chunk's `_source`)."""
    city, _, cap, _, _ = ff.travel_rows(60)[50]
    far = next(c for c in chunks if c["source"] == "差旅标准.xlsx" and city in c["text"])
    assert far["sheet"] == "住宿" and far["row_start"] <= 54 <= far["row_end"] and far["section"] == ff.TRAVEL_TITLE
    assert far["text"].startswith("城市 | 城市等级 | 住宿上限(元/晚)") and f"{city} | 二类 | {cap}" in far["text"]
    assert {c["sheet"] for c in chunks if c["source"] == "差旅标准.xlsx"} == {"住宿", "餐补"}
    notes = next(c for c in chunks if c["source"] == "发布计划.pptx" and "备注：" in c["text"])
    assert notes["slide"] == 3 and ff.LAUNCH_NOTES in notes["text"]
    rates = [c for c in chunks if c["source"] == "费率.csv"]
    assert rates and all(c["sheet"] is None and c["row_start"] >= 2 for c in rates)
    scan = next(c for c in chunks if c["source"] == "安全须知.png")
    assert scan["page_start"] == 1 and "佩戴安全帽" in scan["text"].replace("\n", "")
    assert any("灭火器" in c["text"] for c in chunks if c["source"] == "巡检.jpg")


def all_chunks(es: Elasticsearch, index: str) -> list[dict[str, Any]]:
    es.indices.refresh(index=index)
    hits = es.search(index=index, size=500, query={"match_all": {}}, source_excludes=["embedding"])["hits"]["hits"]
    return [hit["_source"] for hit in hits]


def test_the_cli_indexes_every_new_format_with_its_provenance(
    es: Elasticsearch, es_url: str, index_name: Callable[[str], str], tmp_path: Path
) -> None:
    write_files(tmp_path / "kb")
    alias = index_name("formats")
    folder, cwd = tmp_path / "kb", tmp_path / "cwd"
    process = start_indexing(cwd, folder, "--index", alias, "--no-progress", ES_URL=es_url, OCR_MIN_CONFIDENCE="1")
    code, summary, stderr = indexing_result(process)
    assert code == 0, stderr
    assert summary["documents"] == 6 and summary["load_errors"] == 0  # two sheets, a deck, a CSV, two images
    assert summary["low_confidence_pages"] == {"安全须知.png": [1], "巡检.jpg": [1]}  # a threshold of 1 names all
    check_provenance(all_chunks(es, alias))


@pytest.fixture(scope="module")
def service(
    es: Elasticsearch, es_url: str, embedder: Embedder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    kb, jobs = f"test-formats-{uuid.uuid4().hex[:8]}", f"test-jobs-{uuid.uuid4().hex[:8]}"
    create_kb(es, kb, embedder, chunk_size=300, chunk_overlap=30)
    settings = Settings(
        _env_file=None,
        es_url=es_url,
        es_index="test-formats-no-default-base",
        upload_spool=str(tmp_path_factory.mktemp("spool")),
        jobs_index=jobs,
        ocr_min_confidence=1.0,
    )
    with serve(create_app(settings, embedder=embedder)) as url:
        yield url, kb
    delete_indices(es, kb)
    es.options(ignore_status=404).indices.delete(index=jobs)


def test_the_upload_route_indexes_every_new_format_and_hits_name_sheet_rows_slide_and_page(
    es: Elasticsearch, service: tuple[str, str], tmp_path: Path
) -> None:
    url, kb = service
    with httpx.Client(base_url=url, timeout=120) as client:
        job = upload(client, kb, files=files_of(*write_files(tmp_path)))
        assert job["state"] == "done" and job["counts"]["documents"] == 6
        low = {error["file"]: error for error in job["errors"]}
        assert set(low) == {"安全须知.png", "巡检.jpg"} and all(e["code"] == "low_ocr_confidence" for e in low.values())
        assert "pages [1]" in low["安全须知.png"]["reason"]
        check_provenance(all_chunks(es, kb))

        city = ff.travel_rows(60)[50][0]
        body = {"query": f"{city}的住宿上限是多少", "kb": kb, "k": 5, "filters": {"sources": ["差旅标准.xlsx"]}}
        hit = next(h for h in client.post("/search", json=body).json()["hits"] if city in h["text"])
        assert hit["sheet"] == "住宿" and hit["rows"] == f"{hit['row_start']}-{hit['row_end']}"
        assert hit["label"] == f"《差旅标准》工作表「住宿」第 {hit['rows']} 行 · {ff.TRAVEL_TITLE}"
        body = {"query": "公测日期会推迟吗", "kb": kb, "k": 5, "filters": {"sources": ["发布计划.pptx"]}}
        hit = client.post("/search", json=body).json()["hits"][0]
        assert hit["slide"] == 3 and hit["label"] == "《发布计划》第 3 张幻灯片 · 风险"
        body = {"query": "车间安全帽", "kb": kb, "k": 5, "filters": {"sources": ["安全须知.png"]}}
        hit = client.post("/search", json=body).json()["hits"][0]
        assert hit["page"] == 1 and hit["label"] == "《安全须知》第 1 页"
