"""Structured output on any OpenAI-compatible endpoint (service/structured.py, service/llm.py) and
reasoning kept out of answers (service/reasoning.py), through the real client and fake servers."""

import asyncio
import logging
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import SecretStr

from core.config import Settings
from service.graph.nodes import stream_answer
from service.graph.prompts import OUTPUT_FORMAT
from service.graph.schemas import Evaluation, RouteDecision
from service.llm.client import ChatModel, ask_structured, build_llms
from service.llm.reasoning import ReasoningStream, split_reasoning
from service.llm.structured import OutputError, parse_output
from tests.fakes.habits import HABITS
from tests.fakes.openai_server import ANSWER, FakeChatServer, Habit

ROUTE = {"strategy": "complex", "reason": "要查资料"}
MESSAGES = [SystemMessage("你是路由器。"), HumanMessage("问题：刘备在哪里结义？")]


def judge_for(server: FakeChatServer, **overrides: Any) -> ChatModel:
    settings = Settings(
        _env_file=None, openai_base_url=server.base_url, openai_api_key=SecretStr("k"), model_name="m", **overrides
    )
    judge, _ = build_llms(settings)
    assert judge is not None
    return judge


def ask(judge: ChatModel, max_calls: int = 2) -> Any:
    return asyncio.run(ask_structured(judge, RouteDecision, MESSAGES, OUTPUT_FORMAT, max_calls=max_calls))


@pytest.mark.parametrize(
    "text",
    [
        '{"strategy": "complex", "reason": "要查资料"}',
        '好的，结果如下：\n```json\n{"strategy": "complex", "reason": "要查资料"}\n```\n希望有帮助。',
        '<think>用户问结义地点，{这要查书}。</think>\n\n{"strategy": "complex", "reason": "要查资料"}',
        '先想一想 {草稿}\n</think>\n{"strategy": "complex", "reason": "要查资料"}',
        '结果是 {"strategy": "complex", "reason": "要查资料"} 。',
    ],
    ids=["bare", "fenced-with-preamble", "think-block", "lone-close", "inline-preamble"],
)
def test_the_json_object_is_found_whatever_surrounds_it(text) -> None:
    assert parse_output(text, RouteDecision) == RouteDecision(**ROUTE)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "输出为空"),
        ("我认为这是一个复杂问题。", "没有完整的 JSON 对象"),
        ('{"strategy": "complex"', "没有完整的 JSON 对象"),
        ('{"strategy": "hard"}', "strategy: Input should be 'simple' or 'complex'"),
        ("<think>只想不答</think>", "输出为空"),
    ],
)
def test_an_output_the_schema_rejects_says_why(text, why) -> None:
    with pytest.raises(OutputError, match=why):
        parse_output(text, RouteDecision)


def test_reasoning_is_split_from_a_whole_reply() -> None:
    assert split_reasoning("<think>想</think>\n答案") == ("答案", "想", "think_tags")
    assert split_reasoning("想\n</think>\n答案") == ("答案", "想\n", "lone_close")
    assert split_reasoning("答案 3<4") == ("答案 3<4", "", None)  # a lone "<" is not a tag


def stream_in(pieces: list[str], lone_close: bool = False) -> tuple[ReasoningStream, str, str]:
    """(the stream, answer pieces joined, reasoning pieces joined) as they came out."""
    stream = ReasoningStream(lone_close=lone_close)
    out = [p for piece in pieces for p in stream.feed(piece)] + stream.close()
    return stream, "".join(t for k, t in out if k == "answer"), "".join(t for k, t in out if k == "reasoning")


def test_a_think_block_is_held_back_however_the_stream_cuts_its_tags() -> None:
    text = "<think>先查资料[1]，再想。</think>\n\n刘备在桃园结义[1]。"
    for size in range(1, len(text) + 1):
        pieces = [text[i : i + size] for i in range(0, len(text), size)]
        stream, answer, reasoning = stream_in(pieces)
        assert (answer, reasoning, stream.answer) == ("刘备在桃园结义[1]。", "先查资料[1]，再想。", answer), size


def test_a_model_known_to_close_only_is_held_back_until_its_close_tag() -> None:
    text = "用户问结义地点。\n</think>\n\n刘备在桃园结义。"
    for size in (1, 2, 5, 40):
        pieces = [text[i : i + size] for i in range(0, len(text), size)]
        _, answer, reasoning = stream_in(pieces, lone_close=True)
        assert (answer, reasoning.strip()) == ("刘备在桃园结义。", "用户问结义地点。"), size
    # The same model answering without reasoning: everything held is the answer, released at the end.
    assert stream_in(["刘备在", "桃园结义。"], lone_close=True)[1:] == ("刘备在桃园结义。", "")


def test_an_unexpected_close_tag_moves_what_was_streamed_to_the_reasoning_totals() -> None:
    stream, streamed, _ = stream_in(["用户问结义", "地点。</thi", "nk>刘备在桃园结义。"])
    assert streamed == "用户问结义地点。刘备在桃园结义。"  # already sent, before the tag said otherwise
    assert (stream.answer, stream.reasoning, stream.form) == ("刘备在桃园结义。", "用户问结义地点。", "lone_close")


def test_each_strategy_sends_its_own_request() -> None:
    with FakeChatServer() as server:
        server.on("RouteDecision", ROUTE)
        for strategy in ("json_schema", "json_object", "prompt"):
            assert ask(judge_for(server, structured_output=strategy)).value == RouteDecision(**ROUTE)
    json_schema, json_object, prompt = (r.body for r in server.requests)
    assert json_schema["response_format"]["json_schema"]["name"] == "RouteDecision"
    assert json_schema["response_format"]["json_schema"]["schema"] == RouteDecision.model_json_schema()
    assert json_schema["messages"][0]["content"] == "你是路由器。"  # the protocol carries the schema
    assert json_object["response_format"] == {"type": "json_object"} and "tools" not in json_object
    for body in (json_object, prompt):
        system = body["messages"][0]["content"]
        assert system.startswith("你是路由器。") and "JSON Schema" in system and '"title": "RouteDecision"' in system
    assert "response_format" not in prompt and "tools" not in prompt


def test_auto_moves_past_refused_strategies_once_and_remembers(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="service.llm.client")
    refuses_all = Habit("refuses_all", refuses=frozenset({"tools", "json_schema", "json_object"}))
    with FakeChatServer(refuses_all) as server:
        server.on("RouteDecision", ROUTE)
        judge = judge_for(server)
        first, second = ask(judge), ask(judge)
    assert first.value == second.value == RouteDecision(**ROUTE)
    assert [server.strategy(r.body) for r in server.requests] == [
        "tools",
        "json_schema",
        "json_object",
        "prompt",
    ] * 1 + ["prompt"]
    assert (first.calls, first.strategy, second.calls) == (1, "prompt", 1)  # a refusal is no model call
    assert judge.habits.strategy == "prompt" and set(judge.habits.refused) == {"tools", "json_schema", "json_object"}
    chosen = [r.getMessage() for r in caplog.records if "structured output by prompt" in r.getMessage()]
    assert len(chosen) == 1 and chosen[0].startswith("model m at http://127.0.0.1")


def test_a_fixed_strategy_is_never_left() -> None:
    with FakeChatServer(HABITS["no_tools"]) as server:
        server.on("RouteDecision", ROUTE)
        result = ask(judge_for(server, structured_output="tools"))
    assert result.value is None and (result.error or "").startswith("模型调用失败") and len(server.requests) == 1


def test_the_repair_shows_the_error_and_spends_a_call_of_the_budget() -> None:
    with FakeChatServer(HABITS["invalid_first"]) as server:
        server.on("RouteDecision", ROUTE)
        repaired = ask(judge_for(server))
        no_budget = ask(judge_for(server), max_calls=1)
    assert (repaired.value, repaired.calls) == (RouteDecision(**ROUTE), 2)
    repair = server.requests[1].body["messages"][-1]["content"]
    assert "没有完整的 JSON 对象" in repair and '{"strategy": "complex", "reason": "要查资料"' in repair
    assert (no_budget.value, no_budget.calls) == (None, 1) and "没有完整的 JSON 对象" in (no_budget.error or "")
    assert len(server.requests) == 3


@pytest.mark.parametrize("habit", ["think_inline", "lone_close", "reasoning_field"])
def test_judgement_reasoning_is_kept_apart_and_its_form_learned(habit) -> None:
    with FakeChatServer(HABITS[habit]) as server:
        server.on("Evaluation", {"enough": True, "missing": [], "reason": "够"})
        judge = judge_for(server)
        result = asyncio.run(ask_structured(judge, Evaluation, MESSAGES, OUTPUT_FORMAT))
    assert result.value == Evaluation(enough=True, reason="够")
    assert result.reasoning.strip() == HABITS[habit].reasoning_text
    assert judge.habits.reasoning == HABITS[habit].reasoning


@pytest.mark.parametrize("show", [True, False])
def test_show_reasoning_false_drops_the_reasoning_events_and_field(show) -> None:
    events: list[dict[str, Any]] = []
    with FakeChatServer(HABITS["reasoning_field"]) as server:
        server.on(ANSWER, "刘备在桃园结义[1]。")
        settings = Settings(_env_file=None, openai_base_url=server.base_url, model_name="m", show_reasoning=show)
        _, answer = build_llms(settings)
        text, reasoning = asyncio.run(stream_answer(answer, MESSAGES, events.append, settings))
    thought = HABITS["reasoning_field"].reasoning_text
    assert text == "".join(e["data"]["text"] for e in events if e["event"] == "token") == "刘备在桃园结义[1]。"
    shown = "".join(e["data"]["text"] for e in events if e["event"] == "reasoning")
    assert (reasoning, shown) == ((thought, thought) if show else ("", ""))
