"""Retrieval evaluation: Recall@1/5/10, MRR@10 and nDCG@10 per mode and dataset, one command.

    python -m bench.retrieval_eval --datasets cmrc,sanguo,medical --update-docs

Each dataset (bench/datasets.py) is indexed once through the indexing job
(`indexing.pipeline.index_documents`) into a scratch alias `eval-<name>` (reused while its
chunk count matches; `--reindex` rebuilds), with embeddings cached on disk (.cache/). Every
query then runs through `Retriever.search` in each single mode at the fusion depth and in
`hybrid`; single-mode metrics use the top 10 of those lists, and the same lists feed an
offline grid of RRF settings (rank constant, which lists, vector weight, depth) fused with
`service.retrieval.rrf`, the very function `hybrid` uses.

Outputs (bench/results/): retrieval_eval.md (tables), retrieval_eval.json (everything),
retrieval_eval.png (bar chart); `--update-docs` copies the tables into docs/retrieval.md.

Metrics: a query's relevant set is chunk ids known before indexing (see bench/datasets.py).
Recall@k is the share of queries with a relevant chunk in the top k (each query has one
relevant document; a few 三国 evidence strings sit in two overlapping chunks); MRR@10 uses
the first relevant rank; nDCG@10 is binary, ideal DCG over min(|relevant|, 10) chunks.
"""

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from itertools import product
from pathlib import Path
from typing import Any

from elasticsearch import Elasticsearch
from tqdm import tqdm

from bench.datasets import Dataset, load_cmrc, load_medical, load_sanguo
from bench.embedding_cache import CachedEmbedder
from core.chunking import DEFAULT_CHUNK_SIZE
from core.config import Settings
from core.embeddings import Embedder, load_embedder
from core.schema import Mode
from core.text import ChineseTokenizer, JiebaMode
from indexing.pipeline import index_documents
from service.retrieval import RetrievalParams, Retriever, rrf
from service.store import concrete_indices, create_client

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
DOCS = REPO / "docs" / "retrieval.md"
LISTS = ("vector", "bm25", "bigram", "standard")
METRICS = ("R@1", "R@5", "R@10", "MRR@10", "nDCG@10")
DOCS_BEGIN, DOCS_END = "<!-- retrieval-eval:begin -->", "<!-- retrieval-eval:end -->"


# --- metrics ------------------------------------------------------------------------------


def query_metrics(ranked: Sequence[str], relevant: set[str]) -> dict[str, float]:
    """The five metrics of one ranked list (only its first 10 ids count)."""
    top = list(ranked[:10])
    first = next((rank for rank, chunk in enumerate(top, start=1) if chunk in relevant), None)
    dcg = sum(1 / math.log2(rank + 1) for rank, chunk in enumerate(top, start=1) if chunk in relevant)
    ideal = sum(1 / math.log2(rank + 1) for rank in range(1, min(len(relevant), 10) + 1))
    return {
        "R@1": float(first == 1),
        "R@5": float(first is not None and first <= 5),
        "R@10": float(first is not None),
        "MRR@10": 1 / first if first else 0.0,
        "nDCG@10": dcg / ideal if ideal else 0.0,
    }


def mean_metrics(per_query: list[dict[str, float]]) -> dict[str, float]:
    return {name: round(statistics.fmean(m[name] for m in per_query), 4) for name in METRICS}


# --- indexing -----------------------------------------------------------------------------


def ensure_indexed(
    es: Elasticsearch, dataset: Dataset, alias: str, embedder: Embedder, tokenizer: ChineseTokenizer, reindex: bool
) -> dict[str, Any]:
    """Index `dataset` under `alias` unless an index with exactly its chunks is already there."""
    if not reindex and concrete_indices(es, alias):
        es.indices.refresh(index=alias)
        if es.count(index=alias)["count"] == len(dataset.chunks):
            return {"alias": alias, "reused": True, "chunks": len(dataset.chunks)}
    summary = index_documents(
        es,
        dataset.documents,
        alias=alias,
        embedder=embedder,
        tokenizer=tokenizer,
        chunk_size=dataset.chunk_size,
        chunk_overlap=dataset.chunk_overlap,
        recreate=True,
        progress=True,
    )
    if summary.failed or summary.chunks != len(dataset.chunks):
        raise RuntimeError(f"indexing {alias} went wrong: {summary.model_dump_json()}")
    return {"alias": alias, "reused": False, **summary.model_dump(include={"chunks", "seconds", "embed_seconds"})}


# --- evaluation ---------------------------------------------------------------------------


def run_queries(retriever: Retriever, alias: str, dataset: Dataset) -> dict[str, list[list[str]]]:
    """Ranked chunk ids per mode and query: single modes at fusion depth, hybrid at 10."""
    depth = retriever.params.depth
    ranked: dict[str, list[list[str]]] = {mode: [] for mode in list(Mode)}
    for query in tqdm(dataset.queries, desc=f"querying {alias}", unit="q"):
        for mode in LISTS:
            ranked[mode].append([hit.id for hit in retriever.search(alias, query.text, mode, depth).hits])
        ranked["hybrid"].append([hit.id for hit in retriever.search(alias, query.text, "hybrid", 10).hits])
    return ranked


def evaluate(dataset: Dataset, ranked: dict[str, list[list[str]]]) -> dict[str, dict[str, float]]:
    return {
        mode: mean_metrics(
            [query_metrics(ids, query.relevant) for ids, query in zip(ranked[mode], dataset.queries, strict=True)]
        )
        for mode in list(Mode)
    }


def fusion_grid() -> list[dict[str, Any]]:
    """The RRF settings tried offline: rank constant, fused lists, vector weight, depth."""
    combos = [
        ("vector", "bm25"),
        ("vector", "bigram"),
        ("vector", "bm25", "bigram"),
        ("bm25", "bigram"),
        ("vector", "bm25", "bigram", "standard"),
    ]
    grid = []
    for lists, k, weight, depth in product(combos, (10, 30, 60, 100), (0.5, 1.0, 1.5, 2.0), (20, 50)):
        if weight != 1.0 and "vector" not in lists:
            continue
        grid.append({"lists": lists, "rrf_k": k, "vector_weight": weight, "depth": depth})
    return grid


def fuse(ranked: dict[str, list[list[str]]], config: dict[str, Any], n: int) -> list[str]:
    lists = {name: ranked[name][n][: config["depth"]] for name in config["lists"]}
    return [chunk for chunk, _ in rrf(lists, config["rrf_k"], {"vector": config["vector_weight"]})[:10]]


def tune(datasets: list[tuple[Dataset, dict[str, list[list[str]]]]]) -> list[dict[str, Any]]:
    """Every grid point's MRR@10 and R@5 per dataset and macro-averaged, best first."""
    rows = []
    for config in fusion_grid():
        row: dict[str, Any] = {**config, "lists": "+".join(config["lists"])}
        for dataset, ranked in datasets:
            metrics = mean_metrics(
                [query_metrics(fuse(ranked, config, n), q.relevant) for n, q in enumerate(dataset.queries)]
            )
            row[dataset.name] = {"MRR@10": metrics["MRR@10"], "R@5": metrics["R@5"]}
        row["mean_MRR@10"] = round(statistics.fmean(row[d.name]["MRR@10"] for d, _ in datasets), 4)
        row["mean_R@5"] = round(statistics.fmean(row[d.name]["R@5"] for d, _ in datasets), 4)
        rows.append(row)
    return sorted(rows, key=lambda r: (-r["mean_MRR@10"], -r["mean_R@5"]))


# --- reporting ----------------------------------------------------------------------------


def machine(es: Elasticsearch, embedder: Embedder) -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem_kb = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
    )
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024**2, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "elasticsearch": next(iter(es.nodes.info(node_id="_local")["nodes"].values()))["version"],
        "embedder": embedder.name,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"Machine: {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, load average {m['load_average']} "
        f"(shared with other jobs), Python {m['python']}, Elasticsearch {m['elasticsearch']}, "
        f"embedder `{m['embedder']}`, {m['date']}. Command: `{report['command']}`.",
        "",
    ]
    for name, result in report["datasets"].items():
        params = result["params"]
        lines += [
            f"**{name}** — {result['documents']} documents, {result['chunks']} chunks, {result['queries']} queries; "
            f"hybrid = RRF(k={params['rrf_k']}) of {'+'.join(params['hybrid_lists'])}, depth {params['depth']}"
            f"{', weights ' + json.dumps(params['weights']) if params['weights'] else ''}; "
            f"jieba index/query modes {result['jieba']}",
            "",
            "| mode | " + " | ".join(METRICS) + " |",
            "|---|" + "---:|" * len(METRICS),
        ]
        best = {metric: max(result["metrics"][mode][metric] for mode in list(Mode)) for metric in METRICS}
        for mode in list(Mode):
            cells = [
                f"**{result['metrics'][mode][metric]:.3f}**"
                if result["metrics"][mode][metric] == best[metric]
                else f"{result['metrics'][mode][metric]:.3f}"
                for metric in METRICS
            ]
            label = "standard (baseline)" if mode == "standard" else mode
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        verdict = result["hybrid_vs_best_single"]
        lines += ["", f"hybrid vs best single mode: MRR@10 {verdict['MRR@10']}, R@5 {verdict['R@5']}", ""]
    if report.get("tuning"):
        names = list(report["datasets"])
        lines += [
            "**RRF tuning** (offline fusion of the same ranked lists; top 10 of "
            f"{len(report['tuning'])} settings by mean MRR@10, then the default if not among them and the "
            "issue's starting point, vector+bm25+bigram k=60):",
            "",
            "| lists | k | vector weight | depth | "
            + " | ".join(f"{n} MRR@10 / R@5" for n in names)
            + " | mean MRR@10 |",
            "|---|---:|---:|---:|" + "---:|" * (len(names) + 1),
        ]
        initial = {"lists": "vector+bm25+bigram", "rrf_k": 60, "vector_weight": 1.0, "depth": 50}
        shown = report["tuning"][:10]
        shown += [
            row
            for row in report["tuning"][10:]
            if row.get("default") or all(row[key] == v for key, v in initial.items())
        ]
        for row in shown:
            cells = [f"{row[n]['MRR@10']:.3f} / {row[n]['R@5']:.3f}" for n in names]
            mark = " (default)" if row.get("default") else ""
            mark += " (initial)" if all(row[key] == v for key, v in initial.items()) else ""
            lines.append(
                f"| {row['lists']}{mark} | {row['rrf_k']} | {row['vector_weight']} | {row['depth']} | "
                + " | ".join(cells)
                + f" | {row['mean_MRR@10']:.3f} |"
            )
        lines.append("")
    return "\n".join(lines)


def chart(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["datasets"])
    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 4.4), squeeze=False)
    width = 0.8 / len(list(Mode))
    for ax, name in zip(axes[0], names, strict=True):
        metrics = report["datasets"][name]["metrics"]
        for i, mode in enumerate(list(Mode)):
            ax.bar([x + i * width for x in range(len(METRICS))], [metrics[mode][m] for m in METRICS], width, label=mode)
        ax.set_xticks([x + width * (len(list(Mode)) - 1) / 2 for x in range(len(METRICS))], METRICS)
        ax.set_ylim(0, 1)
        ax.set_title(name)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(list(Mode)), fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def update_docs(table: str, begin: str = DOCS_BEGIN, end: str = DOCS_END, path: Path = DOCS) -> None:
    """Replace the block between `begin` and `end` in docs/retrieval.md (appended if missing)."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    block = f"{begin}\n{table}\n{end}"
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text = text + ("\n" if text else "") + block + "\n"
    path.write_text(text, encoding="utf-8")


# --- command ------------------------------------------------------------------------------


def load_datasets(names: list[str], cmrc_limit: int | None, chunk_sizes: list[int]) -> list[Dataset]:
    datasets: list[Dataset] = []
    for name in names:
        if name == "cmrc":
            datasets.append(load_cmrc(cmrc_limit))
        elif name == "sanguo":
            datasets += [load_sanguo(size) for size in chunk_sizes]
        elif name == "medical":
            datasets.append(load_medical())
        else:
            raise SystemExit(f"unknown dataset {name!r}: use cmrc, sanguo, medical")
    return datasets


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="cmrc,sanguo,medical")
    parser.add_argument(
        "--cmrc-limit",
        type=int,
        default=200,
        help="keep every n-th paragraph of dev+trial (n = ceil(1104 / limit)) and their questions; 0 = all 1,104",
    )
    parser.add_argument(
        "--sanguo-chunk-sizes", default=str(DEFAULT_CHUNK_SIZE), help="comma-separated (overlap: the indexing default)"
    )
    parser.add_argument(
        "--index-mode", choices=("search", "accurate"), default="search", help="jieba mode for indexing"
    )
    parser.add_argument(
        "--query-mode", choices=("search", "accurate"), default="accurate", help="jieba mode for queries"
    )
    parser.add_argument("--rrf-k", type=int, help="override the default RRF rank constant")
    parser.add_argument("--hybrid-lists", help="override the fused lists, e.g. vector,bm25")
    parser.add_argument("--vector-weight", type=float, help="override the RRF weight of the vector list")
    parser.add_argument("--reindex", action="store_true", help="rebuild the eval-* indices")
    parser.add_argument("--no-tune", action="store_true", help="skip the offline RRF grid")
    parser.add_argument("--out", type=Path, default=RESULTS / "retrieval_eval")
    parser.add_argument("--update-docs", action="store_true", help=f"write the tables into {DOCS.relative_to(REPO)}")
    args = parser.parse_args(argv)

    settings = Settings()
    es = create_client(settings)
    embedder = CachedEmbedder(load_embedder(settings.embedder, settings))
    modes: tuple[JiebaMode, JiebaMode] = (args.index_mode, args.query_mode)
    tokenizer = ChineseTokenizer(settings.jieba_user_dict, index_mode=modes[0], query_mode=modes[1])
    params = RetrievalParams.from_settings(settings)
    if args.rrf_k:
        params = replace(params, rrf_k=args.rrf_k)
    if args.hybrid_lists:
        params = replace(params, hybrid_lists=tuple(args.hybrid_lists.split(",")))
    if args.vector_weight is not None:
        params = replace(params, weights={**params.weights, "vector": args.vector_weight})
    retriever = Retriever(es, embedder, tokenizer, params)
    suffix = "" if modes == ("search", "accurate") else f"-{modes[0][:3]}-{modes[1][:3]}"

    report: dict[str, Any] = {
        "command": "python -m bench.retrieval_eval " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(es, embedder),
        "datasets": {},
    }
    evaluated = []
    for dataset in load_datasets(
        args.datasets.split(","), args.cmrc_limit or None, [int(s) for s in args.sanguo_chunk_sizes.split(",")]
    ):
        alias = dataset.alias + suffix
        started = time.perf_counter()
        indexed = ensure_indexed(es, dataset, alias, embedder, tokenizer, args.reindex)
        ranked = run_queries(retriever, alias, dataset)
        metrics = evaluate(dataset, ranked)
        singles = [m for m in list(Mode) if m != "hybrid"]
        verdict = {
            metric: (
                f"hybrid {metrics['hybrid'][metric]:.3f} vs best single {max(metrics[m][metric] for m in singles):.3f} "
                f"({max(singles, key=lambda m: metrics[m][metric])}): "
                + ("OK" if metrics["hybrid"][metric] >= max(metrics[m][metric] for m in singles) else "BELOW")
            )
            for metric in ("MRR@10", "R@5")
        }
        report["datasets"][dataset.name] = {
            "documents": len(dataset.documents),
            "chunks": len(dataset.chunks),
            "queries": len(dataset.queries),
            "chunk_size": dataset.chunk_size,
            "chunk_overlap": dataset.chunk_overlap,
            "jieba": "/".join(modes),
            "index": indexed,
            "params": {
                "rrf_k": params.rrf_k,
                "depth": params.depth,
                "num_candidates": params.num_candidates,
                "hybrid_lists": list(params.hybrid_lists),
                "weights": params.weights,
            },
            "metrics": metrics,
            "hybrid_vs_best_single": verdict,
            "seconds": round(time.perf_counter() - started, 1),
        }
        evaluated.append((dataset, ranked))
        print(json.dumps({dataset.name: metrics["hybrid"], **verdict}, ensure_ascii=False))

    if not args.no_tune:
        report["tuning"] = tune(evaluated)
        for row in report["tuning"]:
            row["default"] = (
                row["lists"] == "+".join(params.hybrid_lists)
                and row["rrf_k"] == params.rrf_k
                and row["vector_weight"] == params.weights.get("vector", 1.0)
                and row["depth"] == params.depth
            )
    report["embedding_cache"] = {"hits": embedder.hits, "misses": embedder.misses}

    args.out.parent.mkdir(parents=True, exist_ok=True)
    table = markdown(report)
    args.out.with_suffix(".md").write_text(table, encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    chart(report, args.out.with_suffix(".png"))
    if args.update_docs:
        update_docs(table)
    print(table)
    print(f"wrote {args.out.with_suffix('.md')}, .json, .png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
