"""`/kbs`: list, create, inspect and delete knowledge bases (core/kbs.py keeps them in Elasticsearch)."""

from contextlib import suppress
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field

from core.config import Settings
from core.contract import StrictModel
from core.embeddings import Embedder
from core.kbs import KB_NAME_PATTERN, KnowledgeBase, KnowledgeBaseStats, create_kb, delete_kb, kb_stats, read_kb
from core.store import IndexNotFoundError
from retrieval.results import FusionUsed
from retrieval.retriever import RetrievalParams, fusion_used
from service.api import ESDep, SettingsDep
from service.auth import Caller, CallerDep, KbAccess, KnowledgeBasesDep, Role, kb_access
from service.openapi import error_responses

router = APIRouter(tags=["knowledge bases"], responses=error_responses(404, 503))


class FusionView(FusionUsed):
    """The fusion a base's hybrid search uses (as a hybrid result names it), with when and why it was set."""

    chosen_at: str = ""
    note: str = ""


class KnowledgeBaseView(BaseModel):
    name: str
    default: bool = Field(description="the base requests without `kb` use (ES_INDEX)")
    role: Role | None = Field(description="the caller's role on it")
    documents: int
    chunks: int
    last_update: str | None
    embedder: str
    dim: int
    chunk_size: int
    chunk_overlap: int
    shards: int
    replicas: int
    created_at: str | None
    fusion: FusionView


class KnowledgeBaseList(BaseModel):
    kbs: list[KnowledgeBaseView]


class CreateKnowledgeBase(StrictModel):
    name: str = Field(pattern=KB_NAME_PATTERN, max_length=100, description="a-z, 0-9, '-', '_', '.'")
    chunk_size: int | None = Field(None, ge=50, le=8000, description="characters per chunk (default CHUNK_SIZE)")
    chunk_overlap: int | None = Field(None, ge=0, le=2000, description="default CHUNK_OVERLAP")
    shards: int | None = Field(None, ge=1, le=64, description="default ES_SHARDS")
    replicas: int | None = Field(None, ge=0, le=8, description="default ES_REPLICAS")
    embedder: str | None = Field(None, max_length=200, description="must be the service's EMBEDDER (the default)")


def invalid(field: str, message: str) -> RequestValidationError:
    """A 422 in the shape of FastAPI's own, for a check that needs the service's settings."""
    return RequestValidationError([{"type": "value_error", "loc": ("body", field), "msg": message}])


def fusion_view(settings: Settings, kb: KnowledgeBase) -> FusionView:
    used = fusion_used(RetrievalParams.from_settings(settings).with_fusion(kb.fusion), kb.fusion)
    stored = kb.fusion
    return FusionView(
        **used.model_dump(), chosen_at=stored.chosen_at if stored else "", note=stored.note if stored else ""
    )


def _view(settings: Settings, kb: KnowledgeBase, stats: KnowledgeBaseStats | None, caller: Caller) -> KnowledgeBaseView:
    return KnowledgeBaseView(
        name=kb.name,
        default=kb.name == settings.es_index,
        role=caller.role_for(kb.name),
        documents=stats.documents if stats else 0,
        chunks=stats.chunks if stats else 0,
        last_update=stats.last_update if stats else None,
        embedder=kb.embedder,
        dim=kb.dim,
        chunk_size=kb.chunk_size,
        chunk_overlap=kb.chunk_overlap,
        shards=kb.shards,
        replicas=kb.replicas,
        created_at=kb.created_at,
        fusion=fusion_view(settings, kb),
    )


@router.get("/kbs", response_model=KnowledgeBaseList)
def list_kbs(settings: SettingsDep, es: ESDep, caller: CallerDep, kbs: KnowledgeBasesDep) -> KnowledgeBaseList:
    """The bases the caller may read, the default first, with their size and settings."""
    kbs.forget()
    names = kbs.readable(caller)
    stats = kb_stats(es, names)
    views = []
    for name in names:
        with suppress(IndexNotFoundError):  # deleted since it was listed
            views.append(_view(settings, read_kb(es, name, settings), stats.get(name), caller))
    return KnowledgeBaseList(kbs=views)


@router.post("/kbs", response_model=KnowledgeBaseView, status_code=201, responses=error_responses(409, 422))
def create(
    body: CreateKnowledgeBase,
    request: Request,
    settings: SettingsDep,
    es: ESDep,
    caller: CallerDep,
    kbs: KnowledgeBasesDep,
) -> KnowledgeBaseView:
    """A new, empty base (needs the write or admin role on every base); 409 when the name is taken."""
    if caller.role not in ("write", "admin"):
        raise HTTPException(403, "creating a knowledge base needs the write or admin role on every base")
    embedder: Embedder = request.app.state.embedder
    if body.embedder is not None and body.embedder != embedder.name:
        raise invalid("embedder", f"{body.embedder!r}: this service embeds with {embedder.name!r} only")
    size = body.chunk_size or settings.chunk_size
    overlap = body.chunk_overlap if body.chunk_overlap is not None else settings.chunk_overlap
    if overlap >= size:
        raise invalid("chunk_overlap", f"{overlap} must be smaller than chunk_size ({size})")
    create_kb(
        es,
        body.name,
        embedder,
        chunk_size=size,
        chunk_overlap=overlap,
        shards=body.shards or settings.es_shards,
        replicas=body.replicas if body.replicas is not None else settings.es_replicas,
    )
    kbs.forget()
    return _view(settings, read_kb(es, body.name, settings), None, caller)


@router.get("/kbs/{kb}", response_model=KnowledgeBaseView, responses=error_responses(422))
def inspect(
    access: Annotated[KbAccess, Depends(kb_access("read"))], settings: SettingsDep, es: ESDep
) -> KnowledgeBaseView:
    """One base: its size, settings and the fusion its hybrid search uses."""
    return _view(settings, read_kb(es, access.kb, settings), kb_stats(es, [access.kb]).get(access.kb), access.caller)


@router.delete("/kbs/{kb}", status_code=204, response_class=Response, responses=error_responses(422))
def delete(access: Annotated[KbAccess, Depends(kb_access("admin"))], es: ESDep, kbs: KnowledgeBasesDep) -> Response:
    """Delete a base and all its chunks (needs the admin role on it)."""
    delete_kb(es, access.kb)
    kbs.forget()
    return Response(status_code=204)
