"""The page as a newcomer uses it, in headless Chromium against the real service (no model, no web
key): make a base, upload into it and read a failed file's reason, delete it; the header's base and
model state; errors in Chinese that say what to do; a clean slate for each question and a vote for
the answer on screen; [n] opening its source at the quote; phones and dark mode; what is in the base
(its chapters, questions it can answer, the evaluation tab's guide and skipped count). Run at
1280 × 800 and 390 × 844, light and dark. Screenshots go to test-output/ (a few to docs/screenshots/)."""

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch
from playwright.sync_api import Browser, Page, expect, sync_playwright

from core.config import Settings
from core.embeddings import Embedder
from indexing.loaders import SUPPORTED_SUFFIXES, split_chapters
from service.app import create_app
from tests.conftest import REPO_ROOT, SANGUO_PATH, TEST_INDICES, knowledge_base
from tests.serving import serve
from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, screenshot

pytestmark = pytest.mark.browser

CHAPTERS = 2  # the base holds chapters 1-2 whole: the repository's questions about later chapters are not in it
QUESTIONS = REPO_ROOT / "bench" / "data" / "sanguo_questions.jsonl"
WEAPONS = "刘关张三人结义后各自打造了什么兵器？"
DOCS_SHOTS = REPO_ROOT / "docs" / "screenshots"  # a few, small (the window only), for the docs
VIEWS = {
    "desktop-light": ({"width": 1280, "height": 800}, "light"),
    "phone-dark": ({"width": 390, "height": 844}, "dark"),
    "desktop-dark": ({"width": 1280, "height": 800}, "dark"),
    "phone-light": ({"width": 390, "height": 844}, "light"),
}
TWO_VIEWS = ["desktop-light", "phone-dark"]


@pytest.fixture(scope="module")
def book(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    chapters = split_chapters(
        SANGUO_PATH.read_text(encoding="utf-8"), source="sanguo_yanyi.txt", title="三国演义", marks="章回"
    )
    with knowledge_base(es, embedder, chapters[:CHAPTERS], "test-page61", profile="classical-novel") as alias:
        yield alias


@pytest.fixture(scope="module")
def url(
    es: Elasticsearch, es_url: str, book: str, embedder: Embedder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    settings = Settings(
        _env_file=None, es_url=es_url, es_index=book, upload_spool=str(tmp_path_factory.mktemp("spool"))
    )
    with serve(create_app(settings, embedder=embedder)) as served:
        yield served
    es.options(ignore_status=404).delete(index=TEST_INDICES["QUESTIONS_INDEX"], id=book)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def open_page(browser: Browser, url: str, view: str) -> tuple[Page, list[str]]:
    size, scheme = VIEWS[view]
    context = browser.new_context(viewport=size, color_scheme=scheme, locale="zh-CN")  # type: ignore[arg-type]
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda err: errors.append(str(err)))
    tab.goto(url)
    expect(tab.locator("#ready")).to_have_class("badge ok")
    return tab, errors


@pytest.fixture(params=TWO_VIEWS)
def tab(request: pytest.FixtureRequest, browser: Browser, url: str) -> Iterator[Page]:
    page, errors = open_page(browser, url, request.param)
    yield page
    page.context.close()
    assert errors == []


def fits(tab: Page) -> None:
    """Nothing is wider than the window: no sideways scrolling."""
    width = tab.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], width


def no_developer_text(text: str) -> None:
    """A message a person reads names no setting, API path, HTTP status or English error."""
    assert not re.search(r"[A-Z_]{4,}=|/kbs|PUT |POST |HTTP \d|detail|[a-z]{4,} [a-z]{4,}", text), text


def ask(tab: Page, question: str) -> None:
    tab.fill("#question", question)
    tab.click("#ask-button")


# --- 1. bases from the page -----------------------------------------------------------------------


def test_make_a_base_upload_read_a_failed_files_reason_reload_and_delete(
    tab: Page, url: str, tmp_path: Path, es: Elasticsearch
) -> None:
    name = f"test-page61-new-{uuid.uuid4().hex[:6]}"
    assert tab.locator("#upload-files").get_attribute("accept") == ",".join(SUPPORTED_SUFFIXES)
    tab.click("#bases-section summary")
    tab.fill("#kb-name", name)
    tab.fill("#kb-description", "公司制度")
    tab.click("#kb-create-button")
    expect(tab.locator("#kb-select")).to_have_value(name)
    expect(tab.locator("#ready")).to_contain_text(f"知识库 {name}")
    expect(tab.locator("#base-description")).to_have_text("公司制度")
    good, empty = tmp_path / "制度.md", tmp_path / "空白.txt"
    good.write_text("# 年假\n\n员工每年有十天带薪年假，入职满一年后开始计算。\n", encoding="utf-8")
    empty.write_text("   \n", encoding="utf-8")
    tab.set_input_files("#upload-files", [str(good), str(empty)])
    tab.click("#upload-button")
    expect(tab.locator("#upload-status")).to_contain_text("上传已完成", timeout=60_000)
    expect(tab.locator("#upload-errors li")).to_have_text(["空白.txt：文件里没有可索引的文字（扫描件需先做文字识别）"])
    expect(tab.locator("#documents-summary")).to_contain_text("共 1 篇文档")
    tab.reload()
    expect(tab.locator("#kb-select")).to_have_value(name)  # remembered across the reload
    expect(tab.locator("#ready")).to_contain_text(f"知识库 {name} · 1 篇")
    screenshot(tab, f"page-base-{tab.viewport_size['width'] if tab.viewport_size else 0}.png")
    tab.click("#bases-section summary")
    tab.once("dialog", lambda dialog: dialog.accept())
    tab.click("#kb-delete")
    expect(tab.locator("#kb-status")).to_have_text(f"已删除知识库「{name}」")
    expect(tab.locator(f"#kb-select option[value='{name}']")).to_have_count(0)
    assert not es.indices.exists_alias(name=name)
    fits(tab)


def test_a_taken_name_is_said_in_chinese(tab: Page, book: str) -> None:
    tab.click("#bases-section summary")
    tab.fill("#kb-name", book)
    tab.click("#kb-create-button")
    expect(tab.locator("#kb-status")).to_have_text("新建知识库失败：已有同名的知识库，请换一个名字")


# --- 1. the header ---------------------------------------------------------------------------------


def test_the_header_names_the_model_state_and_web_search_is_off_without_a_key(tab: Page, book: str) -> None:
    expect(tab.locator("#model-state")).to_have_text("大模型：未连接：未配置大模型，回答为原文摘录")
    expect(tab.locator("#ready")).to_contain_text(f"知识库 {book} · {CHAPTERS} 篇")
    expect(tab.locator("#web")).to_be_disabled()
    expect(tab.locator("#web")).not_to_be_checked()
    expect(tab.locator("#web-note")).to_have_text("未设置联网搜索密钥，只在知识库内查找")


# --- 2 and 3. errors for people, a clean slate -----------------------------------------------------


def test_a_long_question_is_refused_in_chinese_and_clears_the_answer(tab: Page) -> None:
    ask(tab, WEAPONS)
    expect(tab.locator("#feedback")).to_be_visible(timeout=60_000)
    ask(tab, "问" * 2100)
    expect(tab.locator("#error")).to_have_text("提问失败：问题最长 2000 字，请缩短后再问")
    no_developer_text(tab.locator("#error").inner_text())
    expect(tab.locator("#answer-section")).to_be_hidden()
    expect(tab.locator("#feedback")).to_be_hidden()
    # `hidden` hides the feedback bar whatever its class's display says
    assert tab.locator("#feedback").evaluate("bar => getComputedStyle(bar).display") == "none"


def test_a_vote_goes_to_the_answer_on_screen(tab: Page) -> None:
    answers = []
    for question in ("黄巾起义时张角传播的口号是什么？", WEAPONS):
        with tab.expect_response(lambda r: r.url.endswith("/query/stream")) as streamed:
            ask(tab, question)
        expect(tab.locator("#feedback")).to_be_visible(timeout=60_000)
        final = streamed.value.text().split("event: final")[1]
        answers.append(json.loads(final.split("data: ", 1)[1].split("\n")[0])["answer_id"])
    with tab.expect_request(lambda r: r.url.endswith("/feedback")) as voted:
        tab.click("#vote-up")
    assert voted.value.url.endswith(f"/answers/{answers[1]}/feedback")
    expect(tab.locator("#feedback-status")).to_have_text("已记录：有用")
    assert tab.locator("#vote-up svg").count() == 1 and "👍" not in tab.locator("body").inner_text()


def test_no_question_set_says_how_to_get_one(tab: Page) -> None:
    tab.click("#tab-evaluation")
    expect(tab.locator("#eval-questions")).to_have_text("这个知识库还没有问题集：按上面的三种办法之一得到一个")
    expect(tab.locator("#eval-guide li")).to_have_count(3)
    expect(tab.locator("#eval-guide")).to_contain_text("下载示例问题集")
    sample = tab.locator("#eval-sample").get_attribute("href") or ""
    lines = tab.evaluate("href => fetch(href).then(r => r.text())", sample).splitlines()
    assert [set(json.loads(line)) >= {"question", "evidence"} for line in lines] == [True, True]
    fits(tab)


# --- 4. citations that show the quote --------------------------------------------------------------


def test_a_citation_opens_at_its_quote_and_the_whole_passage_is_one_click_away(tab: Page, url: str) -> None:
    ask(tab, WEAPONS)
    expect(tab.locator("#answer a.cite").first).to_be_visible(timeout=60_000)
    result = httpx.post(f"{url}/query", json={"question": WEAPONS}, timeout=60).json()
    number = int(tab.locator("#answer a.cite").first.inner_text().strip("[]"))
    cited = next(c for c in result["citations"] if c["number"] == number)
    tab.locator("#answer a.cite").first.click()
    item = tab.locator(f"#cite-{number}")
    expect(item).to_have_class(re.compile(r"\btarget\b"))
    quote = item.locator("mark.quote")
    expect(quote).to_be_visible()
    assert quote.inner_text() in result["answer"] and quote.inner_text() in cited["text"]
    box, height = quote.bounding_box(), tab.viewport_size["height"] if tab.viewport_size else 0
    assert box is not None and abs(box["y"] + box["height"] / 2 - height / 2) < height / 4  # centred
    item.locator("button.whole").click()
    assert item.locator(".passage-text").text_content() == cited["text"]
    expect(item.locator("mark.quote")).to_have_text(quote.inner_text())
    screenshot(tab, f"page-citation-{tab.viewport_size['width'] if tab.viewport_size else 0}.png")
    if tab.viewport_size and tab.viewport_size["width"] == 1280:
        item.locator("button.whole").click()  # back to the quote and its neighbours
        quote.scroll_into_view_if_needed()
        item.screenshot(path=str(DOCS_SHOTS / "page-citation.png"))


# --- 5. phones and dark mode ----------------------------------------------------------------------


@pytest.mark.parametrize("view", list(VIEWS))
def test_nothing_overflows_no_label_wraps_per_character_and_dark_is_dark(browser: Browser, url: str, view: str) -> None:
    tab, errors = open_page(browser, url, view)
    tab.fill("#question", WEAPONS)
    tab.click("#compare-button")
    expect(tab.locator("#hybrid-hits li.hit").first).to_be_visible(timeout=60_000)
    fits(tab)
    for label in tab.locator("#modes label, .controls > label").all():
        box = label.bounding_box()
        assert box is not None and box["height"] < 2 * 24 and box["width"] > 30, label.inner_text()
    columns = [tab.locator(f"#{side}-hits").bounding_box() for side in ("vector", "hybrid")]
    assert columns[0] is not None and columns[1] is not None
    stacked = columns[1]["y"] >= columns[0]["y"] + columns[0]["height"]
    assert stacked == (VIEWS[view][0]["width"] < 800)
    background = tab.evaluate("() => getComputedStyle(document.body).backgroundColor")
    level = sum(int(part) for part in re.findall(r"\d+", background)[:3]) / 3
    assert (level < 60) if VIEWS[view][1] == "dark" else (level > 200), background
    screenshot(tab, f"page-{view}.png")
    if view in ("phone-dark", "desktop-light"):
        tab.screenshot(path=str(DOCS_SHOTS / f"page-{view}.png"))
    tab.context.close()
    assert errors == []


# --- 6. what is in the base -----------------------------------------------------------------------


def _indexed_questions() -> dict[str, Any]:
    lines = [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {line["question"]: line for line in lines}


def test_the_base_shows_its_chapters_and_questions_it_can_answer(tab: Page, url: str, book: str) -> None:
    expect(tab.locator("#documents-summary")).to_have_text(
        f"共 {CHAPTERS} 篇文档：《sanguo_yanyi.txt》第 1–{CHAPTERS} 章（共 {CHAPTERS} 章）"
    )
    # Without a question set: questions about its chapters' titles, each found in its own chapter.
    examples = tab.locator("#examples button.example")
    expect(examples.first).to_be_visible()
    assert examples.all_inner_texts() == ["「宴桃园豪杰三结义」讲的是什么？", "「张翼德怒鞭督邮」讲的是什么？"]
    assert tab.locator("#question").get_attribute("placeholder") == "输入问题，例如：「宴桃园豪杰三结义」讲的是什么？"


def test_with_the_repositorys_question_set_examples_and_the_evaluation_skip_what_is_not_indexed(
    tab: Page, url: str, book: str
) -> None:
    text = QUESTIONS.read_text(encoding="utf-8")
    assert httpx.put(f"{url}/kbs/{book}/questions", json={"text": text}, timeout=60).status_code == 200
    everything = _indexed_questions()
    outside = sum(1 for line in everything.values() if line.get("chapter", 0) > CHAPTERS)
    tab.reload()
    examples = tab.locator("#examples button.example")
    expect(examples).to_have_count(4)
    for shown in examples.all_inner_texts():
        assert everything[shown]["chapter"] <= CHAPTERS and not everything[shown].get("generated"), shown
    examples.first.click()  # asks it
    expect(tab.locator("#answer")).to_contain_text("「", timeout=60_000)
    tab.click("#tab-evaluation")
    expect(tab.locator("#eval-skipped")).to_contain_text(f"跳过 {outside} 条")
    expect(tab.locator("#eval-bad-lines li")).to_have_count(0)  # no red line for a question that is merely elsewhere
    screenshot(tab, f"page-evaluation-{tab.viewport_size['width'] if tab.viewport_size else 0}.png")


# --- 7. streamed quotes -----------------------------------------------------------------------------


def test_extractive_quotes_stream_before_the_answer_is_composed(url: str) -> None:
    events = []
    with httpx.stream("POST", f"{url}/query/stream", json={"question": WEAPONS}, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("event:"):
                events.append([line[6:].strip(), ""])
            elif line.startswith("data:"):
                events[-1][1] += line[5:].strip()
    kinds = [kind for kind, _ in events]
    assert "quote" in kinds and kinds.index("quote") < kinds.index("token")
    answer = json.loads(events[-1][1])["answer"]
    quoted = [json.loads(data)["text"] for kind, data in events if kind == "quote"]
    # Quotes stream as chosen; the composed answer quotes them (a part not answered keeps at most one).
    assert any(all(line.strip() in answer for line in text.splitlines()) for text in quoted), (quoted, answer)


# --- a spreadsheet row under its header (issues 60 and 61) ----------------------------------------


@pytest.fixture(scope="module")
def sheet_base(es: Elasticsearch, embedder: Embedder, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from bench.format_fixtures import write_xlsx
    from indexing.loaders.base import LoadLimits
    from indexing.loaders.sheet import parse_xlsx

    path = write_xlsx(tmp_path_factory.mktemp("sheet") / "差旅标准.xlsx")
    documents = parse_xlsx(path.read_bytes(), path.name, path.stem, LoadLimits.from_settings(Settings(_env_file=None)))
    with knowledge_base(es, embedder, documents, "test-page61-sheet") as alias:
        yield alias


def test_a_spreadsheet_row_shows_as_a_small_table_under_its_header(tab: Page, url: str, sheet_base: str) -> None:
    from bench.format_fixtures import travel_rows

    city, _, cap, *_ = travel_rows()[54]  # far below the header row
    tab.select_option("#kb-select", sheet_base)
    expect(tab.locator("#ready")).to_contain_text(f"知识库 {sheet_base}")
    tab.fill("#question", f"{city}的住宿上限是多少？")
    tab.click("#compare-button")
    table = tab.locator("#hybrid-hits li").first.locator("table.row-table")
    expect(table).to_be_visible(timeout=60_000)
    expect(table.locator("th").nth(2)).to_have_text("住宿上限(元/晚)")
    expect(table.locator("tbody tr").first.locator("td").first).to_have_text(city)
    assert str(cap) in table.locator("tbody tr").first.inner_text()
    ask(tab, f"{city}的住宿上限是多少？")
    expect(tab.locator("#citations table.row-table").first).to_be_visible(timeout=60_000)
    expect(tab.locator("#citations table.row-table th").nth(2)).to_have_text("住宿上限(元/晚)")
    fits(tab)
