"""Dify's External Knowledge API: `POST /retrieval` over the hybrid retriever.

Dify sends `{"knowledge_id", "query", "retrieval_setting": {"top_k", "score_threshold"},
"metadata_condition"?}` with `Authorization: Bearer <key>` and reads `{"records": [{"content",
"score", "title", "metadata"}]}`. Records come in the hybrid ranking (the service's best order);
`metadata` is always an object (Dify fails on null).

`score` is the cosine similarity of the query's and the chunk's embeddings (negatives as 0),
the measure the vector list ranks by, computed for every record whichever list found it. It
depends only on the query and the chunk, never on the other hits, so one `score_threshold` keeps
its meaning across queries (the fused hybrid score does not: it is relative to each result list).

Errors are `{"error_code", "error_msg"}` with Dify's codes: 1001 (no `Bearer` header) and
1002 (a key that is not accepted) with HTTP 403, 2001 (a knowledge base that does not exist, or
not for this key) with 404. Other failures carry their HTTP status as the code (422 bad input,
503 Elasticsearch away, ...), with the message the rest of the API gives.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from core.contract import StrictModel
from core.schema import Mode
from retrieval.results import Hit
from service.deps import ServicesDep
from service.http.openapi import error_responses
from service.http.protocols.access import open_base
from service.http.protocols.errors import protocol_route
from service.http.protocols.metadata import MetadataCondition
from service.http.schemas import MAX_K, Text
from service.inputs import valid_text
from service.kbs import BaseAccess, UnknownKnowledgeBase
from service.principals import EVERYONE, Caller

INVALID_HEADER, AUTHORIZATION_FAILED, KNOWLEDGE_NOT_FOUND = 1001, 1002, 2001


class RetrievalSetting(StrictModel):
    """JSON types as the schema says them (`score_threshold: false` was taken as 0); fields Dify may add are ignored."""

    model_config = ConfigDict(extra="ignore")

    top_k: int = Field(ge=1, le=MAX_K, description=f"records at most, 1..{MAX_K}")
    score_threshold: float = Field(0.0, ge=0.0, le=1.0, description="the lowest `score` returned (0: all)")
    rerank: bool = Field(True, description="ours, beside Dify's: rerank the hybrid candidates (RERANKER)")


class RetrievalRequest(StrictModel):
    """Dify's request, its JSON types strict; fields Dify may add later are ignored."""

    model_config = ConfigDict(extra="ignore")

    knowledge_id: str = Field(min_length=1, description="the knowledge base")
    query: Text
    retrieval_setting: RetrievalSetting
    metadata_condition: MetadataCondition | None = None


class DifyRecord(BaseModel):
    content: str
    score: float = Field(ge=0.0, le=1.0, description="cosine similarity of query and chunk embeddings")
    title: str
    metadata: dict[str, Any]


class RetrievalResponse(BaseModel):
    records: list[DifyRecord]
    # Beside Dify's `records` (Dify ignores it), only when there is one: e.g. a failed reranker.
    warnings: list[str] = Field(default_factory=list)


class DifyError(HTTPException):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(status_code=status, detail=message)
        self.code = code


def render_error(status: int, message: str, err: Exception | None) -> tuple[int, dict[str, Any]]:
    """Dify's body: its own code when the error has one (1001, 1002, 2001), else the HTTP status."""
    code = getattr(err, "code", None) or (KNOWLEDGE_NOT_FOUND if status == 404 else status)
    return status, {"error_code": code, "error_msg": message}


def dify_caller(request: Request, services: ServicesDep) -> Caller:
    """Dify sends its API key as `Authorization: Bearer <key>`; without keys the service is open."""
    keys = services.keys
    if keys.open:
        return EVERYONE
    scheme, _, key = (request.headers.get("authorization") or "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise DifyError(403, INVALID_HEADER, "Invalid Authorization header format. Expected 'Bearer <api-key>' format.")
    caller = keys.caller(key.strip())
    if caller is None:
        raise DifyError(403, AUTHORIZATION_FAILED, "Authorization failed")
    return caller


class DifyErrorBody(BaseModel):
    error_code: int
    error_msg: str


router = APIRouter(
    tags=["dify"],
    dependencies=[Depends(dify_caller)],
    route_class=protocol_route(render_error),
    responses=error_responses(400, 403, 404, 409, 413, 422, 502, 503, model=DifyErrorBody),  # Dify's error shape
)


def record(hit: Hit) -> DifyRecord:
    """A hit as a Dify record: our fields and the document's own metadata in one flat object."""
    ours = {
        "id": hit.id,
        "doc_id": hit.doc_id,
        "chunk_index": hit.chunk_index,
        "source": hit.source,
        "label": hit.label,
        "chapter": hit.chapter,
        "chapter_title": hit.chapter_title,
        "page": hit.page,
        "section": hit.section,
        "sheet": hit.sheet,
        "rows": hit.rows,
        "slide": hit.slide,
        "hybrid_score": hit.score,
    }
    ours = {key: value for key, value in ours.items() if value is not None}
    theirs = {(f"metadata.{key}" if key in ours else key): value for key, value in hit.metadata.items()}
    return DifyRecord(
        content=hit.text, score=round(hit.similarity or 0.0, 6), title=hit.title or hit.source, metadata=ours | theirs
    )


def _knowledge(
    body: RetrievalRequest, caller: Annotated[Caller, Depends(dify_caller)], services: ServicesDep
) -> BaseAccess:
    """The request's base, once its query is checked (the same limit as `/search`)."""
    valid_text(services.settings, "query", body.query)
    try:
        return open_base(services.kbs, caller, body.knowledge_id)
    except UnknownKnowledgeBase:
        raise DifyError(404, KNOWLEDGE_NOT_FOUND, f"The knowledge does not exist: {body.knowledge_id!r}") from None


@router.post("/retrieval", response_model=RetrievalResponse, response_model_exclude_defaults=True)
async def retrieval(
    body: RetrievalRequest, base: Annotated[BaseAccess, Depends(_knowledge)], services: ServicesDep
) -> RetrievalResponse:
    """Hybrid retrieval's top `top_k`, filtered by `metadata_condition` inside every list, without records under `score_threshold`."""
    setting = body.retrieval_setting
    result = await run_in_threadpool(
        lambda: services.retriever.search(
            base.scope,
            body.query,
            Mode.HYBRID,
            setting.top_k,
            body.metadata_condition,
            similarity=True,
            rerank=setting.rerank,
        )
    )
    records = [record(hit) for hit in result.hits]
    return RetrievalResponse(
        records=[r for r in records if r.score >= setting.score_threshold], warnings=result.warnings
    )
