"""The rating loop in headless Chromium: a reader asks (Enter sends, Shift+Enter is a new line), votes
the answer down and points at a passage; the admin, in the 评测 tab's review, picks the right
passage, sees the question added to the set, evaluates, sees what the stored choice changes
(with intervals) and undoes it. The page's icon is served."""

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright

from core.config import Settings
from core.embeddings import Embedder
from service.app import create_app
from tests.conftest import TEST_INDICES, knowledge_base
from tests.protocols import write_keys_file
from tests.serving import serve
from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, screenshot
from tests.test_evaluate import MEDICAL, question_lines

pytestmark = pytest.mark.browser

KEYS = {"admin": "page-admin", "alice": "page-alice"}
QUESTION = "高血糖的人饮食上要注意什么？"


@pytest.fixture(scope="module")
def page_url(es: Elasticsearch, es_url: str, embedder: Embedder) -> Iterator[tuple[str, str]]:
    jobs = f"test-page-feedback-jobs-{uuid.uuid4().hex[:8]}"
    with knowledge_base(es, embedder, MEDICAL.documents, "test-page-feedback") as kb:
        principals = [
            {"name": "admin", "key": KEYS["admin"], "kbs": {kb: "admin"}},
            {"name": "alice", "key": KEYS["alice"], "kbs": {kb: "read"}},
        ]
        settings = Settings(
            _env_file=None, es_url=es_url, jobs_index=jobs, es_index=kb, keys_file=write_keys_file(principals)
        )
        try:
            with serve(create_app(settings, embedder=embedder)) as url:
                yield url, kb
        finally:
            es.options(ignore_status=404).delete(index=TEST_INDICES["QUESTIONS_INDEX"], id=kb)
            es.options(ignore_status=404).indices.delete(index=jobs)


def _tab(browser: Browser, url: str, who: str, errors: list[str]) -> Page:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
    context.add_init_script(f"localStorage.setItem('rag-api-key', '{KEYS[who]}')")
    tab = context.new_page()
    tab.on("pageerror", lambda err: errors.append(str(err)))
    tab.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status == 404 else None)
    tab.goto(url)
    return tab


def admin_accepts_evaluates_and_undoes(admin_tab: Page, right: str, usable: int) -> None:
    """The admin sees the vote with its comment and passage, adds it to the question set, runs an
    evaluation that stores its fusion, and undoes that."""
    admin_tab.click("#tab-evaluation")
    item = admin_tab.locator("#review-list li.review-item").first
    expect(item).to_contain_text(QUESTION)
    expect(item).to_contain_text("备注：没有说主食怎么吃")
    expect(item).to_contain_text(f"提问者指出的段落：{right}")
    item.locator("button.pick-passage").click()
    item.locator(f'li[data-id="{right}"] button.pick').click()
    expect(admin_tab.locator("#review-status")).to_contain_text("已加入问题集")
    expect(admin_tab.locator("#eval-questions")).to_contain_text(f"可用 {usable + 1} 条")
    expect(admin_tab.locator("#review-list li.review-item").first).to_contain_text("已加入问题集")

    admin_tab.click("#eval-run")  # not a dry run: the chosen fusion is stored (pinned to the base)
    expect(admin_tab.locator("#eval-status")).to_have_text("评测完成", timeout=300_000)
    expect(admin_tab.locator("#eval-change")).to_be_visible()
    expect(admin_tab.locator("#eval-change-text")).to_contain_text("已生效")
    expect(admin_tab.locator("#eval-change-table tbody tr")).to_have_count(5)
    expect(admin_tab.locator("#eval-fusion-text")).to_contain_text("评测选出")
    screenshot(admin_tab, "feedback-review.png")
    admin_tab.click("#eval-undo")
    expect(admin_tab.locator("#eval-change-text")).to_contain_text("已撤销")
    expect(admin_tab.locator("#eval-fusion-text")).to_contain_text("服务默认")


def test_ask_vote_down_accept_evaluate_and_undo(page_url: tuple[str, str], es: Elasticsearch) -> None:
    url, kb = page_url
    es.indices.refresh(index=kb)
    right = es.search(index=kb, query={"term": {"doc_id": "hyperglycemia_diet"}}, size=1)["hits"]["hits"][0]["_id"]
    with httpx.Client(base_url=url, headers={"X-API-Key": KEYS["admin"]}, timeout=60) as admin:
        assert admin.put(f"/kbs/{kb}/questions", json={"text": "\n".join(question_lines())}).status_code == 200
        usable = admin.get(f"/kbs/{kb}/questions").json()["usable"]
        icon = admin.get("/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/x-icon"
        assert icon.content[:4] == b"\x00\x00\x01\x00"  # an ICO file
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        reader = _tab(browser, url, "alice", errors)
        expect(reader.locator("#kb-select")).to_have_value(kb)
        box = reader.locator("#question")
        box.fill("第一行")
        box.press("Shift+Enter")  # a new line, nothing sent
        box.press_sequentially("第二行")
        expect(box).to_have_value("第一行\n第二行")
        expect(reader.locator("#answer-section")).to_be_hidden()
        box.fill(QUESTION)
        box.press("Enter")  # sends
        expect(reader.locator("#timeline li.total")).to_be_visible(timeout=120_000)
        expect(reader.locator("#feedback")).to_be_visible()
        reader.fill("#feedback-comment", "没有说主食怎么吃")
        reader.click("#vote-down")
        expect(reader.locator("#vote-down")).to_have_attribute("aria-pressed", "true")
        expect(reader.locator("#passage-picker")).to_be_visible()
        expect(reader.locator("#passage-query")).to_have_value(QUESTION)
        reader.click("#passage-search")
        reader.locator(f'#passage-hits li[data-id="{right}"] button.pick').click()
        expect(reader.locator("#feedback-status")).to_contain_text("这段才是答案")
        screenshot(reader, "feedback-reader.png")

        admin_accepts_evaluates_and_undoes(_tab(browser, url, "admin", errors), right, usable)
        browser.close()
    assert errors == []
    with httpx.Client(base_url=url, headers={"X-API-Key": KEYS["admin"]}, timeout=60) as admin:
        answers: list[dict[str, Any]] = admin.get(f"/kbs/{kb}/answers?kind=down").json()["answers"]
        assert answers[0]["accepted"]["chunk_ids"] == [right] and answers[0]["owner"] == "alice"
        assert admin.get(f"/kbs/{kb}/fusion").status_code == 404  # undone: the default again


def test_the_evaluation_tab_opened_before_the_bases_arrive_follows_the_base(page_url: tuple[str, str]) -> None:
    """An admin who opens 评测 while the page still asks the server for its bases (held here) sees the
    base's panel and review once the list arrives, not 「（未选择）」 for good."""
    url, kb = page_url
    held: list[Route] = []
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
        context.add_init_script(f"localStorage.setItem('rag-api-key', '{KEYS['admin']}')")
        tab = context.new_page()
        tab.on("pageerror", lambda err: errors.append(str(err)))
        tab.route("**/kbs", lambda route: held.append(route))
        tab.goto(url)
        tab.wait_for_function("() => document.readyState === 'complete'")
        tab.click("#tab-evaluation")
        expect(tab.locator("#eval-base")).to_have_text("（未选择）")
        assert len(held) == 1
        held[0].continue_()
        expect(tab.locator("#eval-base")).to_have_text(kb)
        expect(tab.locator("#review-list li").first).to_be_visible()
        browser.close()
    assert errors == []
