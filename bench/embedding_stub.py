"""A local OpenAI-compatible embedding server that sleeps a fixed time per request.

It stands in for a remote embedder (text-embeddings-inference, vLLM) where only latency and
concurrency matter: the throughput benchmark's `--concurrency` sweep and the cluster fault
tests, which need a fast, deterministic embedder. Vectors are derived from a hash of the
text (unit length, `dim` floats), so the same text always gets the same vector; they carry
no meaning. Requests are served in parallel (one thread each), like a real server with
spare capacity, so C requests in flight take one delay, not C.

    python -m bench.embedding_stub --port 8089 --delay 0.5
    EMBEDDER=openai:stub OPENAI_BASE_URL=http://127.0.0.1:8089/v1 OPENAI_API_KEY=x python -m indexing ...
"""

import argparse
import base64
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

DEFAULT_DIM = 384


def stub_vector(text: str, dim: int = DEFAULT_DIM) -> np.ndarray:
    """A deterministic unit vector for `text`."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


class EmbeddingStub:
    """`POST /v1/embeddings` on 127.0.0.1; a context manager; counts requests and texts."""

    def __init__(self, delay: float = 0.0, dim: int = DEFAULT_DIM, port: int = 0) -> None:
        self.delay, self.dim = delay, dim
        self.requests = 0
        self.texts = 0
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/v1"

    def embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        """The answer to one request, after `delay` seconds (whatever the batch size)."""
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        with self._lock:
            self.requests += 1
            self.texts += len(texts)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        time.sleep(self.delay)
        with self._lock:
            self._in_flight -= 1
        as_base64 = body.get("encoding_format") == "base64"  # the openai SDK's default
        data = []
        for i, text in enumerate(texts):
            vector = stub_vector(str(text), self.dim)
            embedding: Any = base64.b64encode(vector.tobytes()).decode() if as_base64 else vector.tolist()
            data.append({"object": "embedding", "index": i, "embedding": embedding})
        usage = {"prompt_tokens": 0, "total_tokens": 0}
        return {"object": "list", "data": data, "model": body.get("model", "stub"), "usage": usage}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                if not self.path.rstrip("/").endswith("/embeddings"):
                    self.send_error(404, "only POST /v1/embeddings")
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                data = json.dumps(stub.embeddings(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def __enter__(self) -> "EmbeddingStub":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--delay", type=float, default=0.5, help="seconds per request")
    parser.add_argument("--dim", type=int, default=DEFAULT_DIM)
    args = parser.parse_args()
    with EmbeddingStub(args.delay, args.dim, args.port) as stub:
        print(stub.base_url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
