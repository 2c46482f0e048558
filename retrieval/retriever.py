"""BM25, vector and hybrid search over one knowledge base, fused in Python.

A single mode is one Elasticsearch round trip. Hybrid asks its lists (kNN, jieba BM25,
bigram BM25, standard; retrieval/lists.py) for ids and scores only (doc values, no stored
fields), all in one `_msearch` once the query is embedded. It fuses them here
(retrieval/fusion.py; no server-side RRF, absent from the minimal distribution and from
unlicensed clusters), then fetches the fused top k in one `mget`. Every hybrid hit carries its
explanation: its rank and score in each list and that list's contribution. The query is
embedded once per request, in `compare` too (retrieval/compare.py relates the modes).

Scores reveal nothing hidden: a BM25 score counts every chunk of the base (its document
frequencies and average length include chunks the caller may not read), so four searches and the
tokenizer gave a group-less reader the base's chunk count. A caller whose scope hides documents
gets each keyword list's scores as 1 / rank within what it may read, before fusion, so hits,
explanations, comparisons and fused scores are all computed from what it may see (its vector
scores are cosines of its own query and a visible chunk: they count nothing). Only the order of a
list, as under Elasticsearch's document-level security, still depends on the hidden chunks.
Admins of the base, and the command line, keep Elasticsearch's scores.

Keyword queries are cut by the index's own tokenizer: the user dictionary plus the corpus
dictionary stored in the index's `_meta` (core/text.py, indexing/dictionary.py). A caller whose
scope hides documents gets only the corpus terms that occur in chunks it may read (`index_tokenizer`):
a term learned from a hidden document would otherwise change how its text is cut, and the chat
tasks' titles, tags and follow-ups would confirm codenames it may not read.
"""

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from elasticsearch import Elasticsearch

from core.access import Clauses, Scope
from core.config import FusionMethod, Settings
from core.embeddings import Embedder, cosine_similarities
from core.kbs import FusionSetting
from core.reader import Reader
from core.schema import HIT_SOURCE_FIELDS, LIST_MODES, Mode, chunk_id_from_fields
from core.store import IndexMeta, check_embedder_meta, read_index_meta
from core.text import ChineseTokenizer, get_tokenizer
from retrieval import lists
from retrieval.compare import Comparison, relate
from retrieval.fusion import FusionParams, fuse
from retrieval.lists import SearchFilter
from retrieval.results import FusionUsed, Hit, SearchResult

_META_TTL_S = 30.0  # how long an index's embedder and dictionary are trusted before re-reading


@dataclass(frozen=True)
class RetrievalParams:
    """Search parameters, from the settings (`from_settings`); the benchmarks vary them with `replace`."""

    fusion: FusionMethod
    rrf_k: int
    depth: int  # each list's hits fused (RRF_DEPTH), chosen on dev with the fusion
    num_candidates: int
    title_boost: float
    hybrid_lists: tuple[Mode, ...]
    weights: Mapping[str, float]  # per list; 1 when absent

    @classmethod
    def from_settings(cls, settings: Settings) -> "RetrievalParams":
        """The service's parameters: every list fused, unweighted (the choice of docs/retrieval.md)."""
        return cls(
            fusion=settings.fusion,
            rrf_k=settings.rrf_k,
            depth=settings.rrf_depth,
            num_candidates=settings.num_candidates,
            title_boost=settings.title_boost,
            hybrid_lists=LIST_MODES,
            weights={},
        )

    @property
    def fusion_params(self) -> FusionParams:
        return FusionParams(self.fusion, self.rrf_k, self.weights)

    def with_fusion(self, setting: FusionSetting | None) -> "RetrievalParams":
        """These parameters with a knowledge base's own fusion setting (None: unchanged)."""
        if setting is None:
            return self
        return replace(
            self,
            fusion=setting.method,
            rrf_k=setting.rrf_k,
            depth=setting.depth,
            hybrid_lists=setting.lists,
            weights=setting.weights,
        )


def fusion_used(params: RetrievalParams, setting: FusionSetting | None) -> FusionUsed:
    """What a hybrid search with `params` (the service's, with the base's `setting`) fuses, and whence."""
    return FusionUsed(
        method=params.fusion,
        rrf_k=params.rrf_k,
        depth=params.depth,
        lists=list(params.hybrid_lists),
        weights=dict(params.weights),
        origin=setting.origin if setting else "default",
    )


class _QueryVector:
    """The query's embedding, computed on first use and then shared by every mode of a request."""

    def __init__(self, embedder: Embedder, query: str) -> None:
        self._embedder, self._query = embedder, query
        self._vector: np.ndarray | None = None

    def get(self) -> list[float]:
        if self._vector is None:
            self._vector = self._embedder.embed_query(self._query)
        values: list[float] = self._vector.tolist()
        return values


class Retriever:
    """Search one knowledge base; holds the shared client, embedder and base tokenizer."""

    def __init__(
        self,
        es: Elasticsearch,
        embedder: Embedder,
        tokenizer: ChineseTokenizer,
        params: RetrievalParams,
    ) -> None:
        self.es = es
        self.embedder = embedder
        self.tokenizer = tokenizer
        self.params = params
        self._indices: dict[str, tuple[float, IndexMeta, ChineseTokenizer]] = {}
        self._scoped: dict[tuple[str, str], tuple[float, ChineseTokenizer]] = {}

    def search(
        self,
        scope: Scope,
        query: str,
        mode: Mode | str = Mode.HYBRID,
        k: int = 10,
        filters: SearchFilter | None = None,
        *,
        similarity: bool = False,
    ) -> SearchResult:
        """The top `k` of `mode` among the chunks `scope` may read; with `similarity`, each hit's
        cosine to the query too (one more `mget`)."""
        vector = _QueryVector(self.embedder, query)
        result = self._search(Reader(self.es, scope), query, Mode.from_str(mode), k, filters, vector)
        if similarity:
            self._similarities(Reader(self.es, scope), result.hits, vector)
        return result

    def _similarities(self, reader: Reader, hits: list[Hit], vector: _QueryVector) -> None:
        """Set each hit's `similarity` from its stored embedding (the vector list's cosine, any mode)."""
        stored = reader.fetch([hit.id for hit in hits], ["embedding"])
        found = [hit for hit in hits if hit.id in stored]
        if not found:
            return
        vectors = np.asarray([stored[hit.id]["embedding"] for hit in found])
        for hit, value in zip(found, cosine_similarities(vectors, np.asarray(vector.get())), strict=True):
            hit.similarity = max(0.0, float(value))

    def ranked_lists(
        self,
        scope: Scope,
        query: str,
        lists: Sequence[Mode],
        size: int,
        filters: SearchFilter | None = None,
    ) -> dict[str, list[tuple[str, float]]]:
        """(chunk id, score) of each list, `size` deep, in one `_msearch` without `_source`."""
        _validate(query, size)
        return self._lists(Reader(self.es, scope), query, lists, size, filters, _QueryVector(self.embedder, query))

    def _lists(
        self,
        reader: Reader,
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
        clauses = _clauses(filters)
        responses = reader.msearch(
            [self._body(reader.scope, name, query, size, clauses, vector, source=False) for name in lists]
        )
        return {
            name: _visible(
                reader.scope,
                name,
                [(chunk_id_from_fields(raw["fields"]), raw["_score"]) for raw in response["hits"]["hits"]],
            )
            for name, response in zip(lists, responses, strict=True)
        }

    def _search(
        self, reader: Reader, query: str, mode: Mode, k: int, filters: SearchFilter | None, vector: _QueryVector
    ) -> SearchResult:
        _validate(query, k)
        started = time.perf_counter()
        fusion = None
        if mode == Mode.HYBRID:
            setting = self.fusion_of(reader.scope.kb)
            params = self.params.with_fusion(setting)
            hits = self._hybrid(reader, query, k, filters, vector, params)
            fusion = fusion_used(params, setting)
        else:
            body = self._body(reader.scope, mode, query, k, _clauses(filters), vector, source=True)
            found = [(raw["_id"], raw["_score"], raw["_source"]) for raw in reader.msearch([body])[0]["hits"]["hits"]]
            scores = _visible(reader.scope, mode, [(chunk_id, score) for chunk_id, score, _ in found])
            hits = [
                Hit.from_source(source, id=chunk_id, score=score)
                for (chunk_id, _, source), (_, score) in zip(found, scores, strict=True)
            ]
        return SearchResult(mode=mode, took_ms=(time.perf_counter() - started) * 1000, hits=hits, fusion=fusion)

    def fusion_of(self, index: str) -> FusionSetting | None:
        """The base's own fusion setting (None: the service's applies), as read at most `_META_TTL_S` ago."""
        stored = self._index(index)[0].kb.get("fusion")
        return FusionSetting.from_meta(stored) if stored else None

    def forget(self, index: str) -> None:
        """Read the base's settings again at its next search (its fusion was just changed)."""
        self._indices.pop(index, None)

    def _hybrid(
        self,
        reader: Reader,
        query: str,
        k: int,
        filters: SearchFilter | None,
        vector: _QueryVector,
        params: RetrievalParams,
    ) -> list[Hit]:
        ranked = self._lists(reader, query, params.hybrid_lists, max(k, params.depth), filters, vector)
        fused = fuse(ranked, params.fusion_params, top=k)
        # The winners came from filtered lists; the fetch checks their groups again (a chunk's
        # access may change between the search and the fetch).
        sources = reader.fetch([hit.id for hit in fused], HIT_SOURCE_FIELDS)
        return [  # a chunk deleted between the search and the fetch is left out
            Hit.from_source(sources[found.id], id=found.id, score=found.score, explain=found.explain)
            for found in fused
            if found.id in sources
        ]

    def compare(
        self,
        scope: Scope,
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
        reader = Reader(self.es, scope)
        return relate(query, k, {mode: self._search(reader, query, mode, k, filters, vector) for mode in chosen})

    def chunk(self, scope: Scope, chunk_id: str) -> Hit | None:
        """One chunk by id, whole (None when the base has no such chunk, or `scope` may not read it)."""
        source = Reader(self.es, scope).fetch([chunk_id], HIT_SOURCE_FIELDS).get(chunk_id)
        return Hit.from_source(source, id=chunk_id, score=0.0) if source is not None else None

    def index_tokenizer(self, scope: Scope) -> ChineseTokenizer:
        """The tokenizer `scope`'s base was cut with: the base dictionaries plus its stored corpus
        dictionary, of which a scope that hides documents gets the terms its chunks hold."""
        meta, tokenizer = self._index(scope.kb)
        if scope.documents.everything or not meta.corpus_terms:
            return tokenizer
        key = (scope.kb, scope.documents.key)
        cached = self._scoped.get(key)
        if cached is None or time.monotonic() - cached[0] > _META_TTL_S:
            held = Reader(self.es, scope).holding("tokens", list(meta.corpus_terms))
            cached = (time.monotonic(), self.tokenizer.with_corpus_terms([t for t in meta.corpus_terms if t in held]))
            self._scoped[key] = cached
        return cached[1]

    def _index(self, index: str) -> tuple[IndexMeta, ChineseTokenizer]:
        cached = self._indices.get(index)
        if cached is None or time.monotonic() - cached[0] > _META_TTL_S:
            meta = read_index_meta(self.es, index)
            cached = (time.monotonic(), meta, self.tokenizer.with_corpus_terms(meta.corpus_terms or ()))
            self._indices[index] = cached
        return cached[1], cached[2]

    def _body(
        self,
        scope: Scope,
        name: Mode,
        query: str,
        size: int,
        clauses: Clauses,
        vector: _QueryVector,
        *,
        source: bool,
    ) -> dict[str, Any]:
        """One list's search body (retrieval/lists.py), with the index's embedder checked or tokenizer used."""
        body = lists.envelope(size, source=source)
        if name == Mode.VECTOR:
            check_embedder_meta(self._index(scope.kb)[0], scope.kb, self.embedder)
            return body | lists.knn(vector.get(), size, self.params.num_candidates, clauses)
        return body | lists.keyword(name, query, self.index_tokenizer(scope), self.params.title_boost, clauses)


def _visible(scope: Scope, mode: Mode, ranked: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """A list's scores as `scope`'s caller may see them: a keyword list's as 1 / rank when the
    scope hides documents (its BM25 statistics count them), else as Elasticsearch gave them."""
    if mode == Mode.VECTOR or scope.documents.everything:
        return ranked
    return [(chunk_id, 1.0 / rank) for rank, (chunk_id, _) in enumerate(ranked, start=1)]


def _clauses(filters: SearchFilter | None) -> Clauses:
    """A request's own filters, put inside every list (the reader adds the scope's)."""
    return filters.to_es() if filters else []


def _validate(query: str, k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if not query.strip():
        raise ValueError("query is empty")


def build_retriever(settings: Settings, es: Elasticsearch, embedder: Embedder) -> Retriever:
    """The retriever the service and the CLI use: parameters and user dictionary from `settings`."""
    return Retriever(es, embedder, get_tokenizer(settings.jieba_user_dict), RetrievalParams.from_settings(settings))
