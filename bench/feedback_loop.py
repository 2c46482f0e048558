"""Learning from ratings, simulated end to end: do ratings of the dev questions improve the test split?

    python -m bench.feedback_loop [--dataset medical] [--out bench/results/feedback_loop]

1. The dataset (bench/datasets.py) is indexed into a base of its own (`bench-feedback-<name>`).
2. `python -m service` runs on it (no model: extractive answers; its own jobs, judgement, question
   and answer indices). Each **dev** question is asked (`POST /query`) and rated as a user would:
   up when the answer cites a relevant chunk, down with a relevant chunk as "the right passage"
   when it does not.
3. The loop, as an admin runs it: every rated answer is accepted into the base's question set
   (`POST /kbs/{kb}/answers/{id}/accept`: the picked passage, or an upvote's cited chunks), then
   the set is evaluated (`POST /kbs/{kb}/evaluate`), which chooses the fusion on the set's own dev
   part and stores it with the base.
4. The dataset's **test** questions, never rated, are searched (`Retriever.ranked_lists`) and scored
   with the fusion before (the service default) and after (the stored choice): each metric's mean,
   the paired-bootstrap 95 % interval of after minus before, and Wilson intervals of R@1 and R@5.

Writes `<out>.json` and `<out>.md`. It never imports `service`: it talks to the service over HTTP.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from elasticsearch import Elasticsearch
from tqdm import tqdm

from bench.datasets import Dataset, Query, load_named
from bench.extractive_eval import wilson
from bench.service_process import ServiceProcess
from core.access import ALL_DOCUMENTS, Scope
from core.config import Settings
from core.embeddings import load_embedder
from core.reader import Reader
from core.store import concrete_indices, create_client
from core.text import get_tokenizer
from evaluation.metrics import LIST_DEPTH, LISTS, METRICS, config_of, label, mean_metrics, paired_bootstrap, per_query
from indexing.options import Chunking, IndexOptions
from indexing.pipeline import index_documents
from retrieval.retriever import build_retriever

ROOT = Path(__file__).resolve().parent.parent


def ensure_base(es: Elasticsearch, dataset: Dataset, settings: Settings) -> str:
    """The dataset's own base (indexed again only when its chunk count differs)."""
    alias = f"bench-feedback-{dataset.name}"
    if concrete_indices(es, alias) and Reader(es, Scope.whole(alias)).count() == len(dataset.chunks):
        return alias
    chunking = Chunking(dataset.chunk_size, dataset.chunk_overlap)
    summary = index_documents(
        es,
        dataset.documents,
        alias=alias,
        visible=ALL_DOCUMENTS,
        embedder=load_embedder(settings.embedder, settings),
        tokenizer=get_tokenizer(),
        options=replace(IndexOptions.from_settings(settings), chunking=chunking),
        progress=True,
    )
    if summary.failed or summary.chunks != len(dataset.chunks):
        raise RuntimeError(f"indexing {alias} went wrong: {summary.model_dump_json()}")
    return alias


def rate_dev(client: httpx.Client, kb: str, dev: list[Query]) -> dict[str, Any]:
    """Each dev question asked and rated: up when a relevant chunk is cited, else down with one."""
    counts = {"up": 0, "down": 0, "failed": 0}
    for query in tqdm(dev, desc="ask and rate (dev)", unit="q", file=sys.stderr):
        answer = client.post("/query", json={"question": query.text, "kb": kb, "web": False})
        if answer.status_code != 200:
            counts["failed"] += 1
            continue
        body = answer.json()
        cited = {c["chunk_id"] for c in body["citations"] if c.get("chunk_id")}
        rating = {"vote": "up"} if cited & query.relevant else {"vote": "down", "chunk_id": sorted(query.relevant)[0]}
        rated = client.post(f"/answers/{body['answer_id']}/feedback", json=rating)
        counts[rating["vote"] if rated.status_code == 200 else "failed"] += 1
    return counts


def accept_and_evaluate(client: httpx.Client, kb: str) -> dict[str, Any]:
    """The admin's part: every rated answer accepted into the set, then the set evaluated (stored)."""
    answers = client.get(f"/kbs/{kb}/answers", params={"kind": "all", "size": 200}).json()["answers"]
    accepted = 0
    for answer in answers:
        if answer["rating"] is not None:
            accepted += client.post(f"/kbs/{kb}/answers/{answer['id']}/accept", json={}).status_code == 200
    status_url = client.post(f"/kbs/{kb}/evaluate", json={}).json()["status_url"]
    while (status := client.get(status_url).json())["status"] not in ("done", "failed"):
        time.sleep(2)
    if status["status"] != "done":
        raise RuntimeError(f"the evaluation failed: {status['error']}")
    return {"accepted": accepted, "status": status}


def test_figures(
    retriever: Any, kb: str, test: list[Query], before: dict[str, Any], after: dict[str, Any]
) -> dict[str, Any]:
    """The test questions under the fusion before and after: means, the paired-bootstrap interval of
    after minus before, and Wilson intervals of R@1 and R@5."""
    lists = {
        q.id: retriever.ranked_lists(Scope.whole(kb), q.text, LISTS, LIST_DEPTH)
        for q in tqdm(test, desc="search (test)", unit="q", file=sys.stderr)
    }
    old, new = per_query(test, lists, before)["hybrid"], per_query(test, lists, after)["hybrid"]
    figures: dict[str, Any] = {"n": len(test), "before": mean_metrics(old), "after": mean_metrics(new), "change": {}}
    for metric in METRICS:
        diff, low, high = paired_bootstrap([q[metric] for q in new], [q[metric] for q in old])
        figures["change"][metric] = {"diff": diff, "interval": [low, high]}
    for metric in ("R@1", "R@5"):
        figures[f"wilson {metric}"] = {
            name: wilson(int(sum(q[metric] for q in rows)), len(rows))
            for name, rows in (("before", old), ("after", new))
        }
    return figures


def markdown(report: dict[str, Any]) -> str:
    test = report["test"]
    lines = [
        f"# Feedback loop on `{report['dataset']}`",
        "",
        f"Dev questions rated: {report['ratings']['up']} up, {report['ratings']['down']} down "
        f"({report['ratings']['failed']} failed); {report['accepted']} accepted into the question set. "
        f"Fusion before: {report['before']['label']}; chosen on the set's dev part and stored: {report['after']['label']}. "
        f"Load average {report['load']}.",
        "",
        f"## Test split ({test['n']} questions, never rated)",
        "",
        "| metric | before | after | after - before (paired bootstrap 95 %) |",
        "|---|---:|---:|---|",
    ]
    for metric in METRICS:
        change = test["change"][metric]
        low, high = change["interval"]
        lines.append(
            f"| {metric} | {test['before'][metric]:.3f} | {test['after'][metric]:.3f} | "
            f"{change['diff']:+.3f} [{low:+.3f}, {high:+.3f}] |"
        )
    for metric in ("R@1", "R@5"):
        w = test[f"wilson {metric}"]
        lines.append("")
        lines.append(
            f"Wilson 95 % of {metric}: before [{w['before'][0]:.3f}, {w['before'][1]:.3f}], after [{w['after'][0]:.3f}, {w['after'][1]:.3f}]"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.feedback_loop", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="medical", help="cmrc, sanguo or medical")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "feedback_loop")
    args = parser.parse_args(argv)
    settings = Settings()
    es = create_client(settings)
    dataset = load_named(args.dataset)
    kb = ensure_base(es, dataset, settings)
    run = f"bench-feedback-{int(time.time())}"
    own = {
        name: f"{run}-{name.split('_')[0].lower()}"
        for name in ("JOBS_INDEX", "JUDGEMENTS_INDEX", "QUESTIONS_INDEX", "ANSWERS_INDEX")
    }
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LANG": "C.UTF-8",
        "ES_URL": settings.es_url,
        "ES_INDEX": kb,
        "ANSWER_MODE": "extractive",
        **own,
    }
    workdir = Path(tempfile.mkdtemp(prefix="feedback-loop-"))  # its log too
    service = ServiceProcess(env, workdir, workdir / "service.log", ready_path="/readyz")
    try:
        service.start()
        with httpx.Client(base_url=service.url, timeout=300) as client:
            ratings = rate_dev(client, kb, [q for q in dataset.queries if q.split == "dev"])
            loop = accept_and_evaluate(client, kb)
    finally:
        service.stop()
        for index in own.values():
            es.options(ignore_status=404).indices.delete(index=index)
    retriever = build_retriever(settings, es, load_embedder(settings.embedder, settings))
    before, after = config_of(retriever.params), loop["status"]["report"]["chosen"]
    test = test_figures(retriever, kb, [q for q in dataset.queries if q.split == "test"], before, after)
    report = {
        "dataset": dataset.name,
        "ratings": ratings,
        "accepted": loop["accepted"],
        "question_set": loop["status"]["report"]["questions"],
        "before": before | {"label": label(before)},
        "after": after,
        "test": test,
        "load": os.getloadavg()[0],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, ensure_ascii=False, indent=1, default=list), "utf-8")
    args.out.with_suffix(".md").write_text(markdown(report), "utf-8")
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
