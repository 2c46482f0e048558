"""The aliases API (issue 36): a base's admins read its aliases (JSON and CSV) and correct them; a pair an
admin adds expands queries as a mined one does, a pair an admin removes is not used and not mined
back by the next indexing run, bad input is a 422 whatever the base, and no one else sees them."""

import csv
import io
from collections.abc import Iterator

import httpx
import pytest
from elasticsearch import Elasticsearch

from core.access import ALL_DOCUMENTS
from core.embeddings import Embedder
from indexing.pipeline import index_documents
from tests.conftest import INDEX_OPTIONS, get_tokenizer, knowledge_base
from tests.protocols import protocol_settings, service, write_keys_file
from tests.test_aliases import DOCUMENTS

ADMIN, READER, WRITER = "aliases-admin-key", "aliases-reader-key", "aliases-writer-key"


@pytest.fixture(scope="module")
def base(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    with knowledge_base(es, embedder, DOCUMENTS, "test-aliases-api", "classical-novel") as alias:
        yield alias


@pytest.fixture(scope="module")
def url(es_url: str, base: str, embedder: Embedder) -> Iterator[str]:
    principals = [
        {"name": "admin", "key": ADMIN, "kbs": {base: "admin"}},
        {"name": "reader", "key": READER, "kbs": {base: "read"}},  # no group: 孔明's chapter is hidden
        {"name": "writer", "key": WRITER, "kbs": {base: "write"}, "groups": ["strategists"]},
    ]
    settings = protocol_settings(es_url, base, None, keys_file=write_keys_file(principals), alias_weight=1.0)
    with service(settings, embedder) as served:
        yield served


def client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"X-API-Key": key}, timeout=60)


def pairs(listing: dict[str, list[dict[str, str]]], part: str = "aliases") -> set[tuple[str, str]]:
    return {(entry["alias"], entry["name"]) for entry in listing[part]}


def expansions(url: str, base: str, query: str) -> list[tuple[str, str]]:
    with client(url, READER) as reader:
        found = reader.post("/search", json={"query": query, "kb": base, "mode": "bm25"})
    assert found.status_code == 200, found.text
    return [(e["term"], e["expansion"]) for e in found.json()["expansions"]]


def test_admins_read_every_alias_with_its_sentence_as_json_and_csv(url: str, base: str) -> None:
    with client(url, ADMIN) as admin:
        listing = admin.get(f"/kbs/{base}/aliases").json()
        sheet = admin.get(f"/kbs/{base}/aliases", params={"format": "csv"})
    found = {(e["alias"], e["name"]): e for e in listing["aliases"]}
    assert (
        found[("玄德", "刘备")]["origin"] == "mined" and "字玄德" in found[("玄德", "刘备")]["sources"][0]["sentence"]
    )
    assert ("孔明", "诸葛亮") in found  # the admin reads every group's documents
    assert sheet.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(sheet.text)))
    assert {(r["alias"], r["name"]) for r in rows} == set(found) and all(r["origin"] == "mined" for r in rows)


@pytest.mark.parametrize("key", [READER, WRITER])
def test_nobody_but_an_admin_reads_or_writes_them(url: str, base: str, key: str) -> None:
    with client(url, key) as other:
        read = other.get(f"/kbs/{base}/aliases")
        written = other.put(f"/kbs/{base}/aliases", json={"aliases": []})
    assert read.status_code == written.status_code == 403
    assert "孔明" not in read.text


BAD_BODIES = [
    ("application/json", '{"aliases": [{"alias": "刘备", "name": "刘备"}]}', "itself"),
    (
        "application/json",
        '{"aliases": [{"alias": "玄德", "name": "刘备"}, {"alias": "玄德", "name": "刘备"}]}',
        "twice",
    ),
    ("application/json", '{"aliases": [{"alias": "备", "name": "刘备"}]}', "at least 2"),
    ("application/json", '{"aliases": [{"alias": " 玄德", "name": "刘备"}]}', "pattern"),
    ("application/json", '{"aliases": [{"alias": "玄德", "name": "刘备", "note": 1}]}', "Extra inputs"),
    ("application/json", '{"aliases": [{"alias": "\\ud800x", "name": "刘备"}]}', "surrogate"),
    ("application/json", '{"aliases": ', "malformed JSON"),  # a 400, as on every route
    ("text/csv", "玄德,刘备\n", "alias,name"),
    ("text/csv", "alias,name\n玄德,玄德\n", "itself"),
    ("text/csv", "alias,name\n" + "玄" * 140_000 + ",刘备\n", "not CSV"),  # over the csv module's field limit
    ("application/json", '{"aliases": [' + ",".join(['{"alias": "甲乙", "name": "丙丁"}'] * 5001) + "]}", "5000"),
]


@pytest.mark.parametrize(("media", "body", "says"), BAD_BODIES)
def test_bad_input_is_a_4xx_naming_it_before_the_base_is_looked_at(url: str, media: str, body: str, says: str) -> None:
    with client(url, ADMIN) as admin:
        for kb in ("no-such-base", "test-aliases-api-elsewhere"):
            answer = admin.put(f"/kbs/{kb}/aliases", content=body.encode(), headers={"Content-Type": media})
            assert answer.status_code == (400 if says == "malformed JSON" else 422), answer.text
            assert says in answer.text


def test_a_body_in_another_media_type_is_a_415(url: str, base: str) -> None:
    with client(url, ADMIN) as admin:
        answer = admin.put(f"/kbs/{base}/aliases", content=b"alias,name", headers={"Content-Type": "text/plain"})
    assert answer.status_code == 415


def test_an_admins_correction_is_used_kept_by_reindexing_and_round_trips_as_csv(
    url: str, base: str, es: Elasticsearch, embedder: Embedder
) -> None:
    assert ("刘备", "玄德") in expansions(url, base, "刘备的事迹")
    assert expansions(url, base, "皇叔的事迹") == []
    with client(url, ADMIN) as admin:
        kept = [p for p in pairs(admin.get(f"/kbs/{base}/aliases").json()) if p != ("玄德", "刘备")]
        body = {"aliases": [{"alias": a, "name": n} for a, n in [*kept, ("皇叔", "刘备")]]}
        listing = admin.put(f"/kbs/{base}/aliases", json=body).json()
        assert ("玄德", "刘备") in pairs(listing, "removed") and ("皇叔", "刘备") in pairs(listing)
        assert ("刘备", "玄德") not in expansions(url, base, "刘备的事迹")  # removed: not used
        assert expansions(url, base, "皇叔的事迹") == [("皇叔", "刘备")]  # added: used at once

        summary = index_documents(
            es, DOCUMENTS, alias=base, visible=ALL_DOCUMENTS, embedder=embedder, tokenizer=get_tokenizer(),
            options=INDEX_OPTIONS,
        )  # fmt: skip
        assert summary.failed == 0
        after = admin.get(f"/kbs/{base}/aliases").json()
        assert ("玄德", "刘备") in pairs(after, "removed") and ("皇叔", "刘备") in pairs(after)  # not mined back

        sheet = admin.get(f"/kbs/{base}/aliases", params={"format": "csv"}).text
        back = admin.put(f"/kbs/{base}/aliases", content=sheet.encode(), headers={"Content-Type": "text/csv"})
        assert back.status_code == 200 and back.json() == after  # the spreadsheet sent back unchanged: no change
