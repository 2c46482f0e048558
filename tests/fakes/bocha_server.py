"""A fake Bocha Web Search API (`POST /v1/web-search`, bearer key) scripted per test.

Replies, in order with the last repeating: a list of pages (dicts in Bocha's `webPages.value`
shape, see `page()`), `TIMEOUT` (answers after the client gave up), an int HTTP status,
`BAD_JSON`, `("code", n)` for an API-level error, or a callable of the request body.
"""

from typing import Any

from tests.fakes.server import FakeServer, Recorded, Response, Script

TIMEOUT = "timeout"
BAD_JSON = "bad-json"
API_KEY = "test-bocha-key"


def page(
    name: str, url: str, snippet: str, summary: str = "", site: str = "example", date: str = "2024-05-01T08:00:00+08:00"
) -> dict[str, Any]:
    return {
        "id": None,
        "name": name,
        "url": url,
        "displayUrl": url,
        "snippet": snippet,
        "summary": summary or snippet,
        "siteName": site,
        "siteIcon": "https://example.org/icon.png",
        "datePublished": date,
        "dateLastCrawled": "2024-05-02T00:00:00Z",
        "cachedPageUrl": None,
        "language": None,
        "isFamilyFriendly": None,
        "isNavigational": None,
    }


class FakeBochaServer(FakeServer):
    def __init__(self, *replies: Any, delay: float = 1.0) -> None:
        super().__init__()
        self.script = Script(list(replies))
        self.delay = delay

    @property
    def api_url(self) -> str:
        return f"{self.url}/v1/web-search"

    def respond(self, request: Recorded) -> Response:
        if request.headers.get("authorization") != f"Bearer {API_KEY}":
            return Response(401, {"code": 401, "msg": "Invalid API KEY", "data": None})
        if not self.script.replies:
            return Response(500, {"code": 500, "msg": "fake Bocha has no script", "data": None})
        reply = self.script.next()
        if callable(reply):
            reply = reply(request.body)
        if reply == TIMEOUT:
            return Response(200, _ok([]), delay=self.delay)
        if reply == BAD_JSON:
            return Response(200, b"<html>gateway error</html>", content_type="text/html")
        if isinstance(reply, int):
            return Response(reply, {"code": reply, "msg": f"scripted HTTP {reply}", "data": None})
        if isinstance(reply, tuple):
            return Response(200, {"code": reply[1], "msg": "scripted API error", "data": None})
        return Response(200, _ok(reply))


def _ok(pages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "code": 200,
        "log_id": "fake",
        "msg": None,
        "data": {
            "_type": "SearchResponse",
            "queryContext": {"originalQuery": ""},
            "webPages": {
                "webSearchUrl": "",
                "totalEstimatedMatches": len(pages),
                "value": pages,
                "someResultsRemoved": False,
            },
        },
    }
