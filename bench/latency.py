"""Query latency per retrieval mode: p50/p95 after warm-up, and hybrid/vector in the same run.

    python -m bench.latency --datasets sanguo,cmrc --repeat 3 --update-docs

Runs the evaluation queries against the `eval-*` indices that `bench.retrieval_eval` built
(run it first). Each query is searched in every mode, in a shuffled order per query, so
drift in a noisy machine's load hits all modes alike. Timings are wall-clock
`Retriever.search` calls from the client, measured twice: `live` embeds the query with the
real embedder, as a user of the service sees it; `cached` reads the query vector from the
on-disk cache (filled before timing), which isolates the Elasticsearch round trip and fusion.
"""

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.datasets import load_named
from bench.embedding_cache import CachedEmbedder, cache_path
from bench.retrieval_eval import CHUNK_VECTORS, RESULTS, SERVICE, machine, update_docs
from core.access import Scope
from core.config import Settings
from core.embeddings import load_embedder
from core.reader import Reader
from core.schema import Mode
from core.store import IndexNotFoundError, create_client
from core.text import get_tokenizer
from retrieval.retriever import RetrievalParams, Retriever

DOCS_BEGIN, DOCS_END = "<!-- latency:begin -->", "<!-- latency:end -->"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, q in 0..100 (no interpolation: every figure is a latency that happened)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))]


def summarize(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {
        mode: {
            "n": len(values),
            "p50_ms": round(statistics.median(values), 2),
            "p95_ms": round(percentile(values, 95), 2),
            "mean_ms": round(statistics.fmean(values), 2),
        }
        for mode, values in samples.items()
    }


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"Machine: {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, load average {m['load_average']} "
        f"(1, 5, 15 min), Elasticsearch {m['elasticsearch']}, embedder `{m['embedder']}`, {m['date']}. "
        f"Command: `{report['command']}`. {report['warmup']} warm-up queries per mode, then every query in every "
        "mode and variant (shuffled order); wall-clock per `Retriever.search` call. `hybrid@N`: hybrid with "
        "fusion depth N instead of the default.",
        "",
    ]
    for name, result in report["indices"].items():
        for variant in ("live", "cached"):
            what = (
                "query embedded live" if variant == "live" else "query vector from cache: Elasticsearch + fusion only"
            )
            lines += [
                f"**{name}** ({result['chunks']} chunks), {what}",
                "",
                "| mode | n | p50 ms | p95 ms | mean ms |",
                "|---|---:|---:|---:|---:|",
            ]
            for mode, row in result[variant]["latency"].items():
                lines.append(
                    f"| {mode} | {row['n']} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} | {row['mean_ms']:.1f} |"
                )
            latency = result[variant]["latency"]
            lines.append("")
            for label in (name for name in latency if name.startswith("hybrid")):
                p50 = latency[label]["p50_ms"] / latency["vector"]["p50_ms"]
                p95 = latency[label]["p95_ms"] / latency["vector"]["p95_ms"]
                lines.append(f"{label} / vector: p50 {p50:.2f}x, p95 {p95:.2f}x (goal <= 1.3x)  ")
            lines.append("")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="sanguo,cmrc")
    parser.add_argument("--max-queries", type=int, default=100, help="per index (the first ones)")
    parser.add_argument("--repeat", type=int, default=1, help="passes over the queries")
    parser.add_argument("--warmup", type=int, default=10, help="searches per mode before timing")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--out", type=Path, default=RESULTS / "latency")
    parser.add_argument("--update-docs", action="store_true")
    parser.add_argument("--extra-depths", default="50", help="also time hybrid at these fusion depths (hybrid@N)")
    return parser


Run = tuple[str, RetrievalParams, str]  # (label, retriever parameters, mode)


def _warm_up(
    retrievers: dict[str, Retriever], runs: list[Run], alias: str, queries: list[str], args: argparse.Namespace
) -> None:
    """`--warmup` searches of every run with every retriever."""
    for retriever in retrievers.values():
        for _label, run_params, mode in runs:
            retriever.params = run_params
            for text in queries[: args.warmup]:
                retriever.search(Scope.whole(alias), text, mode, args.k)


def _time(
    retrievers: dict[str, Retriever],
    runs: list[Run],
    alias: str,
    queries: list[str],
    args: argparse.Namespace,
    rng: random.Random,
) -> dict[str, dict[str, list[float]]]:
    """Milliseconds per search, per retriever and run label, in a shuffled order per query."""
    samples: dict[str, dict[str, list[float]]] = {
        variant: {label: [] for label, _, _ in runs} for variant in retrievers
    }
    for _ in range(args.repeat):
        for text in queries:
            order = [(variant, run) for variant in retrievers for run in runs]
            for variant, (label, run_params, mode) in rng.sample(order, len(order)):
                retriever = retrievers[variant]
                retriever.params = run_params
                started = time.perf_counter()
                retriever.search(Scope.whole(alias), text, mode, args.k)
                samples[variant][label].append((time.perf_counter() - started) * 1000)
    return samples


def _result(chunks: int, samples: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    result: dict[str, Any] = {"chunks": chunks}
    for variant, by_mode in samples.items():
        latency = summarize(by_mode)
        result[variant] = {
            "latency": latency,
            "hybrid_over_vector": {
                "p50": round(latency["hybrid"]["p50_ms"] / latency["vector"]["p50_ms"], 3),
                "p95": round(latency["hybrid"]["p95_ms"] / latency["vector"]["p95_ms"], 3),
            },
        }
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = Settings()
    es = create_client(settings)
    embedder = load_embedder(settings.embedder, settings)
    rng = random.Random(0)
    report: dict[str, Any] = {
        "command": "python -m bench.latency " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(es, embedder),
        "warmup": args.warmup,
        "indices": {},
    }
    cached = CachedEmbedder(embedder, cache_path(settings))
    tokenizer = get_tokenizer(settings.jieba_user_dict)
    params = RetrievalParams.from_settings(settings)
    retrievers = {
        "live": Retriever(es, embedder, tokenizer, params),
        "cached": Retriever(es, cached, tokenizer, params),
    }
    # Every mode, plus hybrid at other fusion depths.
    runs: list[Run] = [(mode, params, mode) for mode in Mode] + [
        (f"hybrid@{depth}", replace(params, depth=depth), "hybrid")
        for depth in map(int, filter(None, args.extra_depths.split(",")))
        if depth != params.depth
    ]
    # The service's index (passage vectors), then today's (one vector per chunk) when it was built.
    indices = [
        (variant, dataset)
        for dataset in map(load_named, args.datasets.split(","))
        for variant in (SERVICE, CHUNK_VECTORS)
    ]
    for variant, dataset in indices:
        alias = variant.alias(dataset, variant.windows(settings))
        queries = [q.text for q in dataset.queries[: args.max_queries]]
        for text in queries:
            cached.embed_query(text)
        try:
            _warm_up(retrievers, runs, alias, queries, args)
        except IndexNotFoundError as err:
            if variant is CHUNK_VECTORS:
                continue
            hint = f"run `python -m bench.retrieval_eval --datasets {dataset.name.split('-')[0]}` first"
            raise SystemExit(f"{err} ({hint})") from err
        samples = _time(retrievers, runs, alias, queries, args, rng)
        report["indices"][alias] = _result(Reader(es, Scope.whole(alias)).count(), samples)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table = markdown(report)
    args.out.with_suffix(".md").write_text(table, encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    if args.update_docs:
        update_docs(table, DOCS_BEGIN, DOCS_END, RESULTS / "latency.md")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
