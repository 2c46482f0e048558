"""Memory of judgements: a verdict cache, an Elasticsearch log of every verdict, the gap report.

The cache key is (knowledge base, the caller's document scope, the asking principal, question, hash
of the contexts shown): the same evidence gets the same verdict without another model call, and a
verdict made for one base, one group of readers or one principal is never served to another (its
`source: "cache"` would tell that someone else asked exactly this, issue 58), for `JUDGEMENT_CACHE_TTL_S` seconds (then it is asked again:
a better model or prompt deserves a fresh look). The log (`JUDGEMENTS_INDEX`) keeps one document per
evaluation; aggregated, it tells the knowledge-base owner what the base is missing and how
often questions had to go to the web. Both are per knowledge base (`knowledge_base`), and the
report counts only verdicts made on what its reader may read (`access_scope`).

Questions are personal data: a verdict's `missing` aspects quote them. Each verdict records who
asked (`asker`, the principal's name), and the report shows a caller who does not read the whole
base only its own questions; the base's admins see everyone's. Verdicts older than
`JUDGEMENTS_RETENTION_DAYS` are left out of the report and deleted when a process first logs.
"""

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cachetools import TTLCache
from elasticsearch import ApiError, Elasticsearch, NotFoundError, helpers

from core.config import Settings
from core.store import wait_until_readable
from retrieval.conflicts import Conflict
from service.graph.schemas import EvaluationStep, GapAspect, GapConflict, GapReport, Judgement

logger = logging.getLogger(__name__)

JUDGEMENTS_MAPPING: dict[str, Any] = {
    "dynamic": "strict",
    "properties": {
        "query_id": {"type": "keyword"},
        "question": {"type": "keyword", "ignore_above": 2048},
        "knowledge_base": {"type": "keyword"},
        "access_scope": {"type": "keyword"},  # retrieval.lists.DocumentAccess.scope of the asking caller
        "asker": {"type": "keyword"},  # the principal who asked: readers see only their own
        "contexts_hash": {"type": "keyword"},
        "enough": {"type": "boolean"},
        "missing": {"type": "keyword", "ignore_above": 512},
        "reason": {"type": "text", "index": False},
        "web_query": {"type": "keyword", "ignore_above": 512},
        "with_web": {"type": "boolean"},
        "needed_web": {"type": "boolean"},
        "source": {"type": "keyword"},
        # Sources the answer rested on that disagree: the point, and the sources by name.
        "conflicts": {
            "type": "nested",
            "properties": {
                "claim": {"type": "keyword", "ignore_above": 512},
                "sources": {"type": "keyword", "ignore_above": 512},
            },
        },
        "created_at": {"type": "date"},
    },
}


class JudgementMemory:
    """Process-wide verdict cache (LRU, entries expire after `ttl_s`) plus the Elasticsearch judgement log."""

    def __init__(
        self,
        es: Elasticsearch | None,
        index: str,
        *,
        cache_size: int,
        ttl_s: float,
        replicas: int,
        retention_days: int = 90,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.es = es
        self.replicas = replicas
        self.retention_days = retention_days
        self.index = index
        self._cache: TTLCache[str, Judgement] = TTLCache(maxsize=cache_size, ttl=ttl_s, timer=clock)
        self._lock = threading.Lock()  # cachetools caches are not thread-safe
        self._index_ready = False

    @classmethod
    def from_settings(
        cls, es: Elasticsearch | None, settings: Settings, clock: Callable[[], float] = time.monotonic
    ) -> "JudgementMemory":
        """The memory of every knowledge base, logged to `JUDGEMENTS_INDEX` (a test may pass a clock)."""
        return cls(
            es,
            settings.judgements_index,
            cache_size=settings.judgement_cache_size,
            ttl_s=settings.judgement_cache_ttl_s,
            replicas=settings.es_replicas,
            retention_days=settings.judgements_retention_days,
            clock=clock,
        )

    @staticmethod
    def _key(scope: "VerdictScope", question: str, contexts_hash: str) -> str:
        parts = (scope.knowledge_base, scope.access_scope, scope.asker, question, contexts_hash)
        return hashlib.sha256("\x00".join(parts).encode()).hexdigest()

    def cached(self, scope: "VerdictScope", question: str, contexts_hash: str) -> Judgement | None:
        key = self._key(scope, question, contexts_hash)
        with self._lock:
            found = self._cache.get(key)
        return found.model_copy() if found is not None else None

    def remember(self, scope: "VerdictScope", question: str, contexts_hash: str, evaluation: Judgement) -> None:
        with self._lock:
            self._cache[self._key(scope, question, contexts_hash)] = evaluation.model_copy()

    def log(
        self,
        scope: "VerdictScope",
        query_id: str,
        question: str,
        contexts_hash: str,
        step: EvaluationStep,
        conflicts: Sequence[Conflict] = (),
    ) -> None:
        """Append one verdict and the conflicts found among its sources (blocking: call it from a
        worker thread)."""
        if self.es is None:
            return
        self._ensure_index()
        self.es.index(
            index=self.index,
            document={
                "query_id": query_id,
                "question": question,
                "knowledge_base": scope.knowledge_base,
                "access_scope": scope.access_scope,
                "asker": scope.asker,
                "contexts_hash": contexts_hash,
                "enough": step.enough,
                "missing": step.missing,
                "reason": step.reason,
                "web_query": step.web_query,
                "with_web": step.with_web,
                "needed_web": not step.enough and bool(step.missing),
                "source": step.source,
                "conflicts": [{"claim": c.claim, "sources": [source.title for source in c.sources]} for c in conflicts],
                "created_at": datetime.now(UTC).isoformat(),
            },
        )

    def _ensure_index(self) -> None:
        es = self.es
        if self._index_ready or es is None:
            return
        try:
            es.indices.create(
                index=self.index, mappings=JUDGEMENTS_MAPPING, settings={"number_of_replicas": self.replicas}
            )
        except ApiError as err:
            if err.meta.status != 400 or "resource_already_exists" not in str(err):
                raise
            # A log written before knowledge bases had access scopes: add the field in place.
            es.indices.put_mapping(index=self.index, properties=JUDGEMENTS_MAPPING["properties"])
        wait_until_readable(es, self.index, lambda: es.options(ignore_status=404).count(index=self.index))
        self._index_ready = True
        self.forget_old()

    def forget_old(self) -> int:
        """Delete the verdicts older than the retention (blocking); how many were deleted."""
        if self.es is None:
            return 0
        old = {"range": {"created_at": {"lt": f"now-{self.retention_days}d"}}}
        hits = helpers.scan(self.es, index=self.index, query={"query": old}, _source=False)
        deletions = ({"_op_type": "delete", "_index": self.index, "_id": hit["_id"]} for hit in hits)
        deleted, _ = helpers.bulk(self.es, deletions, raise_on_error=False, refresh=True)
        return deleted


@dataclass(frozen=True)
class VerdictScope:
    """Whose verdict it is: the base it was made on and what the asking caller may read there."""

    knowledge_base: str
    access_scope: str  # `DocumentAccess.scope`: "*" for everything
    asker: str = ""  # the principal asking ("" for the command line, which reads everything)


def _report_aggregations(top: int) -> dict[str, Any]:
    """Distinct questions, those that needed the web, the missing aspects of verdicts on local
    passages only, and the points on which sources disagreed (with the sources by name)."""
    return {
        "questions": {"cardinality": {"field": "query_id"}},
        "needing_web": {
            "filter": {"term": {"needed_web": True}},
            "aggs": {"questions": {"cardinality": {"field": "query_id"}}},
        },
        "gaps": {
            "filter": {"bool": {"filter": [{"term": {"enough": False}}, {"term": {"with_web": False}}]}},
            "aggs": {"missing": {"terms": {"field": "missing", "size": top}}},
        },
        "conflicts": {
            "nested": {"path": "conflicts"},
            "aggs": {
                "claims": {
                    "terms": {"field": "conflicts.claim", "size": top},
                    "aggs": {"sources": {"terms": {"field": "conflicts.sources", "size": 10}}},
                }
            },
        },
    }


def knowledge_gap_report(es: Elasticsearch, settings: Settings, scope: VerdictScope, top: int = 20) -> GapReport:
    """Most frequent missing aspects of a knowledge base and the share of questions needing the web.

    Missing aspects count verdicts made on local passages only (`with_web=false`): those are the
    base's gaps, whatever the web later supplied. A question needed the web when any of its
    verdicts was "not enough" with something named missing. Only verdicts of `scope`'s base within
    the retention count, and unless the reader reads everything (`*`: the base's admins), only its
    own questions, asked with what it reads now or less: no one else's words, nor a verdict on
    restricted passages.
    """
    if top < 1:
        raise ValueError(f"top must be at least 1, got {top}")
    index = settings.judgements_index
    readers: list[dict[str, Any]] = [
        {"term": {"knowledge_base": scope.knowledge_base}},
        {"range": {"created_at": {"gte": f"now-{settings.judgements_retention_days}d"}}},
    ]
    if scope.access_scope != "*":
        readers.append({"terms": {"access_scope": sorted({scope.access_scope, ""})}})
        readers.append({"term": {"asker": scope.asker}})
    try:
        body = es.search(
            index=index,
            size=0,
            query={"bool": {"filter": readers}},
            aggs=_report_aggregations(top),
        ).body
    except NotFoundError:
        return GapReport(
            index=index,
            knowledge_base=scope.knowledge_base,
            total_questions=0,
            questions_needing_web=0,
            web_share=0.0,
            evaluations=0,
            top_missing=[],
        )
    total = int(body["aggregations"]["questions"]["value"])
    needing = int(body["aggregations"]["needing_web"]["questions"]["value"])
    return GapReport(
        index=index,
        knowledge_base=scope.knowledge_base,
        total_questions=total,
        questions_needing_web=needing,
        web_share=round(needing / total, 4) if total else 0.0,
        evaluations=int(body["hits"]["total"]["value"]),
        top_missing=[
            GapAspect(aspect=b["key"], count=b["doc_count"]) for b in body["aggregations"]["gaps"]["missing"]["buckets"]
        ],
        conflicts=[
            GapConflict(claim=b["key"], count=b["doc_count"], sources=[s["key"] for s in b["sources"]["buckets"]])
            for b in body["aggregations"]["conflicts"]["claims"]["buckets"]
        ],
    )
