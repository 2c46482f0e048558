"""Request and response models of the HTTP API (the OpenAPI schema at /docs is built from these).

Requests are `core.contract.StrictModel`s: strict JSON types, unknown fields forbidden.
Text fields must hold a non-space character; the configurable length limit (`MAX_QUESTION_CHARS`) is checked
by `service.inputs.valid_text`, the one check of every protocol, because it is a setting, not a constant.
"""

from typing import Annotated, Any, Literal

from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, Field, field_validator
from pydantic_core import PydanticCustomError

from core.contract import Choice, StrictModel
from core.kbs import KB_NAME_PATTERN
from core.schema import Mode
from retrieval.lists import Filters
from service.graph import QueryOptions
from service.inputs import is_blank

MAX_K = 50


def _not_blank(text: str) -> str:
    """Some character that no regex dialect or Python counts as space (the pattern below, exactly)."""
    if is_blank(text):
        raise PydanticCustomError("string_blank", "must contain a non-space character")
    return text


# Not only whitespace (as Python, ECMAScript and Rust see it: the schema's pattern is read by all
# of them). The API strips the text once its length as sent is checked (`service.inputs.valid_text`).
Text = Annotated[str, AfterValidator(_not_blank), Field(json_schema_extra={"pattern": r"[^\s\x1c-\x1f\x85\ufeff]"})]
K = Annotated[int, Field(ge=1, le=MAX_K, description=f"number of hits, 1..{MAX_K}")]
KbName = Annotated[
    str, Field(pattern=KB_NAME_PATTERN, max_length=100, description="knowledge base (default: ES_INDEX)")
]


class SearchRequest(StrictModel):
    query: Text = Field(description="the search text (at most MAX_QUESTION_CHARS characters)")
    kb: KbName | None = None
    mode: Choice[Mode] = Mode.HYBRID
    k: K = 10
    filters: Filters | None = None
    rerank: bool = Field(True, description="rerank hybrid's fused candidates when a reranker is configured (RERANKER)")


class CompareRequest(StrictModel):
    query: Text = Field(description="the search text (at most MAX_QUESTION_CHARS characters)")
    kb: KbName | None = None
    k: K = 10
    modes: list[Choice[Mode]] = Field(
        default=[Mode.VECTOR, Mode.HYBRID], min_length=2, max_length=5, json_schema_extra={"uniqueItems": True}
    )
    filters: Filters | None = None
    rerank: bool = Field(
        True, description="rerank the hybrid column (RERANKER); each of its hits shows its rank before reranking"
    )

    @field_validator("modes")
    @classmethod
    def _distinct(cls, modes: list[Mode]) -> list[Mode]:
        if len(set(modes)) != len(modes):
            raise ValueError("modes must be distinct")
        return modes


class QueryRequest(QueryOptions):
    """The question plus the workflow's `QueryOptions` (defaults: MAX_RETRIEVALS, MAX_WEB_SEARCHES)."""

    question: Text = Field(description="the question (at most MAX_QUESTION_CHARS characters)")
    kb: KbName | None = None

    def options(self) -> QueryOptions:
        return QueryOptions.model_validate(self.model_dump(exclude={"question", "kb"}))


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
    """Only `ready` for a caller who is not an admin of the default base (no key, or a reader): the
    details name the base, its size and the cluster."""

    ready: bool = Field(description="search works: Elasticsearch reachable, index present, embedder matching")
    elasticsearch: ElasticsearchStatus | None = None
    index: IndexStatus | None = None
    embedder: dict[str, Any] | None = None
    llm_configured: bool | None = Field(None, description="without it (or when unreachable) answers are extractive")
    answer_mode: str | None = Field(
        None, description="ANSWER_MODE: auto (model when configured and reachable), llm, extractive"
    )
    web_search_configured: bool | None = None


class ModesResponse(BaseModel):
    modes: list[Mode] = Field(description="every retrieval mode, `mode` of /search and /query")
    default: Mode


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"


class JobAccepted(BaseModel):
    """A background job was stored (202): its id, and where to follow it (also the `Location` header)."""

    job: str = Field(description="the job's id")
    status_url: str = Field(description="where to follow the job")

    def response(self) -> JSONResponse:
        return JSONResponse(self.model_dump(), status_code=202, headers={"Location": self.status_url})
