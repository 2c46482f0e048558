"""`python -m service.llm check [--json]`: what each configured model does, before a user asks.

For the judgement model and the answer model (one line when they are the same): whether it
answers (one short streamed answer), which structured-output strategy works (one judgement,
`STRUCTURED_OUTPUT` deciding as in the service), whether and in which form it reasons, and the
latency of one judgement once the strategy is known. With `RERANKER` set, the reranker too: its
shape, the latency of one ranking of three passages, and whether it put the right one first (one
more report, roles `["reranker"]`). Exit status 0 when every model answers and judges and the
reranker ranks, 1 otherwise, 2 with neither a model nor a reranker configured.
"""

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass, field

import openai
from langchain_core.messages import BaseMessage, HumanMessage

from core.config import Settings
from retrieval.rerank import RerankFailure, Scorer, build_reranker
from service.graph import prompts
from service.graph.schemas import RouteDecision
from service.llm.client import ChatModel, LLMNotConfiguredError, ask_structured, build_llms, stream_text
from service.llm.rerank import LlmScorer
from service.llm.structured import Strategy

PROBE_QUESTION = "赵阳、孙越、李通在哪里结义？"
PROBE_ANSWER: list[BaseMessage] = [HumanMessage("用一句话回答：一年有几个季节？")]
PROBE_PASSAGES = ["周平在许都屯田，积谷备战。", "赵阳、孙越、李通在桃园结为兄弟。", "陈恪躬耕于隆中。"]
PROBE_RELEVANT = 1  # the passage a reranker must put first for PROBE_QUESTION


@dataclass
class ModelReport:
    model: str
    roles: list[str]
    endpoint: str
    answers: bool = False
    strategy: Strategy | None = None  # the structured-output strategy that worked
    refused: dict[Strategy, str] = field(default_factory=dict)  # strategy -> why it was refused
    reasoning: str | None = None  # think_tags | lone_close | field | None (no reasoning seen)
    judgement_ms: float | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.answers and self.strategy is not None and self.error is None


@dataclass
class RerankReport:
    reranker: str  # the scorer's name: shape, model and endpoint
    roles: list[str] = field(default_factory=lambda: ["reranker"])
    ranking_ms: float | None = None
    order: list[int] = field(default_factory=list)  # PROBE_PASSAGES' indices, best first
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.order[:1] == [PROBE_RELEVANT]


def check_reranker(settings: Settings) -> RerankReport | None:
    """One ranking of `PROBE_PASSAGES` by the configured reranker (None: `RERANKER=none`), timed;
    its failure is reported, not hidden behind the fused order as in a search."""
    stage = build_reranker(settings, LlmScorer(settings) if settings.reranker == "llm" else None)
    if stage is None:
        return None
    scorer: Scorer = stage.scorer
    report = RerankReport(scorer.name)
    started = time.perf_counter()
    try:
        scores = scorer.score(PROBE_QUESTION, PROBE_PASSAGES, settings.rerank_timeout_s)
    except RerankFailure as failure:
        report.error = f"{failure.reason}: {failure}"
        return report
    report.ranking_ms = round((time.perf_counter() - started) * 1000, 1)
    report.order = sorted(range(len(scores)), key=lambda i: -scores[i])
    if report.order[0] != PROBE_RELEVANT:
        report.error = f"ranked {PROBE_PASSAGES[report.order[0]]!r} first: check RERANK_MODEL and RERANK_API"
    return report


def render_reranker(report: RerankReport) -> str:
    ms = f"{report.ranking_ms:.0f} ms" if report.ranking_ms is not None else "-"
    lines = [f"reranker {report.reranker}", f"  one ranking:       {ms}, order {report.order or '-'}"]
    return "\n".join(lines + ([f"  error:             {report.error}"] if report.error else []))


async def check_model(model: ChatModel, roles: list[str]) -> ModelReport:
    report = ModelReport(model.name, roles, model.endpoint)
    try:
        async for _ in stream_text(model, PROBE_ANSWER):
            pass
    except openai.APIError as err:
        report.error = f"no answer: {type(err).__name__} {getattr(err, 'status_code', '')}".strip()
        return report
    report.answers = True
    messages = prompts.route_messages(PROBE_QUESTION)
    found = await ask_structured(model, RouteDecision, messages, prompts.OUTPUT_FORMAT)
    if found.value is not None:
        started = time.perf_counter()
        timed = await ask_structured(model, RouteDecision, messages, prompts.OUTPUT_FORMAT)
        report.judgement_ms = round((time.perf_counter() - started) * 1000, 1)
        report.strategy = timed.strategy if timed.value is not None else None
        report.error = None if timed.value is not None else f"judgement: {timed.error}"
    else:
        report.error = f"judgement: {found.error}"
    report.refused = dict(model.habits.refused)
    report.reasoning = model.habits.reasoning
    return report


async def check_models(settings: Settings) -> list[ModelReport]:
    judge, answer = build_llms(settings)
    if judge is None or answer is None:
        raise LLMNotConfiguredError()
    if judge.name == answer.name:
        return [await check_model(judge, ["judge", "answer"])]
    return [await check_model(judge, ["judge"]), await check_model(answer, ["answer"])]


def render(reports: list[ModelReport]) -> str:
    lines = []
    for r in reports:
        refused = "; ".join(f"{s}: {why}" for s, why in r.refused.items())
        strategy = (r.strategy or "none") + (f" (refused {refused})" if refused else "")
        lines += [
            f"{r.model} ({', '.join(r.roles)}) at {r.endpoint}",
            f"  answers:           {'yes' if r.answers else 'no'}",
            f"  structured output: {strategy}",
            f"  reasoning:         {r.reasoning or 'none seen'}",
            f"  one judgement:     {f'{r.judgement_ms:.0f} ms' if r.judgement_ms is not None else '-'}",
        ]
        if r.error:
            lines.append(f"  error:             {r.error}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.llm", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="report what each configured model does")
    check.add_argument("--json", action="store_true", help="one JSON object per model, as a list")
    args = parser.parse_args(argv)
    settings = Settings()
    reranker = check_reranker(settings)  # before the models' event loop: the llm reranker runs its own
    try:
        reports = asyncio.run(check_models(settings))
    except LLMNotConfiguredError as err:
        if reranker is None:
            print(err, file=sys.stderr)
            return 2
        reports = []
    found: list[ModelReport | RerankReport] = [*reports, *([reranker] if reranker else [])]
    if args.json:
        print(json.dumps([asdict(r) for r in found], ensure_ascii=False, indent=2))
    else:
        print("\n".join(filter(None, [render(reports), render_reranker(reranker) if reranker else ""])))
    return 0 if all(r.ok for r in found) else 1
