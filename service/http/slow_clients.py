"""Slow clients are closed by the service itself, not only by a proxy in front of it.

uvicorn (h11) waits for a request's headers forever: a client that sends one header byte at a time
(slowloris) holds its connection, and enough of them hold every connection the process may open.
`protocol(header_timeout_s)` is uvicorn's h11 protocol with a deadline on the headers, armed when
the connection opens and again when it waits for its next request; the body's reads have their own
deadline (`service.http.fairness.Tickets`). The recommended proxy settings stay in docs/api.md.
"""

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class _HeaderDeadline(H11Protocol):
    header_timeout_s = 10.0
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm()

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # the headers are in: the route's time begins
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm()  # the next request's headers get the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.logger.info("closing a connection that sent no whole request head in %g s", self.header_timeout_s)
            self.transport.close()


def protocol(header_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's `http` protocol class closing connections whose headers take over `header_timeout_s`."""
    return type("HeaderDeadline", (_HeaderDeadline,), {"header_timeout_s": header_timeout_s})
