"""Evaluate hybrid retrieval on a knowledge base's own questions and choose its fusion.

    python -m evaluation --kb NAME --questions FILE [--out DIR] [--dry-run]

The question set (retrieval/questions.py) is split dev/test by a fixed seed. Every question runs
once through `Retriever.ranked_lists` (every list `LIST_DEPTH` deep, the service's own
`_msearch`); every fusion setting of the grid fuses the dev lists and the rule of
retrieval/evaluation.py (`choose`, the benchmarks' rule) picks one; only then is the test part
scored: R@1, R@5, R@10, MRR@10, nDCG@10 of every list, of hybrid with the chosen fusion and of
hybrid with the service default, paired-bootstrap 95 % intervals of hybrid minus each list, the
rank distribution and every test question hybrid does not rank first (its rank in each list).

Writes `report.json`, `report.md` and `report.png` into `--out`, and stores the chosen fusion
with the base (core.kbs) unless `--dry-run`: every hybrid search of the base uses it from then.
"""

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.access import Scope
from core.config import Settings
from core.embeddings import load_embedder
from core.kbs import FusionSetting, InvalidKnowledgeBaseName, check_kb_name, read_kb, write_fusion
from core.reader import Reader
from core.store import EmbedderMismatchError, IndexNotFoundError, create_client
from evaluation.metrics import (
    COST_TOLERANCE,
    LIST_DEPTH,
    LISTS,
    METRICS,
    TOLERANCE,
    Lists,
    choose,
    config_of,
    first_relevant,
    fused_ids,
    label,
    mean_metrics,
    paired_bootstrap,
    per_query,
    setting_of,
)
from evaluation.questions import BadLine, Question, QuestionSet, base_corpus, parse_questions, resolve
from evaluation.rerank import markdown as rerank_markdown
from evaluation.rerank import rerank_row, score_questions
from retrieval.retriever import Retriever, build_retriever

MODES = (*LISTS, "hybrid")
RANK_BUCKETS = ("1", "2-3", "4-5", "6-10", "11-50", "none")
Progress = Callable[[int, int], None]  # (questions searched, of how many)


class EvaluationError(ValueError):
    """A question set that cannot be evaluated (e.g. no dev or no test question left)."""


def _bucket(rank: int | None) -> str:
    if rank is None:
        return "none"
    return next(b for b, top in zip(RANK_BUCKETS, (1, 3, 5, 10, LIST_DEPTH), strict=False) if rank <= top)


def _ranks(question: Question, lists: Lists, config: dict[str, Any]) -> dict[str, int | None]:
    """The first relevant rank of each list (within `LIST_DEPTH`) and of hybrid (within its top 10)."""
    ranks: dict[str, int | None] = {
        str(name): first_relevant([id_ for id_, _ in lists[name]], question.relevant) for name in LISTS
    }
    return {**ranks, "hybrid": first_relevant(fused_ids(lists, config), question.relevant)}


def _intervals(found: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Hybrid minus each list, per metric: the mean difference and its paired-bootstrap 95 % interval."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for mode in LISTS:
        out[f"hybrid-{mode}"] = {}
        for metric in METRICS:
            diff, low, high = paired_bootstrap([q[metric] for q in found["hybrid"]], [q[metric] for q in found[mode]])
            out[f"hybrid-{mode}"][metric] = {"diff": diff, "interval": [low, high]}
    return out


def _mode_intervals(found: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Each mode's mean per metric with its bootstrap 95 % interval (the same resampling, against zero)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for mode, rows in found.items():
        out[mode] = {}
        for metric in METRICS:
            mean, low, high = paired_bootstrap([q[metric] for q in rows], [0.0] * len(rows))
            out[mode][metric] = {"mean": mean, "interval": [low, high]}
    return out


def _bad(lines: list[BadLine]) -> list[dict[str, Any]]:
    return [{"line": b.line, "error": b.error, "text": b.text, "absent": b.absent} for b in lines]


def run_evaluation(
    retriever: Retriever,
    scope: Scope,
    questions: QuestionSet,
    progress: Progress | None = None,
    *,
    tolerance: float = TOLERANCE,
    cost_tolerance: float = COST_TOLERANCE,
    before: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report of `questions` on the base `kb` (see the module docstring); stores nothing.
    `before`: the fusion the base uses now (grid form), to say what choosing anew would change."""
    started = time.perf_counter()
    kb = scope.kb
    ready, bad = resolve(questions, base_corpus(Reader(retriever.es, scope)))
    splits = {split: sum(q.split == split for q in ready) for split in ("dev", "test")}
    if not all(splits.values()):
        raise EvaluationError(
            f"{splits['dev']} dev and {splits['test']} test questions of {len(ready)} usable "
            f"({len(bad)} bad lines): both parts need at least one"
        )
    lists: dict[str, Lists] = {}
    for done, question in enumerate(ready, start=1):
        lists[question.id] = retriever.ranked_lists(scope, question.text, LISTS, LIST_DEPTH, coverage=True)
        if progress:
            progress(done, len(ready))
    report = report_of(kb, questions, ready, bad, lists, config_of(retriever.params), tolerance, cost_tolerance)
    if retriever.reranker is not None:  # the reranking row, on the chosen fusion's candidates
        reader, reranker = Reader(retriever.es, scope), retriever.reranker
        scored, took = score_questions(reranker, scope, reader, ready, lists, report["chosen"], progress)
        report["rerank"] = rerank_row(reranker.scorer.name, ready, scored, took)
    if before is not None:
        test = [q for q in ready if q.split == "test"]
        report["before"] = change(test, {q.id: lists[q.id] for q in test}, before, report["chosen"])
    return report | {"seconds": round(time.perf_counter() - started, 2)}


def change(
    test: list[Question], lists: dict[str, Lists], before: dict[str, Any], chosen: dict[str, Any]
) -> dict[str, Any]:
    """What the chosen fusion changes on test against `before`: each metric's figures before and
    after, and the paired-bootstrap 95 % interval of after minus before."""
    old = per_query(test, lists, before)["hybrid"]
    new = per_query(test, lists, chosen)["hybrid"]
    changes = {}
    for metric in METRICS:
        diff, low, high = paired_bootstrap([q[metric] for q in new], [q[metric] for q in old])
        changes[metric] = {"diff": diff, "interval": [low, high]}
    return before | {"label": label(before), "test": mean_metrics(old), "change": changes}


def report_of(
    kb: str,
    questions: QuestionSet,
    ready: list[Question],
    bad: list[BadLine],
    lists: dict[str, Lists],
    default: dict[str, Any],
    tolerance: float = TOLERANCE,
    cost_tolerance: float = COST_TOLERANCE,
) -> dict[str, Any]:
    """The report from every question's ranked lists: the fusion chosen on dev, then test figures with
    the chosen and the `default` fusion, intervals, rank distribution and misses."""
    dev = [q for q in ready if q.split == "dev"]
    test = [q for q in ready if q.split == "test"]
    dev_lists = {q.id: lists[q.id] for q in dev}
    test_lists = {q.id: lists[q.id] for q in test}
    config, rows = choose({kb: (dev, dev_lists)}, tolerance, cost_tolerance)
    found = per_query(test, test_lists, config)
    ranks = {q.id: _ranks(q, test_lists[q.id], config) for q in test}
    misses: list[dict[str, Any]] = [
        {
            "id": q.id,
            "line": q.line,
            "question": q.text,
            "generated": q.generated,
            "ranks": ranks[q.id],
            "found_by": [str(name) for name in LISTS if (ranks[q.id][name] or LIST_DEPTH + 1) <= 10],
        }
        for q in test
        if ranks[q.id]["hybrid"] != 1
    ]
    misses.sort(key=lambda m: (m["ranks"]["hybrid"] is not None, m["ranks"]["hybrid"] or 0, m["line"]))
    return {
        "kb": kb,
        "questions": {
            "total": questions.lines,
            "usable": len(ready),
            "dev": len(dev),
            "test": len(test),
            "generated": sum(q.generated for q in ready),
            "bad_lines": _bad(bad),
        },
        "depth": LIST_DEPTH,
        "test": {mode: mean_metrics(rows_) for mode, rows_ in found.items()},
        "test_intervals": _mode_intervals(found),
        "intervals": _intervals(found),
        "chosen": config | {"label": label(config)},
        "default": default
        | {"label": label(default), "test": mean_metrics(per_query(test, test_lists, default)["hybrid"])},
        "dev": {mode: mean_metrics(rows_) for mode, rows_ in per_query(dev, dev_lists, config).items()},
        "grid": [
            {"label": row["label"], "config": row["config"], "dev": row["datasets"][kb]["hybrid"]}
            | {"worst_margin": row["worst_margin"]}
            for row in rows
        ],
        "ranks": {
            mode: {b: sum(_bucket(r[mode]) == b for r in ranks.values()) for b in RANK_BUCKETS} for mode in MODES
        },
        "misses": misses,
    }


def _interval_cell(value: dict[str, Any]) -> str:
    low, high = value["interval"]
    verdict = "better" if low > 0 else "worse" if high < 0 else "level"
    return f"{value['diff']:+.3f} [{low:+.3f}, {high:+.3f}] {verdict}"


def markdown(report: dict[str, Any]) -> str:
    """The report for people: test figures, intervals, the chosen fusion, bad lines and misses."""
    q = report["questions"]
    lines = [
        f"# Retrieval evaluation of `{report['kb']}`",
        "",
        f"{q['total']} questions read, {q['usable']} usable ({q['generated']} generated by the model), "
        + f"{q['dev']} dev / {q['test']} test; {len(q['bad_lines'])} bad lines. {report['seconds']} s.",
        "",
        f"**Chosen fusion (on dev): {report['chosen']['label']}** "
        + f"(service default: {report['default']['label']}).",
        "",
        f"## Test ({q['test']} questions)",
        "",
        "| mode | " + " | ".join(METRICS) + " |",
        "|---|" + "---:|" * len(METRICS),
    ]
    rows = {**report["test"], "hybrid (default fusion)": report["default"]["test"]}
    for mode, figures in rows.items():
        lines.append(f"| {mode} | " + " | ".join(f"{figures[m]:.3f}" for m in METRICS) + " |")
    lines += ["", "Hybrid minus each list, paired bootstrap 95 % interval:", ""]
    lines += ["| | " + " | ".join(METRICS) + " |", "|---|" + "---|" * len(METRICS)]
    for name, diffs in report["intervals"].items():
        lines.append(f"| {name} | " + " | ".join(_interval_cell(diffs[m]) for m in METRICS) + " |")
    lines += ["", f"## Dev ({q['dev']} questions, chosen fusion)", ""]
    lines += ["| mode | " + " | ".join(METRICS) + " |", "|---|" + "---:|" * len(METRICS)]
    for mode, figures in report["dev"].items():
        lines.append(f"| {mode} | " + " | ".join(f"{figures[m]:.3f}" for m in METRICS) + " |")
    if report.get("rerank"):
        lines += rerank_markdown(report["rerank"])
    if q["bad_lines"]:
        lines += ["", "## Bad lines", ""] + [f"- line {b['line']}: {b['error']}" for b in q["bad_lines"]]
    lines += ["", f"## Test questions hybrid does not rank first ({len(report['misses'])})", ""]
    lines += [
        "| line | question | hybrid | " + " | ".join(LISTS) + " | found by (top 10) |",
        "|---|---|" + "---:|" * 5 + "---|",
    ]
    for miss in report["misses"]:
        ranks = " | ".join(str(miss["ranks"][m] or "-") for m in MODES[-1:] + MODES[:-1])
        lines.append(f"| {miss['line']} | {miss['question']} | {ranks} | {', '.join(miss['found_by']) or '-'} |")
    return "\n".join(lines) + "\n"


def plot_png(report: dict[str, Any], path: Path) -> None:
    """Per-mode bars of every test metric with their interval whiskers, and the rank distribution."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    fig, (bars, ranks) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / len(MODES)
    for i, mode in enumerate(MODES):
        spread = report["test_intervals"][mode]
        means = [spread[m]["mean"] for m in METRICS]
        errors = [[mean - spread[m]["interval"][0] for m, mean in zip(METRICS, means, strict=True)]]
        errors.append([spread[m]["interval"][1] - mean for m, mean in zip(METRICS, means, strict=True)])
        xs = [j + (i - (len(MODES) - 1) / 2) * width for j in range(len(METRICS))]
        bars.bar(xs, means, width, yerr=errors, capsize=2, label=mode)
    bars.set_xticks(range(len(METRICS)), METRICS)
    bars.set_ylim(0, 1.05)
    bars.set_title(f"{report['kb']}: test, {report['questions']['test']} questions (95 % intervals)")
    bars.legend(fontsize=8, loc="lower right")
    for i, mode in enumerate(MODES):
        counts = [report["ranks"][mode][b] for b in RANK_BUCKETS]
        xs = [j + (i - (len(MODES) - 1) / 2) * width for j in range(len(RANK_BUCKETS))]
        ranks.bar(xs, counts, width, label=mode)
    ranks.set_xticks(range(len(RANK_BUCKETS)), RANK_BUCKETS)
    ranks.set_xlabel("rank of the first relevant chunk")
    ranks.set_ylabel("test questions")
    ranks.set_title(f"rank distribution (hybrid: {report['chosen']['label']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(report: dict[str, Any], out: Path) -> list[Path]:
    """`report.json`, `report.md` and `report.png` in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "report.json", out / "report.md", out / "report.png"]
    paths[0].write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    paths[1].write_text(markdown(report), encoding="utf-8")
    plot_png(report, paths[2])
    return paths


def chosen_setting(report: dict[str, Any], note: str) -> FusionSetting:
    """The report's chosen fusion, and reranking weight when it has a reranking row, as a base's
    setting (stored, every hybrid search of the base uses it)."""
    setting = setting_of(report["chosen"], chosen_at=datetime.now(UTC).isoformat(), note=note)
    rerank = report.get("rerank")
    return replace(setting, rerank_weight=rerank["chosen_weight"]) if rerank else setting


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluation", description=__doc__.splitlines()[0])
    parser.add_argument("--kb", required=True, help="the knowledge base (alias) to evaluate")
    parser.add_argument("--questions", type=Path, required=True, help="JSONL question set")
    parser.add_argument("--out", type=Path, default=Path("evaluation"), help="folder of report.{json,md,png}")
    parser.add_argument("--dry-run", action="store_true", help="report only: do not store the chosen fusion")
    args = parser.parse_args(argv)
    settings = Settings()
    es = create_client(settings)
    try:
        check_kb_name(args.kb)
        read_kb(es, args.kb, settings)  # IndexNotFoundError before the embedder loads
        questions = parse_questions(args.questions.read_text(encoding="utf-8").splitlines())
        retriever = build_retriever(settings, es, load_embedder(settings.embedder, settings))
        report = run_evaluation(retriever, Scope.whole(args.kb), questions, _bar())
        paths = write_report(report, args.out)
        if not args.dry_run:
            write_fusion(es, args.kb, chosen_setting(report, note=f"python -m evaluation, {paths[0]}"))
    except (
        InvalidKnowledgeBaseName,
        IndexNotFoundError,
        EmbedderMismatchError,
        EvaluationError,
        OSError,
        UnicodeDecodeError,
    ) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        es.close()
    print(markdown(report))
    stored = "not stored (--dry-run)" if args.dry_run else f"stored with {args.kb}"
    print(f"chosen fusion {report['chosen']['label']}: {stored}; report in {args.out}/", file=sys.stderr)
    return 0


def _bar() -> Progress:
    """A progress bar on stderr."""
    from tqdm import tqdm

    bar = tqdm(desc="questions", unit="q", file=sys.stderr)

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)
        if done == total:
            bar.close()

    return update
