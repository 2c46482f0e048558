"""Access holds inside every search: principals, roles per knowledge base and document groups.

Two bases, restricted documents inside each, five principals. Every endpoint that returns chunks
is asked by every principal, and no response may carry the id, doc id, title or text of a chunk
its principal may not read. The restricted documents are the best matches of the queries, so a
filter applied after the search (instead of inside kNN and BM25) would return too few hits.
"""

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from elasticsearch import Elasticsearch

from core.documents import Document
from core.embeddings import Embedder
from core.schema import Mode
from service.app import create_app
from tests.conftest import knowledge_base
from tests.protocols import write_keys_file
from tests.serving import serve
from tests.test_api import make_settings

MED_DOCS = [
    Document("med-public", "高血糖患者应控制饮食，定期复查。", "guide.md", title="糖尿病公开指南"),
    Document(
        "med-doctors",
        "高血糖胰岛素剂量调整：高血糖患者的胰岛素剂量按体重计算，胰岛素剂量每三日调整。",
        "dose.md",
        title="医生内部剂量表",
        access=["doctors"],
    ),
    Document(
        "med-nurses",
        "高血糖护理：胰岛素剂量核对与注射部位轮换，高血糖巡查记录。",
        "care.md",
        title="护理内部记录",
        access=["nurses"],
    ),
]
HAN_DOCS = [
    Document("han-public", "赤壁之战中孙刘联军大败曹军。", "history.md", title="赤壁公开史料"),
    Document(
        "han-secret",
        "赤壁火攻部署：黄盖诈降，火攻部署在东南风起时，赤壁火攻部署绝密。",
        "plan.md",
        title="军师密函",
        access=["strategists"],
    ),
]
QUERIES = {"med": "高血糖 胰岛素 剂量", "han": "赤壁 火攻 部署"}
# A phrase of each document that only a response carrying that document (or its quote) contains.
PHRASES = {
    "med-public": "控制饮食",
    "med-doctors": "按体重计算",
    "med-nurses": "注射部位轮换",
    "han-public": "孙刘联军",
    "han-secret": "黄盖诈降",
}


@dataclass(frozen=True)
class Principal:
    name: str
    key: str
    readable_docs: frozenset[str]  # doc ids
    readable_kbs: frozenset[str]  # "med", "han"


@dataclass(frozen=True)
class World:
    url: str
    kbs: dict[str, str]  # "med"/"han" -> alias
    chunk_docs: dict[str, str]  # chunk id -> doc id
    principals: list[Principal]


ALL = frozenset(PHRASES)


@pytest.fixture(scope="module")
def world(es_url: str, es: Elasticsearch, embedder: Embedder) -> Iterator[World]:
    with (
        knowledge_base(es, embedder, MED_DOCS, "test-acl-med") as med,
        knowledge_base(es, embedder, HAN_DOCS, "test-acl-han") as han,
    ):
        principals = [
            Principal("admin", "key-admin", ALL, frozenset({"med", "han"})),
            Principal(
                "alice", "key-alice", frozenset({"med-public", "med-doctors", "han-public"}), frozenset({"med", "han"})
            ),
            Principal("bob", "key-bob", frozenset({"med-public"}), frozenset({"med"})),
            Principal("carol", "key-carol", frozenset({"han-public", "han-secret"}), frozenset({"han"})),
            Principal("nobody", "key-nobody", frozenset(), frozenset()),
        ]
        keys = write_keys_file(
            [
                {"name": "admin", "key": "key-admin", "role": "admin"},
                {"name": "alice", "key": "key-alice", "kbs": {med: "read", han: "read"}, "groups": ["doctors"]},
                {"name": "bob", "key": "key-bob", "kbs": {med: "write"}},
                {"name": "carol", "key": "key-carol", "kbs": {han: "admin"}},
                {"name": "nobody", "key": "key-nobody", "groups": ["doctors", "nurses", "strategists"]},
            ]
        )
        chunk_docs = {}
        for alias in (med, han):
            es.indices.refresh(index=alias)
            for hit in es.search(index=alias, size=100, source_includes=["doc_id"])["hits"]["hits"]:
                chunk_docs[hit["_id"]] = hit["_source"]["doc_id"]
        settings = make_settings(es_url, med, keys_file=keys, judgements_index=f"{med}-judgements")
        with serve(create_app(settings, embedder=embedder)) as url:
            yield World(url, {"med": med, "han": han}, chunk_docs, principals)


def leaked(world: World, principal: Principal, body: str) -> list[str]:
    """What of `body` the principal may not read: chunk ids, doc ids, titles and phrases of other documents."""
    forbidden = ALL - principal.readable_docs
    titles = {doc.doc_id: doc.title for doc in [*MED_DOCS, *HAN_DOCS]}
    found = [marker for doc in forbidden for marker in (doc, titles[doc], PHRASES[doc]) if marker in body]
    found += [chunk for chunk, doc in world.chunk_docs.items() if doc in forbidden and chunk in body]
    return found


def requests_for(world: World, kb: str) -> list[tuple[str, str, dict | None]]:
    """(method, path, JSON body) of every chunk-returning request on one base."""
    alias, query = world.kbs[kb], QUERIES[kb]
    calls: list[tuple[str, str, dict | None]] = []
    for mode in Mode:
        for k in (1, 10):
            calls.append(("POST", "/search", {"query": query, "kb": alias, "mode": mode.value, "k": k}))
    calls.append(("POST", "/compare", {"query": query, "kb": alias, "modes": [m.value for m in Mode]}))
    calls.append(("POST", "/query", {"question": query, "kb": alias}))
    calls.append(("POST", "/query/stream", {"question": query, "kb": alias}))
    calls.append(("GET", f"/gaps?kb={alias}", None))
    calls.append(("GET", f"/kbs/{alias}", None))
    calls.append(("GET", f"/kbs/{alias}/documents", None))
    calls.append(
        (
            "POST",
            "/retrieval",
            {"knowledge_id": alias, "query": query, "retrieval_setting": {"top_k": 10, "score_threshold": 0}},
        )
    )
    chat = {"model": f"kb:{alias}", "messages": [{"role": "user", "content": query}]}
    calls.append(("POST", "/v1/chat/completions", chat))
    calls.append(("POST", "/v1/chat/completions", chat | {"stream": True}))
    return calls


def test_no_principal_ever_receives_what_it_may_not_read(world: World) -> None:
    tried, leaks = 0, []
    with httpx.Client(base_url=world.url, timeout=120) as client:
        for principal in world.principals:
            headers = {"Authorization": f"Bearer {principal.key}"}
            for kb in ("med", "han"):
                for method, path, body in requests_for(world, kb):
                    response = client.request(method, path, json=body, headers=headers)
                    tried += 1
                    leaks += [(principal.name, path, marker) for marker in leaked(world, principal, response.text)]
                    if kb in principal.readable_kbs:
                        assert response.status_code == 200, (principal.name, path, response.text)
                    else:  # absent to them: no hint it exists (a key with no base at all: 403)
                        assert response.status_code in (403, 404), (principal.name, path, response.status_code)
            for path in ("/kbs", "/v1/models"):
                response = client.get(path, headers=headers)
                tried += 1
                listed = {kb for kb, alias in world.kbs.items() if alias in response.text}
                assert listed == principal.readable_kbs, (principal.name, path, response.text)
    print(f"access: {tried} requests across {len(world.principals)} principals, {len(leaks)} leaks")
    assert leaks == [] and tried > 150


def test_the_filter_is_inside_knn_and_bm25_so_k_1_still_finds_the_allowed_chunk(world: World) -> None:
    """The restricted chunks rank above the public one; with k=1 the public one must still come back."""
    alias = world.kbs["med"]
    for mode in ("vector", "bm25", "bigram", "hybrid"):
        body = {"query": QUERIES["med"], "kb": alias, "mode": mode, "k": 1}
        top = {}
        for who in ("admin", "bob"):
            response = httpx.post(f"{world.url}/search", json=body, headers={"X-API-Key": f"key-{who}"}, timeout=60)
            assert response.status_code == 200, response.text
            top[who] = [hit["doc_id"] for hit in response.json()["hits"]]
        assert top["admin"] != ["med-public"], (mode, top)  # unfiltered, a restricted chunk wins
        assert top["bob"] == ["med-public"], (mode, top)


def test_wrong_or_missing_keys_and_roles(world: World) -> None:
    alias = world.kbs["med"]
    search = {"query": "高血糖", "kb": alias}
    assert httpx.post(f"{world.url}/search", json=search).status_code == 401
    wrong = httpx.post(f"{world.url}/search", json=search, headers={"X-API-Key": "nope"})
    assert wrong.status_code == 401 and alias not in wrong.text
    nobody = httpx.post(f"{world.url}/search", json=search, headers={"X-API-Key": "key-nobody"})
    assert nobody.status_code == 403 and alias not in nobody.text and world.kbs["han"] not in nobody.text
    # carol may not read med: the same 404 as a base that does not exist, naming only her own base
    unknown = httpx.post(f"{world.url}/search", json=search, headers={"X-API-Key": "key-carol"})
    absent = httpx.post(f"{world.url}/search", json=search | {"kb": "no-such-base"}, headers={"X-API-Key": "key-carol"})
    assert unknown.status_code == absent.status_code == 404
    assert world.kbs["han"] in unknown.text and json.loads(unknown.text)["detail"].count(",") == 0
    # deleting a base needs its admin role: bob writes med but is not its admin
    assert httpx.delete(f"{world.url}/kbs/{alias}", headers={"X-API-Key": "key-bob"}).status_code == 403
    assert httpx.post(f"{world.url}/kbs", json={"name": "x-new"}, headers={"X-API-Key": "key-bob"}).status_code == 403
    bad = httpx.post(f"{world.url}/kbs", json={"name": "Bad Name"}, headers={"X-API-Key": "key-admin"})
    assert bad.status_code == 422
    clash = httpx.post(f"{world.url}/kbs", json={"name": alias}, headers={"X-API-Key": "key-admin"})
    assert clash.status_code == 409


def test_a_job_is_seen_by_its_owner_and_the_bases_admins_only(world: World) -> None:
    """An upload's job names its files and errors: a reader without the document's groups must not see it."""
    alias = world.kbs["med"]
    files = {"files": ("ward.md", "病区排班：夜班由主任医师值守。".encode(), "text/markdown")}
    accepted = httpx.post(
        f"{world.url}/kbs/{alias}/documents", files=files, data={"access": "doctors"}, headers={"X-API-Key": "key-bob"}
    )
    assert accepted.status_code == 202, accepted.text
    job = accepted.json()["job"]
    seen = {}
    for who in ("bob", "admin", "alice", "carol", "nobody"):
        response = httpx.get(f"{world.url}/jobs/{job}", headers={"X-API-Key": f"key-{who}"})
        seen[who] = response.status_code
        if response.status_code != 200:
            assert "ward.md" not in response.text
    assert seen == {"bob": 200, "admin": 200, "alice": 404, "carol": 404, "nobody": 404}
    # bob uploaded it but holds no `doctors` group: he cannot read the document it made.
    for _ in range(120):
        if httpx.get(f"{world.url}/jobs/{job}", headers={"X-API-Key": "key-bob"}).json()["state"] in ("done", "failed"):
            break
        time.sleep(0.5)
    listed = {
        who: [
            d["source"]
            for d in httpx.get(f"{world.url}/kbs/{alias}/documents", headers={"X-API-Key": f"key-{who}"}).json()[
                "documents"
            ]
        ]
        for who in ("bob", "alice")
    }
    assert "ward.md" not in listed["bob"] and "ward.md" in listed["alice"]
