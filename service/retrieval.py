"""BM25, vector and hybrid search over one knowledge base, fused in the service.

A single mode is one Elasticsearch round trip. Hybrid asks its lists (kNN, jieba BM25,
bigram BM25, standard) for ids and scores only (doc values, no stored fields), all in one
`_msearch` once the query is embedded. It fuses them here (service/fusion.py; no server-side
RRF, absent from the minimal distribution and from unlicensed clusters), then fetches the fused
top k in one `mget`. Every hybrid hit carries its explanation: its rank and score in each list
and that list's contribution. The query is embedded once per request, in `compare` too.

Keyword queries are cut by the index's own tokenizer: the user dictionary plus the corpus
dictionary stored in the index's `_meta` (core/text.py, indexing/dictionary.py).
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Protocol

import numpy as np
from elasticsearch import Elasticsearch, NotFoundError
from pydantic import BaseModel, Field, computed_field, model_validator

from core.config import FusionMethod, Settings
from core.documents import page_label, source_label
from core.embeddings import Embedder, cosine_similarities
from core.schema import HIT_SOURCE_FIELDS, ID_FIELDS, LIST_MODES, Mode, chunk_id_from_fields
from core.store import IndexMeta, IndexNotFoundError, check_embedder_meta, msearch, read_index_meta
from core.text import ChineseTokenizer, bigram_terms, get_tokenizer, join_terms
from service.fusion import FusionParams, ListEvidence, fuse

_META_TTL_S = 30.0  # how long an index's embedder and dictionary are trusted before re-reading


class SearchFilter(Protocol):
    """Anything that narrows a search: its Elasticsearch filter clauses, put inside every list."""

    def to_es(self) -> list[dict[str, Any]]: ...


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
    metadata: dict[str, Any] = Field(default_factory=dict)  # the document's own (a JSONL record's "metadata")
    # Cosine similarity of the query's and the chunk's embeddings, negatives as 0: a score whose
    # meaning does not depend on the other hits or the query (set when asked: `similarity=True`).
    similarity: float | None = None
    # Hybrid only, why it was returned: per fused list, its 1-based rank and score there
    # (None: not returned by that list) and the list's contribution; they sum to `score`.
    explain: dict[str, ListEvidence] | None = None

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
    mode: Mode
    took_ms: float
    hits: list[Hit]


class ModeOverlap(BaseModel):
    """How many of the top-k ids two modes share; `overlap_at_k` = shared / k."""

    modes: tuple[Mode, Mode]
    shared: list[str]
    overlap_at_k: float


class RankDifference(BaseModel):
    """One chunk's 1-based rank in every compared mode (None: not in that mode's top k)."""

    id: str
    ranks: dict[Mode, int | None]
    found_by: list[Mode]
    # Worst minus best rank among the modes that found it (0 when only one did).
    spread: int


class Comparison(BaseModel):
    """The same query in several modes side by side (the body of `POST /compare`)."""

    query: str
    k: int
    modes: list[Mode]
    results: dict[Mode, SearchResult]
    overlaps: list[ModeOverlap]
    # Ids every mode found, and ids only one mode found (per mode, in that mode's order).
    common: list[str]
    only: dict[Mode, list[str]]
    # Every id any mode returned, ordered by its best rank.
    ranks: list[RankDifference]


@dataclass(frozen=True)
class RetrievalParams:
    """Search parameters; the hybrid defaults are the choice of the dev questions (docs/retrieval.md)."""

    fusion: FusionMethod = "zscore"  # parameter-free; chosen on dev over RRF, weighted RRF, min-max, RRF by gap
    rrf_k: int = 60
    depth: int = 10  # each list's hits fused (RRF_DEPTH), chosen on dev with the fusion
    num_candidates: int = 100
    hybrid_lists: tuple[Mode, ...] = LIST_MODES
    weights: dict[str, float] = field(default_factory=dict)
    title_boost: float = 2.0

    @classmethod
    def from_settings(cls, settings: Settings) -> "RetrievalParams":
        return cls(
            fusion=settings.fusion,
            rrf_k=settings.rrf_k,
            depth=settings.rrf_depth,
            num_candidates=settings.num_candidates,
        )

    @property
    def fusion_params(self) -> FusionParams:
        return FusionParams(self.fusion, self.rrf_k, self.weights)


class _QueryVector:
    """The query's embedding, computed on first use and then shared by every mode of a request."""

    def __init__(self, embedder: Embedder, query: str) -> None:
        self._embedder, self._query = embedder, query
        self._vector: np.ndarray | None = None

    def get(self) -> list[float]:
        if self._vector is None:
            self._vector = self._embedder.embed_query(self._query)
        return self._vector.tolist()


class Retriever:
    """Search one knowledge base; holds the shared client, embedder and base tokenizer."""

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
        self._indices: dict[str, tuple[float, IndexMeta, ChineseTokenizer]] = {}

    def search(
        self,
        index: str,
        query: str,
        mode: Mode | str = Mode.HYBRID,
        k: int = 10,
        filters: SearchFilter | None = None,
        *,
        similarity: bool = False,
    ) -> SearchResult:
        """The top `k` of `mode`; with `similarity`, each hit's cosine to the query too (one more `mget`)."""
        vector = _QueryVector(self.embedder, query)
        result = self._search(index, query, Mode.from_str(mode), k, filters, vector)
        if similarity:
            self._similarities(index, result.hits, vector)
        return result

    def _similarities(self, index: str, hits: list[Hit], vector: _QueryVector) -> None:
        """Set each hit's `similarity` from its stored embedding (the vector list's cosine, any mode)."""
        stored = self._fetch(index, [hit.id for hit in hits], ["embedding"])
        found = [hit for hit in hits if hit.id in stored]
        if not found:
            return
        cosines = cosine_similarities(
            np.asarray([stored[hit.id]["embedding"] for hit in found]), np.asarray(vector.get())
        )
        for hit, value in zip(found, cosines, strict=True):
            hit.similarity = max(0.0, float(value))

    def ranked_lists(
        self, index: str, query: str, lists: Sequence[Mode], size: int, filters: SearchFilter | None = None
    ) -> dict[str, list[tuple[str, float]]]:
        """(chunk id, score) of each list, `size` deep, in one `_msearch` without `_source`."""
        _validate(query, size)
        return self._lists(index, query, lists, size, filters, _QueryVector(self.embedder, query))

    def _lists(
        self,
        index: str,
        query: str,
        lists: Sequence[Mode],
        size: int,
        filters: SearchFilter | None,
        vector: _QueryVector,
    ) -> dict[str, list[tuple[str, float]]]:
        """Every list of `lists` in one `_msearch`, which Elasticsearch runs concurrently.

        The query is embedded first: searching the keyword lists on a thread while embedding
        was slower on two cores, where the embedder's threads and Elasticsearch compete.
        """
        bodies = [self._body(index, name, query, size, filters, vector, source=False) for name in lists]
        responses = self._msearch(index, bodies)
        return {
            name: [(chunk_id_from_fields(raw["fields"]), raw["_score"]) for raw in response["hits"]["hits"]]
            for name, response in zip(lists, responses, strict=True)
        }

    def _search(
        self, index: str, query: str, mode: Mode, k: int, filters: SearchFilter | None, vector: _QueryVector
    ) -> SearchResult:
        _validate(query, k)
        started = time.perf_counter()
        if mode == Mode.HYBRID:
            hits = self._hybrid(index, query, k, filters, vector)
        else:
            body = self._body(index, mode, query, k, filters, vector, source=True)
            hits = [
                _hit(raw["_id"], raw["_source"], raw["_score"])
                for raw in self._msearch(index, [body])[0]["hits"]["hits"]
            ]
        return SearchResult(mode=mode, took_ms=(time.perf_counter() - started) * 1000, hits=hits)

    def _hybrid(self, index: str, query: str, k: int, filters: SearchFilter | None, vector: _QueryVector) -> list[Hit]:
        ranked = self._lists(index, query, self.params.hybrid_lists, max(k, self.params.depth), filters, vector)
        fused = fuse(ranked, self.params.fusion_params, top=k)
        sources = self._fetch(index, [hit.id for hit in fused])
        hits = []
        for found in fused:
            if found.id in sources:  # a chunk deleted between the search and the fetch is left out
                hit = _hit(found.id, sources[found.id], found.score)
                hit.explain = found.explain
                hits.append(hit)
        return hits

    def compare(
        self,
        index: str,
        query: str,
        k: int = 10,
        modes: Sequence[Mode | str] = (Mode.VECTOR, Mode.HYBRID),
        filters: SearchFilter | None = None,
    ) -> Comparison:
        """Run `query` in each of `modes` (each timed on its own; the query embedded once) and relate their top-k ids."""
        chosen = list(dict.fromkeys(Mode.from_str(mode) for mode in modes))
        if len(chosen) < 2:
            raise ValueError(f"compare needs at least two distinct modes, got {chosen}")
        vector = _QueryVector(self.embedder, query)
        results = {mode: self._search(index, query, mode, k, filters, vector) for mode in chosen}
        ids = {mode: [hit.id for hit in result.hits] for mode, result in results.items()}
        ranks = {mode: {chunk_id: rank for rank, chunk_id in enumerate(found, start=1)} for mode, found in ids.items()}
        overlaps = []
        for a, b in combinations(chosen, 2):
            shared = [chunk_id for chunk_id in ids[a] if chunk_id in ranks[b]]
            overlaps.append(ModeOverlap(modes=(a, b), shared=shared, overlap_at_k=len(shared) / k))
        every = {chunk_id for found in ids.values() for chunk_id in found}
        rows = []
        for chunk_id in every:
            row = {mode: ranks[mode].get(chunk_id) for mode in chosen}
            found = [rank for rank in row.values() if rank is not None]
            rows.append(
                RankDifference(
                    id=chunk_id,
                    ranks=row,
                    found_by=[mode for mode in chosen if row[mode] is not None],
                    spread=max(found) - min(found),
                )
            )
        rows.sort(key=lambda row: (min(r for r in row.ranks.values() if r is not None), row.id))
        return Comparison(
            query=query,
            k=k,
            modes=chosen,
            results=results,
            overlaps=overlaps,
            common=[chunk_id for chunk_id in ids[chosen[0]] if all(chunk_id in ranks[m] for m in chosen)],
            only={
                mode: [c for c in ids[mode] if not any(c in ranks[other] for other in chosen if other != mode)]
                for mode in chosen
            },
            ranks=rows,
        )

    def chunk(self, index: str, chunk_id: str) -> Hit | None:
        """One chunk by id, whole (None when the base has no such chunk)."""
        source = self._fetch(index, [chunk_id]).get(chunk_id)
        return _hit(chunk_id, source, 0.0) if source is not None else None

    def index_tokenizer(self, index: str) -> ChineseTokenizer:
        """The tokenizer `index` was cut with: the base dictionaries plus its stored corpus dictionary."""
        return self._index(index)[1]

    def _index(self, index: str) -> tuple[IndexMeta, ChineseTokenizer]:
        cached = self._indices.get(index)
        if cached is None or time.monotonic() - cached[0] > _META_TTL_S:
            meta = read_index_meta(self.es, index)
            cached = (time.monotonic(), meta, self.tokenizer.with_corpus_terms(meta.corpus_terms or ()))
            self._indices[index] = cached
        return cached[1], cached[2]

    def _fetch(self, index: str, ids: list[str], fields: list[str] = HIT_SOURCE_FIELDS) -> dict[str, dict[str, Any]]:
        """The `_source` `fields` of `ids` in one request."""
        if not ids:
            return {}
        try:
            # realtime=False reads the refreshed view the search just saw, without a refresh check.
            docs = self.es.mget(index=index, ids=ids, source=fields, realtime=False)["docs"]
        except NotFoundError as err:
            raise IndexNotFoundError(index) from err
        return {doc["_id"]: doc["_source"] for doc in docs if doc.get("found")}

    def _msearch(self, index: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return msearch(self.es, index, bodies)

    def _body(
        self,
        index: str,
        name: Mode,
        query: str,
        size: int,
        filters: SearchFilter | None,
        vector: _QueryVector,
        *,
        source: bool,
    ) -> dict[str, Any]:
        clauses = filters.to_es() if filters else []
        body: dict[str, Any] = {"size": size}
        if source:
            body["_source"] = HIT_SOURCE_FIELDS
        else:  # ids from doc values only (core.schema.chunk_id_from_fields)
            body |= {"stored_fields": "_none_", "docvalue_fields": ID_FIELDS}
        if name == Mode.VECTOR:
            meta = self._index(index)[0]
            check_embedder_meta(meta, index, self.embedder)
            knn: dict[str, Any] = {
                "field": "embedding",
                "query_vector": vector.get(),
                "k": size,
                "num_candidates": max(self.params.num_candidates, size),
            }
            if clauses:
                knn["filter"] = clauses
            body["knn"] = knn
            return body
        tokenizer = self._index(index)[1]
        if name == Mode.BM25:
            terms = join_terms(tokenizer.query_terms(query))
            should = [
                {"match": {"tokens": terms}},
                {"match": {"title_tokens": {"query": terms, "boost": self.params.title_boost}}},
            ]
        elif name == Mode.BIGRAM:
            should = [{"match": {"bigrams": join_terms(bigram_terms(tokenizer.keyword_text(query)))}}]
        else:
            should = [{"match": {"text": tokenizer.keyword_chars(query)}}]
        body["query"] = {"bool": {"should": should, "minimum_should_match": 1, "filter": clauses}}
        return body


def _validate(query: str, k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if not query.strip():
        raise ValueError("query is empty")


def _hit(chunk_id: str, source: dict[str, Any], score: float) -> Hit:
    return Hit(
        id=chunk_id,
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
        metadata=source.get("metadata") or {},
    )


def build_retriever(settings: Settings, es: Elasticsearch, embedder: Embedder) -> Retriever:
    """The retriever the service and the CLI use: parameters and user dictionary from `settings`."""
    return Retriever(es, embedder, get_tokenizer(settings.jieba_user_dict), RetrievalParams.from_settings(settings))
