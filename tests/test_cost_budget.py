"""One tenant's heavy request costs only that tenant (issue 58, Elasticsearch's share): planted aliases
leave a base searchable, Dify's pattern clauses have a budget, a tripped circuit breaker is a 503 for
that request alone, unknown base names never read the cluster's mappings, and aliases mined from a
hidden document are no uploader's to replace. Each test is an attack of the issue, measured against
the same request when quiet (ratios, never absolute times)."""

import random
import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch

from core.aliases import MAX_PER_TERM
from core.config import Settings
from core.documents import Document
from core.embeddings import Embedder
from core.store import concrete_indices, write_corpus_terms
from core.text import ChineseTokenizer
from retrieval.retriever import Retriever
from service import kbs as service_kbs
from service.app import create_app
from service.kbs import KnowledgeBases, UnknownKnowledgeBase
from service.principals import Caller
from tests.conftest import PARAMS, knowledge_base
from tests.protocols import write_keys_file
from tests.serving import serve
from tests.test_uploads import upload

KEYS = {
    "admin": "budget-admin",
    "reader": "budget-reader",
    "writer": "budget-writer",
    "auditor": "budget-auditor",
    "stranger": "budget-none",
}
COMPANY = "青禾智能科技有限公司"
DOCUMENTS = [
    Document(
        "rules", f"{COMPANY}（以下简称“青禾科技”）员工手册。青禾科技按月发放工资，患者须知另见附录。", "rules.txt"
    ),
    Document("care", "患者应按时服药，定期复查血糖。患者如有不适，请及时就医。", "care.txt"),
    Document(
        "secret",
        "白鹭资本管理有限公司（以下简称“白鹭资本”）的并购计划。白鹭资本将于三月完成尽调，白鹭资本保密。",
        "secret.txt",
        access=["board"],
    ),
]


@pytest.fixture(scope="module")
def base(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    with knowledge_base(es, embedder, DOCUMENTS, "test-budget") as alias:
        # A dictionary (too small a corpus to learn one): a scoped caller's first search aggregates
        # which of its terms the caller's chunks hold (`Retriever.index_tokenizer`).
        write_corpus_terms(es, concrete_indices(es, alias)[0], ["白鹭资本", "青禾科技"])
        yield alias


@pytest.fixture(scope="module")
def url(es: Elasticsearch, es_url: str, base: str, embedder: Embedder) -> Iterator[str]:
    principals: list[dict[str, Any]] = [
        {"name": "admin", "key": KEYS["admin"], "kbs": {base: "admin"}},
        {"name": "reader", "key": KEYS["reader"], "kbs": {base: "read"}},
        {"name": "writer", "key": KEYS["writer"], "kbs": {base: "write"}},  # no group: the secret is hidden
        # A group of its own: its first search aggregates which dictionary terms its chunks hold.
        {"name": "auditor", "key": KEYS["auditor"], "kbs": {base: "read"}, "groups": ["audit"]},
        {"name": "stranger", "key": KEYS["stranger"]},  # no role anywhere
    ]
    jobs = f"test-budget-jobs-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        _env_file=None,
        es_url=es_url,
        es_index=base,
        jobs_index=jobs,
        keys_file=write_keys_file(principals),
        alias_weight=1.0,
    )
    with serve(create_app(settings, embedder=embedder)) as served:
        yield served
    es.options(ignore_status=404).indices.delete(index=jobs)


def client(url: str, who: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"X-API-Key": KEYS[who]}, timeout=120)


def median_ms(http: httpx.Client, base: str, query: str, times: int = 5) -> float:
    """The median time of `times` bm25 searches for `query`; every one must succeed."""
    took = []
    for _ in range(times):
        started = time.perf_counter()
        found = http.post("/search", json={"query": query, "kb": base, "mode": "bm25", "k": 5})
        took.append(time.perf_counter() - started)
        assert found.status_code == 200, found.text
    return statistics.median(took) * 1000


def planted_text(count: int) -> str:
    """The attack: one text naming `count` other names for 患者 and for the company (each twice, so that
    the corpus "confirms" it), random six-character names as a script would make them."""
    rng = random.Random(58)
    names = ["".join(chr(rng.randrange(0x4E00, 0x9FA5)) for _ in range(6)) for _ in range(count)]
    half = count // 2
    lines = [f"患者（以下简称“{name}”）。{name}。" for name in names[:half]]
    lines += [f"{COMPANY}（以下简称“{name}”）。{name}。" for name in names[half:]]
    return "\n".join(lines)


def test_planted_aliases_leave_the_base_searchable_for_everyone(url: str, base: str) -> None:
    """A group-less writer's 2,000 names for 患者 made every search with 患者 fail 502 (too many clauses)."""
    with client(url, "reader") as reader, client(url, "writer") as writer:
        quiet = {query: median_ms(reader, base, query) for query in ("患者怎样服药", f"{COMPANY}的工资")}
        planted = {"texts": [{"text": planted_text(2000), "id": "planted"}]}
        assert upload(writer, base, json=planted)["state"] == "done"
        for query, before in quiet.items():
            found = reader.post("/search", json={"query": query, "kb": base, "mode": "hybrid", "k": 5})
            assert found.status_code == 200, found.text
            terms = [expansion["term"] for expansion in found.json()["expansions"]]
            assert all(terms.count(term) <= MAX_PER_TERM for term in terms)
            assert "患者" not in terms  # a role, not a name: never expanded
            after = median_ms(reader, base, query)
            assert after < 5 * before + 100, (query, before, after)
        writer.delete(f"/kbs/{base}/documents/planted")


def test_a_dify_request_over_the_pattern_budget_is_a_4xx_in_difys_shape(url: str, base: str) -> None:
    """1,024 `contains` clauses in a 10.7 KB request kept the shared Elasticsearch busy for 15-22 s."""
    names = ["source", "doc_id", "section", "chapter_title"] * 8  # keyword fields: each a wildcard query
    many = [{"name": names, "comparison_operator": "contains", "value": "赤"} for _ in range(32)]
    few = [{"name": "source", "comparison_operator": "contains", "value": "rules"}]
    bearer = {"Authorization": f"Bearer {KEYS['reader']}"}
    answers = {}
    for label, conditions in (("many", many), ("few", few)):
        body = {
            "knowledge_id": base,
            "query": "工资",
            "retrieval_setting": {"top_k": 3},
            "metadata_condition": {"logical_operator": "or", "conditions": conditions},
        }
        answers[label] = httpx.post(f"{url}/retrieval", json=body, headers=bearer, timeout=60)
    refused = answers["many"]
    assert refused.status_code == 422 and refused.json()["error_code"] == 422, refused.text
    assert "1024 pattern clauses" in refused.json()["error_msg"] and "more than 8" in refused.json()["error_msg"]
    assert answers["few"].status_code == 200, answers["few"].text


def test_a_tripped_circuit_breaker_is_a_503_with_retry_after_for_that_request_alone(
    url: str, base: str, es: Elasticsearch
) -> None:
    """Elasticsearch's 429 circuit_breaking_exception: 503 and Retry-After, not a 502; the next request is served."""
    limit = {"indices.breaker.request.limit": "1b"}
    with client(url, "auditor") as auditor:
        es.cluster.put_settings(transient=limit)
        try:
            tripped = auditor.post("/search", json={"query": "白鹭资本的工资", "kb": base, "mode": "hybrid"})
        finally:
            es.cluster.put_settings(transient={"indices.breaker.request.limit": None})
        served = auditor.post("/search", json={"query": "白鹭资本的工资", "kb": base, "mode": "hybrid"})
    assert tripped.status_code == 503, tripped.text
    assert tripped.headers["retry-after"].isdigit() and "answered 429" in tripped.text
    assert served.status_code == 200, served.text


def test_unknown_base_names_never_read_the_clusters_mappings(
    es: Elasticsearch, embedder: Embedder, base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """180 requests naming bases that do not exist, from a key without a role, read every index's
    mappings each (the victim's median went from 45 to 322 ms); now the registry answers them."""
    reads: list[float] = []
    real = service_kbs.list_kb_names

    def counted(client: Elasticsearch) -> list[str]:
        reads.append(time.monotonic())
        return real(client)

    monkeypatch.setattr(service_kbs, "list_kb_names", counted)
    settings = Settings(_env_file=None, es_index=base)
    bases = KnowledgeBases(es, settings, Retriever(es, embedder, ChineseTokenizer(), PARAMS))
    strangers = [Caller("stranger"), Caller("reader", kbs={base: "read"})]
    for n in range(180):
        with pytest.raises(UnknownKnowledgeBase):
            bases.open(strangers[n % 2], f"no-such-base-{n}")
    assert len(reads) <= 2, f"{len(reads)} reads of every index's mappings for 180 unknown names"
    assert bases.open(strangers[1], base).kb == base  # a real base still opens


def test_an_upload_under_a_hidden_documents_id_leaves_its_aliases_and_answers_as_absent(url: str, base: str) -> None:
    """A writer replaced the aliases mined from a document it may not read by uploading any text with its id."""
    text = "任意文本，没有别名。"
    with client(url, "writer") as writer, client(url, "admin") as admin:
        views = []
        for doc_id in ("secret", "never-existed"):
            job = upload(writer, base, json={"texts": [{"text": text, "id": doc_id}]})
            views.append((job["state"], job["counts"], str(job["errors"]).replace(doc_id, "…")))
            writer.delete(f"/kbs/{base}/documents/{doc_id}")
        aliases = admin.get(f"/kbs/{base}/aliases").json()["aliases"]
    assert views[0] == views[1]
    kept = {(entry["alias"], entry["name"]): entry for entry in aliases}
    assert [source["doc_id"] for source in kept[("白鹭资本", "白鹭资本管理有限公司")]["sources"]] == ["secret"]
