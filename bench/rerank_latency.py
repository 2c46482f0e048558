"""What the reranking stage adds to a hybrid search, with a stand-in reranker answering in a fixed time.

    python -m bench.rerank_latency --delay-ms 50 [--index NAME] [--max-queries 100] [--repeat 3]

Each query is searched with and without reranking, in a shuffled order per query, against the
same index (the medical passages indexed into a throwaway index unless `--index`), with the
query's embedding computed once beforehand (the stage adds no embedding). The stub
(`bench.rerank_stub`, Cohere's shape) sleeps `--delay-ms` per request; the goal is an added p50
of at most that time + 15 ms: fetching the 30 candidates instead of k, their excerpts, one HTTP
round trip, and the combination. Writes bench/results/rerank_latency.json.
"""

import argparse
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from elasticsearch import Elasticsearch

from bench.datasets import load_named
from bench.latency import percentile
from bench.rerank_stub import RerankStub, overlap
from core.access import ALL_DOCUMENTS, Scope
from core.config import RerankApi, Settings
from core.embeddings import Embedder, load_embedder
from core.schema import Mode
from core.store import create_client
from core.text import get_tokenizer
from indexing.options import IndexOptions
from indexing.pipeline import index_documents
from retrieval.rerank import HttpScorer, Reranker, RerankLimits
from retrieval.retriever import RetrievalParams, Retriever

RESULTS = Path(__file__).resolve().parent / "results" / "rerank_latency.json"


class KnownQueries:
    """The embedder with every query's vector computed once, beforehand (the timings exclude it)."""

    def __init__(self, inner: Embedder, queries: Sequence[str]) -> None:
        self.inner, self.name = inner, inner.name
        self._vectors = {query: inner.embed_query(query) for query in queries}

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self._vectors[text]


def _time(retriever: Retriever, scope: Scope, query: str, k: int, rerank: bool) -> tuple[float, float]:
    """(the search's wall time, the reranking stage's own: scoring and combining) in ms."""
    started = time.perf_counter()
    result = retriever.search(scope, query, Mode.HYBRID, k, rerank=rerank)
    took = (time.perf_counter() - started) * 1000
    if rerank and not (result.rerank and result.rerank.applied and result.rerank.took_ms is not None):
        raise RuntimeError(f"reranking did not apply: {result.rerank}")
    return took, result.rerank.took_ms if rerank and result.rerank and result.rerank.took_ms else 0.0


def measure(retriever: Retriever, scope: Scope, queries: list[str], k: int, repeat: int) -> dict[str, list[float]]:
    """Per query and repetition, one search with and one without reranking, in a random order."""
    rng = random.Random(0)
    samples: dict[str, list[float]] = {"off": [], "on": [], "added": [], "stage": []}
    for query in queries[:10]:  # warm-up: caches, connections
        _time(retriever, scope, query, k, True)
        _time(retriever, scope, query, k, False)
    for _ in range(repeat):
        for query in rng.sample(queries, len(queries)):
            order = rng.sample([False, True], 2)
            took = {rerank: _time(retriever, scope, query, k, rerank) for rerank in order}
            samples["off"].append(took[False][0])
            samples["on"].append(took[True][0])
            samples["added"].append(took[True][0] - took[False][0])
            samples["stage"].append(took[True][1])
    return samples


def summarize(samples: dict[str, list[float]]) -> dict[str, Any]:
    return {
        name: {"p50_ms": round(statistics.median(v), 2), "p95_ms": round(percentile(v, 95), 2), "n": len(v)}
        for name, v in samples.items()
    }


def _retriever(
    settings: Settings, es: Elasticsearch, embedder: Embedder, stub: RerankStub, limits: RerankLimits
) -> Retriever:
    """The service's retriever, reranking through the stub."""
    scorer = HttpScorer(RerankApi.COHERE, stub.base_url, "stub", None, settings.rerank_batch, httpx.Client())
    params = RetrievalParams.from_settings(settings)
    return Retriever(es, embedder, get_tokenizer(), params, Reranker(scorer, limits))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rerank_latency", description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=float, default=50.0, help="the stub reranker's time per request")
    parser.add_argument("--index", help="an existing base (default: the medical passages, indexed and deleted)")
    parser.add_argument("--max-queries", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args(argv)
    settings = Settings()
    es = create_client(settings)
    embedder = load_embedder(settings.embedder, settings)
    dataset = load_named("medical")
    queries = list(dict.fromkeys(q.text for q in dataset.queries))[: args.max_queries]
    alias = args.index or f"bench-rerank-{uuid.uuid4().hex[:8]}"
    if args.index is None:
        options = IndexOptions.from_settings(settings)
        tokenizer = get_tokenizer()
        index_documents(
            es,
            dataset.documents,
            alias=alias,
            embedder=embedder,
            tokenizer=tokenizer,
            options=options,
            visible=ALL_DOCUMENTS,
        )
    stub = RerankStub(overlap, args.delay_ms / 1000)
    try:
        limits = replace(RerankLimits.from_settings(settings), timeout_s=args.delay_ms / 1000 + 5, weight=0.7)
        retriever = _retriever(settings, es, KnownQueries(embedder, queries), stub, limits)
        load_before = os.getloadavg()
        samples = measure(retriever, Scope.whole(alias), queries, args.k, args.repeat)
        load_after = os.getloadavg()
    finally:
        stub.close()
        if args.index is None:
            es.options(ignore_status=404).indices.delete(index=f"{alias}*", expand_wildcards="all")
    figures = summarize(samples)
    report = {
        "delay_ms": args.delay_ms,
        "candidates": limits.candidates,
        "k": args.k,
        "queries": len(queries),
        "repeat": args.repeat,
        "figures": figures,
        "added_p50_minus_delay_ms": round(figures["added"]["p50_ms"] - args.delay_ms, 2),
        "goal_met": figures["added"]["p50_ms"] <= args.delay_ms + 15,
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in load_after]},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python -m bench.rerank_latency " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    print(json.dumps(report, ensure_ascii=False, indent=1))
    return 0 if report["goal_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
