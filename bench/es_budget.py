"""A victim's search latency while another tenant attacks Elasticsearch's shared budget (issue 58).

Two bases on one cluster: the victim's and the attacker's, the same first chapters of 《三国演义》. A
service (`python -m service`, the code of `--code`: this checkout, or an older one for "before") is
started with three keys: the victim reads its base, the attacker reads its own, a stranger holds no
role. The victim sends `--requests` hybrid `/search`es one after another, first alone (quiet), then
while `--threads` attackers loop for as long:

- **dify**: Dify's `/retrieval` on the attacker's own base with 1,024 `contains` clauses (32
  conditions of 32 names), within the old caps (a 10.7 KB request);
- **unknown**: the stranger's `/search` naming bases that do not exist.

Each figure is the victim's p50 and p95 and its failures, with the load average beside it. This
module never imports `service`: it talks to it over HTTP, as a client would.

    python -m bench.es_budget --es-url http://127.0.0.1:9200 --label after
    python -m bench.es_budget --es-url http://127.0.0.1:9200 --label before --code /tmp/before
"""

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from elasticsearch import Elasticsearch

from bench.datasets import sanguo_book
from bench.embedding_cache import CachedEmbedder, cache_path
from bench.service_process import ServiceProcess
from core.access import ALL_DOCUMENTS
from core.config import Settings
from core.embeddings import load_embedder
from core.text import get_tokenizer
from indexing.loaders import split_chapters
from indexing.options import IndexOptions
from indexing.pipeline import index_documents

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "es_budget.md"
KEYS = {"victim": "bench-victim", "attacker": "bench-attacker", "stranger": "bench-stranger"}
VICTIM_QUERY = "刘备与关羽张飞结义"


def build_bases(es_url: str, prefix: str, chapters: int) -> tuple[str, str]:
    """The victim's and the attacker's bases (built once; a re-run embeds nothing: EMBEDDING_CACHE)."""
    settings = Settings(_env_file=None, es_url=es_url)
    es = Elasticsearch(es_url, request_timeout=120)
    embedder = CachedEmbedder(load_embedder(settings.embedder, settings), cache_path(settings))
    text = sanguo_book().read_text(encoding="utf-8")
    documents = split_chapters(text, source="sanguo_yanyi.txt", title="三国演义", marks="章回")[:chapters]
    names = (f"{prefix}-victim", f"{prefix}-attacker")
    for name in names:
        index_documents(
            es,
            documents,
            alias=name,
            embedder=embedder,
            tokenizer=get_tokenizer(),
            options=IndexOptions.from_settings(settings),
            visible=ALL_DOCUMENTS,
        )
    return names


def keys_file(victim: str, attacker: str) -> str:
    principals = [
        {"name": "victim", "key": KEYS["victim"], "kbs": {victim: "read"}},
        {"name": "attacker", "key": KEYS["attacker"], "kbs": {attacker: "read"}},
        {"name": "stranger", "key": KEYS["stranger"]},
    ]
    handle, path = tempfile.mkstemp(prefix="es-budget-keys-", suffix=".json")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        json.dump({"principals": principals}, file)
    return path


def dify_attack(url: str, attacker: str) -> Callable[[httpx.Client], int]:
    conditions = [{"name": ["doc_id"] * 32, "comparison_operator": "contains", "value": "赤壁"} for _ in range(32)]
    body = {
        "knowledge_id": attacker,
        "query": "赤壁之战",
        "retrieval_setting": {"top_k": 5},
        "metadata_condition": {"logical_operator": "or", "conditions": conditions},
    }
    headers = {"Authorization": f"Bearer {KEYS['attacker']}"}
    return lambda http: http.post(f"{url}/retrieval", json=body, headers=headers).status_code


def unknown_attack(url: str) -> Callable[[httpx.Client], int]:
    counter = iter(range(10**9))
    headers = {"X-API-Key": KEYS["stranger"]}
    return lambda http: (
        http.post(
            f"{url}/search", json={"query": "刘备", "kb": f"no-such-base-{next(counter)}"}, headers=headers
        ).status_code
    )


def victim_run(url: str, victim: str, requests: int) -> tuple[list[float], int]:
    """Seconds of each of the victim's searches, and how many failed."""
    took, failed = [], 0
    with httpx.Client(headers={"X-API-Key": KEYS["victim"]}, timeout=120) as http:
        for _ in range(requests):
            started = time.perf_counter()
            answer = http.post(f"{url}/search", json={"query": VICTIM_QUERY, "kb": victim, "mode": "hybrid"})
            took.append(time.perf_counter() - started)
            failed += answer.status_code != 200
    return took, failed


def under_attack(
    url: str, victim: str, requests: int, attack: Callable[[httpx.Client], int], threads: int
) -> tuple[list[float], int, dict[int, int]]:
    """The victim's run while `threads` attackers loop; the attackers' answers by status."""
    stop, statuses, lock = threading.Event(), dict[int, int](), threading.Lock()

    def loop() -> None:
        with httpx.Client(timeout=120) as http:
            while not stop.is_set():
                try:
                    status = attack(http)
                except httpx.TimeoutException:
                    status = 0
                with lock:
                    statuses[status] = statuses.get(status, 0) + 1

    workers = [threading.Thread(target=loop, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    time.sleep(1.0)  # the attack is under way before the victim's first request
    try:
        took, failed = victim_run(url, victim, requests)
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=180)
    return took, failed, statuses


def row(label: str, scenario: str, took: list[float], failed: int, extra: str = "") -> str:
    ordered = sorted(took)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    load = Path("/proc/loadavg").read_text().split()[0]
    p50 = statistics.median(took) * 1000
    return f"| {label} | {scenario} | {p50:.0f} | {p95 * 1000:.0f} | {failed}/{len(took)} | {load} | {extra} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--es-url", default=os.environ.get("ES_URL", "http://127.0.0.1:9200"))
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose service is measured")
    parser.add_argument("--label", default="after")
    parser.add_argument("--prefix", default="eval58b-budget")
    parser.add_argument("--chapters", type=int, default=10)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args(argv)
    victim, attacker = build_bases(args.es_url, args.prefix, args.chapters)
    env = {
        **{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "EMBEDDING_CACHE", "LANG")},
        "PYTHONPATH": str(args.code),
        "ES_URL": args.es_url,
        "ES_INDEX": victim,
        "KEYS_FILE": keys_file(victim, attacker),
        "JOBS_INDEX": f"{args.prefix}-jobs",
    }
    service = ServiceProcess(env, args.code, Path(tempfile.gettempdir(), f"{args.prefix}-service.log"))
    service.start()
    rows = []
    try:
        victim_run(service.url, victim, 5)  # warm: the embedder and the base's settings
        took, failed = victim_run(service.url, victim, args.requests)
        rows.append(row(args.label, "quiet", took, failed))
        attacks = {
            "dify 1,024 contains": dify_attack(service.url, attacker),
            "unknown base": unknown_attack(service.url),
        }
        for scenario, attack in attacks.items():
            took, failed, statuses = under_attack(service.url, victim, args.requests, attack, args.threads)
            rows.append(row(args.label, scenario, took, failed, f"attacker answers {statuses}"))
    finally:
        service.stop()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a", encoding="utf-8") as out:
        out.write("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
