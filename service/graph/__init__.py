"""The agentic answer workflow (LangGraph): route, decompose, retrieve, evaluate, web fallback, cite."""

from retrieval.conflicts import Conflict
from service.graph.memory import JudgementMemory, VerdictScope, knowledge_gap_report
from service.graph.schemas import (
    ChatTurn,
    Citation,
    ClientContext,
    Evaluation,
    EvaluationStep,
    GapAspect,
    GapReport,
    GivenSource,
    QueryOptions,
    QueryResult,
    ReportedGap,
    TokenUsage,
    TraceStep,
    WorkflowEvent,
)
from service.graph.workflow import (
    WorkflowDeps,
    WorkflowTools,
    build_deps,
    choose_mode,
    ensure_answerable,
    run_query,
    stream_query,
)
from service.llm.client import LLMNotConfiguredError

__all__ = [
    "ChatTurn",
    "Citation",
    "ClientContext",
    "Conflict",
    "Evaluation",
    "EvaluationStep",
    "GapAspect",
    "GapReport",
    "GivenSource",
    "JudgementMemory",
    "LLMNotConfiguredError",
    "QueryOptions",
    "QueryResult",
    "ReportedGap",
    "TokenUsage",
    "TraceStep",
    "VerdictScope",
    "WorkflowDeps",
    "WorkflowEvent",
    "WorkflowTools",
    "build_deps",
    "choose_mode",
    "ensure_answerable",
    "knowledge_gap_report",
    "run_query",
    "stream_query",
]
