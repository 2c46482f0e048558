"""After a bulk load into an empty passage base: drop the copy of every document Elasticsearch keeps.

A passage base keeps its passage vectors out of `_source` (core/schema.py). Elasticsearch then
stores each original document a second time, as `_recovery_source`, for shard recovery, until a
merge finds that no retention lease needs it any more. After a bulk load it is most of the index
(《三国演义》: 42 of 70 MB) and lies in the same compressed blocks as `_source`, so every hit fetched
decompresses it too: the vector list's p50 was 6.8 ms with it and 4.7 ms without, hybrid 9.9 and
7.5 ms (docs/retrieval.md, "Latency"). What a merge may drop is bounded by the
last commit and by the retention leases, which Elasticsearch renews every 30 s; and Lucene never
merges a lone segment. So the pipeline writes a load's first batch as a segment of its own, then
`compact` flushes, waits for the leases to pass the last operation and force-merges the index to
one segment, which leaves the recovery source behind.
"""

import logging
import time
from typing import Any

from elasticsearch import Elasticsearch

logger = logging.getLogger(__name__)


def leases_caught_up(es: Elasticsearch, index: str) -> bool:
    """Whether every shard copy's retention leases retain nothing of what `index` holds: a merge then
    drops the recovery source of every document."""
    shards: dict[str, list[dict[str, Any]]] = next(
        iter(es.indices.stats(index=index, level="shards", metric="docs")["indices"].values())
    )["shards"]
    return all(
        lease["retaining_seq_no"] > copy["seq_no"]["max_seq_no"]
        for copies in shards.values()
        for copy in copies
        for lease in copy["retention_leases"]["leases"]
    )


def compact(es: Elasticsearch, index: str, wait_s: float, poll_s: float = 1.0) -> bool:
    """Wait up to `wait_s` for the leases to pass `index`'s last operation, then have Elasticsearch
    force-merge it to one segment in the background (searches go on meanwhile); False, and nothing
    merged, when they did not in time (a later merge still drops what is then unretained)."""
    es.indices.flush(index=index)  # the last commit also bounds what is retained
    deadline = time.monotonic() + wait_s
    while not leases_caught_up(es, index):
        if time.monotonic() >= deadline:
            logger.info("%s: retention leases not renewed within %.0f s, not compacted", index, wait_s)
            return False
        time.sleep(poll_s)
    es.indices.forcemerge(index=index, max_num_segments=1, wait_for_completion=False)
    return True
