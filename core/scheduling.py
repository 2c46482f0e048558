"""Whose turn it is on a shared resource: principals take turns, interactive work goes first.

One request (or one background job) carries a `Ticket`: who it is for, whether it is bulk work,
how many embedding tokens it may still spend and whether its client has gone. The ticket travels
in a context variable, so the threads a request runs on (FastAPI's threadpool, `asyncio.to_thread`)
see the same one without any signature carrying it; a job thread sets its own.
"""

import asyncio
import collections
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Generic, TypeVar

Item = TypeVar("Item")


class Lane(IntEnum):
    """What kind of work waits, most urgent first: a short query, other work of a request, bulk work."""

    EXPRESS = 0
    INTERACTIVE = 1
    BULK = 2


class BudgetExceeded(Exception):
    """A request asked to embed more tokens than one request may: its own refusal, never a 5xx."""

    def __init__(self, tokens: int, budget: int) -> None:
        super().__init__(
            f"this request would embed {tokens} tokens, more than EMBED_REQUEST_TOKENS={budget}: "
            "send a shorter text or fewer texts"
        )
        self.tokens, self.budget = tokens, budget


class ClientGone(Exception):
    """The request's client hung up before its work reached the embedder: the work was dropped."""


@dataclass
class Ticket:
    """One request's or job's claim on shared work (mutable: the request's route may mark it bulk)."""

    principal: str = ""
    bulk: bool = False
    budget: int | None = None  # embedding tokens this request may spend; None: no limit (jobs, the CLI)
    spent: int = 0
    gone: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def charge(self, tokens: int) -> None:
        """Count `tokens` against the budget, or refuse them all (nothing is spent on a refusal)."""
        with self._lock:
            if self.budget is not None and self.spent + tokens > self.budget:
                raise BudgetExceeded(self.spent + tokens, self.budget)
            self.spent += tokens


_TICKET: ContextVar[Ticket | None] = ContextVar("ticket", default=None)


def current_ticket() -> Ticket:
    """The ticket of the request or job this thread works for; outside any (the CLI, the warm-up) a
    fresh one: interactive, unlimited, of nobody."""
    return _TICKET.get() or Ticket()


@contextmanager
def holding(ticket: Ticket) -> Iterator[Ticket]:
    """Work done inside this block (and the threads it starts with a copied context) is `ticket`'s."""
    token = _TICKET.set(ticket)
    try:
        yield ticket
    finally:
        _TICKET.reset(token)


class Turns(Generic[Item]):
    """Items waiting, served principal by principal in turn (oldest first within a principal): one
    principal with many items waits behind every other principal's first. Not thread-safe alone:
    its owner holds the lock."""

    def __init__(self) -> None:
        self._waiting: collections.OrderedDict[str, collections.deque[Item]] = collections.OrderedDict()

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def put(self, principal: str, item: Item) -> None:
        self._waiting.setdefault(principal, collections.deque()).append(item)

    def peek(self) -> Item:
        """The item `pop` would give."""
        return next(iter(self._waiting.values()))[0]

    def pop(self) -> Item:
        """The first item of the principal served longest ago; that principal goes to the back."""
        principal, items = self._waiting.popitem(last=False)
        item = items.popleft()
        if items:
            self._waiting[principal] = items
        return item


@dataclass
class _Gate:
    semaphore: asyncio.Semaphore
    users: int = 0


class PrincipalGates:
    """At most `limit` calls in flight per principal (one event loop's): a principal's burst waits on
    itself, never on the others' share of a shared pool (the model endpoint). Gates of principals with
    nothing in flight are forgotten."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._gates: dict[str, _Gate] = {}

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        principal = current_ticket().principal
        gate = self._gates.setdefault(principal, _Gate(asyncio.Semaphore(self.limit)))
        gate.users += 1
        try:
            async with gate.semaphore:
                yield
        finally:
            gate.users -= 1
            if not gate.users:
                del self._gates[principal]
