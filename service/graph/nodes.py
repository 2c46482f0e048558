"""The workflow's nodes: thin steps over `retrieval`, `websearch`, `llm` and the prompts.

Every node returns a partial state (`WorkflowState`) and a one-line outcome; `traced` times it,
appends it to the trace and emits a "node" event. Counters (`llm_calls`, `retrievals`,
`web_searches`) are reducers: a node returns what it adds. Decisions that steer a graph are
written as facts (`retrieve_more`, `search_web`, `web_found`) that each graph's routers turn into
its own node names (workflow.py), and every hard limit (sub-questions, `max_retrievals`,
`max_web_searches`, LLM-call and time budgets) is checked here in code, whatever the model answered.
"""

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from functools import partial, wraps
from typing import Protocol

from langchain_core.messages import BaseMessage
from langgraph.runtime import Runtime
from langgraph.types import StreamWriter

from core.config import Settings
from retrieval.conflicts import Conflict
from retrieval.results import interleave
from service.graph import prompts
from service.graph.context import NumberedContext, citations, contexts_hash, resolve_conflicts, select_contexts
from service.graph.schemas import (
    Decomposition,
    Evaluation,
    EvaluationStep,
    EvaluationWithWeb,
    Judgement,
    PlanDecision,
    RouteDecision,
    StandaloneQuestion,
    TraceStep,
)
from service.graph.state import Passage, RunContext, WorkflowState
from service.llm.client import ChatModel, Structured, ask_structured, stream_text
from service.llm.structured import SchemaT
from service.websearch import WebSearchError, dedupe_by_url, url_key

logger = logging.getLogger(__name__)

NodeResult = tuple[WorkflowState, str]  # (partial state, one-line outcome for the trace)
Step = Callable[[WorkflowState, Runtime[RunContext]], Awaitable[NodeResult]]


class Node(Protocol):
    """What LangGraph calls: the state, and the runtime as a keyword."""

    def __call__(self, state: WorkflowState, *, runtime: Runtime[RunContext]) -> Awaitable[WorkflowState]: ...


WEB_NOT_CONFIGURED = "网络搜索不可用：未配置 BOCHA_API_KEY"
WEB_DISABLED = "网络搜索已按请求关闭"
GIVEN_ROUTE = "对话中提供了资料，连同知识库一起查证"
# Pictographs, dingbats, variation selector 16 and zero-width joiner: the answer carries no emoji.
_EMOJI = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\u2b00-\u2bff\ufe0f\u200d]")


def traced(name: str) -> Callable[[Step], Node]:
    def decorate(func: Step) -> Node:
        @wraps(func)
        async def node(state: WorkflowState, *, runtime: Runtime[RunContext]) -> WorkflowState:
            started = time.perf_counter()
            update, outcome = await func(state, runtime)
            step = TraceStep(node=name, ms=round((time.perf_counter() - started) * 1000, 2), outcome=outcome)
            runtime.stream_writer({"event": "node", "data": step.model_dump()})
            update["trace"] = [step]
            return update

        return node

    return decorate


def state_contexts(state: WorkflowState, ctx: RunContext) -> tuple[list[NumberedContext], int]:
    """Every source the run holds (the client's, the base's, the web's), numbered and within budget."""
    budget = ctx.deps.settings.context_token_budget
    return select_contexts(state.get("passages", {}), state.get("web_results", []), budget, state.get("given"))


def budget_exhausted(ctx: RunContext, llm_calls: int) -> str | None:
    """Why no further judgement call is allowed (one call is always kept for the answer)."""
    if ctx.elapsed() > ctx.time_budget_s:
        return f"已超出时间预算（{ctx.time_budget_s:g} 秒），用现有资料作答"
    if llm_calls >= ctx.max_llm_calls - 1:
        return f"已用完模型调用预算（{ctx.max_llm_calls} 次，保留 1 次用于生成答案），用现有资料作答"
    return None


async def judge(
    ctx: RunContext, state: WorkflowState, schema: type[SchemaT], messages: list[BaseMessage]
) -> Structured[SchemaT]:
    """One judgement by the judge model; a second attempt may spend the calls left before the answer's."""
    left = ctx.max_llm_calls - 1 - state["llm_calls"]
    return await ask_structured(ctx.deps.judge_llm, schema, messages, prompts.OUTPUT_FORMAT, max_calls=max(left, 1))


@traced("rewrite_question")
async def rewrite_question(state: WorkflowState, runtime: Runtime[RunContext]) -> NodeResult:
    ctx = runtime.context
    if blocked := budget_exhausted(ctx, state["llm_calls"]):
        return {"warnings": [blocked]}, "预算已用完，沿用原问题"
    result = await judge(ctx, state, StandaloneQuestion, prompts.rewrite_messages(state["history"], state["question"]))
    parsed, error = result.value, result.error
    if parsed is None:
        return {"llm_calls": result.calls, "warnings": [f"多轮改写失败（{error}），按原问题处理"]}, f"改写失败：{error}"
    return {"question": parsed.question, "llm_calls": result.calls}, f"独立问题：{parsed.question}"


@traced("route_question")
async def route_question(state: WorkflowState, runtime: Runtime[RunContext]) -> NodeResult:
    ctx = runtime.context
    if state.get("given"):  # the client sent sources: the answer must read them, never skip them
        return {"route": "complex", "route_reason": GIVEN_ROUTE}, f"complex（{GIVEN_ROUTE}）"
    if blocked := budget_exhausted(ctx, state["llm_calls"]):
        return {"route": "complex", "route_reason": blocked, "warnings": [blocked]}, "complex（预算已用完）"
    result = await judge(ctx, state, RouteDecision, prompts.route_messages(state["question"]))
    parsed, error = result.value, result.error
    if parsed is None:
        reason = f"路由结果无效（{error}），按 complex 处理以查证据"
        return {
            "route": "complex",
            "route_reason": reason,
            "llm_calls": result.calls,
            "warnings": [reason],
        }, "complex（路由结果无效）"
    return {
        "route": parsed.strategy,
        "route_reason": parsed.reason,
        "llm_calls": result.calls,
    }, f"{parsed.strategy}：{parsed.reason}"


@traced("direct_answer")
async def direct_answer(state: WorkflowState, runtime: Runtime[RunContext]) -> NodeResult:
    ctx = runtime.context
    messages = prompts.direct_messages(state["question"], state.get("instructions", ""))
    answer, reasoning = await stream_answer(ctx.deps.answer_llm, messages, runtime.stream_writer, ctx.deps.settings)
    return {"answer": answer, "reasoning": reasoning, "citations": [], "llm_calls": 1}, f"直接回答，{len(answer)} 字"


@traced("decompose_question")
async def decompose_question(state: WorkflowState, runtime: Runtime[RunContext]) -> NodeResult:
    ctx = runtime.context
    question = state["question"]
    if blocked := budget_exhausted(ctx, state["llm_calls"]):
        return {"sub_questions": [question], "cursor": 0, "warnings": [blocked]}, "预算已用完，以原问题检索"
    result = await judge(ctx, state, Decomposition, prompts.decompose_messages(question))
    parsed, error = result.value, result.error
    if parsed is None:
        warning = f"问题拆分结果无效（{error}），以原问题检索"
        return {"sub_questions": [question], "cursor": 0, "llm_calls": result.calls, "warnings": [warning]}, warning
    subs = parsed.sub_questions
    return {"sub_questions": subs, "cursor": 0, "llm_calls": result.calls}, f"{len(subs)} 个子问题：" + "；".join(subs)


@traced("retrieve")
async def retrieve(state: WorkflowState, runtime: Runtime[RunContext]) -> NodeResult:
    ctx = runtime.context
    cursor = state.get("cursor", 0)
    sub_question = state["sub_questions"][cursor]
    texts = state["search_texts"][cursor] if "search_texts" in state else [sub_question]
    search = partial(ctx.deps.retriever.search, ctx.deps.scope, mode=ctx.retrieval_mode, k=ctx.k, rerank=ctx.rerank)
    results = [await asyncio.to_thread(search, text) for text in texts]
    hits = interleave([result.hits for result in results], ctx.k)
    passages = dict(state.get("passages", {}))
    found = {**state.get("found", {}), sub_question: [hit.id for hit in hits]}
    new = 0
    for rank, hit in enumerate(hits, start=1):
        known = passages.get(hit.id)
        if known is None:
            new += 1
            passages[hit.id] = Passage(**hit.model_dump(), rank=rank, found_by=sub_question)
        else:
            passages[hit.id] = known.model_copy(
                update={"score": max(known.score, hit.score), "rank": min(known.rank, rank)}
            )
    top = hits[0].label if hits else "无"
    update: WorkflowState = {"passages": passages, "found": found, "cursor": cursor + 1, "retrievals": 1}
    if warnings := list(dict.fromkeys(w for result in results for w in result.warnings)):
        update["warnings"] = warnings  # a failed reranker: the fused order was used, and the answer says so
    return update, f"子问题 {cursor + 1}「{sub_question}」：{len(hits)} 条（新增 {new}），首条：{top}"


@traced("plan_next_step")
async def plan_next_step(state: WorkflowState, runtime: Runtime[RunContext]) -> NodeResult:
    ctx = runtime.context
    subs, cursor, retrievals = state["sub_questions"], state.get("cursor", 0), state["retrievals"]
    if cursor >= len(subs):
        return {"retrieve_more": False}, "子问题已全部检索 → evaluate"
    if retrievals >= ctx.max_retrievals:
        return {"retrieve_more": False}, f"已达检索上限 max_retrievals={ctx.max_retrievals} → evaluate"
    if blocked := budget_exhausted(ctx, state["llm_calls"]):
        return {"retrieve_more": False, "warnings": [blocked]}, f"{blocked} → evaluate"
    contexts, _ = select_contexts(
        state.get("passages", {}), [], ctx.deps.settings.context_token_budget, state.get("given")
    )
    messages = prompts.plan_messages(state["question"], subs, cursor, contexts)
    result = await judge(ctx, state, PlanDecision, messages)
    parsed, error = result.value, result.error
    if parsed is None:
        return {
            "retrieve_more": True,
            "llm_calls": result.calls,
        }, f"规划结果无效（{error}），继续检索下一个子问题 → retrieve"
    update: WorkflowState = {"retrieve_more": parsed.next_action == "retrieve", "llm_calls": result.calls}
    return update, f"{parsed.next_action}：{parsed.reason}"


@traced("evaluate")
async def evaluate(state: WorkflowState, runtime: Runtime[RunContext]) -> NodeResult:
    ctx = runtime.context
    question = state["question"]
    contexts, _ = state_contexts(state, ctx)
    digest = contexts_hash(contexts)
    step, calls, warnings = await _judge(state, ctx, contexts, digest)
    disagreements = resolve_conflicts(step.conflicts, contexts)
    warnings += await log_verdict(ctx, question, digest, step, disagreements)
    search_web, why, unavailable = after_evaluation(state, ctx, step, state["llm_calls"] + calls)
    if unavailable:
        warnings.append(unavailable)
    verdict = "足够" if step.enough else f"不足（缺少 {len(step.missing)} 项）"
    update: WorkflowState = {
        "evaluations": [step],
        "conflicts": disagreements,
        "llm_calls": calls,
        "search_web": search_web,
        "web_unavailable": unavailable,
        "warnings": warnings,
    }
    return update, f"{verdict}[{step.source}]，{why} → {'web_search' if search_web else 'generate'}"


async def _judge(
    state: WorkflowState, ctx: RunContext, contexts: list[NumberedContext], digest: str
) -> tuple[EvaluationStep, int, list[str]]:
    """(verdict, LLM calls it made, warnings): from code, the cache or the model.

    After a web search the model gets its own prompt and schema, without `web_query`. An
    unparseable verdict names every sub-question missing, so it may send the question to the
    web (the seeds' rule); the one-search limit still holds in `_after_evaluation`.
    """
    question, subs = state["question"], state.get("sub_questions", [])
    with_web = any(c.web for c in contexts)
    memory = ctx.deps.judgements
    if not contexts:
        return (
            EvaluationStep(enough=False, missing=subs or [question], reason="没有检索到任何资料", source="no_context"),
            0,
            [],
        )
    if memory is not None and (cached := memory.cached(ctx.deps.verdict_scope, question, digest)) is not None:
        return EvaluationStep(**cached.model_dump(), with_web=with_web, source="cache"), 0, []
    if blocked := budget_exhausted(ctx, state["llm_calls"]):
        return EvaluationStep(enough=False, reason=blocked, with_web=with_web, source="budget"), 0, [blocked]
    if state.get("web_results"):
        schema: type[Judgement] = EvaluationWithWeb
        messages = prompts.evaluate_with_web_messages(question, subs, contexts)
    else:
        schema, messages = Evaluation, prompts.evaluate_messages(question, subs, contexts)
    result = await judge(ctx, state, schema, messages)
    parsed, error = result.value, result.error
    if parsed is None:
        reason = f"评估结果无效（{error}），按资料不足处理，缺少的视为全部子问题"
        step = EvaluationStep(
            enough=False, missing=subs or [question], reason=reason, with_web=with_web, source="parse_error"
        )
        return step, result.calls, [reason]
    if memory is not None:
        memory.remember(ctx.deps.verdict_scope, question, digest, parsed)
    return EvaluationStep(**parsed.model_dump(), with_web=with_web, source="model"), result.calls, []


async def log_verdict(
    ctx: RunContext, question: str, digest: str, step: EvaluationStep, disagreements: list[Conflict]
) -> list[str]:
    """Append the verdict (and the sources it found disagreeing) to the judgement log; a failed write
    is a warning, never a failed query."""
    memory = ctx.deps.judgements
    if memory is None:
        return []
    scope = ctx.deps.verdict_scope
    try:
        await asyncio.to_thread(memory.log, scope, ctx.query_id, question, digest, step, disagreements)
    except Exception as err:  # the log is a report, never a reason to fail a query
        logger.warning("could not log the judgement to %s: %s", memory.index, err)
        return [f"评估记录未能写入 {memory.index}"]
    return []


def after_evaluation(
    state: WorkflowState, ctx: RunContext, step: EvaluationStep, llm_calls: int
) -> tuple[bool, str, str | None]:
    """(search the web?, why, why the web could not help or None): the web-fallback limits in one place."""
    if step.enough:
        return False, "资料足够", None
    if not step.missing:
        return False, "未指明缺少内容，不搜索", None
    if not ctx.web:
        return False, "网络搜索已关闭", WEB_DISABLED
    if ctx.deps.web_search is None:
        return False, "网络搜索不可用", WEB_NOT_CONFIGURED
    if state["web_searches"] >= ctx.max_web_searches:
        return False, f"已达网络搜索上限 max_web_searches={ctx.max_web_searches}", None
    if blocked := budget_exhausted(ctx, llm_calls):
        return False, blocked, None
    return True, "到网络上查找缺少的内容", None


@traced("web_search")
async def web_search(state: WorkflowState, runtime: Runtime[RunContext]) -> NodeResult:
    ctx = runtime.context
    last = state["evaluations"][-1]
    query = (last.web_query or "").strip() or " ".join(last.missing) or state["question"]
    known = list(state.get("web_results", []))
    try:
        if ctx.deps.web_search is None:  # `_after_evaluation` never routes here without a client
            raise WebSearchError("no web search client configured")
        results = await ctx.deps.web_search.search(query)
    except WebSearchError as err:
        logger.warning("web search failed: %s", err)
        reason = f"网络搜索失败：{err.reason}"
        return _no_web_results(reason), f"「{query}」失败：{err.reason} → 作答"
    new = dedupe_by_url(results, seen={url_key(w.url) for w in known})
    if not new:
        return _no_web_results("网络搜索没有找到新的结果"), f"「{query}」：没有新结果 → 作答"
    update: WorkflowState = {"web_searches": 1, "web_results": known + new, "web_unavailable": None, "web_found": True}
    return update, f"「{query}」：{len(new)} 条新结果 → 重新评估"


def _no_web_results(reason: str) -> WorkflowState:
    """A web search that brought nothing new: counted, said in the answer, and the graph answers."""
    return {"web_searches": 1, "web_unavailable": reason, "web_found": False, "warnings": [reason]}


@traced("generate")
async def generate(state: WorkflowState, runtime: Runtime[RunContext]) -> NodeResult:
    ctx = runtime.context
    contexts, trimmed = state_contexts(state, ctx)
    evaluations = state.get("evaluations", [])
    last = evaluations[-1] if evaluations else None
    unavailable = state.get("web_unavailable")
    notes = [unavailable] if unavailable else []
    disagreements = state.get("conflicts", [])
    instructions = state.get("instructions", "")
    messages = prompts.generate_messages(state["question"], contexts, last, notes, instructions, disagreements)
    answer, reasoning = await stream_answer(ctx.deps.answer_llm, messages, runtime.stream_writer, ctx.deps.settings)
    tail = ""
    if last is not None and not last.enough and prompts.UNCONFIRMED not in answer:
        tail += prompts.unconfirmed_note(last)
    if disagreements and prompts.DISAGREE not in answer:
        tail += prompts.conflict_note(disagreements)
    if unavailable and unavailable not in answer:
        tail += prompts.web_unavailable_note(unavailable)
    if tail:
        runtime.stream_writer({"event": "token", "data": {"text": tail}})
        answer += tail
    cited = citations(answer, contexts)
    warnings = [f"资料超出提示词预算，舍弃了 {trimmed} 条排名最低的资料"] if trimmed else []
    update: WorkflowState = {
        "answer": answer,
        "reasoning": reasoning,
        "citations": cited,
        "llm_calls": 1,
        "warnings": warnings,
    }
    return update, f"{len(answer)} 字，引用 {len(cited)} 条（资料 {len(contexts)} 条）"


async def stream_answer(
    llm: ChatModel | None, messages: list[BaseMessage], writer: StreamWriter, settings: Settings
) -> tuple[str, str]:
    """(answer, reasoning): the answer streamed as "token" events (emoji removed), the reasoning as
    "reasoning" events unless SHOW_REASONING=false. Both come from the stream's totals, so no
    reasoning reaches the answer, its citations or the final event."""
    stream = stream_text(llm, messages)
    async for kind, text in stream:
        if kind == "reasoning":
            if settings.show_reasoning:
                writer({"event": "reasoning", "data": {"text": text}})
        elif piece := _EMOJI.sub("", text):
            writer({"event": "token", "data": {"text": piece}})
    return _EMOJI.sub("", stream.answer), stream.reasoning.strip() if settings.show_reasoning else ""
