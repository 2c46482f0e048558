"""The indexing job's options: small objects, each validated once, when it is built.

`IndexOptions.from_settings` gives the configured ones (chunking, embedding throughput, the
layout of a new index); `RunScope` says what a run may delete besides its documents' own stale
chunks. The CLI only parses flags into these; a bad value is their `ValueError`, which the
CLI reports as a usage error (exit status 2).
"""

import hashlib
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from core.chunking import PassageWindows, split_text
from core.config import Settings
from core.documents import Document


@dataclass(frozen=True)
class Chunking:
    """Characters per chunk at most, and characters shared by neighbouring chunks."""

    size: int
    overlap: int

    def __post_init__(self) -> None:
        split_text("", self.size, self.overlap)  # core.chunking's own check of the two sizes


@dataclass(frozen=True)
class Throughput:
    """Chunks per embedding batch, and embedding batches in flight (remote embedders serve several)."""

    batch_size: int
    concurrency: int

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.concurrency < 1:
            raise ValueError(
                f"batch size and concurrency must be at least 1, got {self.batch_size} and {self.concurrency}"
            )


@dataclass(frozen=True)
class Layout:
    """Primary shards and replicas of an index the run creates."""

    shards: int
    replicas: int

    def __post_init__(self) -> None:
        if self.shards < 1 or self.replicas < 0:
            raise ValueError(f"need shards >= 1 and replicas >= 0, got {self.shards} and {self.replicas}")


@dataclass(frozen=True)
class IndexOptions:
    chunking: Chunking
    throughput: Throughput
    layout: Layout
    # The passage vectors of an index the run creates (an existing index keeps its own, or none).
    passages: PassageWindows | None = None
    # After a load into an empty passage base, how long to wait for Elasticsearch to let go of the
    # documents' recovery copies before merging them away (indexing/compact.py); 0: not compacted.
    compact_wait_s: float = 0.0
    # The base's text profile (`core.profiles`, `retrieval.profiles`), stored with it before its aliases
    # are mined; "": none; None: the one the base already stores.
    profile: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> "IndexOptions":
        return cls(
            Chunking(settings.chunk_size, settings.chunk_overlap),
            Throughput(settings.embed_batch_size, settings.embed_concurrency),
            Layout(settings.es_shards, settings.es_replicas),
            settings.passage_windows,
            settings.index_compact_wait_s,
        )


@dataclass(frozen=True)
class Partition:
    """Part `number` of `count` (1-based): the documents whose id hashes to it.

    The hash is SHA-1 of the document id, so every worker on every machine agrees.
    """

    number: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.number <= self.count:
            raise ValueError(f"partition {self.number}/{self.count}: need 1 <= I <= N")

    @classmethod
    def parse(cls, text: str) -> "Partition":
        """`"I/N"` → Partition(I, N); the error says the expected form."""
        number, slash, count = text.partition("/")
        if not (slash and number.strip().isdigit() and count.strip().isdigit()):
            raise ValueError(f"partition {text!r}: expected I/N, e.g. 1/3")
        return cls(int(number), int(count))

    def contains(self, doc_id: str) -> bool:
        digest = hashlib.sha1(doc_id.encode("utf-8")).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.number - 1

    def __str__(self) -> str:
        return f"{self.number}/{self.count}"


@dataclass(frozen=True)
class RunScope:
    """What a run replaces and deletes; the empty scope adds and updates its documents only.

    `recreate` builds a new versioned index and swaps the alias to it when nothing failed.
    `replace_sources` says the documents are all of their sources' documents (True: every
    source; or the sources named), so chunks of other doc_ids from those sources are deleted (a
    file that lost chapters); `remove_sources` deletes every chunk of those sources (files
    deleted from a synced folder); `prune` deletes every chunk whose doc_id is not given.
    `partition` restricts the run to its share of the documents (not with `recreate`: the
    workers share one index).
    """

    recreate: bool = False
    prune: bool = False
    replace_sources: bool | Collection[str] = False
    remove_sources: Collection[str] = field(default_factory=tuple)
    partition: Partition | None = None

    def __post_init__(self) -> None:
        if self.partition is not None and self.recreate:
            raise ValueError("recreate with a partition: each worker would build its own index; create it once first")


def parse_groups(text: str | None) -> list[str]:
    """Comma-separated access groups (the upload form's `access`, the CLI's `--access`), sorted and distinct."""
    return sorted({group.strip() for group in (text or "").split(",") if group.strip()})


def grant_access(documents: Iterable[Document], groups: list[str]) -> None:
    """`groups` on every document without groups of its own (a JSONL line's `access` wins)."""
    for document in documents:
        document.access = document.access or list(groups)
