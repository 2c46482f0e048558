"""What a search returns: hits (the chunk record's stored fields) with their citation label, and the result of one mode."""

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field, computed_field

from core.config import FusionMethod
from core.documents import page_label, source_label
from core.schema import ChunkFields, Mode
from retrieval.fusion import ListEvidence


class PassageMatch(BaseModel):
    """A passage of a hit's chunk that matched the query (the nested passage kNN's inner hit):
    its character offsets in the chunk's `text` (end exclusive) and its score there."""

    start: int
    end: int
    score: float

    @property
    def cosine(self) -> float:
        """The passage's cosine to the query: Elasticsearch scores a cosine kNN (1 + cosine) / 2."""
        return 2 * self.score - 1


class RerankEvidence(BaseModel):
    """A reranked hit's part: the reranker's own score, and its 1-based rank and score after fusion
    (before reranking); the hit's `score` is then the combined one (retrieval/rerank.py)."""

    score: float
    fused_rank: int
    fused_score: float


class RerankUsed(BaseModel):
    """Whether a hybrid search was reranked, by what, at which weight; `warning` when the reranker
    failed or is paused and the fused order was returned instead."""

    reranker: str
    weight: float
    candidates: int
    applied: bool = False
    took_ms: float | None = None
    warning: str | None = None


class QueryExpansion(BaseModel):
    """A name of the query and another name of it the keyword lists also searched, with where that
    was learnt: 子昂 → 赵阳, 「《三国演义》第1回: 姓刘名备，字子昂。」 (core/aliases.py)."""

    term: str
    expansion: str
    source: str


class Hit(ChunkFields):
    """A chunk a search returned: its stored fields (`ChunkFields`), id and score."""

    id: str
    score: float
    # Cosine similarity of the query's and the chunk's embeddings, negatives as 0: a score whose
    # meaning depends on neither the other hits nor the mode (set when asked: `similarity=True`).
    similarity: float | None = None
    # Hybrid only, why it was returned: per fused list, its 1-based rank and score there
    # (None: not returned by that list) and the list's contribution; they sum to `score`.
    explain: dict[str, ListEvidence] | None = None
    # The chunk's passages that matched best, best first (empty when the base has no passage
    # vectors or the mode ran no passage search): where the extractive answer and the reranker start.
    passages: list[PassageMatch] = Field(default_factory=list)
    # The query's alias expansions this chunk holds: the keyword lists found it by them too (子昂 → 赵阳).
    expansions: list[QueryExpansion] = Field(default_factory=list)
    # Reranked hybrid hits only: the reranker's score and the fused rank and score before it.
    rerank: RerankEvidence | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def page(self) -> int | str | None:
        """The page (3) or page range ("3-4") of a paged format such as PDF."""
        return page_label(self.page_start, self.page_end)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def rows(self) -> int | str | None:
        """The sheet's row (35) or rows ("35-52") a spreadsheet's chunk holds."""
        return page_label(self.row_start, self.row_end)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def label(self) -> str:
        """How this chunk is cited everywhere: 《指南》第 3 页 · 3.2 用药, 《差旅标准》工作表「住宿」第 35-52 行."""
        return source_label(
            title=self.title,
            source=self.source,
            chapter=self.chapter,
            chapter_title=self.chapter_title,
            page=self.page,
            section=self.section,
            sheet=self.sheet,
            rows=self.rows,
            slide=self.slide,
        )


class FusionUsed(BaseModel):
    """How a hybrid search fused its lists, and where that setting came from: the service's
    default, or the base's own (chosen by an evaluation on its questions, or pinned by a person)."""

    method: FusionMethod
    rrf_k: int
    depth: int
    lists: list[Mode]
    weights: dict[str, float]
    coverage: float = 0.0  # a keyword list's weight times its coverage of the question to this power
    origin: Literal["default", "evaluation", "pinned"]


class SearchResult(BaseModel):
    mode: Mode
    took_ms: float
    hits: list[Hit]
    fusion: FusionUsed | None = None  # hybrid only
    rerank: RerankUsed | None = None  # hybrid with a reranker configured and not turned off
    # What else went wrong without failing the search (alias expansions left out), shown in `warnings`.
    notices: list[str] = Field(default_factory=list, exclude=True)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def warnings(self) -> list[str]:
        """What went wrong without failing the search (a reranker's failure: the fused order was kept)."""
        reranking = [self.rerank.warning] if self.rerank and self.rerank.warning else []
        return reranking + self.notices

    # The query's alias expansions (keyword lists and hybrid; only those the caller may see).
    expansions: list[QueryExpansion] = Field(default_factory=list)


def interleave(lists: Sequence[Sequence[Hit]], k: int) -> list[Hit]:
    """The hits of several searches for one question part, first of each, then second of each…, each
    chunk once, the first `k`: every search's best hits are kept (`retrieval.extractive.search_texts`)."""
    found: dict[str, Hit] = {}
    for rank in range(max((len(hits) for hits in lists), default=0)):
        for hits in lists:
            if rank < len(hits):
                found.setdefault(hits[rank].id, hits[rank])
    return list(found.values())[:k]
