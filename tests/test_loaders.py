"""Loaders on real files: encodings, Markdown, JSONL errors, EPUB, chapters of the 三国演义."""

import json
import re
from pathlib import Path

import pytest

from bench import doc_fixtures as fx
from core.profiles import chapter_marks
from indexing.loaders import chapters_of, chinese_number, load_paths
from tests.conftest import LOAD_LIMITS, SANGUO_PATH

NOVEL = """序言：本书据旧本整理。

第一回　宴桃园豪杰三结义
滚滚长江东逝水，浪花淘尽英雄。
第二回 张翼德怒鞭督邮
第三回合，张飞又胜。这一行不是标题。
第十二回　陶恭祖三让徐州
曹操正慌走间。
"""


def test_the_sanguo_file_has_120_chapters_with_numbers_and_titles() -> None:
    result = load_paths([SANGUO_PATH], LOAD_LIMITS)
    assert result.errors == []
    documents = result.documents
    assert [d.chapter for d in documents] == list(range(1, 121))
    twelfth = documents[11]
    assert twelfth.doc_id == "sanguo_yanyi.txt#ch12"
    assert twelfth.chapter_title == "陶恭祖三让徐州 曹孟穗大战吕布"
    assert twelfth.title == "第12章 陶恭祖三让徐州 曹孟穗大战吕布"
    assert twelfth.text.startswith("第12章") and "曹操正慌走间" in twelfth.text
    assert sum(len(d.text) for d in documents) == len(SANGUO_PATH.read_text(encoding="utf-8"))


def test_chinese_numeral_headings_a_front_matter_document_and_no_false_headings(tmp_path: Path) -> None:
    """第N回 headings cut a file only for a base with the classical-novel profile (the pipeline and the
    CLI cut what the loader read); the default path cuts at 第N章 alone and keeps the file whole."""
    path = tmp_path / "novel.txt"
    path.write_text(NOVEL, encoding="utf-8")
    whole = load_paths([path], LOAD_LIMITS).documents
    assert [(d.doc_id, d.chapter) for d in whole] == [("novel.txt", None)]
    whole[0].file_hash = "h"
    documents = chapters_of(whole, chapter_marks("classical-novel"))
    assert all(d.file_hash == "h" for d in documents)
    assert [(d.doc_id, d.chapter, d.chapter_title) for d in documents] == [
        ("novel.txt#front", None, None),
        ("novel.txt#ch1", 1, "宴桃园豪杰三结义"),
        ("novel.txt#ch2", 2, "张翼德怒鞭督邮"),
        ("novel.txt#ch12", 12, "陶恭祖三让徐州"),
    ]
    assert "第三回合，张飞又胜" in documents[2].text


@pytest.mark.parametrize(
    ("numeral", "value"), [("十二", 12), ("一百零八", 108), ("二十", 20), ("十", 10), ("１２", 12)]
)
def test_chinese_numbers(numeral: str, value: int) -> None:
    assert chinese_number(numeral) == value


@pytest.mark.parametrize("encoding", ["gb18030", "gbk", "utf-16"])
def test_non_utf8_text_is_detected_not_crashed_on(tmp_path: Path, encoding: str) -> None:
    path = tmp_path / f"legacy-{encoding}.txt"
    text = re.sub("回(?=[　 ])", "章", NOVEL)  # 第N章: cut on the default path
    path.write_bytes(text.encode(encoding))
    result = load_paths([path], LOAD_LIMITS)
    assert result.errors == []
    assert result.documents[1].chapter_title == "宴桃园豪杰三结义"
    assert "".join(d.text for d in result.documents) == text


def test_markdown_title_from_its_first_heading(tmp_path: Path) -> None:
    path = tmp_path / "guide.md"
    path.write_text("# 甲亢患者饮食指南\n\n甲亢病人应当少吃含碘食物。\n", encoding="utf-8")
    [document] = load_paths([path], LOAD_LIMITS).documents
    assert (document.doc_id, document.title, document.source) == ("guide.md", "甲亢患者饮食指南", "guide.md")
    assert "含碘" in document.text


def test_jsonl_reports_malformed_lines_with_their_numbers_and_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "faq.jsonl"
    lines = [
        json.dumps(
            {"id": "q1", "text": "低血糖时应立即进食糖类。", "title": "低血糖", "metadata": {"lang": "zh"}},
            ensure_ascii=False,
        ),
        '{"id": "q2", "text": "未闭合',
        "",
        json.dumps({"id": 3, "text": "高血糖需要控制饮食。"}, ensure_ascii=False),
        json.dumps({"text": "没有编号"}, ensure_ascii=False),
        json.dumps(["not", "an", "object"]),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = load_paths([path], LOAD_LIMITS)
    assert [(d.doc_id, d.title, d.metadata) for d in result.documents] == [
        ("q1", "低血糖", {"lang": "zh"}),
        ("3", "", {}),
    ]
    assert [(e.path, e.line) for e in result.errors] == [(str(path), 2), (str(path), 5), (str(path), 6)]
    assert '"id"' in result.errors[1].message and "object" in result.errors[2].message
    assert str(result.errors[0]).startswith(f"{path}:2: ")


def test_epub_chapters_follow_the_spine_as_plain_text(tmp_path: Path) -> None:
    path = tmp_path / "book.epub"
    fx.write_epub(path)
    result = load_paths([path], LOAD_LIMITS)
    assert result.errors == []
    assert [(d.doc_id, d.chapter, d.chapter_title) for d in result.documents] == [
        ("book.epub#ch1", 1, "第一章 起"),
        ("book.epub#ch2", 2, "第二章 承"),
    ]
    assert result.documents[1].text == "第二章 承\n合久必分，群雄并起。"
    assert result.documents[1].metadata == {"book": "测试之书", "href": "c2.xhtml"}


def test_folders_unreadable_and_missing_files_are_reported_and_the_rest_loaded(tmp_path: Path) -> None:
    folder = tmp_path / "kb"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.txt").write_text("甲文件。", encoding="utf-8")
    (folder / "b.md").write_text("乙文件。", encoding="utf-8")
    (folder / "broken.epub").write_bytes(b"not a zip at all")
    (folder / "clip.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42")
    result = load_paths([folder, tmp_path / "missing.txt"], LOAD_LIMITS)
    assert sorted(d.doc_id for d in result.documents) == ["b.md", "sub/a.txt"]
    assert result.skipped == [str(folder / "clip.mp4")]
    messages = {Path(e.path).name: e.message for e in result.errors}
    assert messages["broken.epub"] == "not EPUB as its extension says: the content is plain text"
    assert messages["missing.txt"] == "no such file or folder"


def test_the_same_document_id_twice_is_reported(tmp_path: Path) -> None:
    for sub in ("x", "y"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "same.txt").write_text(f"{sub}的内容。", encoding="utf-8")
    result = load_paths([tmp_path / "x" / "same.txt", tmp_path / "y" / "same.txt"], LOAD_LIMITS)
    assert [d.text for d in result.documents] == ["x的内容。"]
    assert "duplicate document id 'same.txt'" in result.errors[0].message
