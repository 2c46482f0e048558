"""An `Embedder` wrapper that keeps vectors on disk, keyed by embedder and text hash.

Benchmarks re-index the same corpora many times (chunk sizes, re-runs); embedding a
500-character chunk costs ~0.5 s on the reference machine, so vectors are computed once
and read back from a SQLite file under the git-ignored `.cache/`.
"""

import hashlib
import sqlite3
import threading
from pathlib import Path

import numpy as np

from core.embeddings import Embedder

DEFAULT_CACHE = Path(__file__).resolve().parent.parent / ".cache" / "embeddings.sqlite"


class CachedEmbedder:
    """Same `name` and `dim` as the wrapped embedder, so indices it builds stay compatible."""

    def __init__(self, inner: Embedder, path: Path = DEFAULT_CACHE) -> None:
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
        return f"{self.name}:{role}:" + hashlib.sha256(text.encode("utf-8")).hexdigest()

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
