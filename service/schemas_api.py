"""Request and response models of the HTTP API (the OpenAPI schema at /docs is built from these).

Requests forbid unknown fields so a misspelt option is a 422, never silently ignored.
Text fields are stripped; the configurable length limit (`MAX_QUESTION_CHARS`) is checked
by the API because it is a setting, not a constant.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from core.schema import Mode
from retrieval.lists import Filters
from service.graph import QueryOptions

MAX_K = 50

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
K = Annotated[int, Field(ge=1, le=MAX_K, description=f"number of hits, 1..{MAX_K}")]


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchRequest(Request):
    query: Text = Field(description="the search text (at most MAX_QUESTION_CHARS characters)")
    mode: Mode = Mode.HYBRID
    k: K = 10
    filters: Filters | None = None


class CompareRequest(Request):
    query: Text = Field(description="the search text (at most MAX_QUESTION_CHARS characters)")
    k: K = 10
    modes: list[Mode] = Field(default=[Mode.VECTOR, Mode.HYBRID], min_length=2, max_length=5)
    filters: Filters | None = None

    @field_validator("modes")
    @classmethod
    def _distinct(cls, modes: list[Mode]) -> list[Mode]:
        if len(set(modes)) != len(modes):
            raise ValueError("modes must be distinct")
        return modes


class QueryRequest(QueryOptions):
    """The question plus the workflow's `QueryOptions` (defaults: MAX_RETRIEVALS, MAX_WEB_SEARCHES)."""

    model_config = ConfigDict(extra="forbid")

    question: Text = Field(description="the question (at most MAX_QUESTION_CHARS characters)")

    def options(self) -> QueryOptions:
        return QueryOptions.model_validate(self.model_dump(exclude={"question"}))


class ErrorResponse(BaseModel):
    detail: str


class FieldError(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorResponse(BaseModel):
    detail: list[FieldError]
    message: str = Field(description="the same errors as one sentence naming each field")


class ElasticsearchStatus(BaseModel):
    url: str
    reachable: bool
    status: str | None = Field(None, description="cluster health: green, yellow or red")
    nodes: int | None = Field(None, description="nodes in the cluster")
    data_nodes: int | None = None
    error: str | None = None


class IndexStatus(BaseModel):
    name: str
    present: bool
    health: str | None = Field(None, description="the index's health; red means some of it cannot be searched")
    docs: int | None = None
    embedder: str | None = None
    embedder_matches: bool | None = None
    error: str | None = None


class ReadyResponse(BaseModel):
    ready: bool = Field(description="search works: Elasticsearch reachable, index present, embedder matching")
    elasticsearch: ElasticsearchStatus
    index: IndexStatus
    embedder: dict[str, Any]
    llm_configured: bool = Field(description="without it (or when unreachable) answers are extractive quotes")
    answer_mode: str = Field(description="ANSWER_MODE: auto (model when configured and reachable), llm, extractive")
    web_search_configured: bool


class ModesResponse(BaseModel):
    modes: list[Mode] = Field(description="every retrieval mode, `mode` of /search and /query")
    default: Mode


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"
