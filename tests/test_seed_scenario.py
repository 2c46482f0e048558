"""The seed articles' example (tests/seed_scenario.py), run by the agentic workflow (the fake
OpenAI-compatible server plays the model: tidy, and once per habit of real servers), and by the
extractive workflow (no model). Bocha is the fake Bocha server; Elasticsearch is real.
"""

import asyncio
from collections.abc import Iterator

import pytest
from elasticsearch import Elasticsearch

from core.embeddings import Embedder
from retrieval import extractive
from service.graph import QueryOptions, QueryResult, WorkflowDeps, prompts, run_query
from tests.conftest import knowledge_base
from tests.fakes.bocha_server import FakeBochaServer
from tests.fakes.habits import HABITS, STRATEGY
from tests.fakes.openai_server import ANSWER, FakeChatServer
from tests.seed_scenario import (
    AGENTIC_QUESTION,
    CORPUS,
    MODEL_CALLS,
    SCRIPTED_ANSWER,
    SUBS,
    WEB_PAGE,
    WEB_QUERY,
    WEB_URL,
    deps_for,
    run_habit,
    script_model,
)
from tests.test_extractive import assert_only_quotes
from tests.test_workflow import SEED_PATH


@pytest.fixture(scope="module")
def corpus(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    with knowledge_base(es, embedder, CORPUS, "test-seed-scenario") as alias:
        yield alias


@pytest.fixture
def bocha() -> Iterator[FakeBochaServer]:
    with FakeBochaServer([WEB_PAGE]) as server:
        yield server


def ask(deps: WorkflowDeps, question: str) -> QueryResult:
    return asyncio.run(run_query(deps, question, QueryOptions(k=3)))


def test_seed_scenario_with_the_model(es, embedder, corpus, bocha, index_name) -> None:
    with script_model(FakeChatServer()) as chat:
        deps = deps_for(
            es, embedder, corpus, bocha, index_name("test-judgements"), openai_base_url=chat.base_url, model_name="m"
        )
        result = ask(deps, AGENTIC_QUESTION)

    assert result.answer_mode == "llm" and result.sub_questions == SUBS
    assert [s.node for s in result.trace] == SEED_PATH
    assert chat.names() == MODEL_CALLS
    assert [r.body["query"] for r in bocha.requests] == [WEB_QUERY]  # one search, the evaluator's query
    first, second = (c.body for c in chat.calls("Evaluation") + chat.calls("EvaluationWithWeb"))
    assert "由林晚舟于二〇一五年创办" in first["messages"][-1]["content"]  # the first hop came from the corpus
    assert second["messages"][0]["content"] == prompts.EVALUATE_WITH_WEB_SYSTEM
    assert "web_query" not in second["tools"][0]["function"]["parameters"]["properties"]
    assert "江南农业大学" in second["messages"][-1]["content"]
    assert [(e.enough, e.with_web) for e in result.evaluations] == [(False, False), (True, True)]
    kinds = {(c.number, c.kind, c.url) for c in result.citations}
    assert (1, "local", None) in kinds and (4, "web", WEB_URL) in kinds
    assert result.citations[0].title == "青岚镇志·茶事"
    assert WEB_URL in result.answer and prompts.UNCONFIRMED not in result.answer


@pytest.mark.parametrize("habit", list(HABITS))
def test_seed_scenario_with_every_habit_of_real_servers(es, embedder, corpus, index_name, habit) -> None:
    """Each habit's server gives the tidy server's run: decomposed, verdicts from the model, one web
    search, the answer exactly as scripted (not a character of reasoning, streamed or final)."""
    run = run_habit(es, embedder, corpus, habit, index_name("test-judgements"))
    result = run.first.result

    assert result.sub_questions == SUBS and [s.node for s in result.trace] == SEED_PATH
    assert [(e.enough, e.with_web, e.source) for e in result.evaluations] == [
        (False, False, "model"),
        (True, True, "model"),
    ]
    assert run.web_queries == [WEB_QUERY]  # one search over both questions (the second is answered from caches)
    assert result.answer == run.first.streamed == SCRIPTED_ANSWER and run.leaked == 0
    assert {(c.number, c.kind, c.url) for c in result.citations} == {(1, "local", None), (4, "web", WEB_URL)}
    assert run.strategy == STRATEGY[habit]
    repeats = 2 if HABITS[habit].invalid_first else 1  # a bad output is asked for once more
    assert run.accepted == [n for n in MODEL_CALLS for _ in range(1 if n == ANSWER else repeats)]
    thought = HABITS[habit].reasoning_text
    if HABITS[habit].reasoning:
        assert run.first.reasoning_events.strip() == result.reasoning == thought  # the `reasoning` events and field
    else:
        assert run.first.reasoning_events == result.reasoning == ""
    assert run.refused_again == 0  # the strategy was remembered: the second question sends nothing refused
    assert run.second.result.answer == SCRIPTED_ANSWER


def test_seed_scenario_without_a_model(es, embedder, corpus, bocha, index_name) -> None:
    question = "青岚镇云雾茶社是谁创办的？另外，林晚舟毕业于哪所大学？请给出来源链接。"
    deps = deps_for(
        es,
        embedder,
        corpus,
        bocha,
        index_name("test-judgements"),
        extractive_min_similarity=0.8,
        extractive_min_coverage=0.6,
    )
    result = ask(deps, question)

    parts = ["青岚镇云雾茶社是谁创办的", "林晚舟毕业于哪所大学", "请给出来源链接"]
    assert (result.answer_mode, result.llm_calls, result.sub_questions) == ("extractive", 0, parts)
    assert [s.node for s in result.trace] == [
        "split_question",
        "retrieve",
        "retrieve",
        "retrieve",
        "select_evidence",
        "web_search",
        "select_evidence",
        "quote_answer",
    ]
    local, after_web = result.evaluations
    assert (local.enough, local.missing, local.source) == (False, parts[1:], "extractive")
    assert [r.body["query"] for r in bocha.requests] == ["林晚舟毕业于哪所大学"]  # once, without the link request
    assert (after_web.enough, after_web.with_web) == (True, True)
    lines = result.answer.split("\n")
    assert lines[0] == extractive.HEADER and lines[1] == f"1. {parts[0]}"
    assert lines[2].startswith("「青岚镇的云雾茶社由林晚舟于二〇一五年创办。") and lines[2].endswith("[1]")
    assert f"「林晚舟，茶人，2009年毕业于江南农业大学茶学系，后回到家乡青岚镇创办云雾茶社。」[2]（{WEB_URL}）" in lines
    assert f"「林晚舟 - 示例百科」{WEB_URL}[2]" in lines  # the link request, answered by the web result
    assert extractive.UNCONFIRMED not in result.answer
    assert [(c.number, c.kind, c.url) for c in result.citations] == [(1, "local", None), (2, "web", WEB_URL)]
    assert_only_quotes(result, {0: "\n".join(d.text for d in CORPUS)})
