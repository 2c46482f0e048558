"""A fake rerank endpoint in each API shape the service speaks, scripted per test.

`FakeRerankServer(api, *replies, rule=...)`: `api` is `cohere` (`POST /v1/rerank`, `{model, query,
documents, top_n}` → `{results: [{index, relevance_score}]}`, as Cohere, Jina, Xinference, vLLM and
SiliconFlow answer), `tei` (`POST /v1/rerank`, `{query, texts}` → `[{index, score}]`) or `dashscope`
(`POST /api/v1/services/rerank/text-rerank/text-rerank`, `{model, input: {query, documents}}` →
`{output: {results: [{index, relevance_score}]}}`). Replies, in order with the last repeating:
`RULE` (score every document with `rule(query, text)`, answered best first as real servers do),
`TIMEOUT` (the rule's answer after `delay`), an int HTTP status, `BAD_JSON`, or a callable of the
request body whose value is sent verbatim (a malformed answer).
"""

from collections.abc import Callable
from typing import Any

from tests.fakes.server import FakeServer, Recorded, Response, Script

RULE = "rule"
TIMEOUT = "timeout"
BAD_JSON = "bad-json"
API_KEY = "test-rerank-key"
PATHS = {"cohere": "/v1/rerank", "tei": "/v1/rerank", "dashscope": "/api/v1/services/rerank/text-rerank/text-rerank"}

Rule = Callable[[str, str], float]


def shared_characters(query: str, text: str) -> float:
    """The default rule: how many distinct characters of the query the text holds."""
    return float(len(set(query) & set(text)))


class FakeRerankServer(FakeServer):
    def __init__(self, api: str = "cohere", *replies: Any, rule: Rule = shared_characters, delay: float = 0.0) -> None:
        super().__init__()
        self.api, self.rule, self.delay = api, rule, delay
        self.script = Script(list(replies) or [RULE])

    @property
    def base_url(self) -> str:
        """What `RERANK_BASE_URL` is set to (the client appends `/rerank` or DashScope's path)."""
        return f"{self.url}/api/v1" if self.api == "dashscope" else f"{self.url}/v1"

    def query_and_texts(self, body: dict[str, Any]) -> tuple[str, list[str]]:
        """What one request asked to rank, in this API's shape."""
        if self.api == "tei":
            return body["query"], body["texts"]
        if self.api == "dashscope":
            return body["input"]["query"], body["input"]["documents"]
        return body["query"], body["documents"]

    def texts_sent(self) -> list[str]:
        return [text for request in self.requests for text in self.query_and_texts(request.body)[1]]

    def respond(self, request: Recorded) -> Response:
        if request.path != PATHS[self.api]:
            return Response(404, {"error": f"no route {request.path}"})
        if request.headers.get("authorization") != f"Bearer {API_KEY}":
            return Response(401, {"error": "invalid api key"})
        reply = self.script.next()
        if callable(reply):
            return Response(200, reply(request.body))
        if reply == BAD_JSON:
            return Response(200, b"<html>502 Bad Gateway</html>", content_type="text/html")
        if isinstance(reply, int):
            return Response(reply, {"error": f"scripted HTTP {reply}"})
        query, texts = self.query_and_texts(request.body)
        ranked = sorted(((self.rule(query, text), i) for i, text in enumerate(texts)), key=lambda p: (-p[0], p[1]))
        return Response(200, self._answer(ranked), delay=self.delay if reply == TIMEOUT else 0.0)

    def _answer(self, ranked: list[tuple[float, int]]) -> Any:
        if self.api == "tei":
            return [{"index": i, "score": score} for score, i in ranked]
        results = [{"index": i, "relevance_score": score} for score, i in ranked]
        if self.api == "dashscope":
            return {"output": {"results": results}, "usage": {"total_tokens": 1}, "request_id": "fake"}
        return {"id": "fake", "results": results, "meta": {"billed_units": {"search_units": 1}}}
