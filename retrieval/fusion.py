"""Fusing ranked lists into one, with each fused hit's explanation.

Every method turns a chunk's place in each list into a **contribution** and sums them; the
explanation of a hit is exactly those contributions, so a reader can add them up.

- `rrf`: Reciprocal Rank Fusion, weight / (k + rank) (rank 1-based); ignores the scores.
- `minmax`: weight * (score - min) / (max - min) of the list (1 when all scores are equal).
- `zscore`: weight * (score - min) / std of the list: the z-score shifted so the list's lowest
  score (and a chunk the list did not return) contributes 0.
- `rrf-gap` (query-adaptive): RRF whose weight per list grows with how clearly that list's
  top hit stands out for this query: weight * (1 + (s1 - s2) / (s1 - s_last)).

**Coverage** (any method, `FusionParams.coverage` > 0): a keyword list whose top hits match only
incidental words of the question (「一个星期」, 「突然」) is outvoted by one that matched what the question
is about. Each keyword list's weight is multiplied by min(1, coverage / `COVERAGE_FULL`) ** `coverage`,
where its coverage is the mean, over its top `COVERAGE_TOP` hits, of the share of the question's content
words (each weighted by its rarity, core/text.py) that the hit's text holds. `COVERAGE_FULL` and the
exponent were chosen on the dev questions of every corpus by the worst one (bench/results/any_corpus.md). The vector list keeps its weight: when the
question's words are not the documents' (a paraphrase), the keyword lists step back for it.

bench/retrieval_eval.py compares them on the dev questions with this very code.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from core.config import FusionMethod

Ranked = Sequence[tuple[str, float]]  # (chunk id, list score), best first
COVERAGE_TOP = 3  # a keyword list's top hits whose coverage of the question's words counts
COVERAGE_FULL = 0.5  # a keyword list whose top hits hold this share of the question keeps its whole weight


@dataclass(frozen=True)
class ListEvidence:
    """One list's part in a fused hit: its rank and score there (None: not returned) and contribution."""

    rank: int | None
    score: float | None
    contribution: float


@dataclass(frozen=True)
class FusionParams:
    method: FusionMethod
    k: int  # rank constant of `rrf` and `rrf-gap`
    weights: Mapping[str, float]  # per list; 1 when absent
    coverage: float = 0.0  # exponent of a keyword list's coverage in its weight (0: coverage ignored)

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", FusionMethod.from_str(self.method))  # a name from a CLI or a grid
        if self.k < 1:
            raise ValueError(f"the RRF rank constant must be at least 1, got {self.k}")
        if self.coverage < 0:
            raise ValueError(f"the coverage exponent must be at least 0, got {self.coverage}")

    def weight(self, name: str, coverage: Mapping[str, float]) -> float:
        """List `name`'s weight for this query: its own, times min(1, coverage / `COVERAGE_FULL`) ** `coverage`
        when it has a coverage."""
        own = self.weights.get(name, 1.0)
        if self.coverage == 0 or name not in coverage:
            return own
        return own * float(min(1.0, coverage[name] / COVERAGE_FULL) ** self.coverage)


@dataclass(frozen=True)
class QueryWords:
    """The question's content words, each with how much it tells (`ChineseTokenizer.rarity`)."""

    weights: Mapping[str, float]

    def coverage(self, text: str) -> float:
        """The weighted share of the words `text` holds (1.0 for a question without content words)."""
        total = math.fsum(self.weights.values())
        if total <= 0:
            return 1.0
        return math.fsum(weight for word, weight in self.weights.items() if word in text) / total


def list_coverage(ranked: Ranked, texts: Mapping[str, str], words: QueryWords, top: int = COVERAGE_TOP) -> float:
    """How much of the question a list's top `top` hits match, on average (0 for an empty list)."""
    found = [words.coverage(texts.get(chunk_id, "")) for chunk_id, _ in ranked[:top]]
    return math.fsum(found) / len(found) if found else 0.0


@dataclass(frozen=True)
class Fused:
    id: str
    score: float
    explain: dict[str, ListEvidence]


def _gap(ranked: Ranked) -> float:
    """How far the top score stands out: (s1 - s2) / (s1 - s_last), 0 for a flat or short list."""
    if len(ranked) < 2 or ranked[0][1] == ranked[-1][1]:
        return 0.0
    return (ranked[0][1] - ranked[1][1]) / (ranked[0][1] - ranked[-1][1])


def _rrf(ranked: Ranked, weight: float, k: int) -> list[float]:
    return [weight / (k + rank) for rank in range(1, len(ranked) + 1)]


def _rrf_gap(ranked: Ranked, weight: float, k: int) -> list[float]:
    return _rrf(ranked, weight * (1 + _gap(ranked)), k)


def _minmax(ranked: Ranked, weight: float, k: int) -> list[float]:
    scores = [score for _, score in ranked]
    low, spread = min(scores), max(scores) - min(scores)
    return [weight * ((s - low) / spread if spread else 1.0) for s in scores]


def _zscore(ranked: Ranked, weight: float, k: int) -> list[float]:
    scores = [score for _, score in ranked]
    low = min(scores)
    mean = math.fsum(scores) / len(scores)
    std = math.sqrt(math.fsum((s - mean) ** 2 for s in scores) / len(scores))  # statistics.pstdev is exact, slow
    return [weight * ((s - low) / std if std else 1.0) for s in scores]


# The contribution of each entry of one (non-empty) list, in list order, per method.
CONTRIBUTIONS: dict[FusionMethod, Callable[[Ranked, float, int], list[float]]] = {
    FusionMethod.RRF: _rrf,
    FusionMethod.RRF_GAP: _rrf_gap,
    FusionMethod.MINMAX: _minmax,
    FusionMethod.ZSCORE: _zscore,
}


def fuse(
    lists: Mapping[str, Ranked],
    params: FusionParams,
    top: int | None = None,
    coverage: Mapping[str, float] | None = None,
) -> list[Fused]:
    """The best `top` chunks of `lists` (all when None), best fused score first, ties by id; `coverage`:
    each keyword list's coverage of the question (`list_coverage`), used when `params.coverage` > 0.

    Explanations are built for the returned chunks only (the offline grid fuses thousands of queries).
    """
    contribute = CONTRIBUTIONS[params.method]
    parts = {
        name: contribute(ranked, params.weight(name, coverage or {}), params.k)
        for name, ranked in lists.items()
        if ranked
    }
    totals: dict[str, list[float]] = {}
    for name, contributions in parts.items():
        for (chunk_id, _score), part in zip(lists[name], contributions, strict=True):
            totals.setdefault(chunk_id, []).append(part)
    order = sorted(((math.fsum(p), chunk_id) for chunk_id, p in totals.items()), key=lambda item: (-item[0], item[1]))
    where = {name: {chunk_id: rank for rank, (chunk_id, _) in enumerate(ranked)} for name, ranked in lists.items()}
    fused = []
    for total, chunk_id in order[:top]:
        explain = {}
        for name, ranked in lists.items():
            rank = where[name].get(chunk_id)
            explain[name] = (
                ListEvidence(rank + 1, ranked[rank][1], parts[name][rank])
                if rank is not None
                else ListEvidence(None, None, 0.0)
            )
        fused.append(Fused(chunk_id, total, explain))
    return fused
