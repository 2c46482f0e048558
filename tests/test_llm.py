"""Model factories and structured output through the real langchain-openai client and a fake server."""

import asyncio
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from pydantic import SecretStr

from core.config import Settings
from service.graph.nodes import stream_answer
from service.graph.prompts import OUTPUT_FORMAT
from service.graph.schemas import Decomposition, Evaluation
from service.llm.client import LLMNotConfiguredError, ask_structured, build_llms
from tests.fakes.openai_server import ANSWER, FakeChatServer, Text


def settings_for(server: FakeChatServer, **overrides: Any) -> Settings:
    values: dict[str, Any] = dict(
        openai_base_url=server.base_url,
        openai_api_key=SecretStr("sk-test-secret"),
        model_name="big",
        evaluator_model_name="small",
        generation_temperature=0.7,
    )
    return Settings(_env_file=None, **{**values, **overrides})


def test_no_configuration_means_no_models_and_a_clear_error() -> None:
    assert build_llms(Settings(_env_file=None)) == (None, None)
    assert build_llms(Settings(_env_file=None, openai_base_url="http://127.0.0.1:1/v1")) == (
        None,
        None,
    )  # no MODEL_NAME
    message = str(LLMNotConfiguredError())
    assert all(name in message for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "MODEL_NAME"))


def test_judge_and_answer_models_from_settings() -> None:
    with FakeChatServer() as server:
        judge, answer = build_llms(settings_for(server))
        same_judge, _ = build_llms(settings_for(server, evaluator_model_name=None))
    assert judge is not None and answer is not None and same_judge is not None
    assert (judge.name, judge.client.temperature, answer.name, answer.client.temperature) == ("small", 0.0, "big", 0.7)
    assert same_judge.name == "big"  # EVALUATOR_MODEL_NAME defaults to MODEL_NAME
    assert judge.habits is not answer.habits  # two models, two sets of habits
    assert "sk-test-secret" not in repr(judge)


def test_structured_output_is_a_forced_tool_call() -> None:
    with FakeChatServer() as server:
        server.on(
            "Evaluation", {"enough": False, "missing": ["a", "b", "a", " ", *"cdefgh"], "reason": "r", "web_query": "q"}
        )
        judge, _ = build_llms(settings_for(server))
        result = asyncio.run(ask_structured(judge, Evaluation, [HumanMessage("问题")], OUTPUT_FORMAT))
    assert result.error is None and (result.calls, result.strategy) == (1, "tools")
    assert result.value == Evaluation(enough=False, missing=["a", "b", "c", "d", "e", "f"], reason="r", web_query="q")
    [request] = server.requests
    body = request.body
    assert request.headers["authorization"] == "Bearer sk-test-secret"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "Evaluation"}}
    assert body["tools"][0]["function"]["name"] == "Evaluation" and "response_format" not in body
    assert "parallel_tool_calls" not in body  # a parameter some OpenAI-compatible servers reject
    assert body["temperature"] == 0.0 and not body.get("stream")


@pytest.mark.parametrize(
    ("reply", "requests", "calls", "error"),
    [
        ('{"sub_questions": ["a"', 2, 2, "没有完整的 JSON 对象"),  # truncated JSON, asked for once more
        ({"sub_questions": [], "reason": "x"}, 2, 2, "sub_questions: List should have at least 1 item"),  # 1..8
        (Text("抱歉"), 1, 1, "未按要求"),  # no tool call at all (STRUCTURED_OUTPUT=tools: no other strategy)
        (500, 3, 1, "模型调用失败"),  # a 5xx after the retry policy's three attempts: one call
        (400, 1, 1, "模型调用失败"),  # a 4xx that names no feature is not a refusal, and is not retried
    ],
    ids=["truncated", "invalid", "no-tool-call", "http-500", "http-400"],
)
def test_bad_structured_output_is_a_result_not_a_crash(reply, requests, calls, error) -> None:
    with FakeChatServer() as server:
        server.on("Decomposition", reply)
        judge, _ = build_llms(settings_for(server, structured_output="tools"))
        result = asyncio.run(ask_structured(judge, Decomposition, [HumanMessage("问题")], OUTPUT_FORMAT))
    assert result.value is None and result.error is not None and error in result.error
    assert (len(server.requests), result.calls) == (requests, calls)
    assert server.names() == ["Decomposition"] * requests  # the same strategy every time


def test_answer_streams_over_sse_without_emoji() -> None:
    pieces: list[dict[str, Any]] = []
    with FakeChatServer() as server:
        server.on(ANSWER, "刘备😀在桃园结义✨[1]。")
        _, answer = build_llms(settings_for(server))
        text, reasoning = asyncio.run(
            stream_answer(answer, [HumanMessage("问题")], pieces.append, settings_for(server))
        )
    assert (text, reasoning) == ("刘备在桃园结义[1]。", "")
    assert len(pieces) >= 3 and "".join(p["data"]["text"] for p in pieces) == text
    assert server.requests[0].body["stream"] is True and server.requests[0].body["model"] == "big"
