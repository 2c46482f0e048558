"""The page's knowledge bases in headless Chromium: the selector (only the key's bases), an upload
with its progress bar until the job is done, the uploaded document searchable on the chosen base,
its deletion from the document list, and after a reload the stored key, base and unfinished job."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch
from playwright.sync_api import Browser, Page, expect, sync_playwright

from core.config import Settings
from core.embeddings import Embedder
from core.kbs import create_kb, delete_kb
from service.app import create_app
from service.jobs.store import Job, JobStore, new_job_id
from tests.conftest import knowledge_base
from tests.protocols import write_keys_file
from tests.serving import serve
from tests.test_access import MED_DOCS
from tests.test_aliases import DOCUMENTS as ALIAS_DOCUMENTS
from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, screenshot

pytestmark = pytest.mark.browser

KEY = "page-key"
UPLOADED = "赤壁之战：周瑜用黄盖诈降之计，以火攻大破曹操水军。"


@pytest.fixture(scope="module")
def page_url(
    es: Elasticsearch, es_url: str, embedder: Embedder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, str]]:
    """The service whose key reads one base and writes another (empty, made by `POST /kbs`'s code)."""
    with knowledge_base(es, embedder, MED_DOCS[:1], "test-page-read") as readable:
        writable = f"{readable}-uploads"
        create_kb(es, writable, embedder, chunk_size=500, chunk_overlap=50)
        keys = write_keys_file([{"name": "editor", "key": KEY, "kbs": {readable: "read", writable: "write"}}])
        spool = tmp_path_factory.mktemp("spool")
        settings = Settings(
            _env_file=None,
            es_url=es_url,
            es_index=readable,
            keys_file=keys,
            upload_spool=str(spool),
            jobs_index=f"{readable}-jobs",
        )
        try:
            with serve(create_app(settings, embedder=embedder)) as url:
                yield url, readable, writable
        finally:
            delete_kb(es, writable)
            es.options(ignore_status=404).indices.delete(index=f"{readable}-jobs")


def open_with_key(browser: Browser, url: str) -> tuple[Page, list[str]]:
    """The page with `KEY` typed into its settings, and the list its script errors go to."""
    tab = browser.new_page(locale="zh-CN")
    errors: list[str] = []
    tab.on("pageerror", lambda err: errors.append(str(err)))
    tab.goto(url)
    tab.click("#ask summary")
    tab.fill("#api-key", KEY)
    tab.dispatch_event("#api-key", "change")
    return tab, errors


def test_select_a_base_upload_follow_the_job_search_and_delete(
    es: Elasticsearch, page_url: tuple[str, str, str], tmp_path: Path
) -> None:
    url, readable, writable = page_url
    document = tmp_path / "赤壁.md"
    document.write_text(f"# 赤壁\n\n{UPLOADED}\n", encoding="utf-8")
    with sync_playwright() as playwright:
        browser: Browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        tab, errors = open_with_key(browser, url)
        options = tab.locator("#kb-select option")
        expect(options).to_have_count(2)  # the key's two bases, no other base of the cluster
        assert sorted(options.evaluate_all("os => os.map(o => o.value)")) == sorted([readable, writable])
        expect(tab.locator("#kb-select")).to_have_value(readable)  # the default base first

        tab.select_option("#kb-select", writable)
        tab.click("#documents-section summary")
        tab.set_input_files("#upload-files", str(document))
        tab.click("#upload-button")
        expect(tab.locator("#upload-status")).to_contain_text("上传已完成", timeout=120_000)
        assert tab.locator("#upload-progress").evaluate("bar => bar.value") == 1
        expect(tab.locator("#documents li")).to_have_count(1)
        expect(tab.locator("#documents li")).to_contain_text("赤壁.md")

        tab.fill("#question", "黄盖诈降")
        tab.click("#compare-button")
        expect(tab.locator("#hybrid-hits li.hit").first).to_contain_text("黄盖诈降")
        screenshot(tab, "kbs.png")

        tab.on("dialog", lambda dialog: dialog.accept())
        tab.click("#documents li .delete-document")
        expect(tab.locator("#upload-status")).to_contain_text("已删除")
        expect(tab.locator("#documents li")).to_have_count(0)

        # A reload finds the stored key and base, and follows the base's unfinished upload again
        # (a job record no runner will pick up: it stays `running`).
        unfinished = Job(id=new_job_id(), kind="upload", kb=writable, owner="editor", state="running")
        JobStore(es, f"{readable}-jobs").create(unfinished)
        es.indices.refresh(index=f"{readable}-jobs")
        tab.reload()
        expect(tab.locator("#kb-select option")).to_have_count(2)
        expect(tab.locator("#kb-select")).to_have_value(writable)
        expect(tab.locator("#upload-status")).to_contain_text("上传正在索引")
        browser.close()
        assert errors == []


def test_an_admin_removes_adds_and_restores_aliases_and_a_reader_sees_none(
    es: Elasticsearch, es_url: str, embedder: Embedder
) -> None:
    with knowledge_base(es, embedder, ALIAS_DOCUMENTS, "test-page-aliases", "classical-novel") as kb:
        keys = write_keys_file(
            [
                {"name": "admin", "key": KEY, "kbs": {kb: "admin"}},
                {"name": "reader", "key": "page-reader", "kbs": {kb: "read"}},
            ]
        )
        settings = Settings(_env_file=None, es_url=es_url, es_index=kb, keys_file=keys, jobs_index=f"{kb}-jobs")
        with serve(create_app(settings, embedder=embedder)) as url, sync_playwright() as playwright:
            browser: Browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            tab, errors = open_with_key(browser, url)
            expect(tab.locator("#kb-select option")).to_have_count(1)
            tab.click("#aliases-section summary")
            mined = tab.locator("#aliases li", has_text="玄德 → 刘备")
            expect(mined).to_contain_text("字玄德")  # the sentence it was found in
            mined.locator(".remove-alias").click()
            expect(tab.locator("#aliases li[data-origin=removed]", has_text="玄德 → 刘备")).to_have_count(1)
            tab.fill("#alias-new", "皇叔")
            tab.fill("#alias-name", "刘备")
            tab.click("#alias-add button[type=submit]")
            expect(tab.locator("#aliases li[data-origin=admin]", has_text="皇叔 → 刘备")).to_have_count(1)
            tab.locator("#aliases li", has_text="玄德 → 刘备").locator(".restore-alias").click()
            expect(tab.locator("#aliases li[data-origin=mined]", has_text="玄德 → 刘备")).to_have_count(1)
            screenshot(tab, "aliases.png")

            tab.fill("#api-key", "page-reader")
            tab.dispatch_event("#api-key", "change")
            tab.click("#aliases-section summary")  # closed, then opened again: read with the reader's key
            tab.click("#aliases-section summary")
            expect(tab.locator("#aliases-status")).to_contain_text("仅知识库管理员")
            expect(tab.locator("#aliases li")).to_have_count(0)
            browser.close()
        es.options(ignore_status=404).indices.delete(index=f"{kb}-jobs")
        assert errors == []
