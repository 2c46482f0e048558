"""Soak: the whole service under a mixed load for a bounded time, on the whole book.

    python -m bench.soak                         # 30 minutes at concurrency 8
    python -m bench.soak --minutes 5 --update-docs

1. Indexes 《三国演义》 whole into the scratch alias `soak-sanguo` (never `kb`; idempotent, vectors
   cached) and starts `python -m service` in its own process, without a model (answers are
   extractive), with its own jobs, judgements and question-set indices (`soak-*`).
2. `--concurrency` clients send a weighted mix for `--minutes`: search (every mode), compare,
   query, OpenAI chat, uploads of texts into a second scratch base, deletes of those documents,
   document lists, and an evaluation of the book's question set (one at a time: a 409 while one
   runs is the contract, and counted apart).
3. Reports the 5xx (the goal: 0), every other non-2xx by kind, p50/p95 per kind, and the
   service's resident memory after a warm-up and at the end (the goal: within 10 %); the JSON
   goes to bench/results/soak/, the table (with `--update-docs`) into docs/reliability.md.
"""

import argparse
import asyncio
import json
import os
import random
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.load_test import build_index, latency_summary
from bench.retrieval_eval import REPO, RESULTS, machine, update_docs
from bench.service_process import ServiceProcess
from core.config import Settings
from core.embeddings import load_embedder
from core.store import create_client

RELIABILITY_DOC = REPO / "docs" / "reliability.md"
DOCS_BEGIN, DOCS_END = "<!-- soak:begin -->", "<!-- soak:end -->"
QUESTIONS = REPO / "bench" / "data" / "sanguo_questions.jsonl"
MODES = ("hybrid", "vector", "bm25", "bigram", "standard")


@dataclass
class Tally:
    """What the clients saw, per kind of request."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    failures: Counter[str] = field(default_factory=Counter)  # transport errors, by kind and type
    uploaded: list[tuple[str, str]] = field(default_factory=list)  # (doc id, its job) the deletes may take


@dataclass
class Soak:
    client: httpx.AsyncClient
    book: str
    scratch: str
    questions: list[str]
    tally: Tally
    rng: random.Random

    async def timed(self, kind: str, call: Awaitable[httpx.Response]) -> httpx.Response | None:
        started = time.perf_counter()
        try:
            response = await call
        except httpx.HTTPError as err:
            self.tally.failures[f"{kind}: {type(err).__name__}"] += 1
            return None
        self.tally.latencies[kind].append((time.perf_counter() - started) * 1000)
        self.tally.statuses[kind][response.status_code] += 1
        return response

    def question(self) -> str:
        return self.rng.choice(self.questions)

    async def search(self) -> None:
        body = {"query": self.question(), "mode": self.rng.choice(MODES), "k": 10, "kb": self.book}
        await self.timed("search", self.client.post("/search", json=body))

    async def compare(self) -> None:
        await self.timed("compare", self.client.post("/compare", json={"query": self.question(), "kb": self.book}))

    async def query(self) -> None:
        body = {"question": self.question(), "kb": self.book, "web": False}
        await self.timed("query", self.client.post("/query", json=body))

    async def chat(self) -> None:
        body = {"model": f"kb:{self.book}", "messages": [{"role": "user", "content": self.question()}]}
        await self.timed("chat", self.client.post("/v1/chat/completions", json=body))

    async def upload(self) -> None:
        doc_id = f"soak-{uuid.uuid4().hex[:10]}"
        text = "。".join(self.rng.sample(self.questions, 3)) + "。"
        body = {"texts": [{"text": text, "id": doc_id, "title": "压力测试"}]}
        response = await self.timed("upload", self.client.post(f"/kbs/{self.scratch}/documents", json=body))
        if response is not None and response.status_code == 202:
            self.tally.uploaded.append((doc_id, response.json()["job"]))

    async def delete(self) -> None:
        """A document whose upload is done (its job is asked first, as a client follows it)."""
        if not self.tally.uploaded:
            return await self.documents()
        doc_id, job = self.tally.uploaded.pop(self.rng.randrange(len(self.tally.uploaded)))
        status = await self.timed("job", self.client.get(f"/jobs/{job}"))
        if status is None or status.status_code != 200 or status.json()["state"] not in ("done", "failed"):
            self.tally.uploaded.append((doc_id, job))  # not indexed yet: another time
            return None
        await self.timed("delete", self.client.delete(f"/kbs/{self.scratch}/documents/{doc_id}"))

    async def documents(self) -> None:
        await self.timed("documents", self.client.get(f"/kbs/{self.scratch}/documents"))

    async def evaluate(self) -> None:
        await self.timed("evaluate", self.client.post(f"/kbs/{self.book}/evaluate", json={"dry_run": True}))


# How often each kind is sent (relative weights).
MIX: dict[str, int] = {
    "search": 30,
    "compare": 8,
    "query": 12,
    "chat": 10,
    "upload": 12,
    "delete": 10,
    "documents": 6,
    "evaluate": 2,
}


def rss_mib(pid: int) -> float:
    """The process's resident memory, from /proc (MiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no VmRSS for {pid}")


async def run_mix(soak: Soak, concurrency: int, seconds: float) -> None:
    actions: dict[str, Callable[[], Awaitable[None]]] = {name: getattr(soak, name) for name in MIX}
    names, weights = list(MIX), list(MIX.values())
    deadline = time.monotonic() + seconds

    async def client() -> None:
        while time.monotonic() < deadline:
            await actions[soak.rng.choices(names, weights)[0]]()

    await asyncio.gather(*(client() for _ in range(concurrency)))


async def prepare(client: httpx.AsyncClient, book: str, scratch: str) -> None:
    """The scratch base for uploads, and the book's question set for the evaluations."""
    created = await client.post("/kbs", json={"name": scratch})
    if created.status_code not in (201, 409):
        raise SystemExit(f"cannot create {scratch}: {created.status_code} {created.text}")
    stored = await client.put(f"/kbs/{book}/questions", json={"text": QUESTIONS.read_text(encoding="utf-8")})
    if stored.status_code != 200:
        raise SystemExit(f"cannot store the question set: {stored.status_code} {stored.text}")


def summary(tally: Tally) -> list[dict[str, Any]]:
    rows = []
    for kind in [*MIX, "job"]:
        statuses = tally.statuses.get(kind, Counter())
        rows.append(
            {
                "kind": kind,
                "requests": sum(statuses.values()),
                "statuses": {str(code): n for code, n in sorted(statuses.items())},
                "5xx": sum(n for code, n in statuses.items() if code >= 500),
                **latency_summary(tally.latencies.get(kind, [])),
            }
        )
    return rows


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    memory = report["memory_mib"]
    lines = [
        f"Machine: {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, load average {m['load_average']} at the "
        f"start and {report['load_average_end']} at the end (1, 5, 15 min), Elasticsearch {m['elasticsearch']}, "
        f"{m['date']}. Index `{report['index']}`: {report['chunks']} chunks, no model (extractive answers). "
        f"{report['minutes']:g} minutes at concurrency {report['concurrency']}. Command: `{report['command']}`.",
        "",
        f"**5xx: {report['5xx']}**; transport errors: {sum(report['failures'].values())}. Service memory (RSS) after "
        f"the warm-up {memory['start']} MiB, at the end {memory['end']} MiB ({memory['change_pct']:+.1f} %).",
        "",
        "| kind | requests | statuses | 5xx | p50 ms | p95 ms |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for row in report["kinds"]:
        statuses = ", ".join(f"{code}: {n}" for code, n in row["statuses"].items())
        lines.append(
            f"| {row['kind']} | {row['requests']} | {statuses} | {row['5xx']} | {row['p50_ms']} | {row['p95_ms']} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--index", default="soak-sanguo", help="scratch alias of the book (default %(default)s)")
    parser.add_argument("--minutes", type=float, default=30, help="how long the mix runs (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=8, help="clients at once (default %(default)s)")
    parser.add_argument("--warmup-s", type=float, default=60, help="mixed load before memory is first read")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS / "soak")
    parser.add_argument("--update-docs", action="store_true", help="write the table into docs/reliability.md")
    args = parser.parse_args(argv)
    if args.index == "kb":
        raise SystemExit("refusing to soak the knowledge base `kb`: use a scratch alias")
    return args


def service_env(book: str) -> dict[str, str]:
    own = {
        name: f"soak-{name.split('_')[0].lower()}"
        for name in ("JOBS_INDEX", "JUDGEMENTS_INDEX", "QUESTIONS_INDEX", "ANSWERS_INDEX")
    }
    no_model = {"OPENAI_BASE_URL": "", "OPENAI_API_KEY": "", "MODEL_NAME": ""}
    return {**os.environ, **own, **no_model, "ES_INDEX": book, "API_KEYS": "", "LOG_LEVEL": "WARNING"}


async def soak_service(service: ServiceProcess, args: argparse.Namespace, questions: list[str]) -> dict[str, Any]:
    assert service.process is not None
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    async with httpx.AsyncClient(base_url=service.url, limits=limits, timeout=300) as client:
        scratch = f"{args.index}-uploads"
        await prepare(client, args.index, scratch)
        soak = Soak(client, args.index, scratch, questions, Tally(), random.Random(args.seed))
        await run_mix(soak, args.concurrency, args.warmup_s)
        start = rss_mib(service.process.pid)
        soak.tally = Tally()  # the warm-up's figures are not the soak's
        await run_mix(soak, args.concurrency, args.minutes * 60)
        end = rss_mib(service.process.pid)
    kinds = summary(soak.tally)
    return {
        "kinds": kinds,
        "5xx": sum(row["5xx"] for row in kinds),
        "failures": dict(soak.tally.failures),
        "memory_mib": {"start": start, "end": end, "change_pct": round((end - start) / start * 100, 1)},
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    chunks, _test_questions = build_index(args.index, None)
    questions = [json.loads(line)["question"] for line in QUESTIONS.read_text(encoding="utf-8").splitlines() if line]
    settings = Settings()
    es = create_client(settings)
    try:
        report: dict[str, Any] = {
            "command": "python -m bench.soak " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": machine(es, load_embedder(settings.embedder, settings)),
            "index": args.index,
            "chunks": chunks,
            "minutes": args.minutes,
            "concurrency": args.concurrency,
        }
    finally:
        es.close()
    log = REPO / ".cache" / "bench" / "soak-service.log"
    service = ServiceProcess(service_env(args.index), Path.cwd(), log, ready_path="/readyz")
    service.start()
    try:
        report |= asyncio.run(soak_service(service, args, questions))
    finally:
        service.stop()
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    table = markdown(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"soak-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps(report, indent=2, ensure_ascii=False)
    )
    print(table)
    if args.update_docs:
        update_docs(table, DOCS_BEGIN, DOCS_END, RELIABILITY_DOC)
    return 1 if report["5xx"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
