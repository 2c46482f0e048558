"""The web page in headless Chromium (Debian's package, driven by Playwright's Python API; no
browser download): comparison columns and a streamed answer against the real service, with the
model and web search played by the fake servers. Screenshots go to test-output/."""

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from elasticsearch import Elasticsearch
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright

from core.config import Settings
from core.embeddings import Embedder
from indexing.loaders import split_chapters
from service.app import create_app
from tests.conftest import REPO_ROOT, SANGUO_PATH, knowledge_base
from tests.fakes.bocha_server import API_KEY, FakeBochaServer, page
from tests.fakes.habits import HABITS
from tests.fakes.openai_server import ANSWER, FakeChatServer
from tests.serving import serve
from tests.test_workflow import LOCAL_PATH

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")  # ./run exports it (system-deps)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OUTPUT = REPO_ROOT / "test-output"
CHAPTERS, CHARS_PER_CHAPTER = 4, 1000  # about nine chunks: enough for two different top-6 lists
# The contexts are the 8 local passages ([1]..[8]) and then the one web result ([9]).
ANSWER_TEXT = "刘备、关羽、张飞在桃园结为兄弟[1]，网上资料也这样说[9]。"


@pytest.fixture(scope="module")
def alias(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    chapters = split_chapters(
        SANGUO_PATH.read_text(encoding="utf-8"), source="sanguo_yanyi.txt", title="三国演义", marks="章回"
    )[:CHAPTERS]
    for chapter in chapters:
        chapter.text = chapter.text[:CHARS_PER_CHAPTER]
    with knowledge_base(es, embedder, chapters, "test-browser") as name:
        yield name


@pytest.fixture(scope="module")
def base_url(es: Elasticsearch, es_url: str, alias: str, embedder: Embedder) -> Iterator[str]:
    judgements = f"test-judgements-{uuid.uuid4().hex[:8]}"
    pages = [page("桃园三结义 - 百科", "https://example.org/taoyuan", "刘备、关羽、张飞桃园结义。")]
    with FakeChatServer() as llm, FakeBochaServer(pages) as bocha:
        llm.on("RouteDecision", {"strategy": "complex", "reason": "需要查原著"})
        llm.on("Decomposition", {"sub_questions": ["桃园结义的是哪三个人？"], "reason": "一个问题"})
        llm.on(
            "Evaluation",
            {"enough": False, "missing": ["结义的年份"], "reason": "原文未写年份", "web_query": "桃园结义 年份"},
        )
        llm.on("EvaluationWithWeb", {"enough": True, "missing": [], "reason": "足够"})
        llm.on(ANSWER, ANSWER_TEXT)
        settings = Settings(
            _env_file=None,
            es_url=es_url,
            es_index=alias,
            judgements_index=judgements,
            openai_base_url=llm.base_url,
            model_name="fake-model",
            bocha_api_key=API_KEY,
            bocha_api_url=bocha.api_url,
        )
        with serve(create_app(settings, embedder=embedder)) as url:
            yield url
    es.options(ignore_status=404).indices.delete(index=judgements)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def tab(browser: Browser, base_url: str) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda err: errors.append(str(err)))
    tab.goto(base_url)
    expect(tab.locator("#ready")).to_have_class("badge ok")
    expect(tab.locator("input[name=mode]:checked")).to_have_value("hybrid")
    yield tab
    context.close()
    assert errors == []  # no uncaught JavaScript error


def screenshot(tab: Page, name: str) -> Path:
    OUTPUT.mkdir(exist_ok=True)
    path = OUTPUT / name
    tab.screenshot(path=str(path), full_page=True)
    return path


def test_comparison_shows_both_columns(tab: Page, base_url: str) -> None:
    query = "桃园结义的三个人是谁"
    tab.fill("#question", query)
    tab.fill("#k", "6")
    tab.click("#compare-button")
    vector, hybrid = tab.locator("#vector-hits li.hit"), tab.locator("#hybrid-hits li.hit")
    expect(vector).to_have_count(6)
    expect(hybrid).to_have_count(6)
    # Every hybrid hit says where each list ranked it and what that list added, as the server did;
    # shared hits are highlighted in both columns.
    served = httpx.post(f"{base_url}/compare", json={"query": query, "k": 6, "modes": ["vector", "hybrid"]}).json()
    for kind in ("bm25", "vector", "bigram", "standard"):
        parts = [hit["explain"][kind] for hit in served["results"]["hybrid"]["hits"]]
        shown = tab.locator(f"#hybrid-hits li.hit .rank.{kind}").all_inner_texts()
        expected = [f"第{p['rank']}名 +{p['contribution']:.4f}" if p["rank"] else "未召回" for p in parts]
        assert all(want in text for text, want in zip(shown, expected, strict=True)), (kind, shown, expected)
    shared = tab.locator("#vector-hits li.overlap").evaluate_all("items => items.map(li => li.dataset.id)")
    assert shared, "the two top-6 lists share no passage"
    assert sorted(shared) == sorted(
        tab.locator("#hybrid-hits li.overlap").evaluate_all("items => items.map(li => li.dataset.id)")
    )
    expect(tab.locator("#compare-summary")).to_contain_text(f"重合 {len(shared)} 条")
    expect(tab.locator("#hybrid-hits li.hit").first).to_contain_text("第1章")
    screenshot(tab, "compare.png")


def test_hits_mark_their_matched_passages_and_name_their_expansions(tab: Page, base_url: str, alias: str) -> None:
    """The vector search's best passage is marked in each chunk; the query analysis names its alias
    expansion with its source, and each hit that holds the other name says so."""
    url = f"{base_url}/kbs/{alias}/aliases"
    before = httpx.get(url).json()["aliases"]
    pairs = [{"alias": a["alias"], "name": a["name"]} for a in before if (a["alias"], a["name"]) != ("玄德", "刘备")]
    assert httpx.put(url, json={"aliases": [*pairs, {"alias": "玄德", "name": "刘备"}]}).status_code == 200
    try:
        query = "刘备在哪里做官"
        tab.fill("#question", query)
        tab.fill("#k", "6")
        tab.click("#compare-button")
        expect(tab.locator("#compare-expansions")).to_have_text("别名扩展：刘备 → 玄德（管理员添加）")
        served = httpx.post(f"{base_url}/compare", json={"query": query, "k": 6, "modes": ["vector", "hybrid"]}).json()
        vector, hybrid = served["results"]["vector"]["hits"], served["results"]["hybrid"]["hits"]
        best = [hit["text"][hit["passages"][0]["start"] : hit["passages"][0]["end"]] for hit in vector]
        expect(tab.locator("#vector-hits li.hit")).to_have_count(len(vector))
        marked = tab.locator("#vector-hits li.hit").evaluate_all(
            "items => items.map(li => [...li.querySelectorAll('mark.passage.best')].map(m => m.textContent).join(''))"
        )
        assert marked == best
        holding = [hit["id"] for hit in hybrid if hit["expansions"]]
        assert holding and all("玄德" in hit["text"] for hit in hybrid if hit["expansions"])
        badges = tab.locator("#hybrid-hits li.hit:has(.rank.alias)")
        assert badges.evaluate_all("items => items.map(li => li.dataset.id)") == holding
        expect(badges.first.locator(".rank.alias")).to_have_text("别名 刘备→玄德")
        screenshot(tab, "compare-passages.png")
    finally:
        httpx.put(url, json={"aliases": [{"alias": a["alias"], "name": a["name"]} for a in before]})


def test_answer_streams_with_citations_and_timeline(tab: Page) -> None:
    tab.fill("#question", "桃园结义的是哪三个人？是哪一年？")
    tab.click("#ask-button")
    expect(tab.locator("#timeline li.total")).to_be_visible(timeout=60_000)
    expect(tab.locator("#answer")).to_have_text(ANSWER_TEXT)
    expect(tab.locator("#answer-mode")).to_have_text("大模型回答")
    # [1] links to a local chapter passage, [9] to the web page.
    expect(tab.locator("#answer a.cite").first).to_have_attribute("href", "#cite-1")
    expect(tab.locator("#cite-1")).to_contain_text("第1章")
    expect(tab.locator("#cite-9 a")).to_have_attribute("href", "https://example.org/taoyuan")
    steps = tab.locator("#timeline li[data-node]").evaluate_all("items => items.map(li => li.dataset.node)")
    assert steps == [*LOCAL_PATH[:-1], "web_search", "evaluate", "generate"]
    expect(tab.locator("#timeline li.missing")).to_contain_text("缺少：结义的年份")
    expect(tab.locator("#timeline li.enough")).to_contain_text("证据充分")
    expect(tab.locator("#timeline li[data-node=route_question]")).to_contain_text("复杂问题")
    expect(tab.locator("#timeline li[data-node=web_search] .ms")).to_contain_text("ms")
    screenshot(tab, "answer.png")


def test_api_docs_render_without_the_network(browser: Browser, base_url: str) -> None:
    """Swagger UI comes from the app: with every other host blocked, it still renders the API."""
    context = browser.new_context(locale="zh-CN")
    outside: list[str] = []

    def only_the_app(route: Route) -> None:
        if route.request.url.startswith(base_url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_the_app)
    tab = context.new_page()
    tab.goto(f"{base_url}/docs")
    expect(tab.locator(".swagger-ui .info .title")).to_contain_text("Agentic RAG on Elasticsearch")
    expect(tab.locator(".opblock-summary-path").first).to_be_visible()
    context.close()
    assert outside == []


@pytest.fixture(scope="module")
def extractive_url(es_url: str, alias: str, embedder: Embedder) -> Iterator[str]:
    """The same knowledge base served without any model: answers are quotes."""
    settings = Settings(_env_file=None, es_url=es_url, es_index=alias)  # the session's own judgements index
    with serve(create_app(settings, embedder=embedder)) as url:
        yield url


@contextmanager
def asked(browser: Browser, url: str, question: str) -> Iterator[Page]:
    """A fresh tab on the page at `url` that has asked `question`."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
    tab = context.new_page()
    tab.goto(url)
    tab.fill("#question", question)
    tab.click("#ask-button")
    yield tab
    context.close()


def test_without_a_model_the_page_marks_the_answer_extractive(browser: Browser, extractive_url: str) -> None:
    with asked(browser, extractive_url, "张角兄弟三人分别叫什么名字？") as tab:
        expect(tab.locator("#model-state")).to_have_text("大模型：未连接：未配置大模型，回答为原文摘录")
        expect(tab.locator("#timeline li.total")).to_be_visible(timeout=60_000)
        expect(tab.locator("#answer-mode")).to_have_text("抽取式回答 · 原文摘录，未使用大模型")
        expect(tab.locator("#answer")).to_contain_text("时巨鹿郡有兄弟三人，一名张角，一名张宝，一名张梁。")
        expect(tab.locator("#answer a.cite").first).to_have_attribute("href", "#cite-1")
        expect(tab.locator("#cite-1")).to_contain_text("第1章")
        expect(tab.locator("#timeline li[data-node=select_evidence]")).to_contain_text("[extractive]")
        screenshot(tab, "answer-extractive.png")


@pytest.fixture(scope="module")
def reasoning_url(es_url: str, alias: str, embedder: Embedder) -> Iterator[str]:
    """The same knowledge base; the model reasons inline (deepseek-r1 on Ollama: no tools, <think> in the content)."""
    with FakeChatServer(HABITS["think_inline"]) as llm:
        llm.on("RouteDecision", {"strategy": "simple", "reason": "常识"}).on(ANSWER, "一年有四个季节。")
        settings = Settings(
            _env_file=None, es_url=es_url, es_index=alias, openai_base_url=llm.base_url, model_name="r1"
        )
        with serve(create_app(settings, embedder=embedder)) as url:
            yield url


def test_the_reasoning_is_shown_folded_and_never_in_the_answer(browser: Browser, reasoning_url: str) -> None:
    with asked(browser, reasoning_url, "一年有几个季节？") as tab:
        expect(tab.locator("#timeline li.total")).to_be_visible(timeout=60_000)  # the run has ended, as above
        expect(tab.locator("#answer")).to_have_text("一年有四个季节。")
        box = tab.locator("#reasoning-box")
        expect(box.locator("summary")).to_have_text("思考过程")
        expect(box).not_to_have_attribute("open", "")  # folded
        expect(tab.locator("#reasoning")).to_have_text(HABITS["think_inline"].reasoning_text)
        expect(tab.locator("#reasoning")).to_be_hidden()
        box.locator("summary").click()
        expect(tab.locator("#reasoning")).to_be_visible()
        screenshot(tab, "answer-reasoning.png")
