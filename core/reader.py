"""The one reader of a knowledge base's content: every search, fetch, count and scroll of a base's
chunks goes through here, with the `Scope` of core/access.py put inside the request.

No other module searches, gets, counts or aggregates a base's index (tests/test_layout.py pins
it), so a new route or tool cannot forget the caller's document groups: it has no way to ask
without a scope. What a scope may not read is filtered inside Elasticsearch (a kNN `filter`, a
`bool.filter` around any other query), and fetched sources are checked once more (a chunk's
groups may change between a search and a fetch).
"""

from collections.abc import Iterator
from typing import Any

from elasticsearch import Elasticsearch, NotFoundError, helpers

from core.access import Scope
from core.kbs import KnowledgeBaseStats
from core.retry import ES_SEARCH, SEARCH_TIMED_OUT, retrying
from core.store import IndexNotFoundError, SearchError

# Elasticsearch's own time budget of a search (issue 58): a search over it stops on every shard and
# fails with a 503 and Retry-After (never partial results). Below the client's ES_REQUEST_TIMEOUT.
SEARCH_TIMEOUT = "10s"


def scoped_body(body: dict[str, Any], scope: Scope) -> dict[str, Any]:
    """`body` with the scope's filter inside: in a kNN search's `filter`, around any query's scoring."""
    clauses = scope.clauses
    if not clauses:
        return body
    scoped = dict(body)
    if "knn" in body:
        knn = dict(body["knn"])
        knn["filter"] = [*knn.get("filter", []), *clauses]
        scoped["knn"] = knn
    if "query" in body or "knn" not in body:
        inner = [body["query"]] if "query" in body else []
        scoped["query"] = {"bool": {"must": inner, "filter": clauses}}
    return scoped


def _kwargs(body: dict[str, Any]) -> dict[str, Any]:
    """A search body as the client's keyword arguments (`_source` is its `source`)."""
    return {("source" if key == "_source" else key): value for key, value in body.items()}


def _msearch(es: Elasticsearch, index: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The responses of `bodies` searched in `index` in one `_msearch` round trip.

    A search that misses shards fails instead of silently returning part of the index. Retry
    policy: connection errors, time-outs and 429/5xx answers are retried by the client's
    transport on another node; a search item that fails transiently (a shard copy lost with
    its node between the query and fetch phases) is re-sent once, after 0.5 s, when the
    cluster has moved on to the surviving copies; one refused for its cost (its `SEARCH_TIMEOUT`
    spent, a circuit breaker tripped) is not. Raises `IndexNotFoundError` or `SearchError`.
    """
    searches: list[dict[str, Any]] = []
    for body in bodies:
        searches += [{"index": index, "allow_partial_search_results": False}, {"timeout": SEARCH_TIMEOUT} | body]

    def once() -> list[dict[str, Any]]:
        try:
            responses: list[dict[str, Any]] = es.msearch(searches=searches)["responses"]
        except NotFoundError as err:
            raise IndexNotFoundError(index) from err
        for response in responses:
            if "error" in response:
                if response["error"].get("type") == "index_not_found_exception":
                    raise IndexNotFoundError(index)
                raise SearchError(index, response["error"], response.get("status"))
            if response.get("timed_out"):
                raise SearchError(index, {"type": SEARCH_TIMED_OUT, "reason": f"over its {SEARCH_TIMEOUT} budget"}, 504)
        return responses

    return retrying(ES_SEARCH, f"search of {index!r}")(once)


class Reader:
    """Reads of one scope: the base `scope.kb` as far as `scope.documents` may see it."""

    def __init__(self, es: Elasticsearch, scope: Scope) -> None:
        self.es = es
        self.scope = scope

    def search(self, body: dict[str, Any]) -> dict[str, Any]:
        """One search (hits, aggregations) of the scope."""
        try:
            response: dict[str, Any] = self.es.search(
                index=self.scope.kb, **_kwargs({"timeout": SEARCH_TIMEOUT} | scoped_body(body, self.scope))
            ).body
        except NotFoundError as err:
            raise IndexNotFoundError(self.scope.kb) from err
        return response

    def msearch(self, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Several searches of the scope in one round trip (partial results refused, transient failures re-sent)."""
        return _msearch(self.es, self.scope.kb, [scoped_body(body, self.scope) for body in bodies])

    def holding(self, field: str, terms: list[str]) -> set[str]:
        """Which of `terms` some chunk of the scope holds in `field` (one request: a filter per term)."""
        if not terms:
            return set()
        filters = {str(i): {"term": {field: term}} for i, term in enumerate(terms)}
        body = {"size": 0, "track_total_hits": False, "aggs": {"held": {"filters": {"filters": filters}}}}
        buckets = self.search(body)["aggregations"]["held"]["buckets"]
        return {terms[int(key)] for key, bucket in buckets.items() if bucket["doc_count"] > 0}

    def count(self, query: dict[str, Any] | None = None) -> int:
        body = scoped_body({"query": query} if query else {}, self.scope)
        try:
            return int(self.es.count(index=self.scope.kb, query=body.get("query"))["count"])
        except NotFoundError as err:
            raise IndexNotFoundError(self.scope.kb) from err

    def scan(self, body: dict[str, Any], size: int = 1000) -> Iterator[dict[str, Any]]:
        """Every hit of `body`'s query (a scroll), e.g. a base's whole corpus or a document's chunk ids."""
        try:
            yield from helpers.scan(self.es, index=self.scope.kb, query=scoped_body(body, self.scope), size=size)
        except NotFoundError as err:
            raise IndexNotFoundError(self.scope.kb) from err

    def fetch(self, ids: list[str], fields: list[str]) -> dict[str, dict[str, Any]]:
        """The `_source` `fields` of those of `ids` the scope may read, in one `mget`."""
        if not ids:
            return {}
        try:
            # realtime=False reads the refreshed view a search just saw, without a refresh check.
            docs = self.es.mget(index=self.scope.kb, ids=ids, source=[*fields, "access"], realtime=False)["docs"]
        except NotFoundError as err:
            raise IndexNotFoundError(self.scope.kb) from err
        return {
            doc["_id"]: doc["_source"]
            for doc in docs
            if doc.get("found") and self.scope.allows(doc["_source"].pop("access", None))
        }


def base_stats(es: Elasticsearch, scopes: list[Scope]) -> dict[str, KnowledgeBaseStats]:
    """Documents, chunks and the last write each scope sees of its base, in one `_msearch`."""
    if not scopes:
        return {}
    searches: list[dict[str, Any]] = []
    aggs = {"documents": {"cardinality": {"field": "doc_id"}}, "last": {"max": {"field": "indexed_at"}}}
    for scope in scopes:
        body = scoped_body({"size": 0, "track_total_hits": True, "aggs": aggs}, scope)
        searches += [{"index": scope.kb}, body]
    stats = {}
    for scope, response in zip(scopes, es.msearch(searches=searches)["responses"], strict=True):
        if "error" in response:
            continue
        last = response["aggregations"]["last"]
        stats[scope.kb] = KnowledgeBaseStats(
            documents=int(response["aggregations"]["documents"]["value"]),
            chunks=int(response["hits"]["total"]["value"]),
            last_update=last.get("value_as_string"),
        )
    return stats
