"""A tiny threaded HTTP server on an ephemeral 127.0.0.1 port that records every request."""

import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Response:
    status: int = 200
    body: Any = None  # JSON-serialisable, raw bytes, or an iterable of SSE `data:` payloads
    sse: bool = False
    delay: float = 0.0
    content_type: str = "application/json"


class _Handler(BaseHTTPRequestHandler):
    """Records each request on the server's fake and sends back what the fake scripted."""

    server: "_RecordingServer"

    def log_message(self, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        fake = self.server.fake
        request = Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, None)
        with fake.lock:
            fake.gets.append(request)
        self._send(fake.respond_get(request))

    def do_POST(self) -> None:
        fake = self.server.fake
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        request = Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        with fake.lock:
            fake.requests.append(request)
        try:
            response = fake.respond(request)
        except Exception as err:  # a failing scripted reply: answer 500 and let the test report it
            fake.errors.append(f"{type(err).__name__}: {err}")
            response = Response(500, {"error": {"message": str(err)}})
        if response.delay:
            threading.Event().wait(response.delay)
        try:
            self._send(response)
        except (BrokenPipeError, ConnectionResetError):
            return  # the client gave up (a timeout test)

    def _send(self, response: Response) -> None:
        if response.sse:
            self.send_response(response.status)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for payload in response.body:
                line = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
                self.wfile.write(f"data: {line}\n\n".encode())
                self.wfile.flush()
            self.close_connection = True
            return
        data = (
            response.body
            if isinstance(response.body, bytes)
            else json.dumps(response.body, ensure_ascii=False).encode()
        )
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _RecordingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: "FakeServer") -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class FakeServer:
    """Subclasses implement `respond(request) -> Response` (POST) and may implement `respond_get`;
    GET requests (probes) are recorded apart in `gets`, so `requests` counts the real calls."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.gets: list[Recorded] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self._server = _RecordingServer(self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def respond(self, request: Recorded) -> Response:
        raise NotImplementedError

    def respond_get(self, request: Recorded) -> Response:
        return Response(404, {"error": {"message": f"no route GET {request.path}"}})

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class Script:
    """Replies in order; the last one repeats once the list is exhausted."""

    replies: list[Any] = field(default_factory=list)
    used: int = 0

    def next(self) -> Any:
        reply = self.replies[min(self.used, len(self.replies) - 1)]
        self.used += 1
        return reply


def chunks(text: str, size: int = 3) -> Iterable[str]:
    return (text[i : i + size] for i in range(0, len(text), size))
