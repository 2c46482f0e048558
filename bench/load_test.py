"""Load test of `POST /search` over HTTP: vector and hybrid at several concurrencies, in one run.

    python -m bench.load_test                                   # whole book, concurrency 1,4,8
    python -m bench.load_test --index perf-sanguo --requests 300 --update-docs

1. Makes sure the scratch alias (`load-sanguo`, never `kb`) holds 《三国演义》 (the whole book,
   or the first `--chapters`), through the indexing pipeline (idempotent: unchanged chunks are
   skipped; vectors cached under .cache/).
2. Starts `python -m service` in a subprocess on a free port (so the client's work never
   shares the server's interpreter) and waits for /readyz; with `--url`, uses that service
   instead (e.g. another checkout's, for before/after figures).
3. Times the retriever alone first (`Retriever.search` in this process, one query at a time,
   the service idle): the floor the HTTP figures are compared with.
4. For each concurrency and mode: `--warmup` requests, then `--requests` more from
   `--concurrency` keep-alive clients, stopping early at `--max-seconds`; the held-out (test)
   questions of bench/data/sanguo_questions.jsonl are cycled.
5. Prints a table (and with `--update-docs` writes it into docs/scaling.md): req/s,
   p50/p95/p99 (client-side, ms), errors, req/s relative to concurrency 1, and the HTTP p50
   at concurrency 1 over the retriever's own; the JSON report goes to bench/results/.
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.datasets import load_sanguo
from bench.embedding_cache import CachedEmbedder, cache_path
from bench.latency import percentile
from bench.retrieval_eval import REPO, RESULTS, machine, update_docs
from bench.service_process import ServiceProcess
from core.access import ALL_DOCUMENTS, Scope
from core.config import Settings
from core.embeddings import load_embedder
from core.store import create_client
from core.text import get_tokenizer
from indexing.options import IndexOptions, RunScope
from indexing.pipeline import index_documents
from retrieval.retriever import build_retriever

SCALING_DOC = REPO / "docs" / "scaling.md"
DOCS_BEGIN, DOCS_END = "<!-- load-test:begin -->", "<!-- load-test:end -->"


def build_index(alias: str, chapters: int | None) -> tuple[int, list[str]]:
    """(chunks in the alias, the held-out questions), after indexing what is missing."""
    settings = Settings()
    dataset = load_sanguo()
    es = create_client(settings)
    try:
        summary = index_documents(
            es,
            dataset.documents[:chapters],
            alias=alias,
            visible=ALL_DOCUMENTS,
            embedder=CachedEmbedder(load_embedder(settings.embedder, settings), cache_path(settings)),
            tokenizer=get_tokenizer(settings.jieba_user_dict),
            options=IndexOptions.from_settings(settings),
            scope=RunScope(prune=True),
            progress=True,
        )
    finally:
        es.close()
    if summary.failed:
        raise SystemExit(f"indexing {alias} failed for {summary.failed} chunks; see the log above")
    return summary.chunks, [query.text for query in dataset.queries if query.split == "test"]


async def run_load(
    url: str,
    questions: list[str],
    mode: str,
    requests: int,
    concurrency: int,
    warmup: int,
    k: int,
    max_seconds: float,
) -> dict[str, Any]:
    latencies: list[float] = []
    took: list[float] = []  # the retriever's own time per request (embedding + ES), from the response
    errors: Counter[str] = Counter()
    sent = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def one(i: int) -> tuple[float, float]:
            started = time.perf_counter()
            response = await client.post("/search", json={"query": questions[i % len(questions)], "mode": mode, "k": k})
            elapsed = (time.perf_counter() - started) * 1000
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}")
            return elapsed, float(response.json()["took_ms"])

        for i in range(warmup):
            await one(i)

        deadline = time.monotonic() + max_seconds

        async def worker() -> None:
            nonlocal sent
            while sent < requests and time.monotonic() < deadline:
                i = sent
                sent += 1
                try:
                    elapsed, server_ms = await one(warmup + i)
                except (httpx.HTTPError, RuntimeError, ValueError, KeyError) as err:  # counted, never hidden
                    errors[str(err) or type(err).__name__] += 1
                else:
                    latencies.append(elapsed)
                    took.append(server_ms)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started

    return {
        "mode": mode,
        "concurrency": concurrency,
        "requests": sent,
        "ok": len(latencies),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "stopped_early": sent < requests,
        "seconds": round(wall, 2),
        "throughput_rps": round(len(latencies) / wall, 2) if wall else 0.0,
        **latency_summary(latencies),
        "took_p50_ms": round(statistics.median(took), 1) if took else None,
    }


def latency_summary(samples: list[float]) -> dict[str, float | None]:
    """p50/p95/p99/max in ms (nearest rank; None without samples)."""
    if not samples:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(samples)
    summary: dict[str, float | None] = {f"p{q}_ms": round(percentile(ordered, q), 1) for q in (50, 95, 99)}
    summary["max_ms"] = round(ordered[-1], 1)
    return summary


def time_retriever(alias: str, questions: list[str], mode: str, requests: int, warmup: int, k: int) -> dict[str, Any]:
    """`Retriever.search` in this process, one query at a time: the retriever's own latency."""
    settings = Settings()
    es = create_client(settings)
    try:
        retriever = build_retriever(settings, es, load_embedder(settings.embedder, settings))
        for text in questions[:warmup]:
            retriever.search(Scope.whole(alias), text, mode, k)
        samples = []
        for i in range(requests):
            started = time.perf_counter()
            retriever.search(Scope.whole(alias), questions[i % len(questions)], mode, k)
            samples.append((time.perf_counter() - started) * 1000)
    finally:
        es.close()
    return {"mode": mode, "n": len(samples), **latency_summary(samples)}


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"Machine: {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, load average {m['load_average']} at the "
        f"start and {report['load_average_end']} at the end (1, 5, 15 min), Elasticsearch {m['elasticsearch']}, "
        f"embedder `{m['embedder']}`, {m['date']}. Index `{report['index']}`: {report['chunks']} chunks. "
        f"Command: `{report['command']}`. Query batching: window {report['query_batch_window_ms']:g} ms, "
        f"at most {report['query_batch_max']} per call.",
        "",
        "| mode | concurrency | requests | errors | req/s | × concurrency 1 | p50 ms | p95 ms | p99 ms | took p50 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["http"]:
        base = next(r for r in report["http"] if r["mode"] == row["mode"] and r["concurrency"] == 1)
        ratio = row["throughput_rps"] / base["throughput_rps"] if base["throughput_rps"] else float("nan")
        lines.append(
            f"| {row['mode']} | {row['concurrency']} | {row['requests']} | {row['errors']} | {row['throughput_rps']:.1f} "
            f"| {ratio:.2f}× | {row['p50_ms']} | {row['p95_ms']} | {row['p99_ms']} | {row['took_p50_ms']} |"
        )
    lines += ["", "| mode | retriever alone: n | p50 ms | p95 ms | HTTP p50 at concurrency 1 / retriever p50 |"]
    lines.append("|---|---:|---:|---:|---:|")
    for row in report["retriever"]:
        http = next(r for r in report["http"] if r["mode"] == row["mode"] and r["concurrency"] == 1)
        lines.append(
            f"| {row['mode']} | {row['n']} | {row['p50_ms']} | {row['p95_ms']} | {http['p50_ms'] / row['p50_ms']:.2f}× |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load_test", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--index", default="load-sanguo", help="scratch alias to index and query (default %(default)s)")
    parser.add_argument("--chapters", type=int, help="only the first N chapters of 三国演义 (default: the whole book)")
    parser.add_argument("--requests", type=int, default=300, help="measured requests per run (default %(default)s)")
    parser.add_argument("--concurrency", default="1,4,8", help="concurrent clients, one run each (default %(default)s)")
    parser.add_argument("--modes", default="vector,hybrid", help="retrieval modes (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=16, help="unmeasured requests first (default %(default)s)")
    parser.add_argument("--k", type=int, default=10, help="hits per search (default %(default)s)")
    parser.add_argument(
        "--max-seconds", type=float, default=300, help="stop a run after this long (default %(default)s)"
    )
    parser.add_argument("--url", help="load-test this running service (serving --index) instead of starting one")
    parser.add_argument("--out", type=Path, default=RESULTS / "load_test")
    parser.add_argument("--update-docs", action="store_true", help="write the table into docs/scaling.md")
    return parser.parse_args(argv)


def http_runs(args: argparse.Namespace, questions: list[str], levels: list[int], modes: list[str]) -> list[Any]:
    """Every concurrency level and mode against `--url`, or against a service started here on `--index`."""
    service = None
    if args.url:
        url = args.url.rstrip("/")
    else:
        env = {**os.environ, "ES_INDEX": args.index, "API_KEYS": "", "LOG_LEVEL": "WARNING"}
        log = REPO / ".cache" / "bench" / "load_test-service.log"
        service = ServiceProcess(env, Path.cwd(), log, ready_path="/readyz")
        service.start()
        url = service.url
    try:
        return [
            asyncio.run(
                run_load(url, questions, mode, args.requests, concurrency, args.warmup, args.k, args.max_seconds)
            )
            for concurrency in levels
            for mode in modes
        ]
    finally:
        if service is not None:
            service.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.index == "kb":
        raise SystemExit("refusing to load-test the knowledge base `kb`: use a scratch alias")
    levels = [int(c) for c in args.concurrency.split(",")]
    modes = args.modes.split(",")
    if 1 not in levels:
        raise SystemExit("--concurrency must include 1: the other levels are compared with it")

    chunks, questions = build_index(args.index, args.chapters)
    settings = Settings()
    es = create_client(settings)
    try:
        report: dict[str, Any] = {
            "command": "python -m bench.load_test " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": machine(es, load_embedder(settings.embedder, settings)),
        }
    finally:
        es.close()
    report |= {
        "index": args.index,
        "chunks": chunks,
        "k": args.k,
        "query_batch_window_ms": settings.query_batch_window_ms,
        "query_batch_max": settings.query_batch_max,
        "retriever": [
            time_retriever(args.index, questions, mode, args.requests, args.warmup, args.k) for mode in modes
        ],
        "http": http_runs(args, questions, levels, modes),
    }
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    table = markdown(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    args.out.with_suffix(".md").write_text(table + "\n", encoding="utf-8")
    if args.update_docs:
        update_docs(table, DOCS_BEGIN, DOCS_END, SCALING_DOC)
    print(table)
    failed = any(row["errors"] or row["stopped_early"] for row in report["http"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
