"""Comparison of modes over one query: overlap of their top k, what only one found, rank moves.

The analytics are plain functions of the per-mode results, so the retriever only runs the
searches (`Retriever.compare`) and `relate` says how they differ.
"""

from itertools import combinations

from pydantic import BaseModel

from core.schema import Mode
from retrieval.results import SearchResult


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


Ranks = dict[Mode, dict[str, int]]  # per mode: chunk id -> its 1-based rank


def overlaps(ids: dict[Mode, list[str]], ranks: Ranks, k: int) -> list[ModeOverlap]:
    """Every pair of modes, in the order given: the ids both returned, in the first one's order."""
    found = []
    for a, b in combinations(ids, 2):
        shared = [chunk_id for chunk_id in ids[a] if chunk_id in ranks[b]]
        found.append(ModeOverlap(modes=(a, b), shared=shared, overlap_at_k=len(shared) / k))
    return found


def rank_differences(ids: dict[Mode, list[str]], ranks: Ranks) -> list[RankDifference]:
    """One row per id any mode returned, by its best rank (ties by id)."""
    rows = []
    for chunk_id in {chunk_id for found in ids.values() for chunk_id in found}:
        row = {mode: ranks[mode].get(chunk_id) for mode in ids}
        found = [rank for rank in row.values() if rank is not None]
        by = [mode for mode in ids if row[mode] is not None]
        rows.append(RankDifference(id=chunk_id, ranks=row, found_by=by, spread=max(found) - min(found)))
    rows.sort(key=lambda row: (min(r for r in row.ranks.values() if r is not None), row.id))
    return rows


def relate(query: str, k: int, results: dict[Mode, SearchResult]) -> Comparison:
    """The comparison of `results` (one per mode, in the order the modes were asked for)."""
    ids = {mode: [hit.id for hit in result.hits] for mode, result in results.items()}
    ranks = {mode: {chunk_id: rank for rank, chunk_id in enumerate(found, start=1)} for mode, found in ids.items()}
    modes = list(results)
    return Comparison(
        query=query,
        k=k,
        modes=modes,
        results=results,
        overlaps=overlaps(ids, ranks, k),
        common=[chunk_id for chunk_id in ids[modes[0]] if all(chunk_id in ranks[m] for m in modes)],
        only={
            mode: [c for c in ids[mode] if not any(c in ranks[other] for other in modes if other != mode)]
            for mode in modes
        },
        ranks=rank_differences(ids, ranks),
    )
