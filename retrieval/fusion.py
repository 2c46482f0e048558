"""Fusing ranked lists into one, with each fused hit's explanation.

Every method turns a chunk's place in each list into a **contribution** and sums them; the
explanation of a hit is exactly those contributions, so a reader can add them up.

- `rrf`: Reciprocal Rank Fusion, weight / (k + rank) (rank 1-based); ignores the scores.
- `minmax`: weight * (score - min) / (max - min) of the list (1 when all scores are equal).
- `zscore`: weight * (score - min) / std of the list: the z-score shifted so the list's lowest
  score (and a chunk the list did not return) contributes 0.
- `rrf-gap` (query-adaptive): RRF whose weight per list grows with how clearly that list's
  top hit stands out for this query: weight * (1 + (s1 - s2) / (s1 - s_last)).

bench/retrieval_eval.py compares them on the dev questions with this very code.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from core.config import FusionMethod

Ranked = Sequence[tuple[str, float]]  # (chunk id, list score), best first


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", FusionMethod.from_str(self.method))  # a name from a CLI or a grid
        if self.k < 1:
            raise ValueError(f"the RRF rank constant must be at least 1, got {self.k}")


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


def fuse(lists: Mapping[str, Ranked], params: FusionParams, top: int | None = None) -> list[Fused]:
    """The best `top` chunks of `lists` (all when None), best fused score first, ties by id.

    Explanations are built for the returned chunks only (the offline grid fuses thousands of queries).
    """
    contribute = CONTRIBUTIONS[params.method]
    parts = {
        name: contribute(ranked, params.weights.get(name, 1.0), params.k) for name, ranked in lists.items() if ranked
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
