"""ASGI middleware of the HTTP service (the metrics middleware lives in `service.http.metrics`)."""

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes

from fastapi import HTTPException
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.inputs import NOT_UNICODE, unencodable


@dataclass(frozen=True)
class LargerBody:
    """Requests (`method`, a path matching `path`, a body of `media` type) whose bodies may reach
    `limit` bytes; `named` is how the 413 names that limit (the settings it comes from), `advice`
    what the sender can do instead."""

    method: str
    path: re.Pattern[str]
    media: str
    limit: int
    named: str
    advice: str = ""

    def matches(self, scope: Scope) -> bool:
        if scope["method"] != self.method or not self.path.fullmatch(scope["path"]):
            return False
        given = dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")
        return given.split(";")[0].strip().lower() == self.media


class BodySizeLimit:
    """413 for bodies over `limit` bytes, declared (Content-Length) or streamed (chunked).

    The body is read here (it is small by definition) and replayed to the app, so an
    oversized chunked upload is refused before any endpoint sees part of it. A request of
    `larger` (an upload: files, or texts as JSON, each its own limit) is streamed to the app
    instead, too large to hold here: refused at once when its Content-Length is over, else cut
    off with a 413 by the read that goes over. Its media type picks its limit, so a JSON body is
    never read up to the files' limit.
    """

    def __init__(self, app: ASGIApp, limit: int, larger: Sequence[LargerBody] = ()) -> None:
        self.app = app
        self.limit = limit
        self.larger = larger

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        larger = next((body for body in self.larger if body.matches(scope)), None)
        limit, named = (larger.limit, larger.named) if larger else (self.limit, f"MAX_REQUEST_BYTES={self.limit}")
        named += f" bytes: {larger.advice}" if larger and larger.advice else " bytes"
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._refuse(send, named)
            return
        if larger is not None:
            await self.app(scope, _counted(receive, limit, named), send)
            return
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.limit:
                await self._refuse(send, named)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, named: str) -> None:
        response = JSONResponse({"detail": _too_large(named)}, 413)
        await send({"type": "http.response.start", "status": 413, "headers": response.raw_headers})
        await send({"type": "http.response.body", "body": response.body})


def _too_large(named: str) -> str:
    return f"request body larger than {named}"


def _counted(receive: Receive, limit: int, named: str) -> Receive:
    """`receive`, raising a 413 (answered by the app's error handler) once the body is over `limit`."""
    size = 0

    async def counted() -> Message:
        nonlocal size
        message = await receive()
        size += len(message.get("body", b""))
        if size > limit:
            raise HTTPException(413, _too_large(named))
        return message

    return counted


# A JSON escape of a surrogate: the only way a body that is valid UTF-8 can hold a lone one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class UnicodeText:
    """Every text a request carries is Unicode that UTF-8 encodes, checked before any protocol reads
    it (service.inputs): a path or query string whose percent-escapes are not UTF-8 is a 400; a JSON
    body that is not UTF-8 a 400, one that spells a lone surrogate (`"\\ud800"`) a 422 naming the
    field. Each in the API's shape, which `ProtocolErrors` renders in the protocol's own.

    Bodies `larger` (uploads, streamed to their route) are parsed by `core.contract.parse_json`,
    which refuses both itself.
    """

    def __init__(self, app: ASGIApp, larger: Sequence[LargerBody] = ()) -> None:
        self.app, self.larger = app, larger

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = _bad_address(scope)
        if refusal is None and _is_json(scope) and not any(body.matches(scope) for body in self.larger):
            messages = await _whole(receive)
            refusal = _bad_body(b"".join(message.get("body", b"") for message in messages))
            receive = _replay(messages, receive)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        await JSONResponse(refusal[1], refusal[0])(scope, receive, send)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """`messages` once more, then what `receive` gives (a disconnect)."""

    async def replay() -> Message:
        return messages.pop(0) if messages else await receive()

    return replay


def _is_json(scope: Scope) -> bool:
    media = dict(scope["headers"]).get(b"content-type", b"").split(b";")[0].strip().lower()
    return media == b"application/json" or media.endswith(b"+json")


async def _whole(receive: Receive) -> list[Message]:
    """The request's messages up to the end of its body (already held by `BodySizeLimit`)."""
    messages = [await receive()]
    while messages[-1]["type"] == "http.request" and messages[-1].get("more_body", False):
        messages.append(await receive())
    return messages


def _bad_address(scope: Scope) -> tuple[int, dict[str, Any]] | None:
    for part, raw in (("path", scope.get("raw_path") or b""), ("query string", scope.get("query_string", b""))):
        try:
            unquote_to_bytes(raw.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError as err:
            return 400, {"detail": f"{part}: its percent-escapes are not UTF-8 (byte {err.start})"}
    return None


def _bad_body(body: bytes) -> tuple[int, dict[str, Any]] | None:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as err:
        return 400, {"detail": f"body: not UTF-8 (byte {err.start})"}
    if not _SURROGATE_ESCAPE.search(body):
        return None
    try:
        where = unencodable(json.loads(body))
    except (ValueError, RecursionError):  # not JSON: the route's own parser says where it breaks
        return None
    if where is None:
        return None
    field = ".".join(str(part) for part in where) or "body"
    problem = {"loc": ["body", *where], "msg": NOT_UNICODE, "type": "string_unicode"}
    return 422, {"detail": [problem], "message": f"{field}: {NOT_UNICODE}"}


CREDENTIALS = (b"authorization", b"x-api-key")


class OneCredential:
    """400 for a request that repeats a credential header (two `X-API-Key`, or two `Authorization`)
    or sends one that is not ASCII: routes read the first of two, the MCP check and `/readyz` the
    last, so one request was two callers. (`X-API-Key` beside `Authorization` is read as
    `X-API-Key` everywhere but Dify's `/retrieval`, which reads only its `Bearer`.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = [(name.lower(), value) for name, value in scope["headers"] if name.lower() in CREDENTIALS]
        if len(sent) > len({name for name, _ in sent}):
            problem = "send one credential: `Authorization: Bearer <key>` or `X-API-Key: <key>`, once"
        elif not all(value.isascii() for _, value in sent):
            problem = "a credential header must be ASCII"
        else:
            await self.app(scope, receive, send)
            return
        await JSONResponse({"detail": problem}, 400)(scope, receive, send)


LOCAL_NAMES = ("localhost", "127.0.0.1", "[::1]")
_ANY_ADDRESS = ("0.0.0.0", "::", "[::]", "")


# A Host as browsers send it: a name or an IPv4 address, or an IPv6 address in brackets; an optional port.
_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9_](?:[a-z0-9_.-]*[a-z0-9_])?)(?::\d{1,5})?")


def _host_name(host: str) -> str | None:
    """`host` without its port, lower case: `[::1]:8000` → `[::1]`, `Localhost:80` → `localhost`;
    None for anything a browser never sends (`[::1]evil`, `localhost:80@attacker.example`)."""
    matched = _HOST.fullmatch(host.strip().lower())
    return matched.group(1) if matched else None


@dataclass(frozen=True)
class OriginPolicy:
    """The names a request may address the service by (`Host`) and the pages that may call it
    (`Origin`): a web page that rebinds its own name to 127.0.0.1 sends its name in both."""

    hosts: frozenset[str]  # names without port; "*": any
    origins: frozenset[str]  # exact origins beside those of `hosts`

    @classmethod
    def of(cls, host: str, allowed_hosts: Sequence[str], allowed_origins: Sequence[str]) -> "OriginPolicy":
        bound = [] if host.strip() in _ANY_ADDRESS else [f"[{host}]" if ":" in host else host]
        names = frozenset(
            name.strip().lower() if name.strip() == "*" else _host_name(name) or name
            for name in [*LOCAL_NAMES, *bound, *allowed_hosts]
        )
        return cls(names, frozenset(origin.rstrip("/").lower() for origin in allowed_origins))

    def allows_host(self, host: str | None) -> bool:
        name = _host_name(host) if host is not None else None
        return name is not None and ("*" in self.hosts or name in self.hosts)

    def allows_origin(self, origin: str | None) -> bool:
        """No `Origin` (not a browser, or a same-origin GET) passes; a page's origin passes when it is
        listed or its host is one of ours."""
        if origin is None:
            return True
        origin = origin.rstrip("/").lower()
        scheme, _, rest = origin.partition("://")
        if "*" in self.origins or origin in self.origins:
            return True
        return scheme in ("http", "https") and self.allows_host(rest)


class TrustedOrigin:
    """421 for a `Host` the service does not answer to, 403 for a foreign `Origin`, before anything
    else reads the request: `/mcp` and the static page included."""

    def __init__(self, app: ASGIApp, policy: OriginPolicy) -> None:
        self.app, self.policy = app, policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        if not self.policy.allows_host(headers.get("host")):
            refusal = (421, f"Host {headers.get('host')!r} is not one this service answers to: see ALLOWED_HOSTS")
        elif not self.policy.allows_origin(headers.get("origin")):
            refusal = (403, f"Origin {headers.get('origin')!r} may not call this service: see ALLOWED_ORIGINS")
        else:
            await self.app(scope, receive, send)
            return
        await JSONResponse({"detail": refusal[1]}, refusal[0])(scope, receive, send)
