"""PDF, Word, HTML and Markdown loaders on generated files: text quality, pages, sections, bad files."""

import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from bench import doc_fixtures as fx
from core.documents import Document, document_chunks, page_label, source_label
from indexing.loaders import load_paths
from indexing.loaders.pdf import join_lines, undecodable_share
from tests.conftest import LOAD_LIMITS


def only_document(path: Path) -> Document:
    result = load_paths([path], LOAD_LIMITS)
    assert result.errors == [], result.errors
    [document] = result.documents
    return document


def where(document: Document, sentence: str) -> tuple[int | str | None, str | None]:
    """(page, section) of the chunk that holds `sentence` whole."""
    [chunk] = [c for c in document_chunks(document, 800, 50) if sentence in c.text][:1]
    return page_label(chunk.page_start, chunk.page_end), chunk.section


@pytest.mark.parametrize("outline", [True, False], ids=["outline-headings", "font-size-headings"])
def test_pdf_text_has_no_running_header_or_footer_and_whole_paragraphs(tmp_path: Path, outline: bool) -> None:
    document = only_document(fx.write_pdf(tmp_path / "guide.pdf", outline=outline))
    assert document.title == fx.TITLE
    assert "内部资料" not in document.text and "共 4 页" not in document.text
    lines = document.text.splitlines()
    for paragraph in fx.paragraphs():  # each paragraph is one line: no breaks, no stray spaces
        assert paragraph in lines
    for row in fx.table_rows():
        assert " | ".join(row) in lines
    for sentence, page, section in fx.KNOWN:
        assert where(document, sentence) == (page, section)


def test_a_paragraph_over_a_page_break_is_joined_and_its_chunk_spans_both_pages(tmp_path: Path) -> None:
    document = only_document(fx.write_long_pdf(tmp_path / "long.pdf"))
    assert fx.LONG_PARAGRAPH in document.text.splitlines()
    assert [page for _, page in document.page_starts] == [1, 2]
    spans = {page_label(c.page_start, c.page_end) for c in document_chunks(document, 800, 50)}
    assert "1-2" in spans


def test_lines_join_without_spaces_in_chinese_and_with_one_between_words() -> None:
    assert join_lines("二甲双胍是首选", "用药。") == "二甲双胍是首选用药。"
    assert join_lines("metformin is the", "first choice") == "metformin is the first choice"
    assert join_lines("first-line treat-", "ment") == "first-line treatment"
    assert join_lines("口服 metformin", "每日") == "口服 metformin每日"


def test_docx_headings_become_sections_tables_rows_and_header_footer_comment_are_ignored(tmp_path: Path) -> None:
    document = only_document(fx.write_docx(tmp_path / "guide.docx"))
    assert document.title == fx.TITLE
    assert document.page_starts == []
    for text in (fx.HEADER, "页脚", "批注", "请核对剂量上限"):
        assert text not in document.text
    lines = document.text.splitlines()
    assert all(paragraph in lines for paragraph in fx.paragraphs())
    assert all(" | ".join(row) in lines for row in fx.table_rows())
    for sentence, _page, section in fx.KNOWN:
        assert where(document, sentence) == (None, section)


@pytest.mark.parametrize(("charset", "layout"), [("utf-8", "semantic"), ("gbk", "classes"), ("utf-8", "plain")])
def test_html_main_text_without_boilerplate_in_the_declared_charset(tmp_path: Path, charset: str, layout: str) -> None:
    document = only_document(fx.write_html(tmp_path / "guide.html", charset, layout=layout))
    assert document.title == fx.TITLE  # from <title>, without the site name
    for boilerplate in fx.BOILERPLATE:
        assert boilerplate not in document.text
    assert "统计代码" not in document.text
    lines = document.text.splitlines()
    assert all(paragraph in lines for paragraph in fx.paragraphs())
    assert all(" | ".join(row) in lines for row in fx.table_rows())
    for sentence, _page, section in fx.KNOWN:
        assert where(document, sentence) == (None, section)


@pytest.mark.parametrize("paragraphs", [1, 2])
@pytest.mark.parametrize("variant", fx.SHORT_VARIANTS)
def test_short_pages_lose_their_chrome_and_keep_heading_and_paragraphs(
    tmp_path: Path, variant: str, paragraphs: int
) -> None:
    path = tmp_path / "notice.html"
    path.write_text(fx.short_page(variant, paragraphs), encoding="utf-8")
    document = only_document(path)
    assert document.title == fx.NOTICE_TITLE
    assert document.text.splitlines() == [fx.NOTICE_TITLE, *fx.NOTICE[:paragraphs]]


def test_chrome_never_reaches_a_long_page_and_an_article_header_keeps_its_heading(tmp_path: Path) -> None:
    chrome = "".join(fx.SHORT_CHROME.values())
    page = fx.guide_html(layout="plain").replace("<body>", f"<body>{chrome}")
    page = page.replace(
        "<div class='c3'>", "<div class='c3'><article><header><h1>科普专栏</h1><p>发布者：编辑部</p></header>"
    )
    path = tmp_path / "long.html"
    path.write_text(page.replace("</div>\n<div class='c4'>", "</article></div>\n<div class='c4'>"), encoding="utf-8")
    lines = only_document(path).text.splitlines()
    assert not [line for line in lines if any(b in line for b in [*fx.SHORT_BOILERPLATE, "编辑部"])]
    assert "科普专栏" in lines
    assert all(paragraph in lines for paragraph in fx.paragraphs())


def test_the_main_content_rule_reads_main_not_the_rest_of_the_body(tmp_path: Path) -> None:
    path = tmp_path / "notice.html"
    path.write_text(
        "<html><body><div class='top'>欢迎光临本站</div><main><h2>通知</h2><p>明天停水。</p>"
        "<table><tr><td>时间</td><td>8:00-12:00</td></tr></table></main><div>友情链接</div></body></html>",
        encoding="utf-8",
    )
    document = only_document(path)
    assert document.text.splitlines() == ["通知", "明天停水。", "时间 | 8:00-12:00"]
    assert document.title == "通知"  # no <title>: trafilatura takes the first heading


def test_a_page_of_nothing_but_chrome_is_an_empty_file_error(tmp_path: Path) -> None:
    path = tmp_path / "menu.html"
    path.write_text(f"<html><body>{fx.SHORT_CHROME['nav']}{fx.SHORT_CHROME['footer']}</body></html>", encoding="utf-8")
    [error] = load_paths([path], LOAD_LIMITS).errors
    assert error.reason == "empty" and "navigation" in error.message


def test_markdown_headings_give_section_paths_and_the_title_heading_is_not_one(tmp_path: Path) -> None:
    path = tmp_path / "thyroid.md"
    path.write_text(
        "# 甲亢饮食指南\n\n## 第一部分 饮食\n\n### 碘\n\n甲亢病人应当少吃含碘食物。\n\n## 第二部分 运动\n\n避免剧烈运动。\n",
        encoding="utf-8",
    )
    document = only_document(path)
    assert where(document, "少吃含碘食物") == (None, "第一部分 饮食 / 碘")
    assert where(document, "避免剧烈运动") == (None, "第二部分 运动")


def test_sections_cut_chunks_so_no_chunk_mixes_two_sections(tmp_path: Path) -> None:
    document = only_document(fx.write_docx(tmp_path / "guide.docx"))
    chunks = document_chunks(document, 800, 50)
    assert len({c.section for c in chunks}) == len(chunks) == 7  # seven sections, each short
    assert chunks[4].text.startswith("3.2 用药")


def test_text_files_without_sections_chunk_exactly_as_before(tmp_path: Path) -> None:
    from core.chunking import split_text

    text = "第一句很长。" * 300
    document = Document("d", text, "d.txt")
    assert [c.text for c in document_chunks(document, 200, 20)] == split_text(text, 200, 20)
    assert {(c.page_start, c.section) for c in document_chunks(document, 200, 20)} == {(None, None)}


def test_source_labels() -> None:
    assert (
        source_label(title="糖尿病防治指南", source="g.pdf", page=12, section="第三章 药物治疗 / 3.2 用药")
        == "《糖尿病防治指南》第 12 页 · 3.2 用药"
    )
    assert source_label(title="指南", source="g.pdf", page="3-4") == "《指南》第 3-4 页"
    assert source_label(title="", source="faq.html", section="常见问题") == "《faq.html》 · 常见问题"
    assert source_label(title="第12章 陶", source="s.txt", chapter=12, chapter_title="陶") == "第12章 陶 · s.txt"
    assert page_label(3, 3) == 3 and page_label(3, 4) == "3-4" and page_label(None, None) is None


def test_text_of_glyphs_without_characters_counts_as_undecodable() -> None:
    assert undecodable_share("\x01\x04\x05\x06 2026 \x0b\x0c") == 6 / 12
    assert undecodable_share("二甲双胍是首选用药。") == 0.0


def bad_files(folder: Path) -> dict[str, str]:
    """Every kind of bad file, with the words its error message must contain."""
    fx.write_scanned_pdf(folder / "scanned.pdf")
    fx.write_pdf(folder / "locked.pdf", encrypt_password="secret")
    whole = fx.write_pdf(folder / "whole.pdf").read_bytes()
    (folder / "whole.pdf").unlink()
    (folder / "truncated.pdf").write_bytes(whole[: len(whole) // 2])
    (folder / "corrupt.pdf").write_bytes(b"%PDF-1.4\n" + bytes(range(256)) * 8 + b"\n%%EOF\n")
    docx = fx.write_docx(folder / "whole.docx").read_bytes()
    (folder / "whole.docx").unlink()
    (folder / "truncated.docx").write_bytes(docx[: len(docx) // 2])
    (folder / "renamed.pdf").write_bytes(docx)
    (folder / "report.docx").write_text("这其实是一个文本文件。", encoding="utf-8")
    (folder / "empty.md").write_bytes(b"")
    (folder / "big.txt").write_text("很大的文件。" * 9000, encoding="utf-8")  # 162 kB
    return {
        "scanned.pdf": "no text on any of its 2 pages, OCR included",
        "locked.pdf": "encrypted PDF",
        "truncated.pdf": "truncated PDF",
        "corrupt.pdf": "corrupt PDF",
        "truncated.docx": "corrupt or truncated Word file",
        "renamed.pdf": "not PDF as its extension says: the content is a ZIP archive",
        "report.docx": "not Word (.docx) as its extension says: the content is plain text",
        "empty.md": "empty file",
        "big.txt": "larger than MAX_FILE_MB=0.1",
    }


def test_each_bad_file_is_one_clear_error_and_the_good_file_still_loads(tmp_path: Path) -> None:
    expected = bad_files(tmp_path)
    (tmp_path / "good.md").write_text("# 好文件\n\n正常的内容。\n", encoding="utf-8")
    result = load_paths([tmp_path], replace(LOAD_LIMITS, max_file_mb=0.1))
    assert [d.source for d in result.documents] == ["good.md"]
    assert [f.source for f in result.loaded] == ["good.md"]
    messages = {Path(error.path).name: error.message for error in result.errors}
    assert len(result.errors) == len(messages) == len(expected)
    for name, words in expected.items():
        assert words in messages[name], (name, messages[name])
    reasons = {Path(error.path).name: error.reason for error in result.errors}
    assert reasons["scanned.pdf"] == "no_text_layer" and reasons["big.txt"] == "too_large"


def test_a_zip_that_is_not_a_word_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "archive.docx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "不是 Word 文件")
    [error] = load_paths([path], LOAD_LIMITS).errors
    assert "corrupt or truncated Word file" in error.message


def test_paragraphs_join_on_pages_with_mirrored_margins() -> None:
    from indexing.loaders.pdf import _blocks, _Line

    def line(text: str, page: int, x0: float, x1: float, top: float) -> _Line:
        return _Line(text, page, x0, x1, top, top + 10, 10.0)

    pages = [
        [line("一个段落从左页开始，写满一整行。", 1, 72, 500, 100), line("左页最后一行也写满", 1, 62, 500, 115)],
        [line("右页的版心更靠右，这一行接着写完。", 2, 95, 530, 100), line("新的段落缩进两格。", 2, 115, 300, 115)],
    ]
    blocks = _blocks(pages)
    assert [(b.text, b.page, b.glue) for b in blocks] == [
        ("一个段落从左页开始，写满一整行。左页最后一行也写满", 1, None),
        ("右页的版心更靠右，这一行接着写完。", 2, ""),
        ("新的段落缩进两格。", 2, None),
    ]
