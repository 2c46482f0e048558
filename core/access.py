"""What one read of a knowledge base may see: the base, and the documents within it.

Every read of a base's chunks, ids, counts or dates takes a `Scope` (core/reader.py is the one
reader), and no function has a default one: a route makes it from its caller
(service/deps.py), the command-line tools and the indexing job name the whole base with
`Scope.whole`, which is greppable and never implied. A chunk without `access` groups is
readable by everyone who may read its base; one with groups only by a caller holding one of
them. The filter goes inside every Elasticsearch query, so what a scope may not read is never
returned, counted, aggregated or fetched.
"""

from dataclasses import dataclass
from typing import Any

Clauses = list[dict[str, Any]]


@dataclass(frozen=True)
class DocumentAccess:
    """The document groups a caller may read (`everything`: an admin of the base, the command line)."""

    groups: frozenset[str] = frozenset()
    everything: bool = False

    def to_es(self) -> Clauses:
        if self.everything:
            return []
        public: dict[str, Any] = {"bool": {"must_not": {"exists": {"field": "access"}}}}
        if not self.groups:
            return [public]
        allowed = {"terms": {"access": sorted(self.groups)}}
        return [{"bool": {"should": [public, allowed], "minimum_should_match": 1}}]

    def allows(self, groups: list[str] | None) -> bool:
        """Whether a chunk with these `access` groups may be read (the same rule as `to_es`)."""
        return self.everything or not groups or not self.groups.isdisjoint(groups)

    @property
    def key(self) -> str:
        """A key naming what this caller reads (`*` everything, else its sorted groups): caches are per key."""
        return "*" if self.everything else ",".join(sorted(self.groups))


ALL_DOCUMENTS = DocumentAccess(everything=True)


@dataclass(frozen=True)
class Scope:
    """One base and the documents of it a read may see."""

    kb: str
    documents: DocumentAccess

    @classmethod
    def whole(cls, kb: str) -> "Scope":
        """Every document of `kb`: for a base's admin, the command-line tools and the indexing job."""
        return cls(kb, ALL_DOCUMENTS)

    @property
    def clauses(self) -> Clauses:
        """The filter clauses every query of this scope carries (none for the whole base)."""
        return self.documents.to_es()

    def allows(self, groups: list[str] | None) -> bool:
        return self.documents.allows(groups)
