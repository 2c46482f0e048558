"""Retrieval evaluation, tuned on dev and reported on test, with paired bootstrap intervals.

    python -m bench.retrieval_eval --datasets cmrc,sanguo,medical --update-docs

For each dataset (bench/datasets.py; every question is fixed as `dev` or `test`):

1. **Query analysis ablation** (dev): the dataset is indexed through the indexing job once per
   analysis variant, `plain` (jieba accurate cut, stop words kept), `+stopwords` (stop words
   out of keyword queries), `+subwords` (dictionary sub-words on both sides), `+corpus-dict`
   (the corpus dictionary learned at indexing, i.e. the service's analysis).
2. **Lists**: every question runs once through `Retriever.ranked_lists` (the service's own
   `_msearch`: every list `--depth` deep, ids and scores).
3. **Fusion** (dev, retrieval/evaluation.py's `choose`, the rule every knowledge base's own
   evaluation uses too): the methods of retrieval/fusion.py over those same lists, each fusing the
   lists cut to a depth of `DEPTHS`; among the settings never below the best single list on
   dev by more than `--tolerance` (R@1, R@5, MRR@10 on every dataset), those within
   `--cost-tolerance` of the best mean dev MRR@10 over the datasets are "as good", and of
   these the shallowest (the fastest: fewer hits to fetch and fuse) is chosen, then the best.
4. **Test**: every list and the chosen hybrid on the test questions, with paired bootstrap 95 %
   intervals of hybrid minus each list (MRR@10 and R@1).

Embeddings come from the on-disk cache (`EMBEDDING_CACHE`, bench/embedding_cache.py); fill
it first with `python -m bench.embedding_cache`. Outputs: bench/results/retrieval_eval.{md,json};
`--update-docs` writes the tables into bench/results/retrieval_eval.md.
"""

import argparse
import json
import os
import platform
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from elasticsearch import Elasticsearch
from tqdm import tqdm

from bench.datasets import Dataset, corpus_of, load_named
from bench.embedding_cache import CachedEmbedder, cache_path
from core.access import ALL_DOCUMENTS, Scope
from core.aliases import Alias
from core.chunking import PassageWindows
from core.config import Settings
from core.embeddings import Embedder, load_embedder
from core.reader import Reader
from core.schema import LIST_MODES, Mode
from core.store import concrete_indices, create_client, read_index_meta
from core.text import ChineseTokenizer
from evaluation.metrics import (
    COST_TOLERANCE,
    GATE,
    LIST_DEPTH,
    LISTS,
    METRICS,
    TOLERANCE,
    Lists,
    choose,
    config_of,
    fused_ids,
    hybrid,
    label,
    margins,
    mean_metrics,
    paired_bootstrap,
    per_query,
    query_metrics,
    wilson,
)
from indexing.options import Chunking, IndexOptions, RunScope
from indexing.pipeline import index_documents
from retrieval.retriever import RetrievalParams, Retriever

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
DOCS = REPO / "bench" / "results" / "retrieval_eval.md"  # the full tables; docs/retrieval.md quotes the service row
DOCS_BEGIN, DOCS_END = "<!-- retrieval-eval:begin -->", "<!-- retrieval-eval:end -->"


@dataclass(frozen=True)
class Variant:
    """One step of the query-analysis ablation (cumulative); `passages` False: one vector per chunk."""

    name: str
    subwords: bool
    drop_stopwords: bool
    corpus_dict: bool
    passages: bool = True

    def tokenizer(self, user_dict: str | None) -> ChineseTokenizer:
        return ChineseTokenizer(
            user_dict, subwords=self.subwords, drop_stopwords=self.drop_stopwords, learn_corpus_terms=self.corpus_dict
        )

    def alias(self, dataset: Dataset, windows: PassageWindows | None) -> str:
        """The index of `dataset` cut this way (with `windows` unless `passages` is off); variants that
        index alike share it (stop words are query-side). Without passages: the name of the index before them."""
        name = f"{dataset.alias}-s{int(self.subwords)}d{int(self.corpus_dict)}"
        return f"{name}-p{windows.size}o{windows.overlap}" if windows and self.passages else name

    def windows(self, settings: Settings) -> PassageWindows | None:
        return settings.passage_windows if self.passages else None


VARIANTS = (
    Variant("plain", subwords=False, drop_stopwords=False, corpus_dict=False),
    Variant("+stopwords", subwords=False, drop_stopwords=True, corpus_dict=False),
    Variant("+subwords", subwords=True, drop_stopwords=True, corpus_dict=False),
    Variant("+corpus-dict", subwords=True, drop_stopwords=True, corpus_dict=True),
)
SERVICE = VARIANTS[-1]
# Today's vector list beside the service's: the same analysis, one vector per chunk (a second index).
CHUNK_VECTORS = replace(SERVICE, name="chunk vectors", passages=False)
CHUNK_LIST = "chunk_vector"  # its vector list, fused as a fifth list in the "both" row


# --- indexing and lists -------------------------------------------------------------------


def ensure_indexed(
    es: Elasticsearch, dataset: Dataset, variant: Variant, embedder: Embedder, settings: Settings, reindex: bool
) -> str:
    """The alias of `dataset` indexed with `variant`'s analysis and vectors (rebuilt unless it matches)."""
    windows = variant.windows(settings)
    alias = variant.alias(dataset, windows)
    if not reindex and concrete_indices(es, alias):
        es.indices.refresh(index=alias)
        meta = read_index_meta(es, alias)
        same = (meta.corpus_terms is not None) == variant.corpus_dict and meta.passages == windows
        if same and Reader(es, Scope.whole(alias)).count() == len(dataset.chunks):
            return alias
    summary = index_documents(
        es,
        dataset.documents,
        alias=alias,
        visible=ALL_DOCUMENTS,
        embedder=embedder,
        tokenizer=variant.tokenizer(settings.jieba_user_dict),
        options=replace(
            IndexOptions.from_settings(settings),
            chunking=Chunking(dataset.chunk_size, dataset.chunk_overlap),
            passages=windows,
        ),
        scope=RunScope(recreate=True),
        progress=True,
    )
    if summary.failed or summary.chunks != len(dataset.chunks):
        raise RuntimeError(f"indexing {alias} went wrong: {summary.model_dump_json()}")
    return alias


def ranked_lists(
    retriever: Retriever, alias: str, dataset: Dataset, split: str, modes: Sequence[Mode] = LIST_MODES
) -> dict[str, Lists]:
    """Every list (of `modes`) of every question of `split`, by question id."""
    queries = [q for q in dataset.queries if q.split == split]
    depth = retriever.params.depth
    return {
        q.id: retriever.ranked_lists(Scope.whole(alias), q.text, modes, depth, coverage=True)
        for q in tqdm(queries, desc=f"lists {alias} {split}", unit="q", file=sys.stderr)
    }


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


def _cell(value: float, best: float) -> str:
    return f"**{value:.3f}**" if value == best else f"{value:.3f}"


def metric_table(metrics: dict[str, dict[str, float]]) -> list[str]:
    lines = ["| list | " + " | ".join(METRICS) + " |", "|---|" + "---:|" * len(METRICS)]
    best = {m: max(row[m] for row in metrics.values()) for m in METRICS}
    for mode, row in metrics.items():
        lines.append(f"| {mode} | " + " | ".join(_cell(row[m], best[m]) for m in METRICS) + " |")
    return lines


def _interval(diff: tuple[float, float, float]) -> str:
    mean, low, high = diff
    verdict = "better" if low > 0 else "worse" if high < 0 else "level"
    return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}] {verdict}"


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"Machine: {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, load average {m['load_average']} "
        + f"(1, 5, 15 min), Elasticsearch {m['elasticsearch']}, embedder `{m['embedder']}`, "
        + f"{m['date']}. Command: `{report['command']}`. Lists {report['depth']} deep.",
        "",
        f"**Chosen fusion (on dev): {label(report['chosen'])}.**",
        "",
        *corpora_table(report),
        *corpora_table(report, "uncovered"),
    ]
    for name, result in report["datasets"].items():
        skipped = f" ({len(result['skipped'])} blank questions left out: {', '.join(result['skipped'])})"
        lines += [
            f"### {name}: {result['documents']} documents, {result['chunks']} chunks, "
            + f"{result['dev_queries']} dev / {result['test_queries']} test questions"
            + (skipped if result["skipped"] else ""),
            "",
        ]
        for split in ("test", "dev"):
            lines += [f"{split} ({result[split + '_queries']} questions):", "", *metric_table(result[split]), ""]
        lines += ["Test, hybrid minus each list, paired bootstrap 95 % interval:", ""]
        lines += ["| list | MRR@10 | R@1 |", "|---|---|---|"]
        for mode, diffs in result["test_intervals"].items():
            lines.append(f"| {mode} | {_interval(diffs['MRR@10'])} | {_interval(diffs['R@1'])} |")
        lines += ["", f"Test gate (hybrid minus best single list): {result['test_margin']}", ""]
    for name, found in report.get("vectors", {}).items():
        lines += vector_table(name, found)
    names = list(report["datasets"])
    lines += [
        "### Query analysis ablation (dev; jieba BM25 list and hybrid MRR@10, chosen fusion)",
        "",
        "| analysis | " + " | ".join(f"{n} bm25 / hybrid" for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for variant in VARIANTS:
        cells = [report["ablation"][n].get(variant.name) for n in names]
        lines.append(
            f"| {variant.name} | "
            + " | ".join(f"{c['bm25']:.3f} / {c['hybrid']:.3f}" if c else "-" for c in cells)
            + " |"
        )
    chosen = report["chosen"]
    tables = {
        f"Fusion methods at depth {chosen['depth']}": [
            r for r in report["fusion"] if r["config"]["depth"] == chosen["depth"]
        ],
        f"Depths of {label(_method(chosen))}": [r for r in report["fusion"] if _method(r["config"]) == _method(chosen)],
    }
    for title, rows in tables.items():
        lines += fusion_table(title, rows, names, chosen)
    return "\n".join(lines) + "\n"


def _ci(found: list[float]) -> str:
    return f"{found[0]:.3f} [{found[1]:.2f}, {found[2]:.2f}]"


def corpora_table(report: dict[str, Any], key: str = "default") -> list[str]:
    """Every corpus under the service's default fusion: vector and hybrid, all and paraphrased questions
    (`key` "uncovered": the same fusion with coverage off)."""
    fusion = report["default_fusion"] | ({"coverage": 0.0} if key == "uncovered" else {})
    if not report.get(key):
        return []
    lines = [
        f"### Every corpus, {label(fusion)}; mean [bootstrap 95 %]",
        "",
        "| corpus | split | questions | n | vector R@1 | vector MRR@10 | hybrid R@1 | hybrid R@5 | hybrid MRR@10 |",
        "|---|---|---|---:|---|---|---|---|---|",
    ]
    for name, rows in report[key].items():
        for row_name, row in rows.items():
            if not row["hybrid"]["n"]:
                continue
            split, part = row_name.split()
            v, h = row["vector"], row["hybrid"]
            lines.append(
                f"| {name} | {split} | {part} | {h['n']} | {_ci(v['R@1'])} | {_ci(v['MRR@10'])} | {_ci(h['R@1'])} "
                f"| {_ci(h['R@5'])} | {_ci(h['MRR@10'])} |"
            )
    for name, misses in report.get("lookalikes", {}).items() if key == "default" else ():
        if misses:
            found = ", ".join(
                f"{mode} {len(ids)}" + (f" ({' '.join(ids)})" if ids else "") for mode, ids in misses.items()
            )
            lines += ["", f"{name}: first hit in the look-alike twin document {LOOKALIKES[name]}: {found}."]
    return [*lines, ""]


def _method(config: dict[str, Any]) -> dict[str, Any]:
    """A grid setting without its depth: the fusion method and its parameters."""
    return {key: value for key, value in config.items() if key != "depth"}


def fusion_table(title: str, rows: list[dict[str, Any]], names: list[str], chosen: dict[str, Any]) -> list[str]:
    lines = [
        "",
        f"### {title} (dev MRR@10 of hybrid; margin = worst of hybrid minus best single list "
        + "over R@1, R@5, MRR@10)",
        "",
        "| fusion | " + " | ".join(f"{n} MRR@10 (margin)" for n in names) + " | mean MRR@10 | worst margin |",
        "|---|" + "---:|" * (len(names) + 2),
    ]
    for row in sorted(rows, key=lambda r: -r["mean_MRR@10"]):
        mark = " **(chosen)**" if row["config"] == chosen else ""
        cells = [
            f"{row['datasets'][n]['hybrid']['MRR@10']:.3f} ({min(row['datasets'][n]['margin'].values()):+.3f})"
            for n in names
        ]
        lines.append(
            f"| {row['label']}{mark} | "
            + " | ".join(cells)
            + f" | {row['mean_MRR@10']:.3f} | {row['worst_margin']:+.3f} |"
        )
    return lines


def update_docs(table: str, begin: str = DOCS_BEGIN, end: str = DOCS_END, path: Path = DOCS) -> None:
    """Replace the block between `begin` and `end` in `path` (appended if missing)."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    block = f"{begin}\n{table}\n{end}"
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text = text + ("\n" if text else "") + block + "\n"
    path.write_text(text, encoding="utf-8")


# --- command ------------------------------------------------------------------------------


def ablation(
    es: Elasticsearch, dataset: Dataset, embedder: Embedder, settings: Settings, args: argparse.Namespace
) -> tuple[dict[str, dict[str, Lists]], tuple[Retriever, str]]:
    """Dev lists of every analysis variant (the last one is the service's), and the service's retriever and index.

    Variants that index alike share one index, built (or rebuilt with `--reindex`) once.
    """
    found = {}
    built: set[str] = set()
    for variant in VARIANTS if not args.no_ablation else (SERVICE,):
        reindex = args.reindex and variant.alias(dataset, variant.windows(settings)) not in built
        alias = ensure_indexed(es, dataset, variant, embedder, settings, reindex)
        built.add(alias)
        retriever = Retriever(
            es,
            embedder,
            variant.tokenizer(settings.jieba_user_dict),
            replace(RetrievalParams.from_settings(settings), depth=args.depth),
        )
        found[variant.name] = ranked_lists(retriever, alias, dataset, "dev")
    return found, (retriever, alias)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="cmrc,sanguo,medical")
    parser.add_argument("--depth", type=int, default=LIST_DEPTH, help="length of every ranked list")
    parser.add_argument(
        "--tolerance", type=float, default=TOLERANCE, help="allowed dev shortfall of hybrid (see above)"
    )
    parser.add_argument(
        "--cost-tolerance",
        type=float,
        default=COST_TOLERANCE,
        help="mean dev MRR@10 a shallower depth may cost (see above)",
    )
    parser.add_argument("--reindex", action="store_true", help="rebuild the PREFIX-* indices")
    parser.add_argument("--prefix", default="eval", help="of the indices' names (a shared Elasticsearch)")
    parser.add_argument("--no-ablation", action="store_true", help="only the service's analysis")
    parser.add_argument(
        "--no-vector-ablation", action="store_true", help="skip today's chunk vectors (a second index of each dataset)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "retrieval_eval")
    parser.add_argument("--lists-out", type=Path, help="also write every question's lists here (fuse again offline)")
    parser.add_argument("--update-docs", action="store_true", help=f"write the tables into {DOCS.relative_to(REPO)}")
    return parser


PARAPHRASED = ("paraphrase", "colloquial")  # question styles that share few words with their evidence
# Documents of a corpus that differ in one word (高/低血糖): a first hit in the twin is the worst miss.
LOOKALIKES = {"diabetes": ("02_低血糖.md", "03_高血糖与酮症.md")}


def lookalike_misses(dataset: Dataset, lists: dict[str, Lists], config: dict[str, Any]) -> dict[str, list[str]]:
    """Per list (and hybrid by `config`), the questions about one of the dataset's look-alike documents
    whose first hit is in its twin."""
    twins = LOOKALIKES.get(dataset.name)
    if not twins:
        return {}
    corpus = corpus_of(dataset.documents, dataset.chunk_size, dataset.chunk_overlap)
    document = {chunk_id: doc for chunk_id, (doc, _text) in corpus.chunks.items()}
    misses: dict[str, list[str]] = {}
    for q in (q for q in dataset.queries if q.id in lists):
        own = {document[chunk_id] for chunk_id in q.relevant}
        if len(own) != 1 or not own <= set(twins):
            continue
        twin = next(doc for doc in twins if doc not in own)
        firsts = {mode: [i for i, _ in lists[q.id][mode][:1]] for mode in LISTS}
        for mode, first in (firsts | {"hybrid": fused_ids(lists[q.id], config)[:1]}).items():
            misses.setdefault(mode, [])
            if first and document.get(first[0]) == twin:
                misses[mode].append(q.id)
    return misses


def _mean_interval(values: list[float]) -> list[float]:
    """The mean of per-question values and its paired-bootstrap 95 % interval (against zero)."""
    return list(paired_bootstrap(values, [0.0] * len(values))) if values else [0.0, 0.0, 0.0]


def default_rows(dataset: Dataset, lists: dict[str, dict[str, Lists]], default: dict[str, Any]) -> dict[str, Any]:
    """The service's default fusion per split: vector and hybrid R@1 / R@5 / MRR@10 with intervals, over
    all questions and over the paraphrased ones, and hybrid minus vector on the paraphrased (R@1, MRR@10)."""
    rows: dict[str, Any] = {}
    for split, found in lists.items():
        for part, styles in (("all", None), ("paraphrased", PARAPHRASED)):
            questions = [q for q in dataset.queries if q.id in found and (styles is None or q.style in styles)]
            metrics = per_query(questions, found, default)
            rows[f"{split} {part}"] = {
                mode: {m: _mean_interval([q[m] for q in metrics[mode]]) for m in GATE} | {"n": len(questions)}
                for mode in ("vector", "hybrid")
            }
            if part == "paraphrased" and questions:
                rows[f"{split} {part}"]["hybrid minus vector"] = {
                    m: paired_bootstrap([q[m] for q in metrics["hybrid"]], [q[m] for q in metrics["vector"]])
                    for m in ("R@1", "MRR@10")
                }
    return rows


def dataset_report(
    dataset: Dataset, test_lists: dict[str, Lists], dev_lists: dict[str, Lists], config: dict[str, Any]
) -> dict[str, Any]:
    """One dataset's figures with the chosen fusion: dev and test means, test margins and intervals."""
    test = per_query(dataset.queries, test_lists, config)
    dev = per_query(dataset.queries, dev_lists, config)
    test_means = {mode: mean_metrics(found) for mode, found in test.items()}
    return {
        "documents": len(dataset.documents),
        "chunks": len(dataset.chunks),
        "skipped": dataset.skipped,
        "dev_queries": len(dev["hybrid"]),
        "test_queries": len(test["hybrid"]),
        "dev": {mode: mean_metrics(found) for mode, found in dev.items()},
        "test": test_means,
        "test_margin": margins(test_means),
        "test_intervals": {
            mode: {
                metric: paired_bootstrap([q[metric] for q in test["hybrid"]], [q[metric] for q in test[mode]])
                for metric in ("MRR@10", "R@1")
            }
            for mode in LISTS
        },
    }


def vector_ablation(
    es: Elasticsearch,
    dataset: Dataset,
    embedder: Embedder,
    settings: Settings,
    args: argparse.Namespace,
    service: dict[str, dict[str, Lists]],
    config: dict[str, Any],
) -> dict[str, Any]:
    """The vector list and hybrid (the chosen fusion) with today's chunk vectors, with passages (the
    service's lists, `service` by split) and with both (the chunk vectors fused as a fifth list), per split;
    on test, paired bootstrap intervals of passages minus chunk vectors."""
    alias = ensure_indexed(es, dataset, CHUNK_VECTORS, embedder, settings, args.reindex)
    params = replace(RetrievalParams.from_settings(settings), depth=args.depth)
    tokenizer = CHUNK_VECTORS.tokenizer(settings.jieba_user_dict)
    retriever = Retriever(es, embedder, tokenizer, params)
    plain = Retriever(es, embedder, tokenizer, replace(params, alias_weight=0.0))  # aliases off
    service_alias = SERVICE.alias(dataset, SERVICE.windows(settings))
    tagged = person_questions(dataset, read_index_meta(es, service_alias).aliases)
    report: dict[str, Any] = {"index": alias, "tagged": sorted(tagged)}
    for split, lists in service.items():
        chunk = ranked_lists(retriever, alias, dataset, split, (Mode.VECTOR,))
        keywords = ranked_lists(plain, service_alias, dataset, split, LIST_MODES[1:])
        questions = [q for q in dataset.queries if q.id in lists]
        rows = {
            "chunk vectors": ({i: {**found, "vector": chunk[i]["vector"]} for i, found in lists.items()}, config),
            "passages": (lists, config),
            "both": (
                {i: {**found, CHUNK_LIST: chunk[i]["vector"]} for i, found in lists.items()},
                config | {"lists": (*config["lists"], CHUNK_LIST)},
            ),
            "passages, aliases off": ({i: {**found, **keywords[i]} for i, found in lists.items()}, config),
        }
        found_by: dict[str, dict[str, list[dict[str, float]]]] = {}
        for name, (found, fusion) in rows.items():
            vector = [query_metrics([i for i, _ in found[q.id]["vector"]], q.relevant) for q in questions]
            fused = hybrid(questions, found, fusion)
            named = [m for m, q in zip(fused, questions, strict=True) if q.id in tagged]
            found_by[name] = {"vector": vector, "hybrid": fused, "hybrid, person by 字 or title": named}
        report[split] = {name: {part: _summary(per) for part, per in parts.items()} for name, parts in found_by.items()}
        if split == "test":
            report["test_intervals"] = {
                part: {
                    metric: paired_bootstrap(
                        [m[metric] for m in found_by["passages"][part]],
                        [m[metric] for m in found_by["chunk vectors"][part]],
                    )
                    for metric in ("MRR@10", "R@1", "R@5")
                }
                for part in ("vector", "hybrid")
            }
    return report


# Titles by which the book names a person (丞相 is 曹操 for many chapters, 先主 is 刘备 ...).
TITLES = ("丞相", "皇叔", "吴侯", "主公", "先主", "后主", "魏王", "汉中王", "卧龙", "凤雏", "都督", "使君")


def person_questions(dataset: Dataset, aliases: Sequence[Alias]) -> set[str]:
    """Ids of the questions that name a person by a courtesy name (字/号 the base mined) or a title."""
    courtesy = {entry.alias for entry in aliases if re.fullmatch(r"[\u4e00-\u9fff]{2}", entry.alias)}
    return {q.id for q in dataset.queries if any(word in q.text for word in (*courtesy, *TITLES))}


def _summary(per: list[dict[str, float]]) -> dict[str, Any]:
    """Means of per-question metrics, the Wilson interval of R@5, and how many questions."""
    hits = int(sum(m["R@5"] for m in per))
    means = mean_metrics(per) if per else dict.fromkeys(METRICS, 0.0)
    return means | {"R@5 ci95": wilson(hits, len(per)), "n": len(per)}


def vector_table(name: str, found: dict[str, Any]) -> list[str]:
    """The vector ablation of one dataset as markdown."""
    lines = [
        f"### Vector lists: {name} (chosen fusion; the vector list of `both` is the passages')",
        "",
        "| split | vectors | vector R@1 / R@5 / MRR@10 | hybrid R@1 | hybrid R@5 [Wilson 95 %] | hybrid MRR@10 "
        + "| person by 字/title: hybrid R@5 [Wilson 95 %] (n) |",
        "|---|---|---|---:|---|---:|---|",
    ]
    for split in ("dev", "test"):
        for vectors, parts in found[split].items():
            v, h, p = parts["vector"], parts["hybrid"], parts["hybrid, person by 字 or title"]
            low, high = h["R@5 ci95"]
            lines.append(
                f"| {split} | {vectors} | {v['R@1']:.3f} / {v['R@5']:.3f} / {v['MRR@10']:.3f} | {h['R@1']:.3f} "
                + f"| {h['R@5']:.3f} [{low:.2f}, {high:.2f}] | {h['MRR@10']:.3f} "
                + f"| {p['R@5']:.3f} [{p['R@5 ci95'][0]:.2f}, {p['R@5 ci95'][1]:.2f}] ({p['n']}) |"
            )
    lines += ["", "Test, passages minus chunk vectors, paired bootstrap 95 % interval:", ""]
    lines += ["| list | MRR@10 | R@1 | R@5 |", "|---|---|---|---|"]
    for part, diffs in found["test_intervals"].items():
        lines.append(f"| {part} | " + " | ".join(_interval(diffs[m]) for m in ("MRR@10", "R@1", "R@5")) + " |")
    return [*lines, ""]


def ablation_report(dataset: Dataset, variants: dict[str, dict[str, Lists]], config: dict[str, Any]) -> dict[str, Any]:
    """Dev MRR@10 of bm25 and hybrid for every analysis variant."""
    return {
        name: {"bm25": mean_metrics(found["bm25"])["MRR@10"], "hybrid": mean_metrics(found["hybrid"])["MRR@10"]}
        for name, lists in variants.items()
        for found in [per_query(dataset.queries, lists, config)]
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = Settings()
    es = create_client(settings)
    embedder = CachedEmbedder(load_embedder(settings.embedder, settings), cache_path(settings))
    datasets = [replace(load_named(name), prefix=args.prefix) for name in args.datasets.split(",")]
    started = time.perf_counter()
    ablations = {d.name: ablation(es, d, embedder, settings, args) for d in datasets}
    dev_lists = {name: lists for name, (lists, _service) in ablations.items()}
    default = config_of(RetrievalParams.from_settings(settings))
    saved: dict[str, dict[str, dict[str, Lists]]] = {}
    config, fusion_rows = choose(
        {d.name: (d.queries, dev_lists[d.name][SERVICE.name]) for d in datasets}, args.tolerance, args.cost_tolerance
    )
    report: dict[str, Any] = {
        "command": "python -m bench.retrieval_eval " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(es, embedder),
        "depth": args.depth,
        "chosen": config,
        "default_fusion": default,
        "fusion": fusion_rows,
        "datasets": {},
        "ablation": {},
        "vectors": {},
        "default": {},  # the service's own fusion (its settings), per dataset: `corpora_table`
        "lookalikes": {},  # first hits in a look-alike twin document, dev and test together
        "uncovered": {},  # the service's fusion without coverage, when FUSION_COVERAGE is set: `corpora_table`
    }
    for dataset in datasets:
        retriever, alias = ablations[dataset.name][1]
        test_lists = ranked_lists(retriever, alias, dataset, "test")
        service_dev = dev_lists[dataset.name][SERVICE.name]
        report["datasets"][dataset.name] = dataset_report(dataset, test_lists, service_dev, config)
        saved[dataset.name] = {"dev": service_dev, "test": test_lists}
        report["default"][dataset.name] = default_rows(dataset, {"dev": service_dev, "test": test_lists}, default)
        if default.get("coverage"):  # what the same fusion gave before keyword lists weighed their coverage
            plain = default | {"coverage": 0.0}
            report["uncovered"][dataset.name] = default_rows(dataset, {"dev": service_dev, "test": test_lists}, plain)
        report["lookalikes"][dataset.name] = lookalike_misses(dataset, service_dev | test_lists, default)
        report["ablation"][dataset.name] = ablation_report(dataset, dev_lists[dataset.name], config)
        if not args.no_vector_ablation:
            service = {"dev": service_dev, "test": test_lists}
            report["vectors"][dataset.name] = vector_ablation(es, dataset, embedder, settings, args, service, config)
    if args.lists_out:
        args.lists_out.write_text(json.dumps(saved, ensure_ascii=False), encoding="utf-8")
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["embedding_cache"] = {"hits": embedder.hits, "misses": embedder.misses}

    args.out.parent.mkdir(parents=True, exist_ok=True)
    table = markdown(report)
    args.out.with_suffix(".md").write_text(table, encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    if args.update_docs:
        update_docs(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
