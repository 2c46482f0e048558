"""The reranking row of a base's evaluation: hybrid with the chosen fusion, reranked at each weight.

Every question's fused candidates (the chosen fusion's top `RERANK_CANDIDATES`, its lists cut to
its depth, exactly what the service reranks) are fetched through the evaluation's scope and scored
once by the configured reranker, timed. Each weight of `WEIGHTS` then combines the two scores as
the service does (`retrieval.rerank.combine`; weight 0 is reranking off): the weight with the best
dev MRR@10 is chosen (ties: the smaller weight, off first), and test gives every weight's figures
and the paired-bootstrap interval of the chosen weight minus off. A question whose reranking
failed keeps its fused order, as a search would, and is counted.
"""

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from core.access import Scope
from core.reader import Reader
from core.schema import HIT_SOURCE_FIELDS
from evaluation.metrics import METRICS, Lists, fusion_params, mean_metrics, paired_bootstrap, query_metrics
from evaluation.questions import Question
from retrieval.fusion import fuse
from retrieval.rerank import Reranker, RerankFailure, combine
from retrieval.results import Hit

WEIGHTS = (0.0, 0.3, 0.5, 0.7, 1.0)
Progress = Callable[[int, int], None]
Scored = tuple[list[Hit], list[float] | None]  # a question's candidates, and their reranker scores (None: failed)


def candidates(reader: Reader, lists: Lists, config: Mapping[str, Any], top: int) -> list[Hit]:
    """The fused top `top` of one question's lists under `config`, with their stored fields."""
    cut = {name: lists[name][: config.get("depth")] for name in config["lists"]}
    fused = fuse(cut, fusion_params(config), top=top)
    sources = reader.fetch([hit.id for hit in fused], HIT_SOURCE_FIELDS)
    return [Hit.from_source(sources[hit.id], id=hit.id, score=hit.score) for hit in fused if hit.id in sources]


def score_questions(
    reranker: Reranker,
    scope: Scope,
    reader: Reader,
    questions: Sequence[Question],
    lists: Mapping[str, Lists],
    config: Mapping[str, Any],
    progress: Progress | None = None,
) -> tuple[dict[str, Scored], list[float]]:
    """Each question's candidates and scores, and the milliseconds each ranking took."""
    scored: dict[str, Scored] = {}
    took: list[float] = []
    for done, question in enumerate(questions, start=1):
        hits = candidates(reader, lists[question.id], config, reranker.limits.candidates)
        started = time.perf_counter()
        try:
            scores: list[float] | None = reranker.score_hits(question.text, hits) if hits else []
        except RerankFailure:
            scores = None
        took.append((time.perf_counter() - started) * 1000)
        scored[question.id] = (hits, scores)
        if progress:
            progress(done, len(questions))
    return scored, took


def _ranked(scored: Scored, weight: float) -> list[str]:
    hits, scores = scored
    if not scores or weight <= 0:
        return [hit.id for hit in hits]
    return [hit.id for hit in combine(hits, scores, weight)]


def _per_query(questions: Sequence[Question], scored: Mapping[str, Scored], weight: float) -> list[dict[str, float]]:
    return [query_metrics(_ranked(scored[q.id], weight), q.relevant) for q in questions]


def rerank_row(
    name: str, questions: Sequence[Question], scored: Mapping[str, Scored], took: Sequence[float]
) -> dict[str, Any]:
    """The row: figures at every weight on dev and test, the weight chosen on dev, its test interval
    against reranking off, the added latency and the failures."""
    dev = [q for q in questions if q.split == "dev"]
    test = [q for q in questions if q.split == "test"]
    dev_rows = {w: _per_query(dev, scored, w) for w in WEIGHTS}
    test_rows = {w: _per_query(test, scored, w) for w in WEIGHTS}
    dev_mrr = {w: mean_metrics(rows)["MRR@10"] for w, rows in dev_rows.items()}
    chosen = max(WEIGHTS, key=lambda w: (dev_mrr[w], -w))
    interval = {}
    for metric in METRICS:
        diff, low, high = paired_bootstrap([q[metric] for q in test_rows[chosen]], [q[metric] for q in test_rows[0.0]])
        interval[metric] = {"diff": diff, "interval": [low, high]}
    ordered = sorted(took)
    return {
        "reranker": name,
        "weights": [
            {"weight": w, "dev": mean_metrics(dev_rows[w]), "test": mean_metrics(test_rows[w])} for w in WEIGHTS
        ],
        "chosen_weight": chosen,
        "chosen_minus_off": interval,
        "added_ms": {
            "p50": round(statistics.median(ordered), 1),
            "p95": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1),
        },
        "failed": sum(scores is None for _, scores in scored.values()),
        "questions": len(scored),
    }


def markdown(row: dict[str, Any]) -> list[str]:
    """The row's lines of report.md."""
    lines = [
        "",
        f"## Reranking ({row['reranker']})",
        "",
        f"Hybrid with the chosen fusion, its candidates reranked; weight = the reranker's share of the final "
        f"score (0: off). **Chosen on dev: {row['chosen_weight']:g}.** Added latency p50 "
        f"{row['added_ms']['p50']} ms, p95 {row['added_ms']['p95']} ms; {row['failed']} of {row['questions']} "
        "rankings failed (fused order kept).",
        "",
        "| weight | dev MRR@10 | " + " | ".join(f"test {m}" for m in METRICS) + " |",
        "|---:|---:|" + "---:|" * len(METRICS),
    ]
    for entry in row["weights"]:
        mark = " **(chosen)**" if entry["weight"] == row["chosen_weight"] else ""
        cells = " | ".join(f"{entry['test'][m]:.3f}" for m in METRICS)
        lines.append(f"| {entry['weight']:g}{mark} | {entry['dev']['MRR@10']:.3f} | {cells} |")
    diffs = row["chosen_minus_off"]
    lines += [
        "",
        "Chosen weight minus off, test, paired bootstrap 95 % interval: "
        + "; ".join(
            f"{m} {diffs[m]['diff']:+.3f} [{diffs[m]['interval'][0]:+.3f}, {diffs[m]['interval'][1]:+.3f}]"
            for m in METRICS
        ),
    ]
    return lines
