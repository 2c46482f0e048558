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

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from elasticsearch import Elasticsearch

from core.access import Clauses, Scope
from core.aliases import Expansion, expansions
from core.config import FusionMethod, Settings
from core.embeddings import Embedder, cosine_similarities
from core.kbs import Calibration, FusionSetting
from core.lexicon import corpus_terms
from core.reader import Reader
from core.schema import HIT_SOURCE_FIELDS, LIST_MODES, Mode, chunk_id_from_fields
from core.store import IndexMeta, SearchError, check_embedder_meta, read_index_meta
from core.text import ChineseTokenizer, get_tokenizer
from retrieval import lists
from retrieval.compare import Comparison, relate
from retrieval.fusion import COVERAGE_TOP, FusionParams, QueryWords, fuse, list_coverage
from retrieval.lists import SearchFilter
from retrieval.profiles import TextProfile, profile_named
from retrieval.rerank import Reranker, build_reranker
from retrieval.results import FusionUsed, Hit, PassageMatch, QueryExpansion, SearchResult

logger = logging.getLogger(__name__)

# Chunks a caller who may not read everything has its own dictionary learnt from (`readable_tokenizer`).
_READ_FOR_TERMS = 500
_META_TTL_S = 30.0  # how long an index's embedder and dictionary are trusted before re-reading
KEYWORD_MODES = frozenset(LIST_MODES) - {Mode.VECTOR}
COVERAGE_KEY = "coverage"  # `ranked_lists(coverage=True)`: (keyword list, its coverage) pairs under this key


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
    passage_hits: int = 3  # matched passages a hit of the vector list carries (PASSAGE_HITS)
    alias_weight: float = 0.0  # of the query's alias expansions in the keyword lists (ALIAS_WEIGHT; 0: none)
    coverage: float = 0.0  # exponent of a keyword list's coverage of the question (FUSION_COVERAGE; 0: off)
    calibrated: bool = True  # a base's own alias weight (its calibration) over `alias_weight`; False: calibrating

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
            passage_hits=settings.passage_hits,
            alias_weight=settings.alias_weight,
            coverage=settings.fusion_coverage,
        )

    @property
    def fusion_params(self) -> FusionParams:
        return FusionParams(self.fusion, self.rrf_k, self.weights, self.coverage)

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
            coverage=setting.coverage,
        )


def fusion_used(params: RetrievalParams, setting: FusionSetting | None) -> FusionUsed:
    """What a hybrid search with `params` (the service's, with the base's `setting`) fuses, and whence."""
    return FusionUsed(
        method=params.fusion,
        rrf_k=params.rrf_k,
        depth=params.depth,
        lists=list(params.hybrid_lists),
        weights=dict(params.weights),
        coverage=params.coverage,
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
        reranker: Reranker | None = None,
    ) -> None:
        self.es = es
        self.embedder = embedder
        self.tokenizer = tokenizer
        self.params = params
        self.reranker = reranker  # hybrid's last stage (retrieval/rerank.py); None: RERANKER=none
        self._indices: dict[str, tuple[float, IndexMeta, ChineseTokenizer]] = {}
        self._scoped: dict[tuple[str, str], tuple[float, ChineseTokenizer]] = {}
        self._readable: dict[tuple[str, str], tuple[float, ChineseTokenizer]] = {}

    def search(
        self,
        scope: Scope,
        query: str,
        mode: Mode | str = Mode.HYBRID,
        k: int = 10,
        filters: SearchFilter | None = None,
        *,
        similarity: bool = False,
        rerank: bool = True,
    ) -> SearchResult:
        """The top `k` of `mode` among the chunks `scope` may read; with `similarity`, each hit's
        cosine to the query too (one more `mget`); hybrid is reranked unless `rerank` is False."""
        vector = _QueryVector(self.embedder, query)
        result = self._search(Reader(self.es, scope), query, Mode.from_str(mode), k, filters, vector, rerank)
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
        *,
        coverage: bool = False,
    ) -> dict[str, list[tuple[str, float]]]:
        """(chunk id, score) of each list, `size` deep, in one `_msearch` without `_source`; with
        `coverage`, also each keyword list's coverage of the question as (list, coverage) under
        `COVERAGE_KEY` (one `mget` more), so an offline grid fuses as the service does."""
        _validate(query, size)
        reader = Reader(self.es, scope)
        found = self.expansions(scope, query)
        ranked = self._lists(reader, query, lists, size, filters, _QueryVector(self.embedder, query), found)[0]
        if coverage:
            ranked[COVERAGE_KEY] = list(self.coverage(reader, query, ranked).items())
        return ranked

    def coverage(
        self, reader: Reader, query: str, ranked: Mapping[str, Sequence[tuple[str, float]]]
    ) -> dict[str, float]:
        """Each keyword list's coverage of the question's content words (`retrieval.fusion.list_coverage`)."""
        tokenizer = self.index_tokenizer(reader.scope)
        words = QueryWords({word: tokenizer.rarity(word) for word in tokenizer.content_words(query)})
        keyword = {name: hits for name, hits in ranked.items() if name in KEYWORD_MODES}
        ids = list(dict.fromkeys(chunk_id for hits in keyword.values() for chunk_id, _ in hits[:COVERAGE_TOP]))
        texts = {chunk_id: source["text"] for chunk_id, source in reader.fetch(ids, ["text"]).items()}
        return {name: list_coverage(hits, texts, words) for name, hits in keyword.items()}

    def expansions(self, scope: Scope, query: str) -> list[Expansion]:
        """The other names of the names in `query` that `scope` may see (none when ALIAS_WEIGHT is 0)."""
        if self.alias_weight(scope.kb) <= 0:
            return []
        return expansions(self._index(scope.kb)[0].aliases, query, scope.documents)

    def _lists(
        self,
        reader: Reader,
        query: str,
        lists: Sequence[Mode],
        size: int,
        filters: SearchFilter | None,
        vector: _QueryVector,
        found: Sequence[Expansion],
    ) -> tuple[dict[str, list[tuple[str, float]]], dict[str, list[PassageMatch]]]:
        """Every list of `lists` in one `_msearch`, which Elasticsearch runs concurrently, and the
        passages each chunk of the vector list matched with (by chunk id).

        The query is embedded first: searching the keyword lists on a thread while embedding
        was slower on two cores, where the embedder's threads and Elasticsearch compete.
        """
        clauses = _clauses(filters)
        terms = [expansion.expansion for expansion in found]
        responses = reader.msearch(
            [
                self._body(reader.scope, name, query, size, clauses, vector, source=False, expansions=terms)
                for name in lists
            ]
        )
        ranked: dict[str, list[tuple[str, float]]] = {}
        matched: dict[str, list[PassageMatch]] = {}
        for name, response in zip(lists, responses, strict=True):
            raws = response["hits"]["hits"]
            ranked[name] = _visible(
                reader.scope, name, [(chunk_id_from_fields(raw["fields"]), raw["_score"]) for raw in raws]
            )
            matched |= {
                chunk_id: passage_matches(raw)
                for (chunk_id, _), raw in zip(ranked[name], raws, strict=True)
                if "inner_hits" in raw
            }
        return ranked, matched

    def _search(
        self,
        reader: Reader,
        query: str,
        mode: Mode,
        k: int,
        filters: SearchFilter | None,
        vector: _QueryVector,
        rerank: bool = True,
    ) -> SearchResult:
        """The search with the query's alias expansions; when Elasticsearch refuses it with them (a
        pair no cap foresaw), the same search without them and a warning: never a failed query."""
        _validate(query, k)
        found = self.expansions(reader.scope, query) if mode != Mode.VECTOR else []
        try:
            return self._expanded(reader, query, mode, k, filters, vector, rerank, found)
        except SearchError as err:
            if not found or err.transient:
                raise
            names = "、".join(expansion.expansion for expansion in found)
            logger.warning(
                "alias expansions %s of %r made the search fail (%s): searched without them", names, query, err
            )
            result = self._expanded(reader, query, mode, k, filters, vector, rerank, [])
            result.notices.append(f"别名扩展（{names}）使检索失败，已忽略")
            return result

    def _expanded(
        self,
        reader: Reader,
        query: str,
        mode: Mode,
        k: int,
        filters: SearchFilter | None,
        vector: _QueryVector,
        rerank: bool,
        found: Sequence[Expansion],
    ) -> SearchResult:
        started = time.perf_counter()
        fusion = reranked = None
        if mode == Mode.HYBRID:
            setting = self.fusion_of(reader.scope.kb)
            params = self.params.with_fusion(setting)
            reranker = self.reranker if rerank else None
            weight = self.rerank_weight(setting)
            # Only hits fetched through the caller's reader (their groups checked again) are ever sent.
            # The candidates are the same fusion's next hits: its lists as deep as without reranking.
            top = max(k, reranker.limits.candidates) if reranker and weight > 0 else k
            hits = self._hybrid(reader, query, k, filters, vector, params, top, found)
            fusion = fusion_used(params, setting)
            if reranker is not None:
                hits, reranked = reranker.rerank(query, hits, k, weight, reader.scope.kb)
        else:
            terms = [expansion.expansion for expansion in found]
            body = self._body(reader.scope, mode, query, k, _clauses(filters), vector, source=True, expansions=terms)
            raws = reader.msearch([body])[0]["hits"]["hits"]
            scores = _visible(reader.scope, mode, [(raw["_id"], raw["_score"]) for raw in raws])
            hits = [
                Hit.from_source(raw["_source"], id=raw["_id"], score=score, passages=passage_matches(raw))
                for raw, (_, score) in zip(raws, scores, strict=True)
            ]
        expanded = [QueryExpansion(term=e.term, expansion=e.expansion, source=e.source) for e in found]
        for hit in hits:  # each hit's explanation names the expansions it holds
            hit.expansions = [e for e in expanded if e.expansion in hit.text]
        return SearchResult(
            mode=mode,
            took_ms=(time.perf_counter() - started) * 1000,
            hits=hits,
            fusion=fusion,
            rerank=reranked,
            expansions=expanded,
        )

    def rerank_weight(self, setting: FusionSetting | None) -> float:
        """The reranker's share of the final score on a base: its own (evaluated or pinned), else the service's."""
        if self.reranker is None:
            return 0.0
        if setting is not None and setting.rerank_weight is not None:
            return setting.rerank_weight
        return self.reranker.limits.weight

    def fusion_of(self, index: str) -> FusionSetting | None:
        """The base's own fusion setting (None: the service's applies), as read at most `_META_TTL_S` ago."""
        stored = self._index(index)[0].kb.get("fusion")
        return FusionSetting.from_meta(stored) if stored else None

    def calibration_of(self, index: str) -> Calibration | None:
        """The base's own calibration (None: the service's thresholds), as read at most `_META_TTL_S` ago."""
        stored = self._index(index)[0].kb.get("calibration")
        return Calibration.from_meta(stored) if stored else None

    def alias_weight(self, index: str) -> float:
        """The weight of alias expansions on a base: its calibration's, else ALIAS_WEIGHT."""
        own = self.calibration_of(index) if self.params.calibrated else None
        return own.alias_weight if own is not None and own.alias_weight is not None else self.params.alias_weight

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
        top: int,
        found: Sequence[Expansion],
    ) -> list[Hit]:
        """The fused `top` (k, or the reranker's candidates) of lists `max(k, depth)` deep."""
        ranked, matched = self._lists(reader, query, params.hybrid_lists, max(k, params.depth), filters, vector, found)
        coverage = self.coverage(reader, query, ranked) if params.coverage > 0 else {}
        fused = fuse(ranked, params.fusion_params, top=top, coverage=coverage)
        # The winners came from filtered lists; the fetch checks their groups again (a chunk's
        # access may change between the search and the fetch).
        sources = reader.fetch([hit.id for hit in fused], HIT_SOURCE_FIELDS)
        return [  # a chunk deleted between the search and the fetch is left out
            Hit.from_source(
                sources[winner.id],
                id=winner.id,
                score=winner.score,
                explain=winner.explain,
                passages=matched.get(winner.id, []),
            )
            for winner in fused
            if winner.id in sources
        ]

    def compare(
        self,
        scope: Scope,
        query: str,
        k: int = 10,
        modes: Sequence[Mode | str] = (Mode.VECTOR, Mode.HYBRID),
        filters: SearchFilter | None = None,
        *,
        rerank: bool = True,
    ) -> Comparison:
        """Run `query` in each of `modes` (each timed on its own; the query embedded once) and relate their
        top-k ids; a reranked hybrid's hits show their fused rank, hybrid before reranking."""
        chosen = list(dict.fromkeys(Mode.from_str(mode) for mode in modes))
        if len(chosen) < 2:
            raise ValueError(f"compare needs at least two distinct modes, got {chosen}")
        vector = _QueryVector(self.embedder, query)
        reader = Reader(self.es, scope)
        return relate(
            query, k, {mode: self._search(reader, query, mode, k, filters, vector, rerank) for mode in chosen}
        )

    def chunk(self, scope: Scope, chunk_id: str) -> Hit | None:
        """One chunk by id, whole (None when the base has no such chunk, or `scope` may not read it)."""
        source = Reader(self.es, scope).fetch([chunk_id], HIT_SOURCE_FIELDS).get(chunk_id)
        return Hit.from_source(source, id=chunk_id, score=0.0) if source is not None else None

    def terms_held(self, scope: Scope, terms: Sequence[str]) -> set[str]:
        """Which of `terms` (index terms) some chunk `scope` reads holds: a term the base never
        mentions cannot be answered from it (the extractive verdict, `retrieval.extractive`)."""
        return Reader(self.es, scope).holding("tokens", list(terms))

    def scored_passages(self, scope: Scope, chunk_ids: Sequence[str], query: str) -> dict[str, list[PassageMatch]]:
        """Every passage of the chunks `chunk_ids` that `scope` reads, with its score for `query`, best
        first (by chunk id): a nested kNN restricted to those chunks, exhaustive since they hold fewer
        passages than its candidates and scored on the stored float vectors, so the stored passage
        vectors are scored exactly without embedding anything but the query (the quotes' figures do
        not move when segments merge). Empty on a base built without passages."""
        meta = self._index(scope.kb)[0]
        if meta.passages is None or not chunk_ids:
            return {}
        check_embedder_meta(meta, scope.kb, self.embedder)
        vector = _QueryVector(self.embedder, query).get()
        ids = [{"ids": {"values": list(chunk_ids)}}]
        candidates = max(self.params.num_candidates, lists.MAX_PASSAGES_PER_CHUNK * len(chunk_ids))
        body = lists.passage_knn(vector, len(chunk_ids), candidates, ids, lists.MAX_PASSAGES_PER_CHUNK, exact=True)
        raws = Reader(self.es, scope).search(lists.envelope(len(chunk_ids), source=False) | body)["hits"]["hits"]
        return {chunk_id_from_fields(raw["fields"]): passage_matches(raw) for raw in raws}

    def text_profile(self, scope: Scope) -> TextProfile:
        """The base's text profile (`_meta.kb.profile`, core/kbs.py): the default for a modern base."""
        return profile_named(self._index(scope.kb)[0].kb.get("profile"))

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

    def readable_tokenizer(self, scope: Scope) -> ChineseTokenizer:
        """A tokenizer of what `scope` may read alone (the chat clients' title and tags tasks): for a caller
        who reads everything the base's, else the base dictionaries plus the terms found in the first
        `_READ_FOR_TERMS` chunks it may read. The stored dictionary was learnt from every document: which
        of its terms a writer's own upload holds would tell what the hidden ones say (issue 58)."""
        if scope.documents.everything or not self.tokenizer.learn_corpus_terms:
            return self._index(scope.kb)[1]
        key = (scope.kb, scope.documents.key)
        cached = self._readable.get(key)
        if cached is None or time.monotonic() - cached[0] > _META_TTL_S:
            body = {"size": _READ_FOR_TERMS, "_source": ["text"], "sort": ["_doc"], "track_total_hits": False}
            hits = Reader(self.es, scope).search(body)["hits"]["hits"]
            terms = corpus_terms(str(hit["_source"].get("text", "")) for hit in hits)
            cached = (time.monotonic(), self.tokenizer.with_corpus_terms(terms))
            self._readable[key] = cached
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
        expansions: Sequence[str] = (),
    ) -> dict[str, Any]:
        """One list's search body (retrieval/lists.py), with the index's embedder checked or tokenizer used."""
        body = lists.envelope(size, source=source)
        if name == Mode.VECTOR:
            meta = self._index(scope.kb)[0]
            check_embedder_meta(meta, scope.kb, self.embedder)
            if meta.passages is None:  # a base built before passage vectors
                return body | lists.knn(vector.get(), size, self.params.num_candidates, clauses)
            hits = self.params.passage_hits
            return body | lists.passage_knn(vector.get(), size, self.params.num_candidates, clauses, hits)
        tokenizer, weight = self.index_tokenizer(scope), self.alias_weight(scope.kb)
        return body | lists.keyword(name, query, tokenizer, self.params.title_boost, clauses, expansions, weight)


def passage_matches(raw: dict[str, Any]) -> list[PassageMatch]:
    """The passages a hit of the passage kNN matched with, best first (none for any other hit)."""
    inner = raw.get("inner_hits", {}).get("passages", {}).get("hits", {}).get("hits", [])
    return [
        PassageMatch(
            start=found["fields"]["passages.start"][0], end=found["fields"]["passages.end"][0], score=found["_score"]
        )
        for found in inner
    ]


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


def build_retriever(
    settings: Settings, es: Elasticsearch, embedder: Embedder, reranker: Reranker | None = None
) -> Retriever:
    """The retriever the service and the CLI use: parameters, user dictionary and reranker from
    `settings` (the service passes its own `reranker` for `RERANKER=llm`)."""
    tokenizer = get_tokenizer(settings.jieba_user_dict)
    stage = reranker if reranker is not None else build_reranker(settings)
    return Retriever(es, embedder, tokenizer, RetrievalParams.from_settings(settings), stage)
