"""Reranking the fused hybrid candidates, without ever failing a query.

The top `RERANK_CANDIDATES` fused hits, each as its best passages (`Hit.passages`) or else a
bounded excerpt around its best query match, go to a `Scorer`: a rerank endpoint (`HttpScorer`,
the request shape `RERANK_API` names) or the chat model (`service/llm/rerank.py`). The final score
is `weight * reranker + (1 - weight) * fused`, both min-max normalised over the candidates, so the
weight means the same whatever scale a reranker answers in; ties keep the fused order.

A time-out (`RERANK_TIMEOUT_S`, retries included), an error, a 429 or an answer whose indices are
missing, repeated, out of range or not numbers is a `RerankFailure`: the caller gets the fused
order and a warning. After `RERANK_BREAKER_FAILURES` failures in a row the stage pauses for
`RERANK_BREAKER_PAUSE_S` (no call, the same warning) instead of adding its time-out to every query.
"""

import logging
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import httpx

from core.config import RerankApi, Settings
from core.redact import redact_url
from core.retry import RERANK, retrying
from core.text import bigram_terms
from retrieval.results import Hit, RerankEvidence, RerankUsed

logger = logging.getLogger(__name__)

Outcome = Literal["applied", "timeout", "error", "rate_limited", "malformed", "paused"]
WARNINGS: dict[Outcome, str] = {
    "timeout": "重排序超时",
    "error": "重排序服务出错",
    "rate_limited": "重排序服务限流（HTTP 429）",
    "malformed": "重排序服务的返回无法使用",
    "paused": "重排序服务连续失败，暂停使用中",
}
_SENTENCE = re.compile(r"[^。！？!?；;\n]+[。！？!?；;\n]*|\n+")


class RerankFailure(Exception):
    """A reranker gave no usable scores; `reason` is the outcome, `transient` whether a retry may help."""

    def __init__(self, reason: Outcome, detail: str, *, transient: bool = False) -> None:
        super().__init__(detail)
        self.reason, self.transient = reason, transient


def warning_of(reason: Outcome) -> str:
    """The warning every protocol shows: what happened, and that the fused order was kept."""
    return f"{WARNINGS[reason]}，已按融合排序返回"


class Scorer(Protocol):
    """Scores `texts` for `query` (higher: more relevant), one per text in order, within `timeout_s`;
    anything else is a `RerankFailure`."""

    @property
    def name(self) -> str: ...

    def score(self, query: str, texts: Sequence[str], timeout_s: float) -> list[float]: ...


def scores_by_index(pairs: Sequence[tuple[Any, Any]], count: int) -> list[float]:
    """The score of every text from (index, score) pairs; missing, repeated, out-of-range or
    non-numeric indices, or a score that is not a finite number, make the whole answer unusable."""
    scores: dict[int, float] = {}
    for index, score in pairs:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise RerankFailure("malformed", f"index {index!r} is not one of 0..{count - 1}")
        if index in scores:
            raise RerankFailure("malformed", f"index {index} is repeated")
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise RerankFailure("malformed", f"score {score!r} of index {index} is not a number")
        scores[index] = float(score)
    if len(scores) != count:
        raise RerankFailure("malformed", f"{count - len(scores)} of {count} indices missing")
    return [scores[i] for i in range(count)]


def _results(data: Any, api: RerankApi) -> list[tuple[Any, Any]]:
    """(index, score) pairs of one answer in `api`'s shape."""
    try:
        if api == RerankApi.TEI:
            return [(item["index"], item["score"]) for item in data]
        rows = data["output"]["results"] if api == RerankApi.DASHSCOPE else data["results"]
        return [(item["index"], item["relevance_score"]) for item in rows]
    except (KeyError, TypeError) as err:
        raise RerankFailure("malformed", f"not a {api} rerank answer ({type(err).__name__}: {err})") from err


class HttpScorer:
    """A rerank endpoint: `POST {base}/rerank` (cohere, tei) or DashScope's text-rerank service,
    `batch` texts per request, with `core.retry`'s `RERANK` policy inside the time budget."""

    def __init__(
        self, api: RerankApi, base_url: str, model: str, api_key: str | None, batch: int, client: httpx.Client
    ) -> None:
        self.api, self.model, self.batch, self._client = api, model, batch, client
        base = base_url.rstrip("/")
        self.url = f"{base}/services/rerank/text-rerank/text-rerank" if api == RerankApi.DASHSCOPE else f"{base}/rerank"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    @property
    def name(self) -> str:
        return f"{self.api} {self.model or '-'} at {redact_url(self.url)}"

    def score(self, query: str, texts: Sequence[str], timeout_s: float) -> list[float]:
        deadline = time.monotonic() + timeout_s
        scores: list[float] = []
        for start in range(0, len(texts), self.batch):
            part = texts[start : start + self.batch]
            answer = retrying(RERANK, f"rerank {self.api}", logger)(self._post, self._body(query, part), deadline)
            scores += scores_by_index(_results(answer, self.api), len(part))
        return scores

    def _body(self, query: str, texts: Sequence[str]) -> dict[str, Any]:
        if self.api == RerankApi.TEI:
            return {"query": query, "texts": list(texts), "truncate": True}
        if self.api == RerankApi.DASHSCOPE:
            return {
                "model": self.model,
                "input": {"query": query, "documents": list(texts)},
                "parameters": {"top_n": len(texts), "return_documents": False},
            }
        return {"model": self.model, "query": query, "documents": list(texts), "top_n": len(texts)}

    def _post(self, body: dict[str, Any], deadline: float) -> Any:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RerankFailure("timeout", "no time left for the rerank request")
        try:
            response = self._client.post(self.url, json=body, headers=self._headers, timeout=left)
        except httpx.TimeoutException as err:
            raise RerankFailure("timeout", f"no answer within {left:.2f} s") from err
        except httpx.HTTPError as err:
            raise RerankFailure("error", f"{type(err).__name__}: {err}", transient=True) from err
        if response.status_code == 429:
            raise RerankFailure("rate_limited", "HTTP 429")
        if response.status_code >= 400:
            transient = response.status_code >= 500
            raise RerankFailure("error", f"HTTP {response.status_code}", transient=transient)
        try:
            return response.json()
        except ValueError as err:
            raise RerankFailure("malformed", "the answer is not JSON") from err


def excerpt(hit: Hit, query: str, limit: int) -> str:
    """What the reranker reads of a hit: its best passages (best first) up to `limit` characters,
    else the sentences around the one sharing most query bigrams."""
    text = hit.text
    if hit.passages:
        parts: list[str] = []
        for passage in hit.passages:
            room = limit - sum(len(p) for p in parts)
            if room <= 0:
                break
            parts.append(text[passage.start : passage.end][:room])
        return "…".join(part for part in parts if part)
    if len(text) <= limit:
        return text
    spans = [m.span() for m in _SENTENCE.finditer(text)]
    terms = set(bigram_terms(query))
    best = max(range(len(spans)), key=lambda i: (len(terms & set(bigram_terms(text[spans[i][0] : spans[i][1]]))), -i))
    low = high = best
    while True:  # grow around the best sentence, after it first, while it fits
        grown = False
        for side in (high + 1, low - 1):
            if (
                0 <= side < len(spans)
                and max(spans[high][1], spans[side][1]) - min(spans[low][0], spans[side][0]) <= limit
            ):
                low, high, grown = min(low, side), max(high, side), True
        if not grown:
            break
    return text[spans[low][0] : spans[high][1]][:limit]


def _minmax(values: Sequence[float]) -> list[float]:
    low, high = min(values), max(values)
    return [(v - low) / (high - low) if high > low else 1.0 for v in values]


def combine(hits: Sequence[Hit], scores: Sequence[float], weight: float) -> list[Hit]:
    """The hits in final order: weight * reranker + (1 - weight) * fused score, both min-max
    normalised over the hits; ties keep the fused order. Each hit keeps its fused rank and score."""
    final = [
        weight * r + (1 - weight) * f for f, r in zip(_minmax([h.score for h in hits]), _minmax(scores), strict=True)
    ]
    order = sorted(range(len(hits)), key=lambda i: (-final[i], i))
    return [
        hits[i].model_copy(
            update={
                "score": final[i],
                "rerank": RerankEvidence(score=scores[i], fused_rank=i + 1, fused_score=hits[i].score),
            }
        )
        for i in order
    ]


@dataclass(frozen=True)
class RerankLimits:
    candidates: int
    weight: float  # the service's; a base's evaluation may choose its own
    timeout_s: float
    max_chars: int
    breaker_failures: int
    breaker_pause_s: float

    @classmethod
    def from_settings(cls, settings: Settings) -> "RerankLimits":
        return cls(
            candidates=settings.rerank_candidates,
            weight=settings.rerank_weight,
            timeout_s=settings.rerank_timeout_s,
            max_chars=settings.rerank_max_chars,
            breaker_failures=settings.rerank_breaker_failures,
            breaker_pause_s=settings.rerank_breaker_pause_s,
        )


class Breaker:
    """Failures in a row open it for `pause_s`; the first call after the pause is a trial."""

    def __init__(self, failures: int, pause_s: float, clock: Callable[[], float]) -> None:
        self.failures, self.pause_s, self._clock = failures, pause_s, clock
        self._in_a_row, self._until = 0, 0.0
        self._lock = threading.Lock()

    def open(self) -> bool:
        with self._lock:
            return self._clock() < self._until

    def record(self, ok: bool) -> None:
        with self._lock:
            self._in_a_row = 0 if ok else self._in_a_row + 1
            if self._in_a_row >= self.failures:
                self._until, self._in_a_row = self._clock() + self.pause_s, 0
                logger.warning(
                    "reranker failed %d times in a row: paused for %.0f s (one base)", self.failures, self.pause_s
                )


Listener = Callable[[Outcome, float], None]  # (outcome, seconds the stage took): /metrics


class Reranker:
    """The stage: a scorer, its limits, a breaker per base; `rerank` never raises for the scorer's sake.

    One breaker per (base, endpoint): failures met searching one base (a tenant's requests the
    endpoint refuses) pause reranking for that base only, never for every tenant (issue 58).
    """

    def __init__(self, scorer: Scorer, limits: RerankLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.scorer, self.limits, self._clock = scorer, limits, clock
        self._breakers: dict[str, Breaker] = {}
        self._lock = threading.Lock()
        self.listeners: list[Listener] = []

    def breaker(self, base: str) -> Breaker:
        """The breaker of `base` on this stage's endpoint."""
        with self._lock:
            if base not in self._breakers:
                self._breakers[base] = Breaker(self.limits.breaker_failures, self.limits.breaker_pause_s, self._clock)
            return self._breakers[base]

    def score_hits(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """The scorer's raw score of each hit (its excerpt); a `RerankFailure` otherwise."""
        texts = [excerpt(hit, query, self.limits.max_chars) for hit in hits]
        try:
            return self.scorer.score(query, texts, self.limits.timeout_s)
        except RerankFailure:
            raise
        except Exception as err:  # a scorer's own bug or library error is a failure, not a failed query
            raise RerankFailure("error", f"{type(err).__name__}: {err}") from err

    def rerank(
        self, query: str, hits: list[Hit], k: int, weight: float, base: str = ""
    ) -> tuple[list[Hit], RerankUsed]:
        """The top `k` of `hits` (the fused candidates of `base`) reranked, or in fused order with a warning."""
        used = RerankUsed(reranker=self.scorer.name, weight=weight, candidates=len(hits))
        breaker = self.breaker(base)
        if not hits or weight <= 0:
            return hits[:k], used
        started = time.perf_counter()
        outcome: Outcome = "paused"
        try:
            if breaker.open():
                return hits[:k], used.model_copy(update={"warning": warning_of("paused")})
            try:
                scores = self.score_hits(query, hits)
            except RerankFailure as failure:
                outcome = failure.reason
                logger.warning("reranking failed (%s: %s): fused order kept", failure.reason, failure)
                breaker.record(False)
                return hits[:k], used.model_copy(update={"warning": warning_of(failure.reason)})
            outcome = "applied"
            breaker.record(True)
            took = (time.perf_counter() - started) * 1000
            return combine(hits, scores, weight)[:k], used.model_copy(update={"applied": True, "took_ms": took})
        finally:
            for listener in self.listeners:
                listener(outcome, time.perf_counter() - started)


def build_reranker(settings: Settings, scorer: Scorer | None = None) -> Reranker | None:
    """The stage `RERANKER` names: None for `none`; `llm` needs the service's chat-model `scorer`."""
    if settings.reranker == "none":
        return None
    if scorer is None:
        if settings.reranker != "http":
            logger.warning("RERANKER=llm is the service's chat model: this process does not rerank")
            return None
        if not settings.rerank_base_url:
            raise ValueError("RERANKER=http needs RERANK_BASE_URL")
        key = settings.rerank_api_key.get_secret_value() if settings.rerank_api_key else None
        client = httpx.Client()
        scorer = HttpScorer(
            settings.rerank_api,
            settings.rerank_base_url,
            settings.rerank_model or "",
            key,
            settings.rerank_batch,
            client,
        )
    return Reranker(scorer, RerankLimits.from_settings(settings))
