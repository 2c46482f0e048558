"""Elasticsearch: the client, the knowledge-base mapping, versioned indices behind an alias.

A knowledge base is an alias (`ES_INDEX`, default `kb`) pointing at one concrete index
`<alias>-v<timestamp>`; a rebuild writes a new index and swaps the alias atomically. The
index `_meta` records which embedder built it, so queries with another one fail loudly.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from elasticsearch import BadRequestError, Elasticsearch, NotFoundError
from elasticsearch.serializer import OrjsonSerializer

from core.aliases import Alias
from core.chunking import PassageWindows
from core.config import Settings
from core.embeddings import Embedder
from core.retry import ES_NEW_INDEX, is_transient, retrying
from core.schema import ADDED_PROPERTIES, index_body


class IndexNotFoundError(LookupError):
    """The knowledge base does not exist yet."""

    def __init__(self, alias: str) -> None:
        super().__init__(f"index {alias!r} not found: build it with `python -m indexing PATH --index {alias}`")
        self.alias = alias


class EmbedderMismatchError(ValueError):
    """The index was built with another embedder (vectors from two spaces never compare)."""


def _first_reason(error: dict[str, Any]) -> str:
    """The first reason an Elasticsearch error body gives: its own, a root cause's, its cause's or a failed shard's.

    A search phase that fails while shards recover often leaves `reason` empty and names the cause
    only further down.
    """
    candidates = [error, *(error.get("root_cause") or []), error.get("caused_by") or {}]
    candidates += [shard.get("reason") or {} for shard in error.get("failed_shards") or []]
    reason = next((str(c["reason"]) for c in candidates if isinstance(c, dict) and c.get("reason")), None)
    return reason or f"no reason given (phase {error.get('phase', 'unknown')})"


class SearchError(Exception):
    """One search of an `_msearch` failed; `transient` when retrying later can succeed."""

    def __init__(self, index: str, error: dict[str, Any], status: int | None) -> None:
        self.index = index
        self.type = str(error.get("type", "unknown"))
        self.reason = _first_reason(error)
        self.status = status
        super().__init__(f"search of {index!r} failed ({self.type}, status {status}): {self.reason}")

    @property
    def transient(self) -> bool:
        return is_transient(self.status, self.type)


@dataclass(frozen=True)
class IndexMeta:
    index: str
    embedder: str
    dim: int
    # The corpus dictionary the index was cut with (core.lexicon); None: built without one.
    corpus_terms: tuple[str, ...] | None = None
    # The knowledge base's own settings (`_meta.kb`, core/kbs.py): chunking, fusion, ...
    kb: dict[str, Any] = field(default_factory=dict)
    # The passage windows its chunks hold vectors of (`_meta.passages`); None: one vector per chunk.
    passages: PassageWindows | None = None
    # The aliases mined from its documents (`_meta.aliases`, core/aliases.py).
    aliases: tuple[Alias, ...] = ()


def create_client(settings: Settings) -> Elasticsearch:
    """The one client a process uses, over every node of `ES_URL`.

    The transport is the retry layer for reads: a connection error or time-out marks the node
    dead for a while and the request goes to the next node (2 retries), so one lost node of a
    cluster costs no failed request. Bulk writes turn this off and retry themselves
    (`indexing.pipeline.bulk_write`). Responses are decoded with orjson, several times faster
    than the standard library on a hybrid search's hundreds of hits.
    """
    return Elasticsearch(
        settings.es_urls,
        serializer=OrjsonSerializer(),
        request_timeout=settings.es_request_timeout,
        retry_on_timeout=True,
        max_retries=2,
    )


def versioned_name(alias: str) -> str:
    return f"{alias}-v{datetime.now(UTC):%Y%m%d%H%M%S%f}"


def create_index(
    es: Elasticsearch,
    name: str,
    embedder: Embedder,
    *,
    shards: int = 1,
    replicas: int = 0,
    passages: PassageWindows | None = None,
) -> None:
    es.indices.create(index=name, **index_body(embedder, shards, replicas, passages))


def wait_until_readable(es: Elasticsearch, index: str, first_read: Callable[[], object]) -> None:
    """Return once `index`, just created, answers reads: its primary started (30 s at most), then
    `first_read` (the owner's own read of it) succeeding (`ES_NEW_INDEX`). Without it the first
    request after creation can be a 503 no_shard_available."""
    es.cluster.health(index=index, wait_for_status="yellow", timeout="30s")
    for attempt in retrying(ES_NEW_INDEX, f"the first read of {index!r}"):
        with attempt:
            first_read()


def concrete_indices(es: Elasticsearch, alias: str) -> list[str]:
    """Indices behind `alias` (or `[alias]` when it names a concrete index); [] if absent."""
    try:
        return sorted(es.indices.get_alias(name=alias).body)
    except NotFoundError:
        return [alias] if es.indices.exists(index=alias) else []


def ensure_index(
    es: Elasticsearch,
    alias: str,
    embedder: Embedder,
    *,
    shards: int = 1,
    replicas: int = 0,
    name: str | None = None,
    passages: PassageWindows | None = None,
) -> str:
    """The concrete index behind `alias`; when missing, created (`name`, default versioned; with
    `passages`) and aliased. An existing index keeps its own passages, or none.

    Workers started together (partitions) pass the same `name`: whoever creates it first wins
    and the others use it, so they never end up with one index each behind the alias.
    """
    if not concrete_indices(es, alias):
        name = name or versioned_name(alias)
        try:
            create_index(es, name, embedder, shards=shards, replicas=replicas, passages=passages)
        except BadRequestError as err:
            if err.error != "resource_already_exists_exception":
                raise
        es.indices.put_alias(index=name, name=alias)
    check_embedder(es, alias, embedder)
    index = concrete_indices(es, alias)[0]
    # Indices built before schema 3 lack some fields; adding fields is allowed in place.
    es.indices.put_mapping(index=index, properties=ADDED_PROPERTIES)
    return index


def swap_alias(es: Elasticsearch, alias: str, new_index: str) -> list[str]:
    """Point `alias` at `new_index` in one atomic request; returns and deletes the old ones."""
    old = [name for name in concrete_indices(es, alias) if name != new_index]
    if old:  # the rebuilt index keeps the base's own settings (`_meta.kb`: fusion, created_at, ...)
        _carry_kb_meta(es, old[0], new_index)
    actions: list[dict[str, Any]] = [{"remove": {"index": name, "alias": alias}} for name in old if name != alias]
    actions.append({"add": {"index": new_index, "alias": alias}})
    es.indices.update_aliases(actions=actions)
    for name in old:
        if name != alias:
            es.indices.delete(index=name)
    return old


def _carry_kb_meta(es: Elasticsearch, source: str, target: str) -> None:
    """The old index's `_meta.kb` under the rebuilt one's: what the rebuild set (its chunking) wins."""
    kb = es.indices.get_mapping(index=source).body[source]["mappings"].get("_meta", {}).get("kb")
    if kb:
        meta = es.indices.get_mapping(index=target).body[target]["mappings"].get("_meta", {})
        es.indices.put_mapping(index=target, meta={**meta, "kb": {**kb, **meta.get("kb", {})}})


def update_kb_meta(es: Elasticsearch, index: str, values: dict[str, Any]) -> None:
    """Merge `values` into the index's `_meta.kb` (a `None` value removes that key)."""
    meta = es.indices.get_mapping(index=index).body[index]["mappings"].get("_meta", {})
    kb = {key: value for key, value in {**meta.get("kb", {}), **values}.items() if value is not None}
    es.indices.put_mapping(index=index, meta={**meta, "kb": kb})


def read_index_meta(es: Elasticsearch, alias: str) -> IndexMeta:
    try:
        mappings = es.indices.get_mapping(index=alias).body
    except NotFoundError as err:
        raise IndexNotFoundError(alias) from err
    index, body = next(iter(sorted(mappings.items())))
    meta = body["mappings"].get("_meta", {})
    terms = meta.get("corpus_terms")
    return IndexMeta(
        passages=PassageWindows.from_meta(meta.get("passages")),
        aliases=tuple(Alias.from_meta(entry) for entry in meta.get("aliases", [])),
        index=index,
        embedder=str(meta.get("embedder", "?")),
        dim=int(meta.get("dim", 0)),
        corpus_terms=tuple(terms) if terms is not None else None,
        kb=dict(meta.get("kb", {})),
    )


def write_corpus_terms(es: Elasticsearch, index: str, terms: list[str]) -> None:
    """Store the corpus dictionary in the concrete index's `_meta` (kept with the index, swapped with it)."""
    meta = es.indices.get_mapping(index=index).body[index]["mappings"].get("_meta", {})
    es.indices.put_mapping(index=index, meta={**meta, "corpus_terms": terms})


def write_aliases(es: Elasticsearch, index: str, aliases: list[Alias]) -> None:
    """Store the base's aliases in the concrete index's `_meta` (kept with the index, like its dictionary)."""
    meta = es.indices.get_mapping(index=index).body[index]["mappings"].get("_meta", {})
    es.indices.put_mapping(index=index, meta={**meta, "aliases": [entry.to_meta() for entry in aliases]})


def check_embedder(es: Elasticsearch, alias: str, embedder: Embedder) -> IndexMeta:
    """Raise `EmbedderMismatchError` unless `embedder` is the one that built `alias`."""
    meta = read_index_meta(es, alias)
    check_embedder_meta(meta, alias, embedder)
    return meta


def check_embedder_meta(meta: IndexMeta, alias: str, embedder: Embedder) -> None:
    """`check_embedder` on an already read `IndexMeta`."""
    if meta.embedder != embedder.name or meta.dim != embedder.dim:
        raise EmbedderMismatchError(
            f"index {alias!r} was built with embedder {meta.embedder!r} ({meta.dim} dims) but "
            f"{embedder.name!r} ({embedder.dim} dims) was given: set EMBEDDER={meta.embedder} "
            f"or rebuild with `python -m indexing ... --index {alias} --recreate`"
        )
