"""The 评测 tab in headless Chromium: upload a question set (its bad lines listed), run the evaluation
with its progress bar, the table equal to the server's report, the plot, and a miss that opens the
comparison view of its question."""

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import Elasticsearch
from playwright.sync_api import Browser, Page, Response, expect, sync_playwright

from core.config import Settings
from core.documents import Document
from core.embeddings import Embedder
from service.app import create_app
from tests.conftest import TEST_INDICES, knowledge_base
from tests.serving import serve
from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, screenshot
from tests.test_evaluate import MEDICAL, question_lines

pytestmark = pytest.mark.browser


JOBS = f"test-page-eval-jobs-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def page_url(es: Elasticsearch, es_url: str, embedder: Embedder) -> Iterator[tuple[str, str]]:
    other = [Document(doc_id="note", text="高血压患者每天食盐不超过5克。", source="note")]
    with (
        knowledge_base(es, embedder, MEDICAL.documents, "test-page-eval") as medical,
        knowledge_base(es, embedder, other, "test-page-eval-other"),
    ):
        settings = Settings(_env_file=None, es_url=es_url, jobs_index=JOBS, es_index=medical)
        with serve(create_app(settings, embedder=embedder)) as url:
            yield url, medical
        es.options(ignore_status=404).delete(index=TEST_INDICES["QUESTIONS_INDEX"], id=medical)
        es.options(ignore_status=404).indices.delete(index=JOBS)


def check_report_shown(tab: Page, report: dict[str, Any]) -> None:
    """The table is the server's report, to the third decimal; the intervals, the chosen fusion, the
    plot and the misses are shown with it."""
    rows = tab.locator("#eval-table tbody tr")
    expect(rows).to_have_count(6)
    for i, mode in enumerate(("vector", "bm25", "bigram", "standard", "hybrid")):
        cells = rows.nth(i).locator("td").all_inner_texts()
        assert cells == [f"{report['test'][mode][m]:.3f}" for m in ("R@1", "R@5", "R@10", "MRR@10", "nDCG@10")]
    expect(tab.locator("#eval-intervals tbody tr")).to_have_count(4)
    expect(tab.locator("#eval-chosen")).to_contain_text(report["chosen"]["label"])
    expect(tab.locator("#eval-chosen")).to_contain_text("已保存")
    expect(tab.locator("#eval-fusion-text")).to_contain_text("评测选出")
    assert tab.locator("#eval-plot").evaluate("img => img.complete && img.naturalWidth") > 0
    misses = tab.locator("#eval-misses li")
    expect(misses).to_have_count(len(report["misses"]))
    # At 1280 px every results table stays inside its section, and the page does not scroll sideways.
    for table in tab.locator("#evaluation-results table.figures").all():
        inside = table.evaluate(
            "t => t.getBoundingClientRect().right <= t.closest('section').getBoundingClientRect().right"
        )
        assert inside, table.get_attribute("id")
    assert tab.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    screenshot(tab, "evaluation.png")


def test_upload_run_read_the_report_and_open_a_miss(page_url: tuple[str, str], tmp_path: Path) -> None:
    url, medical = page_url
    questions = tmp_path / "questions.jsonl"
    # Appended after the five bad lines: a question about one passage whose answer is said to be another,
    # so hybrid cannot rank it first and the misses list has an entry to open.
    wrong = {"id": "wrong", "question": "低血糖有哪些症状？", "doc_id": "hyperglycemia_diet", "split": "test"}
    questions.write_text("\n".join([*question_lines(), json.dumps(wrong, ensure_ascii=False)]) + "\n", "utf-8")
    statuses: list[dict[str, Any]] = []

    def record(response: Response) -> None:
        if "/evaluations/" in response.url and response.url.endswith(tuple("0123456789abcdef")):
            statuses.append(response.json())

    with sync_playwright() as playwright:
        browser: Browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        tab = browser.new_page(locale="zh-CN", viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        tab.on("pageerror", lambda err: errors.append(str(err)))
        tab.on("response", record)
        tab.goto(url)
        expect(tab.locator("#kb-select")).to_have_value(medical)
        tab.click("#tab-evaluation")
        expect(tab.locator("#evaluation-panel")).to_be_visible()
        expect(tab.locator("#ask")).to_be_hidden()
        expect(tab.locator("#eval-base")).to_have_text(medical)
        expect(tab.locator("#eval-questions")).to_have_text("这个知识库还没有问题集：按上面的三种办法之一得到一个")
        expect(tab.locator("#eval-fusion-text")).to_contain_text("服务默认")

        tab.set_input_files("#eval-file", str(questions))
        tab.click("#eval-upload")
        good = len(question_lines()) - 5 + 1
        expect(tab.locator("#eval-questions")).to_contain_text(f"可用 {good} 条")
        # The three wrong lines are listed; the two whose evidence is not in the base are only counted.
        expect(tab.locator("#eval-bad-lines li")).to_have_count(3)
        expect(tab.locator("#eval-bad-lines li").first).to_contain_text(f"第 {good} 行格式有误")
        expect(tab.locator("#eval-skipped")).to_contain_text("跳过 2 条")

        tab.click("#eval-run")
        expect(tab.locator("#eval-status")).to_have_text("评测完成", timeout=300_000)
        report = next(s for s in statuses if s["status"] == "done")["report"]
        assert any(s["status"] in ("queued", "running") for s in statuses)  # progress was shown on the way

        check_report_shown(tab, report)

        wrong_miss = tab.locator("#eval-misses li[data-id=wrong]")
        expect(wrong_miss).to_contain_text("低血糖有哪些症状？")
        wrong_miss.locator(".compare-link").click()
        expect(tab.locator("#ask")).to_be_visible()
        expect(tab.locator("#compare-section")).to_be_visible()
        assert tab.input_value("#question") == "低血糖有哪些症状？"
        expect(tab.locator("#hybrid-hits li.hit").first).to_contain_text("低血糖")

        tab.click("#tab-evaluation")
        tab.click("#eval-reset")
        expect(tab.locator("#eval-fusion-text")).to_contain_text("服务默认")
        browser.close()
    assert errors == [], json.dumps(errors, ensure_ascii=False)


def test_calibrate_the_base_and_go_back_to_the_defaults(page_url: tuple[str, str]) -> None:
    url, medical = page_url
    with sync_playwright() as playwright:
        browser: Browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        tab = browser.new_page(locale="zh-CN", viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        tab.on("pageerror", lambda err: errors.append(str(err)))
        tab.goto(url)
        expect(tab.locator("#kb-select")).to_have_value(medical)
        tab.click("#tab-evaluation")
        text = tab.locator("#eval-calibration-text")
        expect(text).to_have_text("拒答阈值：服务默认（未校准）")
        expect(tab.locator("#eval-calibration-reset")).to_be_hidden()
        tab.click("#eval-calibrate")
        expect(tab.locator("#eval-status")).to_contain_text("校准完成", timeout=300_000)
        # what was chosen, on what, and how it fared at the defaults and at the chosen values
        for said in ("拒答阈值（已校准）：相似度 ≥", "依据：", "默认值下平衡准确率", "校准后平衡准确率"):
            expect(text).to_contain_text(said)
        tab.reload()  # shown again from GET /kbs/{kb}
        tab.click("#tab-evaluation")
        expect(text).to_contain_text("依据：")
        tab.click("#eval-calibration-reset")
        expect(text).to_have_text("拒答阈值：服务默认（未校准）")
        browser.close()
    assert errors == [], json.dumps(errors, ensure_ascii=False)
