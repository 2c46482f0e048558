"""Choose passage windows on dev without reindexing: cached vectors, exact cosine, in memory.

    python -m bench.passage_windows --windows 120:30,240:60 --subset 150

Embedding 《三国演义》 once per candidate window takes long on a small machine, and every
reindexing of `bench.retrieval_eval` embeds again what its cache lacks. This script embeds each
candidate's passages once into the embedding cache (`EMBEDDING_CACHE`, bench/embedding_cache.py),
then scores every dev question against every chunk in memory: a chunk's score is its best
passage's cosine (what the nested kNN with `score_mode` max computes, exactly rather than through
HNSW), beside today's one vector per chunk and the normalised mean of the passages (the chunk
vector a base with passages stores). The index later built with the chosen windows reads the same
cached vectors, so nothing is embedded twice.

`--subset N`: the chunks relevant to the dev questions plus seeded random others, N in all (0: the
whole book), for a first look when embedding the whole book is too slow. Metrics on the split's
questions (`--split`), with Wilson 95 % intervals of R@1 and R@5.
"""

import argparse
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.datasets import Dataset, load_named
from bench.embedding_cache import CachedEmbedder, cache_path
from core.access import ALL_DOCUMENTS, Scope
from core.chunking import PassageWindows
from core.config import Settings
from core.documents import Document
from core.embeddings import load_embedder
from core.reader import Reader
from core.schema import LIST_MODES
from core.store import create_client
from core.text import get_tokenizer
from evaluation.metrics import Lists, config_of, hybrid, mean_metrics, paired_bootstrap, query_metrics, wilson
from indexing.options import IndexOptions, RunScope
from indexing.pipeline import index_documents
from retrieval.retriever import RetrievalParams, Retriever

Scorer = Callable[[np.ndarray], np.ndarray]  # query vectors (q x d) -> scores (q x chunks)


def subset(dataset: Dataset, split: str, size: int) -> list[str]:
    """The chunk ids to rank: every chunk relevant to a question of `split`, then seeded others up to `size`."""
    if size <= 0:
        return list(dataset.chunks)
    relevant = sorted({c for q in dataset.queries if q.split == split for c in q.relevant})
    others = sorted(set(dataset.chunks) - set(relevant))
    random.Random(36).shuffle(others)
    return relevant + others[: max(0, size - len(relevant))]


def passage_scorers(embedder: CachedEmbedder, texts: list[str], windows: PassageWindows) -> dict[str, Scorer]:
    """Best passage (max) and the normalised mean of the passages, for each chunk of `texts`."""
    spans = [windows.spans(text) for text in texts]
    vectors = embedder.embed_documents([span.text for group in spans for span in group])
    owner = np.repeat(np.arange(len(texts)), [len(group) for group in spans])
    means = np.stack([vectors[owner == row].mean(axis=0) for row in range(len(texts))])
    means /= np.linalg.norm(means, axis=1, keepdims=True)

    def best(queries: np.ndarray) -> np.ndarray:
        scores = queries @ vectors.T
        out = np.full((len(queries), len(texts)), -1.0)
        for row in range(len(texts)):
            out[:, row] = scores[:, owner == row].max(axis=1)
        return out

    label = f"{windows.size}:{windows.overlap}"
    return {f"passages {label} (max)": best, f"passages {label} (mean)": lambda q: q @ means.T}


def per_question(scorer: Scorer, ids: list[str], queries: Sequence, vectors: np.ndarray) -> list[dict[str, float]]:
    scores = scorer(vectors)
    return [
        query_metrics([ids[i] for i in np.argsort(-row)[:10]], q.relevant)
        for q, row in zip(queries, scores, strict=True)
    ]


def summary(found: list[dict[str, float]], baseline: list[dict[str, float]] | None) -> dict:
    """Means, Wilson intervals of R@1 and R@5, and the paired bootstrap of MRR@10 minus the baseline's."""
    n = len(found)
    diff = None
    if baseline:
        diff = paired_bootstrap([m["MRR@10"] for m in found], [m["MRR@10"] for m in baseline])
    return {
        **mean_metrics(found),
        "R@1 ci95": wilson(int(sum(m["R@1"] for m in found)), n),
        "R@5 ci95": wilson(int(sum(m["R@5"] for m in found)), n),
        "MRR@10 minus chunk vector": diff,
        "n": n,
    }


def hybrid_pilot(
    embedder: CachedEmbedder, dataset: Dataset, ids: list[str], queries: Sequence, windows: PassageWindows
) -> dict:
    """Hybrid (the service's fusion) over the chunks `ids` alone, each indexed as a document, with
    chunk vectors, with passages, and with both (the chunk vector list fused as a fifth list)."""
    settings = Settings()
    es = create_client(settings)
    documents = [Document(chunk_id, dataset.chunks[chunk_id], "pilot") for chunk_id in ids]
    config = config_of(RetrievalParams.from_settings(settings))
    found: dict[str, dict[str, Lists]] = {}
    for name, passages in (("chunk", None), ("passages", windows)):
        alias = f"bench-pw-{name}"
        options = replace(IndexOptions.from_settings(settings), passages=passages)
        index_documents(
            es, documents, alias=alias, visible=ALL_DOCUMENTS, embedder=embedder,
            tokenizer=get_tokenizer(None), options=options, scope=RunScope(recreate=True),
        )  # fmt: skip
        retriever = Retriever(es, embedder, get_tokenizer(None), RetrievalParams.from_settings(settings))
        hits = Reader(es, Scope.whole(alias)).search({"size": 1000, "_source": ["doc_id"]})["hits"]["hits"]
        by_doc = {hit["_id"]: hit["_source"]["doc_id"] for hit in hits}
        found[name] = {
            q.id: {
                mode: [(by_doc[i], score) for i, score in ranked]
                for mode, ranked in retriever.ranked_lists(Scope.whole(alias), q.text, LIST_MODES, 50).items()
            }
            for q in queries
        }
    rows = {
        "chunk vectors": (found["chunk"], config),
        "passages": (found["passages"], config),
        "both": (
            {i: {**lists, "chunk_vector": found["chunk"][i]["vector"]} for i, lists in found["passages"].items()},
            config | {"lists": (*config["lists"], "chunk_vector")},
        ),
    }
    return {name: mean_metrics(hybrid(queries, lists, fusion)) for name, (lists, fusion) in rows.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="sanguo")
    parser.add_argument("--windows", default="120:30,240:60", help="size:overlap candidates, comma-separated")
    parser.add_argument("--subset", type=int, default=0, help="chunks to rank (0: all)")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--no-chunk-vectors", action="store_true", help="skip today's one vector per chunk")
    parser.add_argument(
        "--hybrid", action="store_true", help="also hybrid over the ranked chunks, indexed (first window only)"
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/passage_windows.json"))
    args = parser.parse_args(argv)
    settings = Settings()
    dataset = load_named(args.dataset)
    embedder = CachedEmbedder(load_embedder(settings.embedder, settings), cache_path(settings))
    ids = subset(dataset, args.split, args.subset)
    texts = [dataset.chunks[i] for i in ids]
    queries = [q for q in dataset.queries if q.split == args.split and q.relevant & set(ids)]
    vectors = np.stack([embedder.embed_query(q.text) for q in queries])
    scorers: dict[str, Scorer] = {}
    if not args.no_chunk_vectors:
        chunks = embedder.embed_documents(texts)
        scorers["chunk vector (today)"] = lambda q: q @ chunks.T
    for spec in args.windows.split(","):
        size, overlap = (int(part) for part in spec.split(":"))
        scorers |= passage_scorers(embedder, texts, PassageWindows(size, overlap))
    report = {
        "dataset": dataset.name,
        "split": args.split,
        "chunks": len(ids),
        "questions": len(queries),
        "lists": {},
    }
    found = {name: per_question(scorer, ids, queries, vectors) for name, scorer in scorers.items()}
    baseline = found.get("chunk vector (today)")
    report["lists"] = {name: summary(per, baseline) for name, per in found.items()}
    if args.hybrid:
        first = PassageWindows(*(int(part) for part in args.windows.split(",")[0].split(":")))
        report["hybrid"] = hybrid_pilot(embedder, dataset, ids, queries, first)
        print(json.dumps(report["hybrid"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    print(f"{dataset.name}, {args.split}: {len(queries)} questions over {len(ids)} chunks (exact cosine)")
    print("| vector list | R@1 [95 %] | R@5 [95 %] | R@10 | MRR@10 | MRR@10 minus chunk vector [95 %] |")
    print("|---|---|---|---:|---:|---|")
    for name, m in report["lists"].items():
        r1, r5, diff = m["R@1 ci95"], m["R@5 ci95"], m["MRR@10 minus chunk vector"]
        gain = f"{diff[0]:+.3f} [{diff[1]:+.3f}, {diff[2]:+.3f}]" if diff and name != "chunk vector (today)" else "-"
        print(
            f"| {name} | {m['R@1']:.3f} [{r1[0]:.2f}, {r1[1]:.2f}] | {m['R@5']:.3f} [{r5[0]:.2f}, {r5[1]:.2f}] "
            + f"| {m['R@10']:.3f} | {m['MRR@10']:.3f} | {gain} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
