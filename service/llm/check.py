"""`python -m service.llm check [--json]`: what each configured model does, before a user asks.

For the judgement model and the answer model (one line when they are the same): whether it
answers (one short streamed answer), which structured-output strategy works (one judgement,
`STRUCTURED_OUTPUT` deciding as in the service), whether and in which form it reasons, and the
latency of one judgement once the strategy is known. Exit status 0 when every model answers and
judges, 1 otherwise, 2 without a configured model.
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
from service.graph import prompts
from service.graph.schemas import RouteDecision
from service.llm.client import ChatModel, LLMNotConfiguredError, ask_structured, build_llms, stream_text
from service.llm.structured import Strategy

PROBE_QUESTION = "刘备、关羽、张飞在哪里结义？"
PROBE_ANSWER: list[BaseMessage] = [HumanMessage("用一句话回答：一年有几个季节？")]


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
    try:
        reports = asyncio.run(check_models(Settings()))
    except LLMNotConfiguredError as err:
        print(err, file=sys.stderr)
        return 2
    print(json.dumps([asdict(r) for r in reports], ensure_ascii=False, indent=2) if args.json else render(reports))
    return 0 if all(r.ok for r in reports) else 1
