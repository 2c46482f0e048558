"""Bounded load test of `POST /search` (hybrid) on loopback, against 《三国演义》.

    python -m bench.load_test                       # 500 requests, concurrency 8, first 30 chapters
    python -m bench.load_test --requests 1000 --chapters 120

1. Makes sure the scratch alias (`load-sanguo`, never `kb`) holds the first `--chapters`
   chapters, through the indexing pipeline (idempotent: unchanged chunks are skipped; vectors
   cached under .cache/).
2. Starts `python -m service` in a subprocess on a free port (so the client's work never
   shares the server's interpreter) and waits for /readyz.
3. Sends `--warmup` requests, then `--requests` more from `--concurrency` workers, stopping
   early at `--max-seconds`; the questions of bench/data/sanguo_questions.jsonl are cycled.
4. Prints one JSON line: throughput, latency percentiles (client-side, ms), errors by kind.
"""

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import httpx

from bench.datasets import load_sanguo
from bench.embedding_cache import CachedEmbedder, cache_path
from bench.latency import percentile
from core.config import Settings
from core.embeddings import load_embedder
from core.store import create_client
from core.text import get_tokenizer
from indexing.options import IndexOptions, Scope
from indexing.pipeline import index_documents


def build_index(alias: str, chapters: int) -> tuple[int, list[str]]:
    """(chunks in the alias, the benchmark questions), after indexing what is missing."""
    settings = Settings()
    dataset = load_sanguo()
    es = create_client(settings)
    try:
        summary = index_documents(
            es,
            dataset.documents[:chapters],
            alias=alias,
            embedder=CachedEmbedder(load_embedder(settings.embedder, settings), cache_path(settings)),
            tokenizer=get_tokenizer(settings.jieba_user_dict),
            options=IndexOptions.from_settings(settings),
            scope=Scope(prune=True),
            progress=True,
        )
    finally:
        es.close()
    if summary.failed:
        raise SystemExit(f"indexing {alias} failed for {summary.failed} chunks; see the log above")
    return summary.chunks, [query.text for query in dataset.queries]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_service(alias: str, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "ES_INDEX": alias, "API_KEYS": "", "LOG_LEVEL": "WARNING"}
    return subprocess.Popen([sys.executable, "-m", "service", "--port", str(port)], env=env)


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the service exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the service at {url} was not ready within {timeout:g} s")


async def run_load(
    url: str, questions: list[str], requests: int, concurrency: int, warmup: int, k: int, max_seconds: float
) -> dict[str, Any]:
    latencies: list[float] = []
    took: list[float] = []  # the retriever's own time per request (embedding + ES), from the response
    errors: Counter[str] = Counter()
    sent = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def one(i: int) -> tuple[float, float]:
            started = time.perf_counter()
            response = await client.post(
                "/search", json={"query": questions[i % len(questions)], "mode": "hybrid", "k": k}
            )
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
        "requests": sent,
        "ok": len(latencies),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "stopped_early": sent < requests,
        "seconds": round(wall, 2),
        "throughput_rps": round(len(latencies) / wall, 2) if wall else 0.0,
        **latency_figures(latencies),
        "retriever_p50_ms": round(statistics.median(took), 1) if took else None,
    }


def latency_figures(latencies: list[float]) -> dict[str, float | None]:
    """Percentiles, maximum, mean and tail ratio of the request latencies (ms)."""
    ordered = sorted(latencies)
    p50 = percentile(ordered, 50) if ordered else float("nan")
    p95 = percentile(ordered, 95) if ordered else float("nan")
    return {
        "p50_ms": round(p50, 1),
        "p95_ms": round(p95, 1),
        "p99_ms": round(percentile(ordered, 99), 1) if ordered else None,
        "max_ms": round(ordered[-1], 1) if ordered else None,
        "mean_ms": round(statistics.fmean(ordered), 1) if ordered else None,
        "p95_over_p50": round(p95 / p50, 2) if ordered else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load_test", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--index", default="load-sanguo", help="scratch alias to index and query (default %(default)s)")
    parser.add_argument("--chapters", type=int, default=30, help="first N chapters of 三国演义 (default %(default)s)")
    parser.add_argument("--requests", type=int, default=500, help="measured requests (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent clients (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=16, help="unmeasured requests first (default %(default)s)")
    parser.add_argument("--k", type=int, default=10, help="hits per search (default %(default)s)")
    parser.add_argument(
        "--max-seconds", type=float, default=600, help="stop sending after this long (default %(default)s)"
    )
    args = parser.parse_args(argv)
    if args.index == "kb":
        raise SystemExit("refusing to load-test the knowledge base `kb`: use a scratch alias")

    chunks, questions = build_index(args.index, args.chapters)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    service = start_service(args.index, port)
    try:
        wait_ready(url, service)
        result = asyncio.run(
            run_load(url, questions, args.requests, args.concurrency, args.warmup, args.k, args.max_seconds)
        )
    finally:
        service.terminate()
        service.wait(30)
    report = {
        "index": args.index,
        "chapters": args.chapters,
        "chunks": chunks,
        "concurrency": args.concurrency,
        "k": args.k,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        **result,
    }
    print(json.dumps(report, ensure_ascii=False))
    return 0 if result["errors"] == 0 and not result["stopped_early"] else 1


if __name__ == "__main__":
    sys.exit(main())
