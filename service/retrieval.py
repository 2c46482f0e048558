"""BM25, vector and hybrid search over one knowledge base, fused with RRF in the service.

Every mode is one Elasticsearch round trip: hybrid sends its lists (jieba BM25, bigram BM25,
kNN) in a single `_msearch` and fuses them with Reciprocal Rank Fusion here, so it needs no
server-side RRF (absent from the minimal distribution and from unlicensed clusters).
`compare` runs one query in several modes and says where they agree and differ.
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from elasticsearch import Elasticsearch
from pydantic import BaseModel, computed_field, model_validator

from core.config import Settings
from core.documents import page_label, source_label
from core.embeddings import Embedder
from core.schema import HIT_SOURCE_FIELDS, LIST_MODES, Mode
from core.text import ChineseTokenizer, bigram_terms, get_tokenizer, join_terms
from service.store import check_embedder, msearch


class Filters(BaseModel):
    sources: list[str] | None = None
    chapter_from: int | None = None
    chapter_to: int | None = None

    @model_validator(mode="after")
    def _ordered_range(self) -> "Filters":
        if self.chapter_from is not None and self.chapter_to is not None and self.chapter_from > self.chapter_to:
            raise ValueError(f"chapter_from ({self.chapter_from}) is after chapter_to ({self.chapter_to})")
        return self

    def to_es(self) -> list[dict[str, Any]]:
        clauses: list[dict[str, Any]] = []
        if self.sources:
            clauses.append({"terms": {"source": self.sources}})
        if self.chapter_from is not None or self.chapter_to is not None:
            bounds = {"gte": self.chapter_from, "lte": self.chapter_to}
            clauses.append({"range": {"chapter": {key: v for key, v in bounds.items() if v is not None}}})
        return clauses


class Hit(BaseModel):
    id: str
    score: float
    text: str
    title: str = ""
    source: str = ""
    chapter: int | None = None
    chapter_title: str | None = None
    doc_id: str = ""
    chunk_index: int = 0
    page_start: int | None = None
    page_end: int | None = None
    section: str | None = None  # heading path, e.g. "第三章 药物治疗 / 3.2 用药"
    # 1-based rank of this chunk in each fused list (hybrid only): why it was returned.
    bm25_rank: int | None = None
    vector_rank: int | None = None
    bigram_rank: int | None = None
    standard_rank: int | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def page(self) -> int | str | None:
        """The page (3) or page range ("3-4") of a paged format such as PDF."""
        return page_label(self.page_start, self.page_end)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def label(self) -> str:
        """How this chunk is cited everywhere: 《指南》第 3 页 · 3.2 用药."""
        return source_label(
            title=self.title,
            source=self.source,
            chapter=self.chapter,
            chapter_title=self.chapter_title,
            page=self.page,
            section=self.section,
        )


class SearchResult(BaseModel):
    mode: str
    took_ms: float
    hits: list[Hit]


class ModeOverlap(BaseModel):
    """How many of the top-k ids two modes share; `overlap_at_k` = shared / k."""

    modes: tuple[str, str]
    shared: list[str]
    overlap_at_k: float


class RankDifference(BaseModel):
    """One chunk's 1-based rank in every compared mode (None: not in that mode's top k)."""

    id: str
    ranks: dict[str, int | None]
    found_by: list[str]
    # Worst minus best rank among the modes that found it (0 when only one did).
    spread: int


class Comparison(BaseModel):
    """The same query in several modes side by side (the body of `POST /compare`)."""

    query: str
    k: int
    modes: list[str]
    results: dict[str, SearchResult]
    overlaps: list[ModeOverlap]
    # Ids every mode found, and ids only one mode found (per mode, in that mode's order).
    common: list[str]
    only: dict[str, list[str]]
    # Every id any mode returned, ordered by its best rank.
    ranks: list[RankDifference]


@dataclass(frozen=True)
class RetrievalParams:
    """Search parameters; the hybrid defaults are the best setting of the retrieval evaluation.

    On 《三国演义》 the single-character `standard` list is the strongest keyword list, so hybrid
    fuses all four lists, with a sharp rank constant (10) and the vector list weighted 1.5
    (docs/retrieval.md has the grid and its figures).
    """

    rrf_k: int = 10
    depth: int = 50
    num_candidates: int = 100
    hybrid_lists: tuple[Mode, ...] = LIST_MODES
    weights: dict[str, float] = field(default_factory=lambda: {"vector": 1.5})
    title_boost: float = 2.0

    @classmethod
    def from_settings(cls, settings: Settings) -> "RetrievalParams":
        return cls(rrf_k=settings.rrf_k, depth=settings.rrf_depth, num_candidates=settings.num_candidates)


def rrf(
    ranked_ids: dict[str, list[str]], k: int = 60, weights: dict[str, float] | None = None
) -> list[tuple[str, float]]:
    """Reciprocal Rank Fusion: score(d) = sum over lists of weight / (k + rank(d)), rank 1-based."""
    scores: dict[str, float] = {}
    for name, ids in ranked_ids.items():
        weight = (weights or {}).get(name, 1.0)
        for rank, doc_id in enumerate(ids, start=1):
            scores[doc_id] = scores.get(doc_id, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


class Retriever:
    """Search one knowledge base; holds the shared client, embedder and tokenizer."""

    def __init__(
        self,
        es: Elasticsearch,
        embedder: Embedder,
        tokenizer: ChineseTokenizer,
        params: RetrievalParams | None = None,
    ) -> None:
        self.es = es
        self.embedder = embedder
        self.tokenizer = tokenizer
        self.params = params or RetrievalParams()
        self._checked: set[str] = set()

    def search(
        self, index: str, query: str, mode: Mode | str = Mode.HYBRID, k: int = 10, filters: Filters | None = None
    ) -> SearchResult:
        mode = Mode.from_str(mode)
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        if not query.strip():
            raise ValueError("query is empty")
        started = time.perf_counter()
        lists: tuple[Mode, ...] = self.params.hybrid_lists if mode == Mode.HYBRID else (mode,)
        size = max(k, self.params.depth) if mode == Mode.HYBRID else k
        if "vector" in lists:
            self._check_embedder(index)
        responses = msearch(self.es, index, [self._body(name, query, size, filters) for name in lists])
        ranked = {name: response["hits"]["hits"] for name, response in zip(lists, responses, strict=True)}
        if mode == Mode.HYBRID:
            hits = self._fuse(ranked, k)
        else:
            hits = [_hit(raw, raw["_score"]) for raw in ranked[lists[0]]][:k]
        return SearchResult(mode=mode, took_ms=(time.perf_counter() - started) * 1000, hits=hits)

    def compare(
        self,
        index: str,
        query: str,
        k: int = 10,
        modes: Sequence[Mode | str] = (Mode.VECTOR, Mode.HYBRID),
        filters: Filters | None = None,
    ) -> Comparison:
        """Run `query` in each of `modes` (each timed on its own) and relate their top-k ids."""
        modes = list(dict.fromkeys(Mode.from_str(mode) for mode in modes))
        if len(modes) < 2:
            raise ValueError(f"compare needs at least two distinct modes, got {modes}")
        results = {mode: self.search(index, query, mode, k, filters) for mode in modes}
        ids = {mode: [hit.id for hit in result.hits] for mode, result in results.items()}
        ranks = {mode: {chunk_id: rank for rank, chunk_id in enumerate(found, start=1)} for mode, found in ids.items()}
        overlaps = []
        for a, b in combinations(modes, 2):
            shared = [chunk_id for chunk_id in ids[a] if chunk_id in ranks[b]]
            overlaps.append(ModeOverlap(modes=(a, b), shared=shared, overlap_at_k=len(shared) / k))
        every = {chunk_id for found in ids.values() for chunk_id in found}
        rows = []
        for chunk_id in every:
            row = {mode: ranks[mode].get(chunk_id) for mode in modes}
            found = [rank for rank in row.values() if rank is not None]
            rows.append(
                RankDifference(
                    id=chunk_id,
                    ranks=row,
                    found_by=[mode for mode in modes if row[mode] is not None],
                    spread=max(found) - min(found),
                )
            )
        rows.sort(key=lambda row: (min(r for r in row.ranks.values() if r is not None), row.id))
        return Comparison(
            query=query,
            k=k,
            modes=modes,
            results=results,
            overlaps=overlaps,
            common=[chunk_id for chunk_id in ids[modes[0]] if all(chunk_id in ranks[m] for m in modes)],
            only={
                mode: [c for c in ids[mode] if not any(c in ranks[other] for other in modes if other != mode)]
                for mode in modes
            },
            ranks=rows,
        )

    def _check_embedder(self, index: str) -> None:
        if index not in self._checked:
            check_embedder(self.es, index, self.embedder)
            self._checked.add(index)

    def _body(self, name: Mode, query: str, size: int, filters: Filters | None) -> dict[str, Any]:
        clauses = filters.to_es() if filters else []
        body: dict[str, Any] = {"size": size, "_source": HIT_SOURCE_FIELDS}
        if name == "vector":
            knn: dict[str, Any] = {
                "field": "embedding",
                "query_vector": self.embedder.embed_query(query).tolist(),
                "k": size,
                "num_candidates": max(self.params.num_candidates, size),
            }
            if clauses:
                knn["filter"] = clauses
            body["knn"] = knn
            return body
        if name == "bm25":
            terms = join_terms(self.tokenizer.query_terms(query))
            should = [
                {"match": {"tokens": terms}},
                {"match": {"title_tokens": {"query": terms, "boost": self.params.title_boost}}},
            ]
        elif name == "bigram":
            should = [{"match": {"bigrams": join_terms(bigram_terms(query))}}]
        else:
            should = [{"match": {"text": query}}]
        body["query"] = {"bool": {"should": should, "minimum_should_match": 1, "filter": clauses}}
        return body

    def _fuse(self, ranked: dict[Mode, list[dict[str, Any]]], k: int) -> list[Hit]:
        by_id = {raw["_id"]: raw for raws in ranked.values() for raw in raws}
        ranks = {name: {raw["_id"]: rank for rank, raw in enumerate(raws, start=1)} for name, raws in ranked.items()}
        fused = rrf(
            {name: [raw["_id"] for raw in raws] for name, raws in ranked.items()},
            self.params.rrf_k,
            self.params.weights,
        )
        hits = []
        for chunk_id, score in fused[:k]:
            hit = _hit(by_id[chunk_id], score)
            hit.bm25_rank = ranks.get(Mode.BM25, {}).get(chunk_id)
            hit.vector_rank = ranks.get(Mode.VECTOR, {}).get(chunk_id)
            hit.bigram_rank = ranks.get(Mode.BIGRAM, {}).get(chunk_id)
            hit.standard_rank = ranks.get(Mode.STANDARD, {}).get(chunk_id)
            hits.append(hit)
        return hits


def _hit(raw: dict[str, Any], score: float) -> Hit:
    source = raw["_source"]
    return Hit(
        id=raw["_id"],
        score=float(score),
        text=source.get("text", ""),
        title=source.get("title") or "",
        source=source.get("source") or "",
        chapter=source.get("chapter"),
        chapter_title=source.get("chapter_title"),
        doc_id=source.get("doc_id") or "",
        chunk_index=source.get("chunk_index") or 0,
        page_start=source.get("page_start"),
        page_end=source.get("page_end"),
        section=source.get("section"),
    )


def build_retriever(settings: Settings, es: Elasticsearch, embedder: Embedder) -> Retriever:
    """The retriever the service and the CLI use: parameters and user dictionary from `settings`."""
    return Retriever(es, embedder, get_tokenizer(settings.jieba_user_dict), RetrievalParams.from_settings(settings))
