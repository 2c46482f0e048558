"""Hostile files in the new formats (issue 60): each one clear error of its own, memory bounded,
nothing of it loaded (so nothing of it is stored), and the good file beside it still loads."""

import io
from dataclasses import replace
from pathlib import Path

from PIL import Image

from bench import format_fixtures as ff
from indexing.loaders import LoadError, load_paths
from tests.conftest import LOAD_LIMITS


def _errors(folder: Path, **limits: object) -> dict[str, LoadError]:
    (folder / "good.md").write_text("# 好文件\n\n正常的内容。\n", encoding="utf-8")
    result = load_paths([folder], replace(LOAD_LIMITS, **limits))  # type: ignore[arg-type]
    assert [document.source for document in result.documents] == ["good.md"]
    return {Path(error.path).name: error for error in result.errors}


def test_office_bombs_tall_sheets_and_truncated_decks_are_each_one_clear_error(tmp_path: Path) -> None:
    small = ff.write_wide_xlsx(tmp_path / "small.xlsx", columns=3, rows=2)
    ff.zip_bomb(tmp_path / "bomb.xlsx", small, inflated_mb=60)
    small.unlink()
    ff.write_tall_xlsx(tmp_path / "tall.xlsx", rows=1_001)
    deck = ff.write_pptx(tmp_path / "deck.pptx").read_bytes()
    (tmp_path / "deck.pptx").unlink()
    (tmp_path / "truncated.pptx").write_bytes(deck[: len(deck) // 2])
    (tmp_path / "tall.csv").write_text("编号\n" + "\n".join(map(str, range(1_001))), encoding="utf-8")
    errors = _errors(tmp_path, max_sheet_rows=1_000)
    assert {name: error.reason for name, error in errors.items()} == {
        "bomb.xlsx": "zip_ratio",
        "tall.xlsx": "too_many_rows",
        "truncated.pptx": "corrupt",
        "tall.csv": "too_many_rows",
    }
    assert "MAX_ZIP_RATIO=100 (a zip bomb?)" in errors["bomb.xlsx"].message
    assert "sheet '长表' has more than MAX_SHEET_ROWS=1000 rows" in errors["tall.xlsx"].message
    assert "corrupt or truncated PowerPoint file" in errors["truncated.pptx"].message


def test_a_sheet_claiming_a_million_rows_costs_only_the_rows_it_holds(tmp_path: Path) -> None:
    ff.claim_rows(ff.write_wide_xlsx(tmp_path / "claims.xlsx", columns=2, rows=3))
    result = load_paths([tmp_path / "claims.xlsx"], replace(LOAD_LIMITS, max_sheet_rows=10, timeout_s=30))
    assert result.errors == []
    [document] = result.documents
    assert document.text.splitlines() == [
        "工号 | 第1项指标 | 第2项指标",
        *(f"E00{r} | 值{r}-1 | 值{r}-2" for r in (1, 2, 3)),
    ]


def test_a_decompression_bomb_image_is_refused_before_it_is_decoded(tmp_path: Path) -> None:
    for name, side in (("bomb.png", 12_000), ("large.png", 7_000)):
        buffer = io.BytesIO()
        Image.new("1", (side, side), 1).save(buffer, "PNG")  # 49 or 144 million pixels in a few hundred kB
        (tmp_path / name).write_bytes(buffer.getvalue())
    (tmp_path / "not-an-image.jpg").write_text("这是文本，不是图片。", encoding="utf-8")
    errors = _errors(tmp_path)
    assert {errors[name].reason for name in ("bomb.png", "large.png")} == {"too_many_pixels"}
    assert "(MAX_IMAGE_PIXELS=40000000)" in errors["bomb.png"].message  # Pillow's own guard, at twice the limit
    assert "7000×7000 = 49000000 pixels, more than MAX_IMAGE_PIXELS=40000000" in errors["large.png"].message
    assert errors["not-an-image.jpg"].reason == "wrong_type"


def test_a_pdf_of_500_scanned_pages_is_refused_within_its_time_budget(tmp_path: Path) -> None:
    page = ff.png_bytes(ff.text_image(["本页为扫描件，共五百页中的一页。"] * 12))
    ff.write_pdf_pages(tmp_path / "scans.pdf", [page] * 500)
    errors = _errors(tmp_path, timeout_s=60)
    error = errors["scans.pdf"]
    assert error.reason == "ocr_time_budget", error  # not killed at the timeout: refused with the estimate
    assert "500 scanned pages need OCR at" in error.message and "LOAD_TIMEOUT_S=60" in error.message
