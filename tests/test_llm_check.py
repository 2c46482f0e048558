"""`python -m service.llm check`: per configured model, against the habits' fake servers."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from core.config import Settings
from service.llm.check import check_models, render
from tests.conftest import subprocess_env
from tests.fakes.habits import HABITS, STRATEGY
from tests.fakes.openai_server import ANSWER, FakeChatServer

ROUTE = {"strategy": "complex", "reason": "要查资料"}


def scripted(server: FakeChatServer) -> FakeChatServer:
    return server.on("RouteDecision", ROUTE).on(ANSWER, "一年有四个季节。")


@pytest.mark.parametrize("habit", ["tidy", "no_tools", "think_inline", "lone_close", "reasoning_field", "fenced"])
def test_check_reports_strategy_reasoning_and_latency(habit) -> None:
    with scripted(FakeChatServer(HABITS[habit])) as server:
        settings = Settings(
            _env_file=None, openai_base_url=server.base_url, openai_api_key=SecretStr("k"), model_name="m"
        )
        [report] = asyncio.run(check_models(settings))
    assert report.ok and (report.model, report.roles, report.answers) == ("m", ["judge", "answer"], True)
    assert report.strategy == STRATEGY[habit]
    assert set(report.refused) == HABITS[habit].refuses
    assert report.reasoning == HABITS[habit].reasoning
    assert report.judgement_ms is not None and report.judgement_ms > 0
    # One streamed answer, the judgement that found the strategy (after refusals), the timed one.
    assert len(server.requests) == 3 + len(HABITS[habit].refuses)
    assert f"structured output: {STRATEGY[habit]}" in render([report])


def test_two_models_two_reports_and_a_model_that_does_not_answer() -> None:
    with FakeChatServer() as server:
        server.on("RouteDecision", ROUTE).on(ANSWER, lambda body: 404 if body["model"] == "big" else "四个。")
        settings = Settings(
            _env_file=None, openai_base_url=server.base_url, model_name="big", evaluator_model_name="small"
        )
        judge, answer = asyncio.run(check_models(settings))
    assert (judge.model, judge.roles, judge.ok) == ("small", ["judge"], True)
    assert (answer.model, answer.answers, answer.ok) == ("big", False, False) and "NotFound" in (answer.error or "")


def test_the_command_as_users_run_it(tmp_path: Path) -> None:
    with scripted(FakeChatServer(HABITS["think_inline"])) as server:
        done = subprocess.run(
            [sys.executable, "-m", "service.llm", "check", "--json"],
            cwd=tmp_path,
            env=subprocess_env(OPENAI_BASE_URL=server.base_url, MODEL_NAME="r1", LOG_LEVEL="WARNING"),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    [report] = json.loads(done.stdout)
    assert (report["strategy"], report["reasoning"], list(report["refused"])) == (
        "json_schema",
        "think_tags",
        ["tools"],
    )

    unconfigured = subprocess.run(
        [sys.executable, "-m", "service.llm", "check"],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
    )
    assert unconfigured.returncode == 2 and "MODEL_NAME" in unconfigured.stderr
