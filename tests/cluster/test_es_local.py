"""`scripts/es-local` never strands data (issue 23): a single node and a 3-node cluster started on
the same port keep data folders of their own, and `start` says ready only when every node sees
the elected master and all the nodes.

The nodes are the test's own (HTTP 9270-9272, transport 9370-9372, or the next free block of
ten: `claim_ports`; 512 MB heaps; a fresh data folder), never the shared node on 9200 nor the
fault tests' cluster on 9250-9252. Marker `cluster`, like the fault tests: CI runs it, a
`-m 'not cluster'` run leaves it out.
"""

import contextlib
from collections.abc import Iterator
from typing import cast

import pytest
from elasticsearch import Elasticsearch

from tests.es_local_nodes import TRANSPORT_OFFSET, EsLocalNodes, claim_ports, own_nodes

pytestmark = pytest.mark.cluster

FIRST_PORT, NODES = 9270, 3


@pytest.fixture
def nodes() -> Iterator[EsLocalNodes]:
    with contextlib.ExitStack() as stack:
        port = claim_ports(stack, FIRST_PORT, NODES)
        yield stack.enter_context(own_nodes(lambda data: EsLocalNodes(data, port, port + TRANSPORT_OFFSET)))


def index_names(es: Elasticsearch) -> set[str]:
    return set(es.indices.get(index="*").body)


def assert_ready_from_every_node(nodes: EsLocalNodes, count: int) -> None:
    """Each node on its own, asked at once and without retries, forwards to one elected master that sees `count` nodes."""
    masters = set()
    for url in nodes.urls(count):
        with Elasticsearch(url, request_timeout=10, max_retries=0) as node:
            assert node.cluster.health()["number_of_nodes"] == count
            masters.add(cast(list[dict[str, str]], node.cat.master(format="json").body)[0]["node"])
    assert len(masters) == 1, masters


def test_one_node_and_three_on_the_same_port_keep_their_own_data(nodes: EsLocalNodes) -> None:
    port, transport = nodes.port, nodes.transport_port
    nodes.run("start")
    with nodes.client(1) as single:
        single.indices.create(index="single-kept", settings={"number_of_replicas": 0})
        single.index(index="single-kept", id="1", document={"text": "桃园三结义"}, refresh=True)

    refused = nodes.attempt("start", "--nodes", str(NODES))
    assert refused.returncode == 1
    assert f"a cluster of 1 nodes is running on port {port}: stop it first" in refused.stderr

    nodes.run("stop")
    nodes.run("start", "--nodes", str(NODES))
    assert_ready_from_every_node(nodes, NODES)
    with nodes.client(NODES) as cluster:
        assert "single-kept" not in index_names(cluster)
        cluster.indices.create(index="cluster-kept", settings={"number_of_shards": 3, "number_of_replicas": 1})
        cluster.index(index="cluster-kept", id="1", document={"text": "三顾茅庐"}, refresh=True)
        assert cluster.cluster.health(index="cluster-kept", wait_for_status="green", timeout="60s")["status"] == "green"
        assert cluster.count(index="cluster-kept")["count"] == 1
    status = nodes.run("status")
    assert f"{nodes.data}/node-{port}: 1 node, HTTP {port}, 0 running" in status
    assert (
        f"{nodes.data}/cluster-{port}-{NODES}-nodes: {NODES} nodes, HTTP {port}-{port + NODES - 1}, "
        f"transport {transport}-{transport + NODES - 1}, the current cluster on this port, {NODES} running"
    ) in status

    nodes.run("stop")
    nodes.run("start")
    with nodes.client(1) as single:
        assert index_names(single) == {"single-kept"}
        assert single.get(index="single-kept", id="1")["_source"] == {"text": "桃园三结义"}
    status = nodes.run("status")
    assert (
        f"{nodes.data}/node-{port}: 1 node, HTTP {port}, transport random, the current cluster on this port, 1 running"
        in status
    )
    assert (
        f"{nodes.data}/cluster-{port}-{NODES}-nodes: {NODES} nodes, HTTP {port}-{port + NODES - 1}, 0 running" in status
    )
