"""Extractive answers (no model) on the 三国 questions: is the evidence quoted, is the unknown admitted?

    python -m bench.extractive_eval [--index extractive-sanguo] [--book PATH] [--save trial.json]
    python -m bench.extractive_eval --set handbook      # a modern made-up corpus, the same figures
    python -m bench.extractive_eval --set medical       # colloquial questions, all answerable
    python -m bench.extractive_eval --set cmrc          # encyclopedic prose, questions no rule was written for

Every question of bench/data/sanguo_questions.jsonl (answerable, with a verbatim `evidence`) and
bench/data/sanguo_unanswerable.jsonl (about things the book does not contain; `compound` ones
ask one answerable and one unanswerable part) and bench/data/sanguo_distributive.jsonl (one
question asked of several subjects, 「刘备、关羽、张飞各自用什么兵器？」, with one evidence per
subject) is answered by the steps of the service's
extractive workflow with web search off (`retrieval.extractive.answer_locally`) over `--index` (built from the whole book, 800/50
chunks, with the cached embedder when it does not exist; sentence vectors are cached too). A
question whose evidence is in no indexed chunk is skipped and counted, so a partial index
(the first N chapters) gives figures on the questions it can answer.

The sufficiency thresholds (best similarity, keyword coverage) do not change which sentences
are quoted, only whether a part counts as answered, so one run per question is judged again
for every point of a grid. The grid point with the best balanced accuracy on `dev` (answerable
judged answered, unanswerable said 无法从上下文确认) is chosen; `test` figures use that point.
Figures: share of answerable questions whose answer contains the evidence (quote markup
removed), judged answered, both; share of unanswerable ones that say 无法从上下文确认; compound
ones whose first part is quoted and whose second is admitted; distributive ones whose every subject's
evidence is quoted and every part answered. Wilson 95 % intervals. The table
goes to bench/results/extractive_eval.md and into docs/workflow.md.

`--set handbook`: the same steps on a modern made-up corpus (bench/data/handbook_corpus.jsonl: a
company's rules, product manuals, a medication note, a contract, an SLA; handbook_questions.jsonl: 71
answerable, 62 unanswerable questions; 16 of the answerable ones name what they ask by a word the
documents do not use, 车重 for 整车重量), so that a rule decided on the classical novel is checked on modern
text. Its thresholds are the service's settings, not tuned on it: it checks the defaults.
`--set medical`: the retrieval set's 80 passages and 140 colloquial questions (「一饿就心慌冒冷汗，是不
是血糖低了？」), all answerable and without verbatim evidence: only how many are admitted.
`--set cmrc`: CMRC 2018's 1,104 Wikipedia paragraphs and 4,219 questions, each with its answer span as
the evidence (about 9 minutes with nothing cached): every rule here was written on the novel and the made-up corpus, so
this is how they fare on questions and prose they were not written for.
"""

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from itertools import product
from pathlib import Path
from typing import Any

from elasticsearch import Elasticsearch

from bench.datasets import (
    BENCH_DATA,
    CMRC_SMALL,
    MODERN,
    Dataset,
    cmrc_answers,
    load_cmrc,
    load_medical,
    load_named,
    load_sanguo,
    read_jsonl,
)
from bench.embedding_cache import CachedEmbedder, cache_path
from bench.latency import percentile
from bench.retrieval_eval import REPO, RESULTS, SERVICE, ensure_indexed, machine, update_docs
from core.access import ALL_DOCUMENTS, Scope
from core.config import Settings
from core.embeddings import load_embedder
from core.reader import Reader
from core.schema import Mode
from core.store import concrete_indices, create_client
from core.text import get_tokenizer
from evaluation.calibration import calibrate
from evaluation.metrics import wilson
from indexing.options import IndexOptions
from indexing.pipeline import index_documents
from retrieval.extractive import Thresholds, answer_locally
from retrieval.profiles import TextProfile, profile_named
from retrieval.retriever import RetrievalParams, Retriever

K = 8  # passages searched per part: the default `k` of POST /query
SIMILARITIES = [round(0.80 + 0.005 * i, 3) for i in range(31)]  # 0.800 … 0.950
UNKNOWN_TERMS = [0, 1, 2, 99]  # 99: no limit
COVERAGES = [round(0.1 * i, 1) for i in range(11)]  # 0.0 … 1.0
_MARKUP = re.compile(r"\[\d+\](?:（https?://[^）]*）)?|[「」\n]")


def load_questions(question_set: str = "sanguo") -> list[dict[str, Any]]:
    if question_set == "handbook" or question_set in MODERN:
        return read_jsonl(BENCH_DATA / f"{question_set}_questions.jsonl")
    if question_set == "medical":
        return [
            {"id": q.id, "question": q.text, "kind": "answerable", "split": q.split} for q in load_medical().queries
        ]
    if question_set in ("cmrc", "cmrc-small"):
        answers = cmrc_answers()
        kept = CMRC_SMALL if question_set == "cmrc-small" else None
        written = read_jsonl(BENCH_DATA / "cmrc_unanswerable.jsonl") if kept else []  # about those paragraphs
        return [
            {"id": q.id, "question": q.text, "kind": "answerable", "split": q.split, "evidence": answers[q.id]}
            for q in load_cmrc(paragraphs_kept=kept).queries
            if q.id in answers
        ] + written
    answerable = [{**item, "kind": "answerable"} for item in read_jsonl(BENCH_DATA / "sanguo_questions.jsonl")]
    return (
        answerable
        + read_jsonl(BENCH_DATA / "sanguo_unanswerable.jsonl")
        + read_jsonl(BENCH_DATA / "sanguo_distributive.jsonl")
    )


def indexed_chunks(es: Elasticsearch, index: str) -> list[str]:
    """Every chunk of the index: a question whose evidence is in none of them cannot be asked."""
    es.indices.refresh(index=index)
    return [hit["_source"]["text"] for hit in Reader(es, Scope.whole(index)).scan({"_source": ["text"]})]


def contains(answer: str, evidence: str) -> bool:
    """The evidence, verbatim, in the answer's quotes (markup removed from both, so adjacent quotes join
    and an evidence holding 「」 of its own, as CMRC's spans may, is still found)."""
    return _MARKUP.sub("", evidence) in _MARKUP.sub("", answer)


def run_all(
    retriever: Retriever, settings: Settings, questions: list[dict[str, Any]], profile: TextProfile | None = None
) -> list[dict[str, Any]]:
    runs = []
    limits = Thresholds.from_settings(settings)
    for number, item in enumerate(questions, start=1):
        started = time.perf_counter()
        result = answer_locally(
            retriever,
            Scope.whole(settings.es_index),
            item["question"],
            mode=Mode.HYBRID,
            k=K,
            max_parts=settings.max_retrievals,
            passages=settings.extractive_passages,
            limits=limits,
            profile=profile,
        )
        evidence = item.get("evidence")
        each = item.get("evidence_per_part", [])  # a distributive question: one evidence per subject
        runs.append(
            {
                **item,
                "ms": round((time.perf_counter() - started) * 1000, 1),
                "answer": result.answer,
                "parts": [
                    p.model_dump(
                        include={
                            "part",
                            "best_similarity",
                            "coverage",
                            "wants_links",
                            "unknown",
                            "strangers",
                            "absent_attribute",
                            "unsourced_attribute",
                            "wanted",
                            "wanted_found",
                            "premise_denied",
                            "unstated_claim",
                            "vouched",
                        }
                    )
                    for p in result.parts
                ],
                "quoted": contains(result.answer, evidence) if evidence else None,
                "parts_quoted": [contains(result.answer, one) for one in each],
                "contradiction_quoted": contains(result.answer, item["contradicted_by"])
                if item.get("contradicted_by")
                else None,
                "sides_quoted": [contains(result.answer, side) for side in item.get("conflict", [])],
            }
        )
        print(f"\r{number}/{len(questions)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return runs


def answered(part: dict[str, Any], similarity: float, coverage: float, unknown: int) -> bool:
    """`retrieval.extractive.select`'s verdict at these thresholds."""
    if part["wants_links"]:  # answered by web links only; `link_answer` scores 1.0 when it has some
        return part["best_similarity"] >= 1.0
    if part.get("premise_denied") or part.get("unstated_claim"):  # a source contradicts what the part takes for
        return False  # granted (retrieval/premises.py), or no source states the claim it asks to confirm
    if part.get("strangers") or part.get("absent_attribute") or part.get("unsourced_attribute"):
        return False  # it names someone (李白) or asks for an attribute (CEO, 妻子) no source mentions
    known = len(part.get("unknown", [])) <= unknown
    found = part.get("wanted_found", True)  # a quote holds the kind of answer asked for (retrieval/answer_kinds.py)
    # A distributed part's own sentence holding the specific kind asked answers it whatever its similarity.
    close = part["best_similarity"] >= similarity or part.get("vouched", False)
    return close and part["coverage"] >= coverage and known and found


def judge(run: dict[str, Any], similarity: float, coverage: float, unknown: int) -> dict[str, bool]:
    """What the answer says at these thresholds: all parts answered, or 无法从上下文确认 for some."""
    verdicts = [answered(p, similarity, coverage, unknown) for p in run["parts"]]
    result = {"all_answered": all(verdicts), "admits": not all(verdicts)}
    if run["kind"] == "compound":
        # First part answered and quoted, some later part admitted.
        result["compound_ok"] = bool(verdicts) and verdicts[0] and not all(verdicts[1:]) and bool(run["quoted"])
    return result


def share(flags: list[bool]) -> dict[str, Any]:
    hits = sum(flags)
    return {"share": round(hits / len(flags), 3) if flags else 0.0, "n": len(flags), "ci95": wilson(hits, len(flags))}


TRAPS = ("modern", "plausible", "false_premise", "out_of_domain")  # kinds of unanswerable question
UNANSWERED = ("unanswerable", "compound")  # kinds the answer should admit (in part)


def figures(runs: list[dict[str, Any]], similarity: float, coverage: float, unknown: int) -> dict[str, Any]:
    answerable = [r for r in runs if r["kind"] == "answerable"]
    unanswerable = [r for r in runs if r["kind"] == "unanswerable"]
    compound = [r for r in runs if r["kind"] == "compound"]
    judged = {id(r): judge(r, similarity, coverage, unknown) for r in runs}
    found = {
        "answerable_quotes_evidence": share([r["quoted"] for r in answerable if r["quoted"] is not None]),
        "answerable_judged_answered": share([judged[id(r)]["all_answered"] for r in answerable]),
        "answerable_quoted_and_answered": share(
            [r["quoted"] and judged[id(r)]["all_answered"] for r in answerable if r["quoted"] is not None]
        ),
        "answerable_admitted": share([judged[id(r)]["admits"] for r in answerable]),
        # Asked in other words than the evidence's (车重 for 整车重量): what a rule on the asked words costs.
        "answerable_paraphrase_judged_answered": share(
            [judged[id(r)]["all_answered"] for r in answerable if r.get("style") == "paraphrase"]
        ),
        "unanswerable_says_unconfirmed": share([judged[id(r)]["admits"] for r in unanswerable]),
    }
    for trap in TRAPS:
        of_trap = [judged[id(r)]["admits"] for r in unanswerable if r.get("trap") == trap]
        found[f"unanswerable_{trap}_says_unconfirmed"] = share(of_trap)
    premises = [bool(r["contradiction_quoted"]) for r in unanswerable if r.get("contradicted_by")]
    found["false_premise_quotes_contradiction"] = share(premises)
    found["compound_first_quoted_second_admitted"] = share([judged[id(r)]["compound_ok"] for r in compound])
    found["compound_says_unconfirmed"] = share([judged[id(r)]["admits"] for r in compound])
    distributive = [r for r in runs if r["kind"] == "distributive"]
    found["distributive_parts_quoted"] = share([quoted for r in distributive for quoted in r["parts_quoted"]])
    conflicts = [r for r in runs if r["kind"] == "conflict"]  # two versions disagree: both should be quoted
    found["conflict_both_sides_quoted"] = share([all(r.get("sides_quoted", [False])) for r in conflicts])
    found["conflict_newer_quoted"] = share([bool(r.get("sides_quoted", [False])[0]) for r in conflicts])
    found["distributive_all_quoted_and_answered"] = share(
        [all(r["parts_quoted"]) and judged[id(r)]["all_answered"] for r in distributive]
    )
    return found


def tune(dev: list[dict[str, Any]]) -> dict[str, Any]:
    """The grid point with the best balanced accuracy on dev; ties go to the stricter point."""
    best: tuple[float, float, float, int] | None = None
    for similarity, coverage, unknown in product(SIMILARITIES, COVERAGES, UNKNOWN_TERMS):
        found = figures(dev, similarity, coverage, unknown)
        admitted = [judge(r, similarity, coverage, unknown)["admits"] for r in dev if r["kind"] in UNANSWERED]
        balanced = (found["answerable_judged_answered"]["share"] + sum(admitted) / max(1, len(admitted))) / 2
        if best is None or (balanced, similarity, coverage, -unknown) > (*best[:3], -best[3]):
            best = (balanced, similarity, coverage, unknown)
    assert best is not None
    return {
        "balanced_accuracy": round(best[0], 3),
        "min_similarity": best[1],
        "min_coverage": best[2],
        "max_unknown_terms": best[3],
    }


def defaults(settings: Settings) -> dict[str, Any]:
    """The service's thresholds (a set that checks the defaults rather than tuning its own)."""
    return {
        "balanced_accuracy": None,
        "min_similarity": settings.extractive_min_similarity,
        "min_coverage": settings.extractive_min_coverage,
        "max_unknown_terms": settings.extractive_max_unknown_terms,
    }


def markdown(report: dict[str, Any]) -> str:
    chosen = report["chosen"]
    how = (
        f"Thresholds chosen on dev (balanced accuracy {chosen['balanced_accuracy']}): "
        if chosen["balanced_accuracy"] is not None
        else "Thresholds: the service's settings (not tuned on this set): "
    )
    lines = [
        f"Index `{report['index']}` ({report['chunks']} chunks), "
        f"{report['questions']} questions asked ({report['skipped']} skipped: evidence not in the index); "
        f"machine: {report['machine']['cores']} cores, load {report['machine']['load_average']}, {report['machine']['date']}.",
        f"{how}EXTRACTIVE_MIN_SIMILARITY={chosen['min_similarity']}, EXTRACTIVE_MIN_COVERAGE={chosen['min_coverage']}, "
        f"EXTRACTIVE_MAX_UNKNOWN_TERMS={chosen['max_unknown_terms']}.",
        "",
        "| figure | dev | test |",
        "|---|---|---|",
    ]
    for name in (n for n in report["dev"] if report["dev"][n]["n"] or report["test"][n]["n"]):  # rows the set has
        cells = [
            f"{report[s][name]['share']:.3f} (n={report[s][name]['n']}, 95 % CI {report[s][name]['ci95'][0]:.2f}–{report[s][name]['ci95'][1]:.2f})"
            for s in ("dev", "test")
        ]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    lines += [
        "",
        f"Latency per question (ms, the extractive steps without the service's graph, window vectors from the embedding cache, so not the "
        f"service's): p50 {report['latency_ms']['p50']}, p95 {report['latency_ms']['p95']}.",
    ]
    return "\n".join(lines)


SETS = ("sanguo", "handbook", "medical", "cmrc", "cmrc-small", *MODERN)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.extractive_eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", dest="question_set", default="sanguo", help=f"one or more of {','.join(SETS)}, or all")
    parser.add_argument("--index", help="alias (or index) holding the corpus (default: the retrieval evaluation's)")
    parser.add_argument("--prefix", default="eval", help="of the default indices' names (a shared Elasticsearch)")
    parser.add_argument("--book", type=Path, help="the book (default: data/sanguo/sanguo_yanyi.txt)")
    parser.add_argument("--save", type=Path, help="write the report here instead of bench/results and the docs")
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="also judge every question at the thresholds (and alias weight) the base chooses on its own "
        + "self-made questions (evaluation/calibration.py; no question of the set is used)",
    )
    parser.add_argument(
        "--profile",
        help="answer with this text profile ('none': the default path) instead of the one the base stores",
    )
    return parser


def dataset_of(question_set: str, book: Path | None, prefix: str) -> Dataset:
    """The corpus a set asks about, chunked as the retrieval evaluation indexes it."""
    dataset = load_sanguo(path=book) if question_set == "sanguo" and book else load_named(question_set)
    return replace(dataset, prefix=prefix)


def ensure_index(es: Elasticsearch, settings: Settings, embedder: CachedEmbedder, dataset: Dataset) -> None:
    """`settings.es_index` built from `dataset` by the indexing job, unless it is there already."""
    if concrete_indices(es, settings.es_index):
        return
    index_documents(
        es,
        dataset.documents,
        alias=settings.es_index,
        visible=ALL_DOCUMENTS,
        embedder=embedder,
        tokenizer=get_tokenizer(settings.jieba_user_dict),
        options=IndexOptions.from_settings(settings),
        progress=True,
    )


UNPUBLISHED_RUNS = {"cmrc"}


def publish(report: dict[str, Any], question_set: str) -> None:
    """bench/results and the docs' table (another set's under its own file names and markers)."""
    suffix = "" if question_set == "sanguo" else f"_{question_set}"
    marker = "extractive-eval" if question_set == "sanguo" else f"extractive-eval-{question_set}"
    table = markdown(report)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if question_set in UNPUBLISHED_RUNS:  # thousands of answers: `--save` keeps them
        report = {**report, "runs": f"left out ({len(report['runs'])}; --save FILE keeps them)"}
    (RESULTS / f"extractive_eval{suffix}.json").write_text(
        json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8"
    )
    (RESULTS / f"extractive_eval{suffix}.md").write_text(table + "\n", encoding="utf-8")
    docs = REPO / "docs" / "workflow.md"
    if f"<!-- {marker}:begin -->" in docs.read_text(
        encoding="utf-8"
    ):  # the sets the docs show; others in bench/results
        update_docs(table, f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->", docs)


def evaluate_set(question_set: str, args: argparse.Namespace, embedder: CachedEmbedder) -> dict[str, Any]:
    """One set's report: its index (the retrieval evaluation's service index unless `--index`), every
    question answered, thresholds tuned on dev for 三国 and the service's elsewhere."""
    dataset = dataset_of(question_set, args.book, args.prefix)
    settings = Settings()
    es = create_client(settings)
    if args.index:
        settings = Settings(es_index=args.index)
        ensure_index(es, settings, embedder, dataset)
    else:
        settings = Settings(es_index=ensure_indexed(es, dataset, SERVICE, embedder, settings, reindex=False))
    index = settings.es_index
    chunks = indexed_chunks(es, index)
    text = "\x1e".join(chunks)
    questions = load_questions(question_set)
    askable = [q for q in questions if q.get("evidence") is None or q["evidence"] in text]
    retriever = Retriever(
        es, embedder, get_tokenizer(settings.jieba_user_dict), RetrievalParams.from_settings(settings)
    )
    profile = None if args.profile is None else profile_named("" if args.profile == "none" else args.profile)
    runs = run_all(retriever, settings, askable, profile)
    dev = [r for r in runs if r["split"] == "dev"]
    chosen = tune(dev) if question_set == "sanguo" else defaults(settings)
    thresholds = (chosen["min_similarity"], chosen["min_coverage"], chosen["max_unknown_terms"])
    calibrated = self_calibrated(retriever, settings, askable, runs, profile) if args.calibrate else None
    return {
        "calibrated": calibrated,
        "set": question_set,
        "index": index,
        "chunks": len(chunks),
        "questions": len(askable),
        "skipped": len(questions) - len(askable),
        "machine": machine(es, embedder),
        "chosen": chosen,
        "profile": "(the base's)" if args.profile is None else args.profile,
        "dev": figures(dev, *thresholds),
        "test": figures([r for r in runs if r["split"] == "test"], *thresholds),
        "latency_ms": {"p50": percentile([r["ms"] for r in runs], 50), "p95": percentile([r["ms"] for r in runs], 95)},
        "runs": runs,
    }


def self_calibrated(
    retriever: Retriever,
    settings: Settings,
    questions: list[dict[str, Any]],
    runs: list[dict[str, Any]],
    profile: TextProfile | None,
) -> dict[str, Any]:
    """The base calibrated on its own self-made questions (none of `questions`), and the set's figures at
    the chosen thresholds: the questions run again only when the chosen alias weight differs."""
    started = time.perf_counter()
    calibration = calibrate(retriever, Scope.whole(settings.es_index), settings)
    seconds = round(time.perf_counter() - started, 1)
    if calibration.alias_weight is not None and calibration.alias_weight != retriever.params.alias_weight:
        params = replace(retriever.params, alias_weight=calibration.alias_weight)
        runs = run_all(
            Retriever(retriever.es, retriever.embedder, retriever.tokenizer, params), settings, questions, profile
        )
    chosen = (calibration.min_similarity, calibration.min_coverage, settings.extractive_max_unknown_terms)
    return {
        "calibration": asdict(calibration),
        "seconds": seconds,
        "dev": figures([r for r in runs if r["split"] == "dev"], *chosen),
        "test": figures([r for r in runs if r["split"] == "test"], *chosen),
    }


SUMMARY = {  # the figures of the per-corpus table, by their names in `figures`
    "answerable quoted": "answerable_quotes_evidence",
    "answerable judged answered": "answerable_judged_answered",
    "paraphrased judged answered": "answerable_paraphrase_judged_answered",
    "should refuse: admitted": "unanswerable_says_unconfirmed",
    "false premise admitted": "unanswerable_false_premise_says_unconfirmed",
    "conflict: both sides quoted": "conflict_both_sides_quoted",
}


def summary(reports: list[dict[str, Any]]) -> str:
    """Every set side by side: the main figures, dev and test, with Wilson 95 % intervals (and, after
    `--calibrate`, at the base's self-calibrated thresholds)."""
    lines = ["| corpus | thresholds | split | " + " | ".join(SUMMARY) + " |", "|---|---|---|" + "---|" * len(SUMMARY)]
    for report in reports:
        versions = [("defaults", report)]
        if calibrated := report.get("calibrated"):
            chosen = calibrated["calibration"]
            versions.append((f"self-calibrated {chosen['min_similarity']}/{chosen['min_coverage']}", calibrated))
        for (name, figures_of), split in product(versions, ("dev", "test")):
            cells = []
            for figure in SUMMARY.values():
                found = figures_of[split][figure]
                low, high = found["ci95"]
                cells.append(f"{found['share']:.3f} [{low:.2f}, {high:.2f}] ({found['n']})" if found["n"] else "-")
            lines.append(f"| {report['set']} | {name} | {split} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    sets = SETS if args.question_set == "all" else tuple(args.question_set.split(","))
    if unknown := [name for name in sets if name not in SETS]:
        raise SystemExit(f"unknown set(s) {unknown}: use {', '.join(SETS)} or all")
    settings = Settings()
    embedder = CachedEmbedder(load_embedder(settings.embedder, settings), cache_path(settings))
    reports = []
    for question_set in sets:
        report = evaluate_set(question_set, args, embedder)
        print(markdown(report))
        if args.save:  # a trial (another setting on dev): the published figures stay as they are
            path = args.save if len(sets) == 1 else args.save.with_name(f"{args.save.stem}_{question_set}.json")
            path.write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
        else:
            publish(report, question_set)
        reports.append(report)
    table = summary(reports)
    print(table)
    if not args.save and len(sets) > 1:
        (RESULTS / "extractive_eval_corpora.md").write_text(table + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
