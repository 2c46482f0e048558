"""The workflow's state (what the nodes read and update), its shared tools and its per-query run context."""

import operator
import time
import uuid
from dataclasses import dataclass, field
from typing import Annotated, Literal, TypedDict

from core.access import Scope
from core.config import Settings
from core.schema import Mode
from retrieval.conflicts import Conflict
from retrieval.extractive import PartAnswer
from retrieval.results import Hit
from retrieval.retriever import Retriever
from service.graph.memory import JudgementMemory, VerdictScope
from service.graph.schemas import AnswerMode, ChatTurn, Citation, EvaluationStep, GivenSource, TraceStep
from service.llm.client import ChatModel, LLMProbe
from service.websearch import WebResult, WebSearch


class Passage(Hit):
    """A retrieved chunk; `rank` is its best 1-based rank over all retrievals that found it,
    `found_by` the sub-question that first retrieved it."""

    rank: int
    found_by: str = ""


Count = Annotated[int, operator.add]  # a counter: a node returns how many it adds (the run starts at 0)


class WorkflowState(TypedDict, total=False):
    """The state, and (every key optional) the partial update a node returns; LangGraph merges it."""

    question: str  # standalone question (rewritten when there is a history)
    history: list[ChatTurn]
    instructions: str  # the client's system prompt: only the answer's wording sees it
    given: list[GivenSource]  # sources the client sent with the question, numbered first
    history_terms: list[str]  # extractive mode: the earlier question's terms searched with a follow-up
    route: Literal["simple", "complex"]
    route_reason: str
    sub_questions: list[str]
    # extractive mode: what to search per sub-question, hits interleaved (default: the sub-question itself)
    search_texts: list[list[str]]
    cursor: int  # index of the next sub-question to retrieve for
    retrievals: Count
    passages: dict[str, Passage]  # merged by chunk id, best score and rank kept
    found: dict[str, list[str]]  # sub-question -> chunk ids its retrieval returned, best first
    part_answers: list[PartAnswer]  # extractive mode: the verdict and quotes per question part
    conflicts: list[Conflict]  # the last verdict's: cited sources that disagree
    web_results: list[WebResult]  # kept apart from local passages
    web_searches: Count
    web_unavailable: str | None  # why the web could not be searched, said in the answer
    # Decisions the graphs' routers read (each graph names its own next node, workflow.py):
    retrieve_more: bool  # the planner's: retrieve the next sub-question (else evaluate)
    search_web: bool  # the last verdict's: search the web for what is missing (else answer)
    web_found: bool  # the last web search's: new results to judge again (else answer)
    evaluations: Annotated[list[EvaluationStep], operator.add]
    llm_calls: Count
    answer: str
    reasoning: str  # the answer model's reasoning, kept out of `answer`
    citations: list[Citation]
    trace: Annotated[list[TraceStep], operator.add]
    warnings: Annotated[list[str], operator.add]


@dataclass(frozen=True)
class WorkflowTools:
    """What every run of the workflow shares: the retriever, the models, web search, the judgement log."""

    retriever: Retriever
    settings: Settings
    judge_llm: ChatModel | None
    answer_llm: ChatModel | None
    web_search: WebSearch | None
    judgements: JudgementMemory | None
    probe: LLMProbe | None = None

    def for_scope(self, scope: Scope, asker: str = "") -> "WorkflowDeps":
        """A run answering `asker` from `scope`: the base and what the asking caller may read of it."""
        return WorkflowDeps(
            **{name: getattr(self, name) for name in self.__dataclass_fields__}, scope=scope, asker=asker
        )


@dataclass(frozen=True)
class WorkflowDeps(WorkflowTools):
    """One run's dependencies: the shared tools and the scope every retrieval of the run reads."""

    scope: Scope = field(kw_only=True)
    asker: str = field(default="", kw_only=True)  # the principal asking: its questions are its own

    @property
    def verdict_scope(self) -> VerdictScope:
        return VerdictScope(self.scope.kb, self.scope.documents.key, self.asker)


@dataclass
class RunContext:
    """Per-query dependencies and limits, handed to every node by LangGraph's runtime."""

    deps: WorkflowDeps
    retrieval_mode: Mode
    k: int
    web: bool
    rerank: bool
    max_retrievals: int
    max_web_searches: int
    max_llm_calls: int
    time_budget_s: float
    answer_mode: AnswerMode = "llm"
    mode_reason: str = ""
    query_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.started
