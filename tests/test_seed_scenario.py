"""The seed articles' own example, on a small fictional corpus written for it (so no model or
search engine could know the answer): a multi-hop question whose first hop is in the knowledge
base and whose second needs the web, plus a request for source links.

Run twice: by the agentic workflow (the fake OpenAI-compatible server plays the model), and by
the extractive workflow (no model). Bocha is the fake Bocha server; Elasticsearch is real.
"""

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from elasticsearch import Elasticsearch
from pydantic import SecretStr

from core.config import Settings
from core.documents import Document
from core.embeddings import Embedder
from retrieval import extractive
from retrieval.retriever import build_retriever
from service.graph import QueryOptions, QueryResult, WorkflowDeps, build_deps, prompts, run_query
from tests.conftest import knowledge_base
from tests.fakes.bocha_server import API_KEY, FakeBochaServer, page
from tests.fakes.openai_server import ANSWER, FakeChatServer
from tests.test_extractive import assert_only_quotes
from tests.test_workflow import SEED_PATH

# 青岚镇 and everyone in it are invented for this test.
CORPUS = [
    Document(
        "qinglan-1",
        "青岚镇的云雾茶社由林晚舟于二〇一五年创办。茶社的招牌茶叫“雾里青”，用镇北白鹭山的春茶制成。"
        "每年清明前后，茶社会请镇上的老茶师沈砚秋主持开园仪式。",
        "青岚镇志.md",
        title="青岚镇志·茶事",
    ),
    Document(
        "qinglan-2",
        "白鹭山在青岚镇北面，山上有一座石拱桥，名叫望归桥，相传是清代乡绅周允和出资修建。",
        "青岚镇志.md",
        title="青岚镇志·山川",
    ),
    Document(
        "qinglan-3",
        "青岚镇的集市每逢农历初一、十五开市，镇东的渡口每天有三班渡船往返对岸的柳湾村。",
        "青岚镇志.md",
        title="青岚镇志·集市",
    ),
]
WEB_URL = "https://baike.example.org/item/林晚舟"
WEB_PAGE = page(
    "林晚舟 - 示例百科",
    WEB_URL,
    "林晚舟，茶人，2009年毕业于江南农业大学茶学系，后回到家乡青岚镇创办云雾茶社。",
    site="示例百科",
)
AGENTIC_QUESTION = "青岚镇云雾茶社的创办人是谁？这位创办人毕业于哪所大学？请给出来源链接。"
SUBS = ["青岚镇云雾茶社的创办人是谁？", "林晚舟毕业于哪所大学？"]


@pytest.fixture(scope="module")
def corpus(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    with knowledge_base(es, embedder, CORPUS, "test-seed-scenario") as alias:
        yield alias


@pytest.fixture
def bocha() -> Iterator[FakeBochaServer]:
    with FakeBochaServer([WEB_PAGE]) as server:
        yield server


def deps_for(
    es: Elasticsearch, embedder: Embedder, corpus: str, bocha: FakeBochaServer, judgements: str, **extra: Any
) -> WorkflowDeps:
    settings = Settings(
        _env_file=None,
        es_index=corpus,
        judgements_index=judgements,
        bocha_api_key=SecretStr(API_KEY),
        bocha_api_url=bocha.api_url,
        **extra,
    )
    return build_deps(settings, es, build_retriever(settings, es, embedder))


def ask(deps: WorkflowDeps, question: str) -> QueryResult:
    return asyncio.run(run_query(deps, question, QueryOptions(k=3)))


def test_seed_scenario_with_the_model(es, embedder, corpus, bocha, index_name) -> None:
    with FakeChatServer() as chat:
        chat.on("RouteDecision", {"strategy": "complex", "reason": "需要知识库和出处"})
        chat.on("Decomposition", {"sub_questions": SUBS, "reason": "先找创办人，再查其学历"})
        chat.on("PlanDecision", {"next_action": "retrieve", "reason": "还要查第二跳"})
        chat.on(
            "Evaluation",
            {
                "enough": False,
                "missing": ["林晚舟毕业的大学", "来源链接"],
                "reason": "资料[1]只写了林晚舟创办茶社",
                "web_query": "林晚舟 毕业 大学",
            },
        )
        chat.on("EvaluationWithWeb", {"enough": True, "missing": [], "reason": "网络资料补足了学历和链接"})
        chat.on(ANSWER, f"云雾茶社由林晚舟创办[1]；她毕业于江南农业大学[4]。来源链接：{WEB_URL}")
        deps = deps_for(
            es, embedder, corpus, bocha, index_name("test-judgements"), openai_base_url=chat.base_url, model_name="m"
        )
        result = ask(deps, AGENTIC_QUESTION)

    assert result.answer_mode == "llm" and result.sub_questions == SUBS
    assert [s.node for s in result.trace] == SEED_PATH
    assert chat.names() == ["RouteDecision", "Decomposition", "PlanDecision", "Evaluation", "EvaluationWithWeb", ANSWER]
    assert [r.body["query"] for r in bocha.requests] == ["林晚舟 毕业 大学"]  # one search, the evaluator's query
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
