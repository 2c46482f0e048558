"""Knowledge bases: many per service, each an alias whose index `_meta` holds its settings.

A knowledge base is what `core.store` already builds (an alias over a versioned index); this
module adds what makes it a first-class object. Its settings (embedder, chunking, shards,
replicas) and its fusion setting live under `_meta.kb` of the concrete index, beside the
corpus dictionary, so they are kept in Elasticsearch, move with a rebuild (`swap_alias`
carries them) and go with the index when it is deleted. A base made by the indexing job has
no `_meta.kb` yet: it is still a base, with the service's defaults.
"""

import re
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from elasticsearch import Elasticsearch, NotFoundError

from core.aliases import Alias
from core.chunking import PassageWindows
from core.config import FusionMethod, Settings
from core.embeddings import Embedder
from core.schema import LIST_MODES, Mode
from core.store import (
    IndexNotFoundError,
    concrete_indices,
    create_index,
    update_kb_meta,
    versioned_name,
    write_aliases,
)

# Lower case, digits, `-`, `_` and `.`, starting with a letter or digit: a valid Elasticsearch alias.
KB_NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,99}$"
_KB_NAME = re.compile(KB_NAME_PATTERN)
_VERSIONED = re.compile(r"-v\d+$")


class InvalidKnowledgeBaseName(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(
            f"invalid knowledge-base name {name!r}: 1 to 100 characters of a-z, 0-9, '-', '_', '.', "
            "starting with a letter or digit"
        )


class KnowledgeBaseExists(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(f"a knowledge base or index named {name!r} already exists")


def check_kb_name(name: str) -> str:
    """`name` when it can name a knowledge base, else `InvalidKnowledgeBaseName`."""
    if not _KB_NAME.fullmatch(name) or name in {".", ".."}:
        raise InvalidKnowledgeBaseName(name)
    return name


@dataclass(frozen=True)
class FusionSetting:
    """How a base's hybrid search fuses its lists: chosen by an evaluation on its questions, or pinned."""

    method: FusionMethod
    rrf_k: int = 60
    depth: int = 10
    lists: tuple[Mode, ...] = LIST_MODES
    weights: dict[str, float] = field(default_factory=dict)
    coverage: float = 0.0  # exponent of a keyword list's coverage of the question (retrieval/fusion.py)
    # The reranker's share of the final score on this base (None: RERANK_WEIGHT; 0: no reranking).
    rerank_weight: float | None = None
    origin: Literal["evaluation", "pinned"] = "pinned"
    chosen_at: str = ""
    note: str = ""  # e.g. the evaluation's report or the person who pinned it

    def seen_by(self, admin: bool) -> "FusionSetting":
        """This setting as a caller sees it: its provenance (an evaluation's job id and time, who
        pinned it) only for the base's admins."""
        return self if admin else replace(self, chosen_at="", note="")

    def to_meta(self) -> dict[str, Any]:
        return asdict(self) | {"method": self.method.value, "lists": [str(mode) for mode in self.lists]}

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> "FusionSetting":
        return cls(
            method=FusionMethod.from_str(meta["method"]),
            rrf_k=int(meta.get("rrf_k", 60)),
            depth=int(meta.get("depth", 10)),
            lists=tuple(Mode.from_str(name) for name in meta.get("lists", LIST_MODES)),
            weights={str(k): float(v) for k, v in (meta.get("weights") or {}).items()},
            coverage=float(meta.get("coverage", 0.0)),
            rerank_weight=None if meta.get("rerank_weight") is None else float(meta["rerank_weight"]),
            origin=meta.get("origin", "pinned"),
            chosen_at=str(meta.get("chosen_at", "")),
            note=str(meta.get("note", "")),
        )


@dataclass(frozen=True)
class Calibration:
    """A base's own abstention thresholds for the extractive verdict and its alias weight, chosen on
    its questions (evaluation/calibration.py), with what they were chosen on and how they fared."""

    min_similarity: float
    min_coverage: float
    alias_weight: float | None  # None: the service's ALIAS_WEIGHT
    source: Literal["questions", "self-made"]  # the answerable questions: its own set, or made from its text
    questions: int = 0  # of its own question set, asked
    ratings: int = 0  # knowledge gaps an admin accepted from ratings, asked as questions to refuse
    answerable: int = 0  # self-made answerable questions asked
    negative: int = 0  # self-made questions to refuse asked
    defaults: dict[str, float] = field(default_factory=dict)  # the service's values when chosen
    at_defaults: dict[str, float] = field(default_factory=dict)  # figures on those questions at the defaults
    at_chosen: dict[str, float] = field(default_factory=dict)  # and at the chosen values
    chosen_at: str = ""
    note: str = ""  # the rule's verdict in words (e.g. why the defaults were kept)

    def to_meta(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> "Calibration":
        def figures(name: str) -> dict[str, float]:
            return {str(k): float(v) for k, v in (meta.get(name) or {}).items()}

        weight = meta.get("alias_weight")
        return cls(
            min_similarity=float(meta["min_similarity"]),
            min_coverage=float(meta["min_coverage"]),
            alias_weight=None if weight is None else float(weight),
            source=meta.get("source", "self-made"),
            questions=int(meta.get("questions", 0)),
            ratings=int(meta.get("ratings", 0)),
            answerable=int(meta.get("answerable", 0)),
            negative=int(meta.get("negative", 0)),
            defaults=figures("defaults"),
            at_defaults=figures("at_defaults"),
            at_chosen=figures("at_chosen"),
            chosen_at=str(meta.get("chosen_at", "")),
            note=str(meta.get("note", "")),
        )


@dataclass(frozen=True)
class KnowledgeBase:
    """A base's name and settings as stored; `fusion` None: the service default (`FUSION`) applies."""

    name: str
    index: str
    embedder: str
    dim: int
    chunk_size: int
    chunk_overlap: int
    shards: int
    replicas: int
    created_at: str | None = None
    fusion: FusionSetting | None = None
    description: str = ""  # what it holds, in its creator's words
    passages: PassageWindows | None = None  # None: one vector per chunk (built before passage vectors)
    # The base's text profile (`retrieval.profiles`: rules a kind of text needs, e.g. classical-novel); None: none.
    profile: str | None = None
    calibration: Calibration | None = None  # None: the service's thresholds and alias weight


@dataclass(frozen=True)
class KnowledgeBaseStats:
    documents: int
    chunks: int
    last_update: str | None


def _mappings(es: Elasticsearch, name: str) -> tuple[str, dict[str, Any]]:
    """(concrete index, its mappings) of the base `name`."""
    try:
        body = es.indices.get_mapping(index=name).body
    except NotFoundError as err:
        raise IndexNotFoundError(name) from err
    index = sorted(body)[0]
    return index, body[index]["mappings"]


def _settings(es: Elasticsearch, index: str) -> tuple[int, int]:
    values = es.indices.get_settings(index=index, name="index.number_of_*").body[index]["settings"]["index"]
    return int(values.get("number_of_shards", 1)), int(values.get("number_of_replicas", 0))


def read_kb(es: Elasticsearch, name: str, settings: Settings) -> KnowledgeBase:
    """The base `name` (an alias, or a concrete index built before aliases); `IndexNotFoundError` if absent."""
    index, mappings = _mappings(es, name)
    meta = mappings.get("_meta", {})
    kb: dict[str, Any] = meta.get("kb", {})
    shards, replicas = _settings(es, index)
    return KnowledgeBase(
        name=name,
        index=index,
        embedder=str(meta.get("embedder", "?")),
        dim=int(meta.get("dim", 0)),
        chunk_size=int(kb.get("chunk_size", settings.chunk_size)),
        chunk_overlap=int(kb.get("chunk_overlap", settings.chunk_overlap)),
        shards=shards,
        replicas=replicas,
        created_at=kb.get("created_at"),
        fusion=FusionSetting.from_meta(kb["fusion"]) if kb.get("fusion") else None,
        description=str(kb.get("description", "")),
        passages=PassageWindows.from_meta(meta.get("passages")),
        profile=kb.get("profile") or None,
        calibration=Calibration.from_meta(kb["calibration"]) if kb.get("calibration") else None,
    )


def list_kb_names(es: Elasticsearch) -> list[str]:
    """Every knowledge base: aliases (and bare indices) whose index carries a chunk mapping's `_meta`."""
    # One request for mappings and aliases: indices come and go between two requests. Only the one field
    # of each mapping that tells a base is sent back (a cluster's mappings are large).
    indices = es.indices.get(
        index="*",
        features=["aliases", "mappings"],
        expand_wildcards="open",
        filter_path=["*.aliases", "*.mappings._meta.embedder"],
    ).body
    names: set[str] = set()
    for index, body in indices.items():
        if "embedder" not in body.get("mappings", {}).get("_meta", {}):
            continue
        held = list(body.get("aliases", {}))
        # A versioned index is reached only through its alias; an unaliased one is a base by its own name.
        names.update(held or ([] if _VERSIONED.search(index) else [index]))
    return sorted(names)


def create_kb(
    es: Elasticsearch,
    name: str,
    embedder: Embedder,
    *,
    chunk_size: int,
    chunk_overlap: int,
    shards: int = 1,
    replicas: int = 0,
    passages: PassageWindows | None = None,
    description: str = "",
) -> str:
    """A new, empty base `name` (a versioned index behind the alias, its chunks with `passages`);
    `KnowledgeBaseExists` on a clash."""
    check_kb_name(name)
    if es.indices.exists_alias(name=name) or es.indices.exists(index=name):
        raise KnowledgeBaseExists(name)
    index = versioned_name(name)
    create_index(es, index, embedder, shards=shards, replicas=replicas, passages=passages)
    created = datetime.now(UTC).isoformat()
    meta = {"chunk_size": chunk_size, "chunk_overlap": chunk_overlap, "created_at": created, "description": description}
    update_kb_meta(es, index, meta)
    es.indices.put_alias(index=index, name=name)
    return index


def delete_kb(es: Elasticsearch, name: str) -> list[str]:
    """Delete the base `name` and every index behind it; returns them (`IndexNotFoundError` if absent)."""
    indices = concrete_indices(es, name)
    if not indices:
        raise IndexNotFoundError(name)
    for index in indices:
        es.indices.delete(index=index)
    return indices


def _write_settings(es: Elasticsearch, name: str, values: dict[str, Any]) -> None:
    """Store `values` in the base's `_meta.kb` on every index behind it (`IndexNotFoundError`: no base)."""
    indices = concrete_indices(es, name)
    if not indices:
        raise IndexNotFoundError(name)
    for index in indices:
        update_kb_meta(es, index, values)


def write_fusion(es: Elasticsearch, name: str, setting: FusionSetting | None) -> None:
    """Store `setting` as the base's fusion (None: back to the service default) on every index behind it."""
    _write_settings(es, name, {"fusion": setting.to_meta() if setting else None})


def write_profile(es: Elasticsearch, name: str, profile: str | None) -> None:
    """Store `profile` as the base's text profile (None: back to the default path) on every index behind it."""
    _write_settings(es, name, {"profile": profile})


def write_calibration(es: Elasticsearch, name: str, calibration: Calibration | None) -> None:
    """Store the base's calibration (None: back to the service's thresholds) on every index behind it."""
    _write_settings(es, name, {"calibration": calibration.to_meta() if calibration else None})


def write_base_aliases(es: Elasticsearch, name: str, aliases: list[Alias]) -> None:
    """Store `aliases` as the base's (an admin's correction) on every index behind it."""
    indices = concrete_indices(es, name)
    if not indices:
        raise IndexNotFoundError(name)
    for index in indices:
        write_aliases(es, index, aliases)
