"""The nodes of the extractive workflow (no model): split, select quotes and judge, quote the answer.

They share `retrieve` and `web_search` with the agentic workflow, and the web-fallback limits
(`after_evaluation`); the verdict is an `EvaluationStep` with `source="extractive"` whose
`missing` items are the unanswered question parts, exactly as the evaluator's would be.
"""

import asyncio
from dataclasses import replace
from functools import partial

from langgraph.runtime import Runtime

from core.config import Settings
from core.text import ChineseTokenizer
from retrieval import conflicts, extractive
from retrieval.conflicts import Conflict
from retrieval.extractive import Extract, PartAnswer, Quoted, Source, Thresholds
from retrieval.retriever import Retriever
from service.graph.context import NumberedContext, citations, conflict_source, contexts_hash
from service.graph.nodes import NodeResult, after_evaluation, log_verdict, state_contexts, traced
from service.graph.schemas import MAX_MISSING, EvaluationStep
from service.graph.state import Passage, RunContext, WorkflowState

ROUTE_REASON = "抽取式回答不做路由：每个问题都到知识库中找原文"
WEB_DID_NOT_CONFIRM = "网络搜索结果也未能确认"
INSTRUCTIONS_NOT_APPLIED = "抽取式回答只摘录原文，没有按系统提示调整语言、语气或篇幅"


def follow_up_note(terms: list[str]) -> str:
    """Said in the answer: without a model the follow-up was not rewritten, but searched with these."""
    return f"（追问未经改写：检索时加上了上一问的关键词「{'、'.join(terms)}」）"


@traced("split_question")
async def split_question(state: WorkflowState, runtime: Runtime[RunContext]) -> NodeResult:
    ctx = runtime.context
    question = state["question"]
    parts = extractive.split_question(question, ctx.max_retrievals)
    texts = extractive.search_texts(parts, question)
    earlier = [turn.content for turn in state.get("history", []) if turn.role == "user"]
    terms: list[str] = []
    if earlier:
        tokenizer = await asyncio.to_thread(ctx.deps.retriever.index_tokenizer, ctx.deps.scope)
        terms = extractive.follow_up_terms(earlier[-1], question, tokenizer)
    warnings = [follow_up_note(terms)] if terms else []
    warnings += [INSTRUCTIONS_NOT_APPLIED] if state.get("instructions", "").strip() else []
    update: WorkflowState = {
        "sub_questions": parts,
        "search_texts": [[" ".join([*terms, text]) for text in each] for each in texts],
        "history_terms": terms,
        "cursor": 0,
        "route": "complex",
        "route_reason": ROUTE_REASON,
        "warnings": warnings,
    }
    return update, f"{len(parts)} 个部分：" + "；".join(parts) + (
        f"（加上上一问的「{'、'.join(terms)}」检索）" if terms else ""
    )


def _sources(state: WorkflowState, part: str, passages: int) -> list[Source]:
    """The part's top `passages` local passages, then every web result and every source the client sent."""
    known = state.get("passages", {})
    local = [known[chunk_id] for chunk_id in state.get("found", {}).get(part, [])[:passages] if chunk_id in known]
    web = [Source(w.url, w.text, 0, i, web=True) for i, w in enumerate(state.get("web_results", []))]
    given = [Source(f"given:{g.id}", g.text, 0, i, web=True, given=True) for i, g in enumerate(state.get("given", []))]
    return extractive.local_sources(local) + web + given


def base_thresholds(retriever: Retriever, kb: str, settings: Settings) -> Thresholds:
    """The verdict's thresholds on a base: the service's, with its own calibration's when it has one."""
    limits = Thresholds.from_settings(settings)
    calibration = retriever.calibration_of(kb)
    if calibration is None:
        return limits
    return replace(limits, min_similarity=calibration.min_similarity, min_coverage=calibration.min_coverage)


@traced("select_evidence")
async def select_evidence(state: WorkflowState, runtime: Runtime[RunContext]) -> NodeResult:
    ctx = runtime.context
    settings, retriever = ctx.deps.settings, ctx.deps.retriever
    limits = await asyncio.to_thread(base_thresholds, retriever, ctx.deps.scope.kb, settings)
    web = state.get("web_results", [])
    tokenizer = await asyncio.to_thread(retriever.index_tokenizer, ctx.deps.scope)
    profile = await asyncio.to_thread(retriever.text_profile, ctx.deps.scope)
    before = {answer.part: answer for answer in state.get("part_answers", [])}
    origins = extractive.distributed(state["question"])
    answers = []
    for part in state["sub_questions"]:
        if part in before and before[part].answered:  # after the web, only what was missing is judged again
            answers.append(before[part])
        elif extractive.wants_links(part):
            answers.append(extractive.link_answer(part, [(w.title, w.url) for w in web]))
        else:
            judged = " ".join([*state.get("history_terms", []), part])  # a follow-up is about the earlier subject
            known = _sources(state, part, settings.extractive_passages)
            sources = await asyncio.to_thread(extractive.score_passages, retriever, ctx.deps.scope, judged, known)
            held = partial(retriever.terms_held, ctx.deps.scope)
            names = extractive.other_names(retriever.expansions(ctx.deps.scope, judged))  # the caller's aliases
            select = partial(
                extractive.select,
                judged,
                sources,
                retriever.embedder,
                tokenizer,
                limits,
                held,
                names,
                origins.get(part),
                profile,
            )
            found = (await asyncio.to_thread(select)).model_copy(update={"part": part})
            _stream_quotes(runtime, found)
            every = _sources(state, part, len(state.get("found", {}).get(part, [])))  # a premise is checked on all hits
            answers.append(extractive.deny_premise(found, every, names, tokenizer, profile))
    step = _verdict(answers, with_web=bool(web))
    disagreements = _disagreements(state, answers, tokenizer, profile.units)
    contexts, _ = state_contexts(state, ctx)
    warnings = await log_verdict(ctx, state["question"], contexts_hash(contexts), step, disagreements)
    search_web, why, unavailable = after_evaluation(state, ctx, step, state["llm_calls"])
    if unavailable:
        warnings.append(unavailable)
    update: WorkflowState = {
        "part_answers": answers,
        "conflicts": disagreements,
        "evaluations": [step],
        "search_web": search_web,
        "web_unavailable": unavailable,
        "warnings": warnings,
    }
    verdict = "足够" if step.enough else f"不足（缺少 {len(step.missing)} 项）"
    verdict += f"，{len(disagreements)} 处资料有出入" if disagreements else ""
    return update, f"{verdict}[extractive]，{why} → {'web_search' if search_web else 'quote_answer'}"


def _verdict(answers: list[PartAnswer], with_web: bool) -> EvaluationStep:
    """The evaluator's verdict, made in code: the unanswered parts are what is missing."""
    missing = [a.part for a in answers if not a.answered]
    figures = "；".join(
        f"「{a.part}」相似度 {a.best_similarity:.3f}，关键词覆盖 {a.coverage:.0%}"
        + (f"，{reason}" if (reason := extractive.lacks(a)) else "")
        for a in answers
        if not a.wants_links
    )
    searchable = [part for part in missing if not extractive.wants_links(part)]
    query = " ".join(searchable or [a.part for a in answers if not a.wants_links])
    return EvaluationStep(
        enough=not missing,
        missing=missing[:MAX_MISSING],
        reason=figures or "只要求给出链接",
        web_query=query if missing else None,
        with_web=with_web,
        source="extractive",
    )


def _disagreements(
    state: WorkflowState, answers: list[PartAnswer], tokenizer: ChineseTokenizer, units: conflicts.Units
) -> list[Conflict]:
    """Figures and dates on which the quotes of an answered part, from different documents, disagree
    (`retrieval.conflicts`), each side cited with the number the answer gives it."""
    contexts, quoted = _numbered(state, answers)
    by_number = {context.number: context for context in contexts}
    passages = state.get("passages", {})
    quotes = [
        _conflict_quote(answer.part, e, passages.get(e.source_id))
        for answer in answers
        if answer.answered and not answer.wants_links
        for e in answer.extracts
    ]
    found_conflicts = []
    for found in conflicts.figure_conflicts(quotes, tokenizer, units):
        numbers = [quoted[figure.quote.source_id].number for figure in found.figures]
        dates = [(n, _own_date(passages.get(f.quote.source_id))) for n, f in zip(numbers, found.figures, strict=True)]
        newest = conflicts.newest_side(dates)
        found_conflicts.append(
            Conflict(
                claim=found.part,
                sources=[
                    conflict_source(by_number[number], figure.clause)
                    for number, figure in zip(numbers, found.figures, strict=True)
                ],
                newest=newest[0] if newest else None,
                newest_date=newest[1] if newest else "",
            )
        )
    return found_conflicts


def _own_date(passage: Passage | None) -> tuple[tuple[int, ...], str] | None:
    """The date a base passage's document gives itself (its title, file name or the chunk: 2024年版)."""
    if passage is None:
        return None
    return conflicts.document_date(passage.title or "", passage.source or "", passage.text)


def _conflict_quote(part: str, extract: Extract, passage: Passage | None) -> conflicts.Quote:
    """An extract as the conflict check reads it: its document (a base passage's source, else the web
    result's or client source's id) and the whole chunk it is from, when it is from the base."""
    document = (passage.source if passage else "") or extract.source_id
    return conflicts.Quote(part, extract.source_id, document, extract.text, passage.text if passage else "")


def _numbered(state: WorkflowState, answers: list[PartAnswer]) -> tuple[list[NumberedContext], dict[str, Quoted]]:
    """The quoted sources with their numbers: the client's keep theirs (its order), the others follow
    in the order of their first quote."""
    passages, web = state.get("passages", {}), {w.url: w for w in state.get("web_results", [])}
    given = {f"given:{g.id}": (number, g) for number, g in enumerate(state.get("given", []), start=1)}
    contexts: list[NumberedContext] = []
    quoted: dict[str, Quoted] = {}
    following = len(given) + 1
    for source_id in extractive.quoted_ids(answers):
        if source_id in given:
            number, source = given[source_id]
            contexts.append(NumberedContext(number, given=source))
            quoted[source_id] = Quoted(number, url=source.url, title=source.name)
            continue
        number, following = following, following + 1
        if source_id in web:
            result = web[source_id]
            contexts.append(NumberedContext(number, web=result))
            quoted[source_id] = Quoted(number, url=result.url, title=result.title)
        else:
            contexts.append(NumberedContext(number, passage=passages[source_id]))
            quoted[source_id] = Quoted(number)
    return contexts, quoted


def _stream_quotes(runtime: Runtime[RunContext], answer: extractive.PartAnswer) -> None:
    """A part's quotes go out as they are chosen, before the answer is composed, as the answer quotes them
    (headings left out); the composed answer may keep fewer (a part not answered shows at most one)."""
    for extract in answer.extracts:
        text = "\n".join(extractive.quoted_paragraphs(extract, answer.headings_quoted))
        runtime.stream_writer({"event": "quote", "data": {"part": answer.part, "text": text}})


@traced("quote_answer")
async def quote_answer(state: WorkflowState, runtime: Runtime[RunContext]) -> NodeResult:
    answers = state.get("part_answers", [])
    contexts, quoted = _numbered(state, answers)
    unavailable = state.get("web_unavailable")
    searched = state["web_searches"] > 0 and not unavailable
    why_not = [unavailable] if unavailable else [WEB_DID_NOT_CONFIRM] if searched else []
    terms = state.get("history_terms", [])
    notes = [follow_up_note(terms)] if terms else []
    answer = extractive.compose(answers, quoted, why_not, notes, state.get("conflicts", []))
    for line in answer.splitlines(keepends=True):
        runtime.stream_writer({"event": "token", "data": {"text": line}})
    cited = citations(answer, contexts)
    return {"answer": answer, "citations": cited}, f"抽取式回答：{len(answer)} 字，引用 {len(cited)} 条"
