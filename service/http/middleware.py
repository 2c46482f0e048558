"""ASGI middleware of the HTTP service (the metrics middleware lives in `service.http.metrics`)."""

import re
from collections.abc import Sequence
from dataclasses import dataclass

from fastapi import HTTPException
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


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


LOCAL_NAMES = ("localhost", "127.0.0.1", "[::1]")
_ANY_ADDRESS = ("0.0.0.0", "::", "[::]", "")


def _host_name(host: str) -> str:
    """`host` without its port, lower case: `[::1]:8000` → `[::1]`, `Localhost:80` → `localhost`."""
    host = host.strip().lower()
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


@dataclass(frozen=True)
class OriginPolicy:
    """The names a request may address the service by (`Host`) and the pages that may call it
    (`Origin`): a web page that rebinds its own name to 127.0.0.1 sends its name in both."""

    hosts: frozenset[str]  # names without port; "*": any
    origins: frozenset[str]  # exact origins beside those of `hosts`

    @classmethod
    def of(cls, host: str, allowed_hosts: Sequence[str], allowed_origins: Sequence[str]) -> "OriginPolicy":
        bound = [] if host.strip() in _ANY_ADDRESS else [f"[{host}]" if ":" in host else host]
        names = frozenset(_host_name(name) for name in [*LOCAL_NAMES, *bound, *allowed_hosts])
        return cls(names, frozenset(origin.rstrip("/").lower() for origin in allowed_origins))

    def allows_host(self, host: str | None) -> bool:
        return host is not None and ("*" in self.hosts or _host_name(host) in self.hosts)

    def allows_origin(self, origin: str | None) -> bool:
        """No `Origin` (not a browser, or a same-origin GET) passes; a page's origin passes when it is
        listed or its host is one of ours."""
        if origin is None:
            return True
        origin = origin.rstrip("/").lower()
        scheme, _, rest = origin.partition("://")
        return "*" in self.origins or origin in self.origins or (scheme in ("http", "https") and self.allows_host(rest))


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
