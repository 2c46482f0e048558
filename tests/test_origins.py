"""DNS rebinding and foreign pages are refused on the whole service, `/mcp` included.

A page of attacker.example that rebinds its name to 127.0.0.1 reaches the service with
`Host: attacker.example:8000` (and its own `Origin` when it sends JSON): both are refused before
any route runs, in the open mode (no keys) that `./run demo` starts.
"""

from collections.abc import Iterator

import httpx
import pytest

from core.config import Settings
from core.embeddings import Embedder
from service.app import create_app
from service.http.middleware import OriginPolicy
from tests.serving import serve

MCP_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def message(response: httpx.Response) -> str:
    """The refusal's message, in the route's protocol shape (JSON-RPC's on /mcp)."""
    body = response.json()
    return str(body.get("detail") or body["error"]["message"])


@pytest.fixture(scope="module")
def url(es_url: str, embedder: Embedder) -> Iterator[str]:
    settings = Settings(
        _env_file=None,
        es_url=es_url,
        es_index="test-origins-none",
        allowed_hosts=["rag.example.com"],
        allowed_origins=["https://chat.example.com"],
    )
    with serve(create_app(settings, embedder=embedder)) as served:
        yield served


def test_the_policy_allows_local_names_with_or_without_a_port() -> None:
    policy = OriginPolicy.of("127.0.0.1", [], [])
    for host in ("localhost", "localhost:8000", "127.0.0.1:8000", "[::1]", "[::1]:8000", "LOCALHOST:1"):
        assert policy.allows_host(host), host
    foreign: list[str | None] = ["attacker.example", "attacker.example:8000", "127.0.0.1.attacker.example", "", None]
    assert not [host for host in foreign if policy.allows_host(host)]
    assert policy.allows_origin(None) and policy.allows_origin("http://localhost:3000")
    assert not policy.allows_origin("http://attacker.example:8000") and not policy.allows_origin("null")
    bound = OriginPolicy.of("10.1.2.3", [], [])
    assert bound.allows_host("10.1.2.3:8000") and not OriginPolicy.of("0.0.0.0", [], []).allows_host("0.0.0.0")
    assert OriginPolicy.of("127.0.0.1", ["*"], []).allows_host("anything.example")


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("GET", "/kbs", None), ("GET", "/healthz", None), ("POST", "/mcp", MCP_LIST), ("GET", "/", None)],
)
def test_a_foreign_host_is_refused_everywhere(url: str, method: str, path: str, body: dict | None) -> None:
    refused = httpx.request(method, f"{url}{path}", json=body, headers={"Host": "attacker.example:8000", **MCP_HEADERS})
    assert refused.status_code == 421 and "ALLOWED_HOSTS" in message(refused)
    port = url.rsplit(":", 1)[1]
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "rag.example.com"):
        allowed = httpx.request(method, f"{url}{path}", json=body, headers={"Host": host, **MCP_HEADERS})
        assert allowed.status_code != 421, (host, allowed.text)


@pytest.mark.parametrize("path", ["/kbs", "/mcp"])
def test_a_foreign_origin_is_refused(url: str, path: str) -> None:
    def post(origin: str) -> httpx.Response:
        return httpx.post(f"{url}{path}", json=MCP_LIST, headers={"Origin": origin, **MCP_HEADERS})

    refused = post("http://attacker.example:8000")
    assert refused.status_code == 403 and "ALLOWED_ORIGINS" in message(refused)
    for origin in ("https://chat.example.com", "http://localhost:3000", "http://127.0.0.1"):
        assert post(origin).status_code != 403, origin
