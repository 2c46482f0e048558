"""Retrieval evaluation: metrics, the paired bootstrap, the fusion grid and the rule that picks a fusion on dev.

One copy, used by the user-facing evaluation of a knowledge base (retrieval/evaluate.py) and by
the benchmarks (bench/retrieval_eval.py), so a base's report and the published figures are
computed by the same code.

- **Relevance** is a set of chunk ids per question, decided before the search
  (retrieval/questions.py: evidence-string containment, chunk ids or whole documents).
- **Metrics** of one ranked list, only its first 10 ids counting: R@1, R@5, R@10 and MRR@10 of
  the first relevant chunk; nDCG@10 with binary gains over every relevant chunk (the ideal
  ranking puts min(|relevant|, 10) of them first).
- **The rule** (`choose`): every setting of `fusion_grid` fuses the dev lists; among those never
  below the best single list by more than `tolerance` on R@1, R@5 and MRR@10 (on every set),
  those within `cost_tolerance` of the best mean dev MRR@10 are "as good", and of these the
  shallowest (fewer hits to fetch and fuse) is chosen, then the best.
"""

import hashlib
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from core.config import FusionMethod
from core.kbs import FusionSetting
from core.schema import LIST_MODES, Mode
from retrieval.fusion import FusionParams, fuse
from retrieval.retriever import COVERAGE_KEY, RetrievalParams

LISTS: tuple[Mode, ...] = LIST_MODES
METRICS = ("R@1", "R@5", "R@10", "MRR@10", "nDCG@10")
GATE = ("R@1", "R@5", "MRR@10")  # hybrid must not be below any single list on these
BOOTSTRAP = 2000
LIST_DEPTH = 50  # every list is fetched this deep once; fusion depths are cuts of it
DEPTHS = (50, 30, 20, 10)  # fusion depths compared on dev (a cut equals a shallower search)
TOLERANCE = 0.0  # allowed dev shortfall of hybrid below the best single list
COST_TOLERANCE = 0.002  # mean dev MRR@10 a shallower depth may cost
SPLITS = ("dev", "test")
_SPLIT_SEED = "retrieval-eval-2026"

Lists = dict[str, list[tuple[str, float]]]  # one query's ranked lists: list name -> (chunk id, score)


class Judged(Protocol):
    """A question whose relevant chunks are known: what the metrics need of it."""

    @property
    def id(self) -> str: ...

    @property
    def relevant(self) -> set[str] | frozenset[str]: ...


def seeded_split(key: str) -> str:
    """A fixed half-half dev/test assignment from a seeded hash of `key` (stable across runs and machines)."""
    return SPLITS[hashlib.sha256(f"{_SPLIT_SEED}:{key}".encode()).digest()[0] % 2]


# --- metrics ------------------------------------------------------------------------------


def first_relevant(ranked: Sequence[str], relevant: set[str] | frozenset[str]) -> int | None:
    """The 1-based rank of the first relevant id in `ranked` (None: none)."""
    return next((rank for rank, chunk in enumerate(ranked, start=1) if chunk in relevant), None)


def query_metrics(ranked: Sequence[str], relevant: set[str] | frozenset[str]) -> dict[str, float]:
    """R@1/5/10, MRR@10 and nDCG@10 of one ranked list (only its first 10 ids count)."""
    top = ranked[:10]
    first = first_relevant(top, relevant)
    dcg = math.fsum(1 / math.log2(rank + 1) for rank, chunk in enumerate(top, start=1) if chunk in relevant)
    ideal = math.fsum(1 / math.log2(rank + 1) for rank in range(1, min(len(relevant), 10) + 1))
    return {
        "R@1": float(first == 1),
        "R@5": float(first is not None and first <= 5),
        "R@10": float(first is not None),
        "MRR@10": 1 / first if first else 0.0,
        "nDCG@10": dcg / ideal if ideal else 0.0,
    }


def mean_metrics(per_query: Sequence[Mapping[str, float]]) -> dict[str, float]:
    return {name: round(statistics.fmean(m[name] for m in per_query), 4) for name in METRICS}


def wilson(hits: int, n: int, z: float = 1.96) -> list[float]:
    """The Wilson score 95 % interval of a share `hits / n` (a small set's R@k)."""
    if n == 0:
        return [0.0, 0.0]
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(max(0.0, centre - half), 3), round(min(1.0, centre + half), 3)]


def paired_bootstrap(a: Sequence[float], b: Sequence[float], seed: int = 0) -> tuple[float, float, float]:
    """Mean of a - b and its 95 % percentile interval over `BOOTSTRAP` resamples of the queries."""
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(BOOTSTRAP, len(diff)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return round(float(diff.mean()), 4), round(float(low), 4), round(float(high), 4)


# --- fusion -------------------------------------------------------------------------------


COVERAGES = (0.0, 1.0, 2.0, 4.0)  # exponents of a keyword list's coverage compared on dev (retrieval/fusion.py)


def fusion_grid() -> list[dict[str, Any]]:
    """The settings compared on dev: plain and weighted RRF, min-max and z-score sums, RRF by score gap,
    the score sums also with each keyword list weighted by its coverage of the question."""
    grid: list[dict[str, Any]] = []  # simplest first: on a tie, the earlier setting is chosen
    for lists in (LISTS, (Mode.VECTOR, Mode.BM25, Mode.BIGRAM)):
        for weight in (1.0, 2.0):
            grid += [{"method": "rrf", "k": k, "lists": lists, "vector_weight": weight} for k in (60, 30, 10)]
            grid += [
                {"method": m, "k": 60, "lists": lists, "vector_weight": weight, "coverage": c}
                for m in ("minmax", "zscore")
                for c in COVERAGES
            ]
        grid += [{"method": "rrf-gap", "k": k, "lists": lists, "vector_weight": 1.0} for k in (60, 10)]
    return [config | {"depth": depth} for depth in DEPTHS for config in grid]


def fusion_params(config: Mapping[str, Any]) -> FusionParams:
    return FusionParams(config["method"], config["k"], {"vector": config["vector_weight"]}, config.get("coverage", 0.0))


def fused_ids(lists: Lists, config: Mapping[str, Any]) -> list[str]:
    """The fused top 10; the lists' coverage (`Retriever.ranked_lists(coverage=True)`) when they carry it."""
    chosen = {name: lists[name][: config.get("depth")] for name in config["lists"]}
    coverage = dict(lists.get(COVERAGE_KEY, []))
    return [hit.id for hit in fuse(chosen, fusion_params(config), top=10, coverage=coverage)]


def label(config: Mapping[str, Any]) -> str:
    lists = "all 4 lists" if tuple(config["lists"]) == LISTS else "+".join(config["lists"])
    k = f" k={config['k']}" if config["method"].startswith("rrf") else ""
    weight = f", vector ×{config['vector_weight']:g}" if config["vector_weight"] != 1.0 else ""
    coverage = f", coverage^{config['coverage']:g}" if config.get("coverage") else ""
    depth = f", depth {config['depth']}" if "depth" in config else ""
    return f"{config['method']}{k}, {lists}{weight}{coverage}{depth}"


def config_of(params: RetrievalParams) -> dict[str, Any]:
    """The grid form of the service's hybrid parameters (to score the default fusion like a grid setting)."""
    return {
        "method": str(params.fusion),
        "k": params.rrf_k,
        "lists": tuple(params.hybrid_lists),
        "vector_weight": float(params.weights.get("vector", 1.0)),
        "coverage": params.coverage,
        "depth": params.depth,
    }


def setting_of(config: Mapping[str, Any], *, chosen_at: str, note: str) -> FusionSetting:
    """A grid setting as a knowledge base stores it (core.kbs), chosen by an evaluation."""
    weight = float(config["vector_weight"])
    return FusionSetting(
        method=FusionMethod.from_str(str(config["method"])),
        rrf_k=int(config["k"]),
        depth=int(config["depth"]),
        lists=tuple(Mode.from_str(name) for name in config["lists"]),
        weights={"vector": weight} if weight != 1.0 else {},
        coverage=float(config.get("coverage", 0.0)),
        origin="evaluation",
        chosen_at=chosen_at,
        note=note,
    )


def single_lists(questions: Sequence[Judged], lists: Mapping[str, Lists]) -> dict[str, list[dict[str, float]]]:
    """Per-query metrics of every single list, over the questions in `lists`."""
    kept = [q for q in questions if q.id in lists]
    return {name: [query_metrics([i for i, _ in lists[q.id][name]], q.relevant) for q in kept] for name in LISTS}


def hybrid(
    questions: Sequence[Judged], lists: Mapping[str, Lists], config: Mapping[str, Any]
) -> list[dict[str, float]]:
    """Per-query metrics of hybrid fused by `config`, over the questions in `lists`."""
    return [query_metrics(fused_ids(lists[q.id], config), q.relevant) for q in questions if q.id in lists]


def per_query(
    questions: Sequence[Judged], lists: Mapping[str, Lists], config: Mapping[str, Any]
) -> dict[str, list[dict[str, float]]]:
    """Per-query metrics of every single list and of hybrid fused by `config`, over the questions in `lists`."""
    return {**single_lists(questions, lists), "hybrid": hybrid(questions, lists, config)}


def margins(metrics: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Hybrid minus the best single list, per gate metric."""
    return {m: round(metrics["hybrid"][m] - max(metrics[name][m] for name in LISTS), 4) for m in GATE}


def choose(
    dev: Mapping[str, tuple[Sequence[Judged], Mapping[str, Lists]]],
    tolerance: float = TOLERANCE,
    cost_tolerance: float = 0.0,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Every grid setting's dev figures over the named question sets, and the chosen one (the module's rule)."""
    singles = {  # the same for every setting
        name: {mode: mean_metrics(found) for mode, found in single_lists(questions, lists).items()}
        for name, (questions, lists) in dev.items()
    }
    rows = []
    for config in fusion_grid():
        row: dict[str, Any] = {"config": config, "label": label(config), "datasets": {}}
        for name, (questions, lists) in dev.items():
            metrics = {**singles[name], "hybrid": mean_metrics(hybrid(questions, lists, config))}
            row["datasets"][name] = {"hybrid": metrics["hybrid"], "margin": margins(metrics)}
        row["mean_MRR@10"] = round(statistics.fmean(d["hybrid"]["MRR@10"] for d in row["datasets"].values()), 4)
        row["worst_margin"] = min(v for d in row["datasets"].values() for v in d["margin"].values())
        rows.append(row)
    safe = [row for row in rows if row["worst_margin"] >= -tolerance] or sorted(rows, key=lambda r: -r["worst_margin"])[
        :1
    ]
    best = max(row["mean_MRR@10"] for row in safe)
    as_good = [row for row in safe if row["mean_MRR@10"] >= best - cost_tolerance]
    chosen = max(as_good, key=lambda r: (-r["config"].get("depth", 0), r["mean_MRR@10"], r["worst_margin"]))
    return chosen["config"], rows
