"""Upload-to-searchable time over HTTP against `python -m indexing`, the same book, one run.

The same file (the first N chapters of 《三国演义》, `--chapters`) is indexed twice into fresh
bases with the same chunking (the defaults, 800/50):

- **CLI**: `python -m indexing FILE --index A`, timed from process start to exit (the CLI
  refreshes before it exits, so its chunks are searchable then);
- **HTTP**: a running `python -m service` (started before the clock, as a deployed service
  is), `POST /kbs` of a base, then the clock runs from `POST /kbs/B/documents` until
  `GET /kbs/B` counts as many chunks as the CLI wrote (counted chunks are searchable); each
  document is then found by a search of its title.

The ratio HTTP / CLI says what the service's background job costs over the command; both
run the same loaders and pipeline, so it should be close to 1. Bases are deleted afterwards, whatever happened.
This module never imports `service`: it talks to it over HTTP, as a client would.

    python -m bench.upload_time --chapters 20
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.datasets import sanguo_book
from bench.service_process import ServiceProcess
from core.config import Settings

RESULTS = Path(__file__).resolve().parent / "results" / "upload_time.json"
_NEXT_CHAPTER = "第{}章"


def first_chapters(book: Path, chapters: int, folder: Path) -> Path:
    """The book's text up to the heading of chapter `chapters + 1`, as a file of its own."""
    text = book.read_text(encoding="utf-8")
    heading = re.search(rf"^{_NEXT_CHAPTER.format(chapters + 1)} ", text, flags=re.M)
    path = folder / f"sanguo_first_{chapters}.txt"
    path.write_text(text[: heading.start()] if heading else text, encoding="utf-8")
    return path


def run_cli(path: Path, alias: str, env: dict[str, str], workdir: Path) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "indexing", str(path), "--index", alias, "--no-progress", "--json"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"python -m indexing failed ({done.returncode}): {done.stderr[-2000:]}")
    summary = json.loads(done.stdout.splitlines()[-1])
    return {"wall_s": round(wall, 2), "chunks": summary["chunks"], "indexed": summary["indexed"], "summary": summary}


def listed_documents(client: httpx.Client, kb: str) -> list[dict[str, Any]]:
    """Every document `GET /kbs/{kb}/documents` lists, page after page."""
    documents: list[dict[str, Any]] = []
    params: dict[str, Any] = {"size": 100}
    while True:
        page = client.get(f"/kbs/{kb}/documents", params=params).json()
        documents += page["documents"]
        if page["next"] is None:
            return documents
        params["after"] = page["next"]


def run_http(service: ServiceProcess, path: Path, kb: str, chunks: int) -> dict[str, Any]:
    """From the upload request until the base counts all `chunks` (what the CLI wrote).

    A chunk counts once a refresh made it visible to search. Afterwards (off the clock) each
    document is searched by its title in the base, so "searchable" is checked, not assumed.
    """
    with httpx.Client(base_url=service.url, timeout=120) as client:
        client.post("/kbs", json={"name": kb}).raise_for_status()
        started = time.perf_counter()
        accepted = client.post(f"/kbs/{kb}/documents", files=[("files", (path.name, path.read_bytes()))])
        accepted.raise_for_status()
        answered = time.perf_counter() - started
        job = accepted.json()["job"]
        while (status := client.get(f"/jobs/{job}").json())["state"] not in ("done", "failed"):
            time.sleep(0.2)
        if status["state"] == "failed":
            raise RuntimeError(f"the upload job failed: {status}")
        done = time.perf_counter() - started
        while (counted := client.get(f"/kbs/{kb}").json()["chunks"]) < chunks:
            if time.perf_counter() - started > 3600:
                raise RuntimeError(f"after an hour the base counts {counted} of {chunks} chunks")
            time.sleep(0.1)
        searchable = time.perf_counter() - started
        documents = listed_documents(client, kb)
        for document in documents:
            body = {"query": document["title"], "kb": kb, "mode": "bm25", "k": 10}
            found = {hit["doc_id"] for hit in client.post("/search", json=body).json()["hits"]}
            if document["doc_id"] not in found:
                raise RuntimeError(f"{document['doc_id']} is listed but a search of its title misses it")
    return {
        "accepted_s": round(answered, 3),
        "job_done_s": round(done, 2),
        "searchable_s": round(searchable, 2),
        "documents": len(documents),
        "counts": status["counts"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.upload_time", description=__doc__.splitlines()[0])
    parser.add_argument("--chapters", type=int, default=20, help="the first N chapters (the same N for both)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    settings = Settings()
    run_id = uuid.uuid4().hex[:8]
    cli_alias, http_kb = f"bench-upload-cli-{run_id}", f"bench-upload-http-{run_id}"
    with tempfile.TemporaryDirectory(prefix="upload-time-") as scratch:
        folder = Path(scratch)
        path = first_chapters(sanguo_book(), args.chapters, folder)
        env = {
            **os.environ,
            "ES_URL": settings.es_url,
            "ES_INDEX": cli_alias,
            "UPLOAD_SPOOL": str(folder / "spool"),
            "JOBS_INDEX": f"bench-upload-jobs-{run_id}",
            "LOG_LEVEL": "WARNING",
        }
        service = ServiceProcess(env, folder, folder / "service.log")
        service.start()  # before the clock, as a deployed service is: the CLI below is the only other load
        try:
            cli = run_cli(path, cli_alias, env, folder)
            http = run_http(service, path, http_kb, chunks=cli["chunks"])
        finally:
            with httpx.Client(base_url=service.url, timeout=120) as client:
                for kb in (cli_alias, http_kb):
                    client.delete(f"/kbs/{kb}")
            service.stop()
            httpx.delete(f"{settings.es_url.split(',')[0]}/{env['JOBS_INDEX']}", timeout=30)
    result = {
        "chapters": args.chapters,
        "embedder": settings.embedder,
        "cli": cli,
        "http": http,
        "ratio_http_over_cli": round(http["searchable_s"] / cli["wall_s"], 3),
        "load_average": [round(load, 2) for load in os.getloadavg()],
        "cpus": os.cpu_count(),
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
