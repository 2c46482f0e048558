"""Spreadsheets, decks, scans and images (issue 60): each sheet a document whose every chunk begins
with its header, slides with their tables and notes, OCR page by page with a confidence, and every
hostile file one clear error. The files are made here (bench/format_fixtures.py)."""

import re
from dataclasses import replace
from pathlib import Path

from bench import doc_fixtures as fx
from bench import format_fixtures as ff
from core.documents import Chunk, Document, document_chunks, source_label
from indexing.loaders import SUPPORTED_SUFFIXES, load_paths
from tests.conftest import LOAD_LIMITS


def _load(*paths: Path, **limits: object) -> list[Document]:
    result = load_paths(paths, replace(LOAD_LIMITS, **limits))  # type: ignore[arg-type]
    assert result.errors == [], result.errors
    return result.documents


def _row_of(chunks: list[Chunk], words: str) -> Chunk:
    return next(chunk for chunk in chunks if words in chunk.text)


def test_each_sheet_is_a_document_and_every_chunk_begins_with_the_header(tmp_path: Path) -> None:
    stays, meals = _load(ff.write_xlsx(tmp_path / "差旅标准.xlsx", count=60))
    assert (stays.doc_id, stays.sheet, meals.doc_id, meals.sheet) == (
        "差旅标准.xlsx#住宿",
        "住宿",
        "差旅标准.xlsx#餐补",
        "餐补",
    )
    chunks = document_chunks(stays, 300, 30)
    header = " | ".join(ff.TRAVEL_HEADER)  # the empty column D is dropped, the merged title is no header
    assert len(chunks) > 4 and all(chunk.text.startswith(header + "\n") for chunk in chunks)
    assert {chunk.section for chunk in chunks} == {ff.TRAVEL_TITLE}
    city, tier, cap, effective, _ = ff.travel_rows(60)[50]
    far = _row_of(chunks, city)
    # Row 50 of the data sits on sheet row 54: title, header, 50 rows before it and the empty row.
    assert far.row_start is not None and far.row_end is not None and far.row_start <= 54 <= far.row_end
    line = next(line for line in far.text.splitlines() if line.startswith(city))
    assert line == f"{city} | {tier} | {cap} | {effective.isoformat()} | 10% | {cap + 50}"  # date, %, formula value
    label = source_label(title=stays.title, source=stays.source, sheet=far.document.sheet, rows="54-60")
    assert label == "《差旅标准》工作表「住宿」第 54-60 行"
    assert document_chunks(meals, 300, 30)[0].text == "级别 | 每日餐补(元)\n经理 | 120\n员工 | 80"


def test_a_wide_table_is_split_by_columns_each_keeping_the_key_column(tmp_path: Path) -> None:
    [wide] = _load(ff.write_wide_xlsx(tmp_path / "wide.xlsx", columns=30, rows=5))
    chunks = document_chunks(wide, 800, 50)
    assert len(chunks) >= 3
    for chunk in chunks:
        header, *rows = chunk.text.splitlines()
        assert header.startswith("工号 | ") and len(header.split(" | ")) <= 13
        assert [row.split(" | ")[0] for row in rows] == [f"E{r:03d}" for r in range(1, 6)]
        assert chunk.section is not None and chunk.section.startswith("列 A、")
    cells = {cell for chunk in chunks for row in chunk.text.splitlines()[1:] for cell in row.split(" | ")[1:]}
    assert cells == {f"值{r}-{c}" for r in range(1, 6) for c in range(1, 31)}  # every cell once


def test_xls_csv_and_tsv_are_sheets_too(tmp_path: Path) -> None:
    [old] = _load(ff.write_xls(tmp_path / "台账.xls"))
    [chunk] = document_chunks(old, 800, 50)
    assert (old.sheet, chunk.section, chunk.text) == (
        "设备",
        "设备台账",
        "设备 | 保修截止 | 数量\n投影仪 | 2027-06-30 | 4",
    )
    assert (chunk.row_start, chunk.row_end) == (3, 3)
    for name, delimiter in (("rates.csv", ","), ("rates.tsv", "\t")):
        [table] = _load(ff.write_delimited(tmp_path / name, delimiter, count=40))
        chunks = document_chunks(table, 200, 20)
        assert table.sheet is None and len(chunks) > 2
        assert all(chunk.text.startswith("城市 | 城市等级 | 住宿上限(元/晚)\n") for chunk in chunks)
        assert (chunks[0].row_start, chunks[-1].row_end) == (2, 41)


def test_a_deck_is_one_document_with_slides_tables_and_notes(tmp_path: Path) -> None:
    [deck] = _load(ff.write_pptx(tmp_path / "计划.pptx"))
    chunks = document_chunks(deck, 800, 50)
    assert [chunk.slide for chunk in chunks] == [1, 2, 3]  # a chunk per slide
    assert chunks[1].section == "发布时间表"
    assert "阶段 | 日期 | 负责人\n内测 | 4月1日 | 产品部\n公测 | 5月20日 | 运营部" in chunks[1].text
    assert chunks[2].text.endswith("备注：" + ff.LAUNCH_NOTES) and "支付渠道" in chunks[2].text
    assert "2026 年第二季度" in chunks[0].text
    assert source_label(title=deck.title, source=deck.source, slide=2, section=chunks[1].section) == (
        "《计划》第 2 张幻灯片 · 发布时间表"
    )


def test_a_table_in_a_pdf_docx_or_html_repeats_its_header_on_every_chunk(tmp_path: Path) -> None:
    header = ("药品", "每日最大剂量", "备注")
    rows = tuple((f"药品{n:02d}", f"{n * 100} 毫克", "饭后服用") for n in range(1, 41))
    pages = [[fx.Block("附表 常用药品", 1), fx.Block(rows=(header, *rows))]]
    files = (
        fx.write_pdf(tmp_path / "t.pdf", pages),
        fx.write_docx(tmp_path / "t.docx", pages),
        fx.write_html(tmp_path / "t.html", pages=pages),
    )
    for document in _load(*files):
        chunks = [chunk for chunk in document_chunks(document, 200, 20) if "药品3" in chunk.text]
        assert chunks, document.source
        assert all(chunk.text.startswith("药品 | 每日最大剂量 | 备注\n") for chunk in chunks), document.source


def test_an_image_is_read_by_ocr_with_its_page_and_confidence(tmp_path: Path) -> None:
    lines = ["进入车间必须佩戴安全帽。", "消防通道严禁堆放杂物。"]
    (tmp_path / "须知.png").write_bytes(ff.png_bytes(ff.text_image(lines)))
    frames = [ff.text_image([f"第{n}页：仓库钥匙由值班员保管。"]) for n in (1, 2)]
    frames[0].save(tmp_path / "scan.tiff", save_all=True, append_images=frames[1:])  # type: ignore[attr-defined]
    image, tiff = _load(tmp_path / "须知.png", tmp_path / "scan.tiff", ocr_min_confidence=1.0)
    assert re.sub(r"\s", "", image.text) == "".join(lines)
    assert image.page_starts == [(0, 1)] and image.metadata["ocr_pages"] == [1]
    assert 0.8 < image.metadata["ocr_confidence"]["1"] <= 1.0
    assert image.metadata["ocr_low_confidence_pages"] == [1]  # under a threshold of 1.0, named
    assert [page for _, page in tiff.page_starts] == [1, 2] and "第2页" in tiff.text


def test_a_mixed_pdf_keeps_its_text_layer_and_reads_its_scanned_page(tmp_path: Path) -> None:
    scan = ff.png_bytes(ff.text_image(["第二页是扫描件：灭火器每月检查一次。"]))
    pdf = ff.write_pdf_pages(tmp_path / "mixed.pdf", ["第一页有文字层：安全员每天巡查两次。", scan])
    [document] = _load(pdf)
    assert document.metadata["ocr_pages"] == [2]
    chunks = document_chunks(document, 20, 0)
    first, second = chunks[0], chunks[-1]
    assert first.page_start == 1 and "安全员每天巡查两次" in first.text
    assert second.page_end == 2 and "灭火器每月检查一次" in re.sub(r"\s", "", second.text)


def test_the_new_formats_are_in_the_one_list_of_supported_suffixes() -> None:
    for suffix in (".xlsx", ".xls", ".csv", ".tsv", ".pptx", ".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff"):
        assert suffix in SUPPORTED_SUFFIXES
