"""Each request's claim on shared work (core.scheduling.Ticket): whose it is, what it may spend,
and whether its client is still there; and a deadline on each read of its body (a client that
stops sending is answered 408 and let go, its work dropped).

The principal is the credential the request carries (hashed), or the client's address without one:
known before any route runs, for every protocol alike. A route doing bulk work (a `/v1/embeddings`
batch) marks the ticket itself.
"""

import asyncio
import hashlib

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.scheduling import Ticket, holding
from service.http.middleware import CREDENTIALS


def principal_of(scope: Scope) -> str:
    """Who the request is for, as the shared queues tell callers apart."""
    sent = [value for name, value in scope["headers"] if name.lower() in CREDENTIALS]
    if sent:
        return "key:" + hashlib.sha256(sent[0].removeprefix(b"Bearer ")).hexdigest()[:16]
    client = scope.get("client")
    return f"address:{client[0] if client else ''}"


class BodyStalled(HTTPException):
    """A read of the body brought nothing for BODY_READ_TIMEOUT_S: 408, and the connection closed."""

    def __init__(self, timeout_s: float) -> None:
        detail = f"the request body stalled: nothing came for BODY_READ_TIMEOUT_S={timeout_s:g} s"
        super().__init__(408, detail, headers={"Connection": "close"})


def _has_body(scope: Scope) -> bool:
    headers = dict(scope["headers"])
    return b"transfer-encoding" in headers or headers.get(b"content-length", b"0") not in (b"0", b"")


class _Watched:
    """The request's `receive`; once the body is read it waits for the next message, the hang-up,
    and marks the ticket gone when it comes (the work still queued for it is dropped)."""

    def __init__(self, receive: Receive, ticket: Ticket, read_timeout_s: float) -> None:
        self._receive, self._ticket, self._timeout_s = receive, ticket, read_timeout_s
        self._stash: list[Message] = []
        self._after: asyncio.Future[Message] | None = None

    async def start(self, scope: Scope) -> None:
        if not _has_body(scope):  # the empty body is there at once: read it now, watch from here
            self._stash.append(self._note(await self._receive()))

    async def __call__(self) -> Message:
        if self._stash:
            return self._stash.pop(0)
        if self._after is not None:
            return await asyncio.shield(self._after)
        try:
            message = await asyncio.wait_for(self._receive(), self._timeout_s)
        except TimeoutError:  # the body stalled: its work is dropped, the request answered 408
            self._ticket.gone.set()
            raise BodyStalled(self._timeout_s) from None
        return self._note(message)

    def _note(self, message: Message) -> Message:
        if message["type"] == "http.disconnect":
            self._ticket.gone.set()
        elif not message.get("more_body", False):
            self._after = asyncio.ensure_future(self._hang_up())
        return message

    async def _hang_up(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self._ticket.gone.set()
        return message

    def stop(self) -> None:
        if self._after is not None:
            self._after.cancel()


class Tickets:
    """Every HTTP request runs holding its own ticket, budgeted `budget` embedding tokens; a read of
    its body that waits over `read_timeout_s` ends it (408 when nothing was answered yet)."""

    def __init__(self, app: ASGIApp, budget: int, read_timeout_s: float) -> None:
        self.app, self.budget, self.read_timeout_s = app, budget, read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ticket = Ticket(principal=principal_of(scope), budget=self.budget)
        watched = _Watched(receive, ticket, self.read_timeout_s)
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await watched.start(scope)
            with holding(ticket):
                await self.app(scope, watched, sending)
        except BodyStalled as stalled:  # met by a middleware's read (a route's is answered by the app)
            if started:
                raise
            await JSONResponse({"detail": stalled.detail}, 408, stalled.headers)(scope, watched, send)
        finally:
            watched.stop()
