"""A stand-in rerank endpoint (Cohere's shape, `POST /v1/rerank`) answering in a fixed time by a known rule.

    python -m bench.rerank_stub --delay-ms 50 --rule overlap             # prints its RERANK_BASE_URL
    python -m bench.rerank_stub --rule oracle --oracle relevant.jsonl    # relevant passages first

Rules: `overlap` (distinct query characters the text shares), `oracle` (1 when the text is part of
one of the question's relevant passages, from a JSONL file of `{"question", "relevant": [texts]}`,
else 0) and `reverse` (the oracle upside down). Used by `bench.rerank_latency` (added latency at a
fixed reranker time) and for the evaluation run of docs/retrieval.md ("Reranking").
"""

import argparse
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Rule = Callable[[str, str], float]


def overlap(query: str, text: str) -> float:
    return float(len(set(query) & set(text)))


def oracle_rule(path: Path, reverse: bool = False) -> Rule:
    relevant: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        relevant[item["question"]] = item["relevant"]

    def rule(query: str, text: str) -> float:
        hit = float(any(text in passage for passage in relevant.get(query, [])))
        return 1.0 - hit if reverse else hit

    return rule


class RerankStub:
    """The endpoint on 127.0.0.1 (an ephemeral port unless given), in a daemon thread."""

    def __init__(self, rule: Rule, delay_s: float = 0.0, port: int = 0) -> None:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as rerank servers (uvicorn, TEI) answer
            # Headers and body leave in two writes: with Nagle's algorithm on, the body waited for the
            # client's delayed ACK of the headers, 40 ms on Linux, which was counted as the stage's.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                time.sleep(stub.delay_s)
                scores = [(rule(body["query"], text), i) for i, text in enumerate(body["documents"])]
                ranked = sorted(scores, key=lambda pair: (-pair[0], pair[1]))
                data = json.dumps({"results": [{"index": i, "relevance_score": s} for s, i in ranked]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.delay_s = delay_s
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.rerank_stub", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--rule", choices=["overlap", "oracle", "reverse"], default="overlap")
    parser.add_argument("--oracle", type=Path, help="JSONL of {question, relevant: [texts]} (oracle, reverse)")
    args = parser.parse_args()
    if args.rule != "overlap" and args.oracle is None:
        parser.error(f"--rule {args.rule} needs --oracle FILE")
    rule = overlap if args.rule == "overlap" else oracle_rule(args.oracle, reverse=args.rule == "reverse")
    stub = RerankStub(rule, args.delay_ms / 1000, args.port)
    print(f"RERANK_BASE_URL={stub.base_url}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
