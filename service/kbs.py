"""The service's knowledge bases: which exist, which a caller may use and what it sees of them, and
the one way to create, delete or re-fuse a base.

`open` is where every route, protocol and tool turns a base name and a caller into a
`BaseAccess` (the checked base and the caller's `Scope`): a base the caller may not read is
answered exactly like one that does not exist, and an error names only bases the caller may
read. The caches (the list of names here, each base's settings and fusion in the retriever)
are invalidated here when a base changes, never by a route.
"""

import threading
import time
from dataclasses import dataclass

from elasticsearch import Elasticsearch

from core.access import Scope
from core.aliases import Alias
from core.config import Settings
from core.embeddings import Embedder
from core.kbs import (
    Calibration,
    FusionSetting,
    KnowledgeBase,
    KnowledgeBaseStats,
    check_kb_name,
    create_kb,
    delete_kb,
    list_kb_names,
    read_kb,
    write_base_aliases,
    write_calibration,
    write_fusion,
    write_profile,
)
from core.reader import base_stats
from core.store import IndexNotFoundError, read_index_meta
from indexing.pipeline import remine_aliases
from retrieval.retriever import Retriever
from service.principals import Caller, Role


class UnknownKnowledgeBase(LookupError):
    """A name that is not among the caller's readable bases (absent, or not the caller's: the same answer)."""

    def __init__(self, name: str | None, readable: list[str], *, no_access: bool = False) -> None:
        available = ", ".join(readable) or "none"
        what = f"knowledge base {name!r} does not exist" if name is not None else "no knowledge base was named"
        super().__init__(f"{what}; available: {available}")
        self.name = name
        self.readable = readable
        self.no_access = no_access  # the caller holds no role on any base


class NotPermitted(PermissionError):
    """The caller may read the base but not do this to it."""

    def __init__(self, kb: str, role: Role) -> None:
        super().__init__(f"this needs the {role} role on knowledge base {kb!r}")


@dataclass(frozen=True)
class BaseAccess:
    """A request's knowledge base, checked: it exists, the caller holds the route's role on it, and
    `scope` is what the caller's reads of it see."""

    caller: Caller
    scope: Scope

    @property
    def kb(self) -> str:
        return self.scope.kb


class KnowledgeBases:
    """The bases (a registry of their names, read briefly cached: every request resolves its base) and
    their changes.

    An unknown name is answered from the registry: it never makes the service read every index's
    mappings (180 requests naming bases that do not exist took another tenant's median from 45 to
    322 ms, issue 58). Only a name that exists on the cluster (one cheap existence check: a base the
    indexing job created a moment ago) reads the registry again; a listing reads it at most once
    every `refresh_s`.
    """

    def __init__(
        self, es: Elasticsearch, settings: Settings, retriever: Retriever, ttl_s: float = 5.0, refresh_s: float = 1.0
    ) -> None:
        self.es = es
        self.settings = settings
        self.default = settings.es_index
        self._retriever = retriever
        self._ttl_s = ttl_s
        self._refresh_s = refresh_s
        self._names: tuple[float, list[str]] | None = None
        self._lock = threading.Lock()  # one reader of the registry at a time; the others use its answer

    def names(self, *, older_than: float | None = None) -> list[str]:
        """The bases, read again when the registry is older than `older_than` seconds (default: its TTL)."""
        limit = self._ttl_s if older_than is None else older_than
        with self._lock:
            if self._names is None or time.monotonic() - self._names[0] > limit:
                self._names = (time.monotonic(), list_kb_names(self.es))
            return self._names[1]

    def _known(self, name: str) -> bool:
        """Whether `name` is a base: in the registry, or created since it was read (then read again)."""
        if name in self.names():
            return True
        if not (self.es.indices.exists_alias(name=name) or self.es.indices.exists(index=name)):
            return False
        return name in self.names(older_than=0.0)

    def readable(self, caller: Caller, *, listing: bool = True) -> list[str]:
        """The bases `caller` may read, the default base first: for a `listing`, as read at most
        `refresh_s` ago; for an error's message, as the registry has them."""
        names = self.names(older_than=self._refresh_s if listing else None)
        return sorted(caller.readable(names), key=lambda name: (name != self.default, name))

    def open(self, caller: Caller, name: str | None, role: Role = "read") -> BaseAccess:
        """`name` (None: the default base) when it exists and `caller` holds `role` on it.

        Unreadable is the same `UnknownKnowledgeBase` as absent (naming the default only to a caller
        who may read it); readable without `role` is `NotPermitted`.
        """
        chosen = check_kb_name(name) if name is not None else self.default
        if not caller.may(chosen, "read"):
            raise UnknownKnowledgeBase(name, self.readable(caller, listing=False), no_access=not caller.has_any_role)
        if not self._known(chosen):
            if chosen == self.default:
                raise IndexNotFoundError(chosen)  # the service's own base, not built yet: say how to build it
            raise UnknownKnowledgeBase(name, self.readable(caller, listing=False))
        if not caller.may(chosen, role):
            raise NotPermitted(chosen, role)
        return BaseAccess(caller, caller.scope(chosen))

    def read(self, name: str) -> KnowledgeBase:
        """The base's stored settings (`IndexNotFoundError` when it is gone)."""
        return read_kb(self.es, name, self.settings)

    def stats(self, scopes: list[Scope]) -> dict[str, KnowledgeBaseStats]:
        """Documents, chunks and last write of each base, as far as each scope sees it."""
        return base_stats(self.es, scopes)

    def create(
        self,
        name: str,
        embedder: Embedder,
        *,
        chunk_size: int,
        chunk_overlap: int,
        shards: int,
        replicas: int,
        description: str = "",
    ) -> KnowledgeBase:
        create_kb(
            self.es,
            name,
            embedder,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            shards=shards,
            replicas=replicas,
            passages=self.settings.passage_windows,
            description=description,
        )
        self._changed(name)
        return self.read(name)

    def delete(self, name: str) -> None:
        delete_kb(self.es, name)
        self._changed(name)

    def write_fusion(self, name: str, setting: FusionSetting | None) -> None:
        """Store the base's fusion (None: the service default); its next search uses it."""
        write_fusion(self.es, name, setting)
        self._changed(name)

    def write_calibration(self, name: str, calibration: Calibration | None) -> None:
        """Store the base's calibration (None: the service's thresholds); its next answer uses it."""
        write_calibration(self.es, name, calibration)
        self._changed(name)

    def write_profile(self, name: str, profile: str | None) -> None:
        """Set the base's text profile (None: the default path); a change mines its aliases again with
        the new profile's naming rules (`indexing.pipeline.remine_aliases`), an admin's pairs kept."""
        before = read_index_meta(self.es, name).kb.get("profile") or None
        write_profile(self.es, name, profile)
        if profile != before:
            remine_aliases(self.es, name, self._retriever.index_tokenizer(Scope.whole(name)), profile)
        self._changed(name)

    def aliases(self, name: str) -> tuple[Alias, ...]:
        """The base's aliases as stored: mined, added and removed ones, every source with its groups."""
        return read_index_meta(self.es, name).aliases

    def write_aliases(self, name: str, aliases: list[Alias]) -> None:
        """Store the base's aliases; its next search expands queries with them."""
        write_base_aliases(self.es, name, aliases)
        self._changed(name)

    def _changed(self, name: str) -> None:
        with self._lock:
            self._names = None
        self._retriever.forget(name)
