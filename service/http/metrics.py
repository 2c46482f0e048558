"""Prometheus metrics of one app: HTTP traffic per endpoint, workflow paths, LLM/web calls, errors.

Each app owns its `CollectorRegistry` (not the process-global one) so several apps in one
process (tests) never clash, and `/metrics` shows exactly this app's figures.
"""

import re
import threading
import time
from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_KB_LABEL = re.compile(r'[{,]kb="((?:[^"\\]|\\.)*)"')
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._tally: dict[str, tuple[int, int]] = {}  # per base: answers, answers rated
        self._lock = threading.Lock()
        self.requests = Counter(
            "rag_http_requests",
            "HTTP requests by endpoint, method and status",
            ["endpoint", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "rag_http_request_duration_seconds",
            "Time to the end of the response, by endpoint",
            ["endpoint", "method"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter(
            "rag_errors",
            "Requests answered with an error, by endpoint and kind",
            ["endpoint", "kind"],
            registry=self.registry,
        )
        self.workflow_paths = Counter(
            "rag_workflow_paths",
            "Answered questions by route and whether the web was used",
            ["route", "web_used"],
            registry=self.registry,
        )
        self.refusals = Counter(
            "rag_refusals",
            "Requests refused for what they sent, by endpoint and reason (body_too_large, question_too_long, ...)",
            ["endpoint", "reason"],
            registry=self.registry,
        )
        self._answer_series()
        self.llm_calls = Counter("rag_llm_calls", "Chat-model calls made by the workflow", registry=self.registry)
        self.web_calls = Counter("rag_web_calls", "Web-search calls made by the workflow", registry=self.registry)
        self.reranks = Counter(
            "rag_rerank",
            "Reranked searches by outcome: applied, or the fused order kept (timeout, error, rate_limited, "
            "malformed, paused)",
            ["outcome"],
            registry=self.registry,
        )
        self.rerank_latency = Histogram(
            "rag_rerank_duration_seconds",
            "Time the reranking stage took",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )

    def record_workflow(self, route: str, web_used: bool, llm_calls: int, web_calls: int) -> None:
        self.workflow_paths.labels(route=route or "unknown", web_used=str(web_used).lower()).inc()
        self.llm_calls.inc(llm_calls)
        self.web_calls.inc(web_calls)

    def record_rerank(self, outcome: str, seconds: float) -> None:
        self.reranks.labels(outcome=outcome).inc()
        self.rerank_latency.observe(seconds)

    def record_error(self, endpoint: str, kind: str) -> None:
        self.errors.labels(endpoint=endpoint, kind=kind).inc()

    def record_refusal(self, endpoint: str, reason: str) -> None:
        self.refusals.labels(endpoint=endpoint, reason=reason).inc()

    def _answer_series(self) -> None:
        """The answer log's series, per base: answers, votes, answers rated and their share."""
        self.answers = Counter("rag_answers", "Answers kept in the answer log, by base", ["kb"], registry=self.registry)
        self.votes = Counter(
            "rag_answer_votes", "Ratings of answers, by base and vote", ["kb", "vote"], registry=self.registry
        )
        self.rated = Counter(
            "rag_answers_rated", "Answers rated at least once, by base", ["kb"], registry=self.registry
        )
        self.rated_share = Gauge(
            "rag_answers_rated_share",
            "Share of this process's answers that were rated, by base",
            ["kb"],
            registry=self.registry,
        )

    def record_answer(self, kb: str) -> None:
        self.answers.labels(kb=kb).inc()
        self._share(kb, answers=1)

    def record_vote(self, kb: str, vote: str, *, first: bool) -> None:
        """A rating (`first`: the answer had none; a new rating replaces the old, and counts as a vote)."""
        self.votes.labels(kb=kb, vote=vote).inc()
        if first:
            self.rated.labels(kb=kb).inc()
        self._share(kb, rated=int(first))

    def _share(self, kb: str, answers: int = 0, rated: int = 0) -> None:
        with self._lock:
            total, done = self._tally.get(kb, (0, 0))
            self._tally[kb] = (total + answers, done + rated)
            total, done = self._tally[kb]
        self.rated_share.labels(kb=kb).set(min(done / total, 1.0) if total else 0.0)

    def render(self, readable: Callable[[str], bool] = lambda kb: True) -> bytes:
        """The registry in Prometheus text, without the series of bases the caller may not read
        (their names are not the caller's to learn)."""
        lines = generate_latest(self.registry).decode().splitlines(keepends=True)
        return "".join(line for line in lines if (kb := _KB_LABEL.search(line)) is None or readable(kb[1])).encode()


def endpoint_label(scope: Scope) -> str:
    """The route template (`/search`), never the raw path, so label values stay few."""
    route = scope.get("route")
    return getattr(route, "path", None) or "unmatched"


class MetricsMiddleware:
    """Pure ASGI (streams pass through untouched): counts and times every HTTP request, and counts a
    413 as a refusal (`body_too_large`) of its route, known by `paths` (the app's fixed paths) when the
    body limit refused it before any route matched."""

    def __init__(self, app: ASGIApp, metrics: Metrics, paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.metrics = metrics
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            endpoint = endpoint_label(scope)
            if status == 413:
                known = scope["path"] if scope["path"] in self.paths else endpoint
                self.metrics.record_refusal(known, "body_too_large")
            self.metrics.requests.labels(endpoint=endpoint, method=scope["method"], status=str(status)).inc()
            self.metrics.latency.labels(endpoint=endpoint, method=scope["method"]).observe(
                time.perf_counter() - started
            )
