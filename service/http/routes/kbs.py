"""`/kbs`: list, create, inspect and delete knowledge bases (core/kbs.py keeps them in Elasticsearch)."""

from contextlib import suppress
from dataclasses import asdict
from typing import Literal

from fastapi import APIRouter, Depends, HTTPException, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field

from core.config import Settings
from core.contract import StrictModel
from core.kbs import KB_NAME_PATTERN, Calibration, KnowledgeBase, KnowledgeBaseStats
from core.store import IndexNotFoundError
from retrieval.profiles import ProfileName
from retrieval.results import FusionUsed
from retrieval.retriever import RetrievalParams, fusion_used
from service.deps import AdminBase, CallerDep, ReadBase, ServicesDep, get_caller
from service.http.openapi import error_responses
from service.principals import Caller, Role

router = APIRouter(tags=["knowledge bases"], dependencies=[Depends(get_caller)], responses=error_responses(404, 503))


class FusionView(FusionUsed):
    """The fusion a base's hybrid search uses (as a hybrid result names it), with when and why it was set."""

    chosen_at: str = ""
    note: str = ""


class CalibrationFigures(BaseModel):
    answerable_answered: float = Field(description="share of the answerable questions answered")
    refused: float = Field(description="share of the questions to refuse that were refused")
    balanced_accuracy: float
    answerable: int
    negative: int


class CalibrationView(BaseModel):
    """The base's own extractive thresholds and alias weight, chosen on its questions (its admins see on
    which and how they fared; other readers the values only)."""

    min_similarity: float = Field(description="EXTRACTIVE_MIN_SIMILARITY on this base")
    min_coverage: float = Field(description="EXTRACTIVE_MIN_COVERAGE on this base")
    alias_weight: float | None = Field(description="ALIAS_WEIGHT on this base (null: the service's)")
    source: Literal["questions", "self-made"] = Field(
        description="its answerable questions: the base's own question set, or made from its text"
    )
    questions: int = Field(0, description="questions of its question set asked")
    ratings: int = Field(0, description="knowledge gaps accepted from ratings, asked as questions to refuse")
    answerable: int = Field(0, description="self-made answerable questions asked")
    negative: int = Field(0, description="self-made questions to refuse asked")
    defaults: dict[str, float] = Field(default_factory=dict, description="the service's values when it was chosen")
    at_defaults: CalibrationFigures | None = Field(None, description="figures on those questions at the defaults")
    at_chosen: CalibrationFigures | None = Field(None, description="figures on those questions at the chosen values")
    chosen_at: str = ""
    note: str = Field("", description="the rule's verdict in words")

    @classmethod
    def of(cls, calibration: Calibration, admin: bool) -> "CalibrationView":
        values = asdict(calibration)
        if not admin:
            values = {key: values[key] for key in ("min_similarity", "min_coverage", "alias_weight", "source")}
        for key in ("at_defaults", "at_chosen"):
            values[key] = values.get(key) or None
        return cls.model_validate(values)


class PassageWindowsView(BaseModel):
    size: int = Field(description="characters per passage at most")
    overlap: int = Field(description="characters neighbouring passages share at most")


class KnowledgeBaseView(BaseModel):
    name: str
    description: str = Field("", description="what it holds, as its creator wrote")
    default: bool = Field(description="the base requests without `kb` use (ES_INDEX)")
    role: Role | None = Field(description="the caller's role on it")
    documents: int = Field(description="documents the caller may read")
    chunks: int = Field(description="chunks the caller may read")
    last_update: str | None = Field(description="the last write of a chunk the caller may read")
    embedder: str
    dim: int
    chunk_size: int
    chunk_overlap: int
    shards: int
    replicas: int
    created_at: str | None
    fusion: FusionView
    profile: str | None = Field(
        description="the base's text profile (rules a kind of text needs, e.g. classical-novel); null: none"
    )
    calibration: CalibrationView | None = Field(
        None, description="the base's own extractive thresholds and alias weight (null: the service's)"
    )
    passages: PassageWindowsView | None = Field(
        description="the passage windows its chunks hold vectors of (null: one vector per chunk, built before "
        + "passage vectors: rebuild with `python -m indexing ... --recreate` to get them)"
    )


class KnowledgeBaseList(BaseModel):
    kbs: list[KnowledgeBaseView]


class CreateKnowledgeBase(StrictModel):
    name: str = Field(pattern=KB_NAME_PATTERN, max_length=100, description="a-z, 0-9, '-', '_', '.'")
    description: str = Field("", max_length=500, description="what it holds, shown beside its name")
    chunk_size: int | None = Field(None, ge=50, le=8000, description="characters per chunk (default CHUNK_SIZE)")
    chunk_overlap: int | None = Field(
        None,
        ge=0,
        le=2000,
        description="smaller than chunk_size; default CHUNK_OVERLAP, at most a quarter of chunk_size",
    )
    shards: int | None = Field(None, ge=1, le=64, description="default ES_SHARDS")
    replicas: int | None = Field(None, ge=0, le=8, description="default ES_REPLICAS")
    embedder: str | None = Field(
        None, max_length=200, description="the service's EMBEDDER, the only one it embeds with (the default)"
    )


def invalid(field: str, message: str) -> RequestValidationError:
    """A 422 in the shape of FastAPI's own, for a check that needs the service's settings."""
    return RequestValidationError([{"type": "value_error", "loc": ("body", field), "msg": message}])


def fusion_view(settings: Settings, kb: KnowledgeBase, caller: Caller) -> FusionView:
    used = fusion_used(RetrievalParams.from_settings(settings).with_fusion(kb.fusion), kb.fusion)
    stored = kb.fusion.seen_by(caller.may(kb.name, "admin")) if kb.fusion else None
    return FusionView(
        **used.model_dump(), chosen_at=stored.chosen_at if stored else "", note=stored.note if stored else ""
    )


def _view(settings: Settings, kb: KnowledgeBase, stats: KnowledgeBaseStats | None, caller: Caller) -> KnowledgeBaseView:
    return KnowledgeBaseView(
        name=kb.name,
        description=kb.description,
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
        fusion=fusion_view(settings, kb, caller),
        passages=PassageWindowsView(**kb.passages.to_meta()) if kb.passages else None,
        profile=kb.profile,
        calibration=CalibrationView.of(kb.calibration, caller.may(kb.name, "admin")) if kb.calibration else None,
    )


@router.get("/kbs", response_model=KnowledgeBaseList)
def list_kbs(services: ServicesDep, caller: CallerDep) -> KnowledgeBaseList:
    """The bases the caller may read, the default first, with their size and settings (what the caller
    may read of them)."""
    kbs = services.kbs
    names = kbs.readable(caller)
    stats = kbs.stats([caller.scope(name) for name in names])
    views = []
    for name in names:
        with suppress(IndexNotFoundError):  # deleted since it was listed
            views.append(_view(services.settings, kbs.read(name), stats.get(name), caller))
    return KnowledgeBaseList(kbs=views)


@router.post("/kbs", response_model=KnowledgeBaseView, status_code=201, responses=error_responses(409, 422))
def create(body: CreateKnowledgeBase, services: ServicesDep, caller: CallerDep) -> KnowledgeBaseView:
    """A new, empty base (needs the write or admin role on every base); 409 when the name is taken."""
    if caller.role not in ("write", "admin"):
        raise HTTPException(403, "creating a knowledge base needs the write or admin role on every base")
    settings, embedder = services.settings, services.embedder
    if body.embedder is not None and body.embedder != embedder.name:
        raise invalid("embedder", f"{body.embedder!r}: this service embeds with {embedder.name!r} only")
    size = body.chunk_size or settings.chunk_size
    # A small chunk_size given alone is valid: the default overlap shrinks to fit it.
    overlap = body.chunk_overlap if body.chunk_overlap is not None else min(settings.chunk_overlap, size // 4)
    if overlap >= size:
        raise invalid("chunk_overlap", f"{overlap} must be smaller than chunk_size ({size})")
    created = services.kbs.create(
        body.name,
        embedder,
        chunk_size=size,
        chunk_overlap=overlap,
        shards=body.shards or settings.es_shards,
        replicas=body.replicas if body.replicas is not None else settings.es_replicas,
        description=body.description.strip(),
    )
    return _view(settings, created, None, caller)


@router.get("/kbs/{kb}", response_model=KnowledgeBaseView, responses=error_responses(422))
def inspect(base: ReadBase, services: ServicesDep) -> KnowledgeBaseView:
    """One base: its size (what the caller may read of it), settings and the fusion its hybrid search uses."""
    stats = services.kbs.stats([base.scope]).get(base.kb)
    return _view(services.settings, services.kbs.read(base.kb), stats, base.caller)


@router.delete("/kbs/{kb}", status_code=204, response_class=Response, responses=error_responses(422))
def delete(base: AdminBase, services: ServicesDep) -> Response:
    """Delete a base and all its chunks (needs the admin role on it)."""
    services.kbs.delete(base.kb)
    return Response(status_code=204)


class KnowledgeBaseChange(StrictModel):
    profile: ProfileName | None = Field(
        description="a text profile (rules a kind of text needs: classical-novel for a classical novel), or null"
    )


@router.patch("/kbs/{kb}", response_model=KnowledgeBaseView, responses=error_responses(422))
def change(body: KnowledgeBaseChange, base: AdminBase, services: ServicesDep) -> KnowledgeBaseView:
    """Change a base's settings (needs the admin role on it): its text profile, e.g. classical-novel for a
    classical novel; null goes back to the default path."""
    services.kbs.write_profile(base.kb, body.profile)
    stats = services.kbs.stats([base.scope]).get(base.kb)
    return _view(services.settings, services.kbs.read(base.kb), stats, base.caller)
