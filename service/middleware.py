"""ASGI middleware of the HTTP service (the metrics middleware lives in `service.metrics`)."""

import re
from collections.abc import Sequence
from dataclasses import dataclass

from fastapi import HTTPException
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


@dataclass(frozen=True)
class LargerBody:
    """Requests (`method`, a path matching `path`) whose bodies may reach `limit` bytes; `named`
    is how the 413 names that limit (the settings it comes from)."""

    method: str
    path: re.Pattern[str]
    limit: int
    named: str

    def matches(self, scope: Scope) -> bool:
        return bool(scope["method"] == self.method and self.path.fullmatch(scope["path"]))


class BodySizeLimit:
    """413 for bodies over `limit` bytes, declared (Content-Length) or streamed (chunked).

    The body is read here (it is small by definition) and replayed to the app, so an
    oversized chunked upload is refused before any endpoint sees part of it. A request of
    `larger` (file uploads) has its own limit and is streamed to the app instead, too large to
    hold in memory: refused at once when its Content-Length is over, else cut off with a 413
    by the read that goes over.
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
    return f"request body larger than {named} bytes"


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
