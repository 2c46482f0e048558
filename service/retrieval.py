"""BM25, vector and hybrid search over one knowledge base, fused with RRF in the service.

Every mode is one Elasticsearch round trip: hybrid sends its lists (jieba BM25, bigram BM25,
kNN) in a single `_msearch` and fuses them with Reciprocal Rank Fusion here, so it needs no
server-side RRF (absent from the minimal distribution and from unlicensed clusters).
"""

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from elasticsearch import Elasticsearch, NotFoundError
from pydantic import BaseModel

from service.embeddings import Embedder
from service.store import IndexNotFoundError, check_embedder
from service.text import ChineseTokenizer, bigram_terms, join_terms

Mode = Literal["vector", "bm25", "bigram", "hybrid", "standard"]
ListName = Literal["vector", "bm25", "bigram", "standard"]
MODES: tuple[str, ...] = ("vector", "bm25", "bigram", "hybrid", "standard")
_SOURCE_FIELDS = ["text", "title", "source", "doc_id", "chunk_index", "chapter", "chapter_title"]


class Filters(BaseModel):
    sources: list[str] | None = None
    chapter_from: int | None = None
    chapter_to: int | None = None

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
    # 1-based rank of this chunk in each fused list (hybrid only): why it was returned.
    bm25_rank: int | None = None
    vector_rank: int | None = None
    bigram_rank: int | None = None


class SearchResult(BaseModel):
    mode: str
    took_ms: float
    hits: list[Hit]


@dataclass(frozen=True)
class RetrievalParams:
    rrf_k: int = 60
    depth: int = 50
    num_candidates: int = 100
    hybrid_lists: tuple[ListName, ...] = ("vector", "bm25", "bigram")
    weights: dict[str, float] = field(default_factory=dict)
    title_boost: float = 2.0


def rrf(ranked_ids: dict[str, list[str]], k: int = 60, weights: dict[str, float] | None = None) -> list[tuple[str, float]]:
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
        self, index: str, query: str, mode: Mode = "hybrid", k: int = 10, filters: Filters | None = None
    ) -> SearchResult:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
        started = time.perf_counter()
        lists: tuple[ListName, ...] = self.params.hybrid_lists if mode == "hybrid" else (mode,)
        size = max(k, self.params.depth) if mode == "hybrid" else k
        if "vector" in lists:
            self._check_embedder(index)
        responses = self._msearch(index, [self._body(name, query, size, filters) for name in lists])
        ranked = {name: response["hits"]["hits"] for name, response in zip(lists, responses)}
        if mode == "hybrid":
            hits = self._fuse(ranked, k)
        else:
            hits = [_hit(raw, raw["_score"]) for raw in ranked[lists[0]]][:k]
        return SearchResult(mode=mode, took_ms=(time.perf_counter() - started) * 1000, hits=hits)

    def _check_embedder(self, index: str) -> None:
        if index not in self._checked:
            check_embedder(self.es, index, self.embedder)
            self._checked.add(index)

    def _msearch(self, index: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        searches: list[dict[str, Any]] = []
        for body in bodies:
            searches += [{"index": index}, body]
        try:
            responses = self.es.msearch(searches=searches)["responses"]
        except NotFoundError as err:
            raise IndexNotFoundError(index) from err
        for response in responses:
            if "error" in response:
                if response["error"].get("type") == "index_not_found_exception":
                    raise IndexNotFoundError(index)
                raise RuntimeError(f"Elasticsearch search failed: {response['error'].get('reason', response['error'])}")
        return responses

    def _body(self, name: ListName, query: str, size: int, filters: Filters | None) -> dict[str, Any]:
        clauses = filters.to_es() if filters else []
        body: dict[str, Any] = {"size": size, "_source": _SOURCE_FIELDS}
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

    def _fuse(self, ranked: dict[str, list[dict[str, Any]]], k: int) -> list[Hit]:
        by_id = {raw["_id"]: raw for raws in ranked.values() for raw in raws}
        ranks = {name: {raw["_id"]: rank for rank, raw in enumerate(raws, start=1)} for name, raws in ranked.items()}
        fused = rrf({name: [raw["_id"] for raw in raws] for name, raws in ranked.items()}, self.params.rrf_k, self.params.weights)
        hits = []
        for chunk_id, score in fused[:k]:
            hit = _hit(by_id[chunk_id], score)
            hit.bm25_rank = ranks.get("bm25", {}).get(chunk_id)
            hit.vector_rank = ranks.get("vector", {}).get(chunk_id)
            hit.bigram_rank = ranks.get("bigram", {}).get(chunk_id)
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
    )
