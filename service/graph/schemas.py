"""Data the workflow exchanges: the models' structured outputs and the public result types.

The structured-output classes carry no docstrings or field descriptions on purpose: their
JSON schema is sent to the model (as the tool definition, the response format or in the
prompt: `service/structured.py`), and every word the model reads lives in `prompts.py`.
"""

import re
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, Field, StrictBool, ValidationError, field_validator

from core.contract import Choice, StrictModel
from core.schema import Mode
from retrieval.conflicts import Conflict
from retrieval.extractive import PartAnswer

MAX_SUB_QUESTIONS = 8
MAX_MISSING = 6

AnswerMode = Literal["llm", "extractive"]


def _as_list(value: object) -> object:
    """Weaker models sometimes send null or one string where a list is asked for."""
    if value is None:
        return []
    if isinstance(value, str):
        return [item for item in re.split(r"[\n；;]+", value) if item.strip()]
    return value


def _clean(items: list[str], limit: int) -> list[str]:
    unique: list[str] = []
    for item in (s.strip() for s in items):
        if item and item not in unique:
            unique.append(item)
    return unique[:limit]


# --- structured outputs of the judgement model ----------------------------------------


class StandaloneQuestion(BaseModel):
    question: str = Field(min_length=1)


class RouteDecision(BaseModel):
    strategy: Literal["simple", "complex"]
    reason: str = ""


class Decomposition(BaseModel):
    sub_questions: list[str] = Field(min_length=1)
    reason: str = ""

    @field_validator("sub_questions", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return _as_list(value)

    @field_validator("sub_questions")
    @classmethod
    def _limit(cls, value: list[str]) -> list[str]:
        cleaned = _clean(value, MAX_SUB_QUESTIONS)
        if not cleaned:
            raise ValueError("at least one non-empty sub-question")
        return cleaned


class PlanDecision(BaseModel):
    next_action: Literal["retrieve", "evaluate"]
    reason: str = ""


class JudgedClaim(BaseModel):
    source: int
    says: str = Field(min_length=1)


class JudgedConflict(BaseModel):
    claim: str = Field(min_length=1)
    sources: list[JudgedClaim] = Field(min_length=2)


def _conflicts(value: object) -> list[JudgedConflict]:
    """The well-formed conflicts of a verdict, each naming two sources or more; a malformed one is
    dropped, never the verdict (a weak model's habit must not cost the judgement)."""
    kept: list[JudgedConflict] = []
    for item in value if isinstance(value, list) else []:
        try:
            conflict = JudgedConflict.model_validate(item)
        except ValidationError:
            continue
        if len({claim.source for claim in conflict.sources}) > 1:
            kept.append(conflict)
    return kept[:MAX_MISSING]


# A verdict. `enough` must be a JSON boolean: "true"/"yes" strings are unparseable (the seeds' rule).
class Judgement(BaseModel):
    enough: StrictBool
    missing: list[str] = Field(default_factory=list)
    reason: str = ""
    conflicts: list[JudgedConflict] = Field(default_factory=list)

    @field_validator("conflicts", mode="before")
    @classmethod
    def _well_formed(cls, value: object) -> object:
        return _conflicts(value)

    @field_validator("missing", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return _as_list(value)

    @field_validator("missing")
    @classmethod
    def _limit(cls, value: list[str]) -> list[str]:
        return _clean(value, MAX_MISSING)


# The evaluation before any web search: it may propose a web query.
class Evaluation(Judgement):
    web_query: str | None = None


# The evaluation after a web search: its own prompt, and no `web_query` to ask for.
class EvaluationWithWeb(Judgement):
    pass


# --- public request / result types -----------------------------------------------------


class EvaluationStep(Evaluation):
    """One sufficiency verdict and where it came from (the model, the cache, or code)."""

    with_web: bool = False
    source: Literal["model", "cache", "no_context", "parse_error", "budget", "extractive"] = "model"


class ChatTurn(StrictModel):
    role: Literal["user", "assistant"]
    content: str


class QueryOptions(StrictModel):
    retrieval_mode: Choice[Mode] = Field(
        Mode.HYBRID,
        validation_alias=AliasChoices("retrieval_mode", "mode"),
        description="how each sub-question is searched; `mode`, its older name, is still accepted",
    )
    k: int = Field(8, ge=1, le=50)
    web: bool = True
    rerank: bool = Field(True, description="rerank hybrid's fused candidates when a reranker is configured")
    max_retrievals: int | None = Field(None, ge=1, le=20)
    max_web_searches: int | None = Field(None, ge=0, le=5)
    history: list[ChatTurn] = Field(default_factory=list)


class GivenSource(BaseModel):
    """A passage the client sent with the question (a file attached in Open WebUI, or its own web
    search): evidence like the base's, kept apart and cited as the client's."""

    id: str = Field(description="the client's id of the source")
    name: str = Field(description="its name as the client gave it: a file name or a URL")
    text: str

    @property
    def url(self) -> str | None:
        """The name, when it is a web page's address (Open WebUI's own web search names them so)."""
        return self.name if self.name.startswith(("http://", "https://")) else None


class ClientContext(BaseModel):
    """What a chat client sends besides the question: its system prompt, which shapes only how the
    answer is written (never the honesty rules, never a judgement), and the sources it attached."""

    instructions: str = ""
    given: list[GivenSource] = Field(default_factory=list)


class Citation(BaseModel):
    number: int
    kind: Literal["local", "web", "given"]
    title: str
    chapter: int | None = None
    source: str = ""
    url: str | None = None
    snippet: str = ""
    # Local passages: page (3 or "3-4") and heading path, and the label the prompt numbered it with.
    page: int | str | None = None
    section: str | None = None
    # Spreadsheets: the sheet and its rows (35 or "35-52"); decks: the slide.
    sheet: str | None = None
    rows: int | str | None = None
    slide: int | None = None
    label: str = ""
    chunk_id: str | None = Field(None, description="local passages: the cited chunk's id (rate an answer with it)")
    text: str = Field(
        "", description="the whole passage cited (a local chunk, a web page's text): the page shows the quote in it"
    )


class TraceStep(BaseModel):
    node: str
    ms: float
    outcome: str


class TokenUsage(BaseModel):
    """Tokens the chat models counted for one question, over every call (0 when no model answered)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class QueryResult(BaseModel):
    answer_id: str = Field(
        "", description="the answer's id in the answer log: POST /answers/{answer_id}/feedback rates it"
    )
    question: str
    answer: str
    reasoning: str = Field(
        "",
        description="the answer model's reasoning (<think> block or reasoning_content), never part of `answer`; "
        "empty when it did not reason or SHOW_REASONING=false",
    )
    answer_mode: AnswerMode = Field(
        "llm",
        validation_alias=AliasChoices("answer_mode", "mode"),
        serialization_alias="mode",  # the response's field name, as before
        description="llm: written by the model; extractive: quotes only, no model",
    )
    mode_reason: str = Field("", description="why this answer mode (ANSWER_MODE, model configured / reachable)")
    route: str
    route_reason: str
    sub_questions: list[str]
    evaluations: list[EvaluationStep]
    web_used: bool
    citations: list[Citation]
    trace: list[TraceStep]
    timings: dict[str, float]
    llm_calls: int
    web_calls: int
    warnings: list[str]
    parts: list[PartAnswer] = Field(
        default_factory=list, description="extractive mode: per question part, its quotes and the verdict's figures"
    )
    conflicts: list[Conflict] = Field(
        default_factory=list,
        description="sources the answer rests on that disagree (a figure, a date, a name, a yes/no): each side "
        "cited; the answer states them too",
    )
    usage: TokenUsage = Field(
        default_factory=TokenUsage, description="tokens of every model call, as the endpoint counted them"
    )


class WorkflowEvent(BaseModel):
    event: Literal["mode", "node", "quote", "token", "reasoning", "final", "error"]
    data: dict[str, Any]


class GapAspect(BaseModel):
    aspect: str
    count: int


class GapConflict(BaseModel):
    """A point on which the base's sources (or the base and the web) were found to disagree."""

    claim: str
    count: int = Field(description="verdicts that found it")
    sources: list[str] = Field(description="the disagreeing sources by name: the documents to fix")


class ReportedGap(BaseModel):
    """An answer its asker voted down without naming a passage that answers it: the base may lack one."""

    answer_id: str
    question: str
    comment: str
    rated_at: str


class GapReport(BaseModel):
    index: str  # the judgement log
    knowledge_base: str
    total_questions: int
    questions_needing_web: int
    web_share: float
    evaluations: int
    top_missing: list[GapAspect]
    conflicts: list[GapConflict] = Field(
        default_factory=list, description="these documents disagree: the points and the sources found disagreeing"
    )
    reported: list[ReportedGap] = Field(
        default_factory=list,
        description="answers voted down with no passage picked (the answer log: the caller's own, an admin's all)",
    )
