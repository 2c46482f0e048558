"""An `Embedder` wrapper that keeps vectors on disk, keyed by embedder and text hash.

Benchmarks re-index the same corpora many times (chunk sizes, ablations, re-runs); embedding
an 800-character chunk costs ~0.7 s on the reference machine, so vectors are computed once
and read back from a SQLite file: `EMBEDDING_CACHE` (shared by several checkouts), else
`.cache/embeddings.sqlite` in the repository.

    python -m bench.embedding_cache --datasets cmrc,sanguo,medical

fills the cache with every chunk and question of the evaluation sets (run it early, under
`nice`: it is the slow part of `bench.retrieval_eval`).
"""

import argparse
import hashlib
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from core.config import Settings
from core.embeddings import Embedder, TokenWindow, load_embedder

DEFAULT_CACHE = Path(__file__).resolve().parent.parent / ".cache" / "embeddings.sqlite"


def cache_path(settings: Settings) -> Path:
    return Path(settings.embedding_cache) if settings.embedding_cache else DEFAULT_CACHE


class CachedEmbedder:
    """Same `name` and `dim` as the wrapped embedder, so indices it builds stay compatible.

    The file is `path`, else `EMBEDDING_CACHE`, else `DEFAULT_CACHE`: every benchmark reads the
    cache that `python -m bench.embedding_cache` filled.
    """

    def __init__(self, inner: Embedder, path: Path) -> None:
        self.inner = inner
        self.name = inner.name
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=60)
        # WAL: several benchmark processes may read and write the cache at once.
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vector BLOB NOT NULL)")
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    def _key(self, role: str, text: str) -> str:
        """Keyed by what the model reads: the text cut to its window (a vector cached for a longer text
        before the window was enforced is never read back for it)."""
        window: TokenWindow | None = getattr(self.inner, "window", None)
        read = window.cut(text, role == "query") if window is not None else text
        return f"{self.name}:{role}:" + hashlib.sha256(read.encode("utf-8")).hexdigest()

    def _get(self, keys: list[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                part = keys[start : start + 500]
                rows = self._db.execute(
                    f"SELECT key, vector FROM vectors WHERE key IN ({','.join('?' * len(part))})", part
                ).fetchall()
                found.update({key: np.frombuffer(blob, dtype=np.float32) for key, blob in rows})
        return found

    def _put(self, items: dict[str, np.ndarray]) -> None:
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO vectors VALUES (?, ?)",
                [(key, np.asarray(vec, dtype=np.float32).tobytes()) for key, vec in items.items()],
            )
            self._db.commit()

    def missing(self, texts: Sequence[str], role: str = "passage") -> list[str]:
        """The distinct `texts` that have no cached vector for `role` yet."""
        keys = {self._key(role, text): text for text in texts}
        found = self._get(list(keys))
        return [text for key, text in keys.items() if key not in found]

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        keys = [self._key("passage", text) for text in texts]
        found = self._get(keys)
        missing = [i for i, key in enumerate(keys) if key not in found]
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            vectors = self.inner.embed_documents([texts[i] for i in missing])
            new = {keys[i]: vectors[row] for row, i in enumerate(missing)}
            self._put(new)
            found.update(new)
        return np.stack([found[key] for key in keys]) if texts else np.zeros((0, self.dim), dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        key = self._key("query", text)
        found = self._get([key])
        if key in found:
            self.hits += 1
            return found[key]
        self.misses += 1
        vector = self.inner.embed_query(text)
        self._put({key: vector})
        return vector

    def prefill_queries(self, texts: Sequence[str], batch: int = 32) -> None:
        """Cache the query vectors of `texts`, in batches when the embedder has `embed_queries`."""
        batched = getattr(self.inner, "embed_queries", None)

        def one_by_one(part: list[str]) -> np.ndarray:
            return np.stack([self.inner.embed_query(text) for text in part])

        self._prefill("query", texts, batch, batched or one_by_one, "queries")

    def prefill_passages(self, texts: Sequence[str], batch: int = 16) -> None:
        self._prefill("passage", texts, batch, self.inner.embed_documents, "passages")

    def _prefill(
        self, role: str, texts: Sequence[str], batch: int, embed: Callable[[list[str]], np.ndarray], desc: str
    ) -> None:
        """Embed and store the `texts` without a cached vector for `role`, `batch` at a time."""
        todo = self.missing(texts, role)
        with tqdm(total=len(todo), desc=desc, unit="text") as bar:
            for start in range(0, len(todo), batch):
                part = todo[start : start + batch]
                self._put({self._key(role, text): vector for text, vector in zip(part, embed(part), strict=True)})
                bar.update(len(part))


def main(argv: Sequence[str] | None = None) -> int:
    from bench.datasets import load_named

    parser = argparse.ArgumentParser(description="Fill the embedding cache with the evaluation sets.")
    parser.add_argument("--datasets", default="medical,sanguo,cmrc")
    args = parser.parse_args(argv)
    settings = Settings()
    embedder = CachedEmbedder(load_embedder(settings.embedder, settings), cache_path(settings))
    datasets = [load_named(name) for name in args.datasets.split(",")]
    # Queries first: they are short and batch well, so every set is soon searchable.
    for dataset in datasets:
        print(f"{dataset.name}: {len(dataset.queries)} queries")
        embedder.prefill_queries([query.text for query in dataset.queries])
    for dataset in datasets:
        print(f"{dataset.name}: {len(dataset.chunks)} chunks")
        embedder.prefill_passages(list(dataset.chunks.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
