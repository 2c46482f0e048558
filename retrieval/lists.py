"""The ranked lists hybrid search fuses: one small query builder per mode.

Each builder returns the part of a search body that differs between the lists; `envelope`
adds what they share (size, and `_source` or the doc values a chunk id is derived from).
Keyword queries are cut by the index's own tokenizer, so they match what indexing wrote.
"""

from collections.abc import Callable, Sequence
from typing import Annotated, Any, Protocol

from pydantic import Field

from core.access import Clauses
from core.contract import StrictModel
from core.schema import HIT_SOURCE_FIELDS, ID_FIELDS, Mode
from core.text import ChineseTokenizer, bigram_terms, join_terms


class SearchFilter(Protocol):
    """Anything that narrows a search: its filter clauses, put inside every list (`Filters`, Dify's metadata conditions)."""

    def to_es(self) -> Clauses: ...


ES_INTEGER_MAX = 2**31 - 1  # `chapter` is an Elasticsearch integer: a larger bound is refused there
Chapter = Annotated[int, Field(ge=0, le=ES_INTEGER_MAX)]


class Filters(StrictModel):
    """Restrict a search to some sources and a chapter range (inclusive; from after to matches nothing)."""

    sources: list[str] | None = None
    chapter_from: Chapter | None = None
    chapter_to: Chapter | None = None

    def to_es(self) -> Clauses:
        """Filter clauses applied inside every list (kNN `filter`, BM25 `bool.filter`)."""
        clauses: Clauses = []
        if self.sources:
            clauses.append({"terms": {"source": self.sources}})
        if self.chapter_from is not None or self.chapter_to is not None:
            bounds = {"gte": self.chapter_from, "lte": self.chapter_to}
            clauses.append({"range": {"chapter": {key: v for key, v in bounds.items() if v is not None}}})
        return clauses


def envelope(size: int, *, source: bool) -> dict[str, Any]:
    """What every list's body shares: its size, and `_source` or only the id doc values."""
    if source:
        return {"size": size, "_source": HIT_SOURCE_FIELDS}
    # ids from doc values only (core.schema.chunk_id_from_fields)
    return {"size": size, "stored_fields": "_none_", "docvalue_fields": ID_FIELDS}


def knn(vector: list[float], size: int, num_candidates: int, clauses: Clauses) -> dict[str, Any]:
    """`vector` on a base without passages: dense kNN over the chunk embeddings (HNSW), the filters
    applied inside the search."""
    query: dict[str, Any] = {
        "field": "embedding",
        "query_vector": vector,
        "k": size,
        "num_candidates": max(num_candidates, size),
    }
    if clauses:
        query["filter"] = clauses
    return {"knn": query}


# The offsets of a matched passage, read from doc values (a passage's `_source` holds its vector).
PASSAGE_FIELDS = ["passages.start", "passages.end"]
# Inner hits a chunk returns at most (Elasticsearch's index.max_inner_result_window): every passage of
# an 800-character chunk (about 9 at 120/30), and of one ten times as long.
MAX_PASSAGES_PER_CHUNK = 100


def passage_knn(
    vector: list[float], size: int, num_candidates: int, clauses: Clauses, hits: int, *, exact: bool = False
) -> dict[str, Any]:
    """`vector` on a base with passages: nested kNN over the passage vectors, a chunk scored by its
    best passage, its `hits` best passages as inner hits. The filters (the request's, and the
    reader's access groups) are on the chunk, inside the search: a passage of a chunk the caller
    may not read is never a candidate. `exact`: scores from the stored float vectors, not their
    int8 quantisation (which moves a cosine by up to .004 and changes when segments merge)."""
    body = knn(vector, size, num_candidates, clauses)
    body["knn"]["field"] = "passages.vector"
    body["knn"]["inner_hits"] = {"size": hits, "_source": False, "docvalue_fields": PASSAGE_FIELDS}
    if exact:
        body["knn"]["rescore_vector"] = {"oversample": 1.0}
    return body


def bm25(query: str, tokenizer: ChineseTokenizer, title_boost: float) -> Clauses:
    """`bm25`: jieba query terms against the chunk tokens, and against the title tokens boosted."""
    terms = join_terms(tokenizer.query_terms(query))
    return [
        {"match": {"tokens": terms}},
        {"match": {"title_tokens": {"query": terms, "boost": title_boost}}},
    ]


def bigram(query: str, tokenizer: ChineseTokenizer, title_boost: float) -> Clauses:
    """`bigram`: CJK character bigrams of the query's keywords, for text jieba cuts badly (no title part)."""
    return [{"match": {"bigrams": join_terms(bigram_terms(tokenizer.keyword_text(query)))}}]


def standard(query: str, tokenizer: ChineseTokenizer, title_boost: float) -> Clauses:
    """`standard`: the single-character baseline, Elasticsearch's standard analyzer over the raw text."""
    return [{"match": {"text": tokenizer.keyword_chars(query)}}]


KEYWORD_LISTS: dict[Mode, Callable[[str, ChineseTokenizer, float], Clauses]] = {
    Mode.BM25: bm25,
    Mode.BIGRAM: bigram,
    Mode.STANDARD: standard,
}


def keyword(
    mode: Mode,
    query: str,
    tokenizer: ChineseTokenizer,
    title_boost: float,
    clauses: Clauses,
    expansions: Sequence[str] = (),
    weight: float = 0.0,
) -> dict[str, Any]:
    """A keyword list's query: any of its `should` clauses must match, the filters always. The
    `expansions` (other names of the query's names, core/aliases.py) are searched the same way at `weight`."""
    should = KEYWORD_LISTS[mode](query, tokenizer, title_boost)
    if expansions and weight > 0:
        extra = KEYWORD_LISTS[mode]("，".join(expansions), tokenizer, title_boost)
        should += [{"bool": {"should": extra, "boost": weight}}]
    return {"query": {"bool": {"should": should, "minimum_should_match": 1, "filter": clauses}}}
