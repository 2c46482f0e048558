"""The answer workflows, wired with LangGraph, and their two entry points.

The agentic workflow (a model answers):

    START ─history?→ rewrite_question → route_question ─simple→ direct_answer → END
                                                      └complex→ decompose_question → retrieve ⇄ plan_next_step
        → evaluate ─enough, or nothing named missing, or no web allowed / left→ generate → END
             ↑   └not enough, something missing, web allowed and left → web_search
             └──────────── new web results ──────────────────────────────┘ (none or failure → generate)

The extractive workflow (no model: quotes only; `retrieval.extractive`):

    START → split_question → retrieve (once per part) → select_evidence ─enough / no web→ quote_answer → END
                                                             ↑        └missing parts, web allowed and left → web_search
                                                             └──── new web results ────────────┘ (none → quote_answer)

`ANSWER_MODE` picks one per query (`choose_mode`). Nodes decide (and enforce the limits) and
write their decision as a fact (`retrieve_more`, `search_web`, `web_found`); each graph has its
own routers below, which turn those facts into that graph's node names (typed `Literal`s, from
which LangGraph reads the edges' destinations).
"""

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Literal, cast

import openai
from elastic_transport import TransportError as ESTransportError
from elasticsearch import ApiError, Elasticsearch
from langchain_core.callbacks import UsageMetadataCallbackHandler
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from core.config import Settings
from core.failures import log_failure
from core.store import EmbedderMismatchError, IndexNotFoundError, SearchError
from retrieval.retriever import Retriever
from service.graph import extractive_nodes, nodes
from service.graph.memory import JudgementMemory
from service.graph.schemas import AnswerMode, ClientContext, QueryOptions, QueryResult, TokenUsage, WorkflowEvent
from service.graph.state import RunContext, WorkflowDeps, WorkflowState, WorkflowTools
from service.llm.client import LLMNotConfiguredError, LLMProbe, build_llms
from service.websearch import build_web_search

logger = logging.getLogger(__name__)


def build_deps(settings: Settings, es: Elasticsearch, retriever: Retriever) -> WorkflowTools:
    """Models (and their probe), web search (None without BOCHA_API_KEY) and judgement memory from settings."""
    judge, answer = build_llms(settings)
    return WorkflowTools(
        retriever=retriever,
        settings=settings,
        judge_llm=judge,
        answer_llm=answer,
        web_search=build_web_search(settings),
        judgements=JudgementMemory.from_settings(es, settings),
        probe=LLMProbe(settings) if settings.llm_configured else None,
    )


def ensure_answerable(deps: WorkflowDeps) -> None:
    """`ANSWER_MODE=llm` without a configured model: `LLMNotConfiguredError` (a 503 naming the settings)."""
    if deps.settings.answer_mode == "llm" and (deps.judge_llm is None or deps.answer_llm is None):
        raise LLMNotConfiguredError()


async def choose_mode(deps: WorkflowDeps) -> tuple[AnswerMode, str]:
    """(mode, why): `ANSWER_MODE=auto` answers with the model when it is configured and reachable."""
    ensure_answerable(deps)
    wanted = deps.settings.answer_mode
    if wanted == "extractive":
        return "extractive", "ANSWER_MODE=extractive：只摘录原文，不使用大模型"
    if deps.judge_llm is None or deps.answer_llm is None:
        return "extractive", "未配置大模型（OPENAI_BASE_URL / OPENAI_API_KEY、MODEL_NAME），改用抽取式回答"
    if wanted == "llm":
        return "llm", "ANSWER_MODE=llm：由大模型回答"
    why_not = await deps.probe.unavailable() if deps.probe is not None else None
    if why_not:
        return "extractive", f"{why_not}，改用抽取式回答"
    return "llm", "已配置大模型且可以连接，由大模型回答"


Workflow = CompiledStateGraph[WorkflowState, RunContext, WorkflowState, WorkflowState]


# Routers of the agentic graph.
def _start(state: WorkflowState) -> Literal["rewrite_question", "route_question"]:
    return "rewrite_question" if state.get("history") else "route_question"


def _after_route(state: WorkflowState) -> Literal["direct_answer", "decompose_question"]:
    return "direct_answer" if state["route"] == "simple" else "decompose_question"


def _after_plan(state: WorkflowState) -> Literal["retrieve", "evaluate"]:
    return "retrieve" if state["retrieve_more"] else "evaluate"


def _after_evaluate(state: WorkflowState) -> Literal["web_search", "generate"]:
    return "web_search" if state["search_web"] else "generate"


def _after_web(state: WorkflowState) -> Literal["evaluate", "generate"]:
    return "evaluate" if state["web_found"] else "generate"


def build_graph() -> Workflow:
    graph = StateGraph(WorkflowState, context_schema=RunContext)
    graph.add_node("rewrite_question", nodes.rewrite_question)
    graph.add_node("route_question", nodes.route_question)
    graph.add_node("direct_answer", nodes.direct_answer)
    graph.add_node("decompose_question", nodes.decompose_question)
    graph.add_node("retrieve", nodes.retrieve)
    graph.add_node("plan_next_step", nodes.plan_next_step)
    graph.add_node("evaluate", nodes.evaluate)
    graph.add_node("web_search", nodes.web_search)
    graph.add_node("generate", nodes.generate)

    graph.add_conditional_edges(START, _start)
    graph.add_edge("rewrite_question", "route_question")
    graph.add_conditional_edges("route_question", _after_route)
    graph.add_edge("direct_answer", END)
    graph.add_edge("decompose_question", "retrieve")
    graph.add_edge("retrieve", "plan_next_step")
    graph.add_conditional_edges("plan_next_step", _after_plan)
    graph.add_conditional_edges("evaluate", _after_evaluate)
    graph.add_conditional_edges("web_search", _after_web)
    graph.add_edge("generate", END)
    return graph.compile()


# Routers of the extractive graph.
def _next_part(state: WorkflowState) -> Literal["retrieve", "select_evidence"]:
    """Retrieve for every part (the parts were capped at `max_retrievals` when split)."""
    return "retrieve" if state.get("cursor", 0) < len(state["sub_questions"]) else "select_evidence"


def _after_selection(state: WorkflowState) -> Literal["web_search", "quote_answer"]:
    return "web_search" if state["search_web"] else "quote_answer"


def _after_web_quotes(state: WorkflowState) -> Literal["select_evidence", "quote_answer"]:
    return "select_evidence" if state["web_found"] else "quote_answer"


def build_extractive_graph() -> Workflow:
    graph = StateGraph(WorkflowState, context_schema=RunContext)
    graph.add_node("split_question", extractive_nodes.split_question)
    graph.add_node("retrieve", nodes.retrieve)
    graph.add_node("select_evidence", extractive_nodes.select_evidence)
    graph.add_node("web_search", nodes.web_search)
    graph.add_node("quote_answer", extractive_nodes.quote_answer)

    graph.add_edge(START, "split_question")
    graph.add_edge("split_question", "retrieve")
    graph.add_conditional_edges("retrieve", _next_part)
    graph.add_conditional_edges("select_evidence", _after_selection)
    graph.add_conditional_edges("web_search", _after_web_quotes)
    graph.add_edge("quote_answer", END)
    return graph.compile()


GRAPHS: dict[AnswerMode, Workflow] = {"llm": build_graph(), "extractive": build_extractive_graph()}


async def stream_query(
    deps: WorkflowDeps, question: str, options: QueryOptions, client: ClientContext | None = None
) -> AsyncIterator[WorkflowEvent]:
    """A "mode" event (llm or extractive, and why), "node" events as nodes complete, "token" events as
    the answer streams, then "final" (or "error").

    A failure once streaming has begun is reported as an event and logged here, once. A missing
    index or another embedder is the user's to fix: its message says how (as the API's 404/409
    does). Any other failure is logged with its traceback and an error id; the client gets the
    id and a short reason that carries no internals (no URL, no exception text).
    """
    try:
        async for event in _run(deps, question, options, client or ClientContext()):
            yield event
    except LLMNotConfiguredError:
        raise
    except (IndexNotFoundError, EmbedderMismatchError) as err:
        logger.warning("query stream stopped: %s", err)
        yield WorkflowEvent(event="error", data={"type": type(err).__name__, "message": str(err)})
    except Exception as err:  # reported to the client as an event; the stream ends cleanly
        error_id = uuid.uuid4().hex[:12]
        log_failure(logger, err, "query stream failed, error %s", error_id)
        message = f"回答中断：{_stream_failure(err)}（错误编号 {error_id}，详情见服务日志）"
        yield WorkflowEvent(event="error", data={"type": type(err).__name__, "message": message, "error_id": error_id})


def _stream_failure(err: Exception) -> str:
    """What the user may know of a failure: which dependency, and its HTTP status."""
    if isinstance(err, openai.APIStatusError):
        return f"大模型服务返回 HTTP {err.status_code}"
    if isinstance(err, openai.APIError):
        return "大模型服务无法连接"
    if isinstance(err, ESTransportError | ApiError | SearchError):
        return "Elasticsearch 暂时不可用"
    return "服务内部错误"


async def run_query(
    deps: WorkflowDeps, question: str, options: QueryOptions, client: ClientContext | None = None
) -> QueryResult:
    """The whole workflow; errors (Elasticsearch, the answer model) propagate with their type.
    `client`: what a chat client sent besides the question (its system prompt, its sources)."""
    async for event in _run(deps, question, options, client or ClientContext()):
        if event.event == "final":
            return QueryResult.model_validate(event.data)
    raise RuntimeError("the workflow ended without a result")


async def _run(
    deps: WorkflowDeps, question: str, options: QueryOptions, client: ClientContext
) -> AsyncIterator[WorkflowEvent]:
    """The run in the chosen mode. In `auto` mode a model that fails mid-run, before any answer
    text went out, is reported to the probe and the question is answered extractively instead,
    with a second "mode" event saying why; in `llm` mode, or once text has streamed, it fails."""
    mode, why = await choose_mode(deps)
    streamed = False
    try:
        async for event in _run_in_mode(deps, question, options, client, mode, why):
            streamed = streamed or event.event == "token"
            yield event
    except openai.APIError as err:
        if mode != "llm" or deps.settings.answer_mode != "auto" or streamed:
            raise
        failure = _stream_failure(err)
        logger.warning("answer model failed mid-run (%s): answering extractively", failure)
        if deps.probe is not None:
            deps.probe.report_failure(failure)
        async for event in _run_in_mode(deps, question, options, client, "extractive", f"{failure}，改用抽取式回答"):
            yield event


async def _run_in_mode(
    deps: WorkflowDeps, question: str, options: QueryOptions, client: ClientContext, mode: AnswerMode, why: str
) -> AsyncIterator[WorkflowEvent]:
    yield WorkflowEvent(event="mode", data={"mode": mode, "reason": why})
    settings = deps.settings
    ctx = RunContext(
        deps=deps,
        retrieval_mode=options.retrieval_mode,
        k=options.k,
        web=options.web,
        rerank=options.rerank,
        max_retrievals=options.max_retrievals or settings.max_retrievals,
        max_web_searches=settings.max_web_searches if options.max_web_searches is None else options.max_web_searches,
        max_llm_calls=settings.max_llm_calls,
        time_budget_s=settings.query_time_budget_s,
        answer_mode=mode,
        mode_reason=why,
    )
    initial: WorkflowState = {
        "question": question,
        "history": options.history,
        "instructions": client.instructions,
        "given": client.given,
        "llm_calls": 0,
        "web_searches": 0,
        "retrievals": 0,
        "passages": {},
        "web_results": [],
    }
    # Each retrieval and each web search costs two super-steps; the code limits bound the total.
    usage = UsageMetadataCallbackHandler()  # every model call inside the nodes reports to it
    limit = 8 + 2 * ctx.max_retrievals + 2 * ctx.max_web_searches + 4
    config: RunnableConfig = {"recursion_limit": limit, "callbacks": [usage]}
    final: WorkflowState = {}
    graph = GRAPHS[mode]
    async for kind, chunk in graph.astream(initial, config=config, context=ctx, stream_mode=["custom", "values"]):
        if kind == "custom":
            yield WorkflowEvent.model_validate(chunk)
        else:  # "values": the whole state after each step
            final = cast(WorkflowState, chunk)
    yield WorkflowEvent(event="final", data=_result(final, ctx, usage).model_dump(mode="json", by_alias=True))


def _result(state: WorkflowState, ctx: RunContext, usage: UsageMetadataCallbackHandler) -> QueryResult:
    trace = state.get("trace", [])
    timings: dict[str, float] = {}
    for step in trace:
        timings[step.node] = round(timings.get(step.node, 0.0) + step.ms, 2)
    timings["total"] = round(ctx.elapsed() * 1000, 2)
    return QueryResult(
        question=state["question"],
        answer=state.get("answer", ""),
        reasoning=state.get("reasoning", ""),
        answer_mode=ctx.answer_mode,
        mode_reason=ctx.mode_reason,
        route=state.get("route", ""),
        route_reason=state.get("route_reason", ""),
        sub_questions=state.get("sub_questions", []),
        evaluations=state.get("evaluations", []),
        web_used=bool(state.get("web_results")),
        citations=state.get("citations", []),
        trace=trace,
        timings=timings,
        llm_calls=state["llm_calls"],
        web_calls=state["web_searches"],
        warnings=list(dict.fromkeys(state.get("warnings", []))),
        parts=state.get("part_answers", []),
        conflicts=state.get("conflicts", []),
        usage=TokenUsage(
            prompt_tokens=sum(model["input_tokens"] for model in usage.usage_metadata.values()),
            completion_tokens=sum(model["output_tokens"] for model in usage.usage_metadata.values()),
        ),
    )
