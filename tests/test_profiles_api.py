"""A base's text profile over HTTP (retrieval/profiles): its admin turns the classical-novel profile on and
off with PATCH /kbs/{kb}, GET /kbs/{kb} shows it, and the narrative premise rule runs only while it is on."""

from collections.abc import Iterator
from typing import get_args

import httpx
import pytest
from elasticsearch import Elasticsearch

from core.documents import Document
from core.embeddings import Embedder
from retrieval.premises import PREMISE_DENIED
from retrieval.profiles import ProfileName, profiles
from retrieval.profiles.classical_novel import NAME
from tests.conftest import knowledge_base
from tests.protocols import protocol_settings, service, write_keys_file

ADMIN, READER = "profile-admin-key", "profile-reader-key"
REPORT = "赵阳率军在青石岭与孙越交战，两军相持三日。\n赵阳兵败被擒，押送孙越营中。孙越收兵回城。"
QUESTION = "赵阳在青石岭打败孙越之后去了哪里？"
COURTESY = "那人姓刘，名备，字玄德。刘备拜谢众人，刘备上马。玄德曰：“好。”刘备去了。"  # a 字 only the profile reads


@pytest.fixture(scope="module")
def base(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    documents = [
        Document("report", REPORT, "战报.txt"),
        Document("weather", "青石岭多雾，秋季尤甚。", "地志.txt"),
        Document("intro", COURTESY, "列传.txt"),
    ]
    with knowledge_base(es, embedder, documents, "test-profiles-api") as alias:
        yield alias


@pytest.fixture(scope="module")
def url(es_url: str, base: str, embedder: Embedder) -> Iterator[str]:
    principals = [
        {"name": "admin", "key": ADMIN, "kbs": {base: "admin"}},
        {"name": "reader", "key": READER, "kbs": {base: "read"}},
    ]
    with service(protocol_settings(es_url, base, None, keys_file=write_keys_file(principals)), embedder) as served:
        yield served


def client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"X-API-Key": key}, timeout=60)


def answer(url: str, base: str) -> str:
    with client(url, READER) as reader:
        response = reader.post("/query", json={"question": QUESTION, "kb": base, "web": False})
    assert response.status_code == 200, response.text
    return str(response.json()["answer"])


def test_the_admin_turns_the_profile_on_and_off_and_only_then_its_rules_run(url: str, base: str) -> None:
    with client(url, ADMIN) as admin:
        assert admin.get(f"/kbs/{base}").json()["profile"] is None
        assert PREMISE_DENIED not in answer(url, base)  # a base without the profile: the narrative rule is off
        on = admin.patch(f"/kbs/{base}", json={"profile": NAME})
        assert on.status_code == 200 and on.json()["profile"] == NAME
        assert admin.get(f"/kbs/{base}").json()["profile"] == NAME
        assert PREMISE_DENIED in answer(url, base) and "「赵阳兵败被擒，押送孙越营中。」" in answer(url, base)
        off = admin.patch(f"/kbs/{base}", json={"profile": None})
        assert off.status_code == 200 and off.json()["profile"] is None
    assert PREMISE_DENIED not in answer(url, base)


def test_the_api_names_every_profile() -> None:
    assert set(get_args(ProfileName)) == set(profiles()) == {NAME}


def test_only_an_admin_sets_it_and_only_to_a_known_profile(url: str, base: str) -> None:
    with client(url, READER) as reader:
        assert reader.patch(f"/kbs/{base}", json={"profile": NAME}).status_code == 403
    with client(url, ADMIN) as admin:
        unknown = admin.patch(f"/kbs/{base}", json={"profile": "no-such-profile"})
        extra = admin.patch(f"/kbs/{base}", json={"profile": None, "chunk_size": 5})
        assert admin.get(f"/kbs/{base}").json()["profile"] is None
    assert unknown.status_code == 422 and "classical-novel" in unknown.text
    assert extra.status_code == 422  # nothing but the profile is changed here


def test_turning_the_profile_on_mines_the_names_it_reads_and_off_forgets_them(url: str, base: str) -> None:
    """The base is not indexed again: its aliases are mined again from its chunks with the profile's
    naming rules when the profile changes (玄德 is 刘备 by 姓刘，名备，字玄德 only with it)."""
    with client(url, ADMIN) as admin:

        def pairs() -> set[tuple[str, str]]:
            listing = admin.get(f"/kbs/{base}/aliases").json()["aliases"]
            return {(entry["alias"], entry["name"]) for entry in listing}

        assert ("玄德", "刘备") not in pairs()
        assert admin.patch(f"/kbs/{base}", json={"profile": NAME}).status_code == 200
        assert ("玄德", "刘备") in pairs()
        assert admin.patch(f"/kbs/{base}", json={"profile": None}).status_code == 200
        assert ("玄德", "刘备") not in pairs()
