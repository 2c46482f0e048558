"""The chat model as the reranker, against the fake OpenAI-compatible server in every habit the
workflow copes with (no tools, no JSON schema, `<think>`, a lone `</think>`, a reasoning field,
fences, a first invalid JSON): listwise over sliding windows, pointwise when it cannot keep a list."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings
from retrieval.rerank import Reranker, RerankFailure, RerankLimits
from retrieval.results import Hit
from service.llm.rerank import LlmScorer
from tests.conftest import subprocess_env
from tests.fakes.habits import HABITS
from tests.fakes.openai_server import FakeChatServer, prompt_text
from tests.fakes.rerank_server import API_KEY, FakeRerankServer

QUERY = "黄盖用了什么计策？"
# 14 candidates: two windows of 10 (from the bottom up, half a window apart) and then the top one.
TEXTS = [f"第{i}条资料：曹操与孙权的战事，第{i}段。" for i in range(14)]
TEXTS[11] = "第11条资料：黄盖献苦肉计，诈降曹操。"
TEXTS[6] = "第6条资料：黄盖率火船冲向曹营。"
_NUMBERED = re.compile(r"^\[(\d+)\] (.+)$", re.MULTILINE)


def relevance(text: str) -> float:
    """The known rule: 苦肉计 first, then 黄盖, then the rest by their number (lower first)."""
    number = int(re.search(r"第(\d+)条", text).group(1))  # type: ignore[union-attr]
    return 2 * ("苦肉计" in text) + ("黄盖" in text) - number / 100


def listwise(body: dict[str, Any]) -> dict[str, Any]:
    """A model that ranks its window by the rule: the numbers of the window's passages, best first."""
    shown = {int(n): text for n, text in _NUMBERED.findall(prompt_text(body))}
    return {"order": sorted(shown, key=lambda n: -relevance(shown[n]))}


def slow_listwise(body: dict[str, Any]) -> dict[str, Any]:
    time.sleep(1.5)
    return listwise(body)


def grade(body: dict[str, Any]) -> dict[str, Any]:
    text = prompt_text(body).rsplit("资料：\n", 1)[1]
    return {"score": round(min(10.0, max(0.0, 5 + 2 * relevance(text))))}


def settings_for(server: FakeChatServer) -> Settings:
    return Settings(_env_file=None, openai_base_url=server.base_url, model_name="fake-model", rerank_llm_window=10)


@pytest.mark.parametrize("habit", list(HABITS))
def test_listwise_reranking_in_every_habit(habit: str) -> None:
    with FakeChatServer(HABITS[habit]) as server:
        server.on("RerankOrder", listwise)
        scorer = LlmScorer(settings_for(server))
        scores = scorer.score(QUERY, TEXTS, 30)
        assert scorer.listwise and "RerankGrade" not in server.names()
    order = sorted(range(len(TEXTS)), key=lambda i: -scores[i])
    assert order[:2] == [11, 6]  # both climbed from the bottom windows to the top
    assert len(set(scores)) == len(TEXTS)
    windows = [r for r in server.requests if r not in server.refused and server.kind(r.body) == "RerankOrder"]
    assert len({len(_NUMBERED.findall(prompt_text(r.body))) for r in windows}) == 1  # windows of 10


def test_a_model_that_cannot_keep_a_list_is_graded_pointwise() -> None:
    with FakeChatServer() as server:
        server.on("RerankOrder", {"order": [3]})  # one number of ten: not a list
        server.on("RerankGrade", grade)
        scorer = LlmScorer(settings_for(server))
        first = scorer.score(QUERY, TEXTS[:6] + TEXTS[11:12], 30)
        assert not scorer.listwise and scorer.name.endswith("(pointwise)")
        server.requests.clear()
        second = scorer.score(QUERY, TEXTS[:6] + TEXTS[11:12], 30)
    assert first == second and max(range(7), key=lambda i: first[i]) == 6
    assert set(server.names()) == {"RerankGrade"}  # remembered: no list asked any more


def test_an_endpoint_failure_is_a_rerank_failure_and_the_stage_keeps_the_fused_order() -> None:
    with FakeChatServer() as server:
        server.on("RerankOrder", 400)
        scorer = LlmScorer(settings_for(server))
        with pytest.raises(RerankFailure) as failure:
            scorer.score(QUERY, TEXTS[:3], 30)
        assert failure.value.reason == "error" and scorer.listwise  # an outage is not a model habit
        limits = RerankLimits(30, 1.0, 5.0, 400, 3, 30.0)
        hits = [Hit(id=str(i), score=10.0 - i, text=text) for i, text in enumerate(TEXTS[:3])]
        kept, used = Reranker(scorer, limits).rerank(QUERY, hits, 3, 1.0)
    assert [hit.id for hit in kept] == ["0", "1", "2"] and used.warning and not used.applied


def test_a_slow_model_times_out_into_the_fused_order() -> None:
    with FakeChatServer() as server:
        server.on("RerankOrder", slow_listwise)
        limits = RerankLimits(30, 1.0, 0.5, 400, 3, 30.0)
        hits = [Hit(id=str(i), score=10.0 - i, text=text) for i, text in enumerate(TEXTS[10:13])]
        kept, used = Reranker(LlmScorer(settings_for(server)), limits).rerank(QUERY, hits, 3, 1.0)
    assert [hit.id for hit in kept] == ["0", "1", "2"] and used.warning and "超时" in used.warning


def check_command(tmp_path: Path, **env: str) -> tuple[int, list[dict[str, Any]]]:
    done = subprocess.run(
        [sys.executable, "-m", "service.llm", "check", "--json"],
        cwd=tmp_path,
        env=subprocess_env(LOG_LEVEL="ERROR", **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, json.loads(done.stdout or "[]")


@pytest.mark.parametrize("api", ["cohere", "tei", "dashscope"])
def test_the_check_command_probes_the_reranker(tmp_path: Path, api: str) -> None:
    """Shape, latency and one sanity ranking; a reranker that ranks wrong or fails is a failed check."""
    endpoint = {"RERANKER": "http", "RERANK_API": api, "RERANK_MODEL": "m", "RERANK_API_KEY": API_KEY}
    with FakeRerankServer(api, rule=lambda q, text: float("桃园" in text)) as server:
        status, [report] = check_command(tmp_path, RERANK_BASE_URL=server.base_url, **endpoint)
    assert status == 0 and report["roles"] == ["reranker"] and report["order"][0] == 1, report
    assert report["reranker"].startswith(f"{api} m at ") and report["ranking_ms"] >= 0
    with FakeRerankServer(api, rule=lambda q, text: float("曹操" in text)) as wrong:
        status, [report] = check_command(tmp_path, RERANK_BASE_URL=wrong.base_url, **endpoint)
    assert status == 1 and "ranked" in report["error"]
    with FakeRerankServer(api, 500) as failing:
        status, [report] = check_command(tmp_path, RERANK_BASE_URL=failing.base_url, **endpoint)
    assert status == 1 and report["error"] == "error: HTTP 500"
