"""Documents over HTTP (issue 20): uploads of files and texts as background jobs, under uvicorn on
the real Elasticsearch: searchable with page and section, idempotent re-uploads, a changed file
replacing its chunks, bad files and limits, the document list and deletion."""

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch

from bench import doc_fixtures as fx
from core.config import Settings
from core.embeddings import Embedder
from core.kbs import create_kb
from service.app import create_app
from service.jobs.store import Job, JobStore, new_job_id
from tests.conftest import delete_indices
from tests.protocols import write_keys_file
from tests.serving import serve
from tests.test_loaders_formats import bad_files

QUESTION = "二甲双胍每天最多吃多少毫克？"
Files = list[tuple[str, tuple[str, bytes]]]


def files_of(*paths: Path) -> Files:
    return [("files", (path.name, path.read_bytes())) for path in paths]


def wait_for_job(client: httpx.Client, job: str, timeout_s: float = 600) -> dict[str, Any]:
    """The job's status once it has ended (done or failed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = client.get(f"/jobs/{job}")
        assert status.status_code == 200, status.text
        body: dict[str, Any] = status.json()
        if body["state"] in ("done", "failed"):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.2)


def upload(client: httpx.Client, kb: str, **request: Any) -> dict[str, Any]:
    """POST the upload (202 at once), then wait for its job to end."""
    accepted = client.post(f"/kbs/{kb}/documents", **request)
    assert accepted.status_code == 202, accepted.text
    assert accepted.headers["location"] == f"/jobs/{accepted.json()['job']}"
    return wait_for_job(client, accepted.json()["job"])


def spool_emptied(spool: Path) -> bool:
    """Whether the spool folder is empty, or becomes so within seconds (a job's folder goes just after it ends)."""
    deadline = time.monotonic() + 10
    while any(spool.iterdir()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def chunks_per_doc(es: Elasticsearch, kb: str) -> dict[str, int]:
    es.indices.refresh(index=kb)
    aggs = {"d": {"terms": {"field": "doc_id", "size": 1000}}}
    buckets = es.search(index=kb, size=0, aggs=aggs)["aggregations"]["d"]["buckets"]
    return {bucket["key"]: bucket["doc_count"] for bucket in buckets}


@pytest.fixture(scope="module")
def kb(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    """An empty base, as `POST /kbs` makes it, with the default chunking."""
    name = f"test-uploads-{uuid.uuid4().hex[:8]}"
    defaults = Settings(_env_file=None)
    create_kb(es, name, embedder, chunk_size=defaults.chunk_size, chunk_overlap=defaults.chunk_overlap)
    yield name
    delete_indices(es, name)


@pytest.fixture(scope="module")
def serving(
    es: Elasticsearch, es_url: str, kb: str, embedder: Embedder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """The service (limits small enough to test) and its spool folder."""
    spool = tmp_path_factory.mktemp("spool")
    jobs = f"test-jobs-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        _env_file=None,
        es_url=es_url,
        es_index="test-uploads-no-default-base",  # every request names its base
        upload_spool=str(spool),
        jobs_index=jobs,
        max_file_mb=0.1,
        max_upload_mb=0.5,
        max_upload_files=12,
        max_upload_texts=3,
        max_job_chunks=40,
        max_request_bytes=4096,
    )
    with serve(create_app(settings, embedder=embedder)) as url:
        yield url, spool
    es.options(ignore_status=404).indices.delete(index=jobs)


@pytest.fixture
def client(serving: tuple[str, Path]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=serving[0], timeout=120) as http:
        yield http


def test_a_pdf_and_a_docx_are_searchable_with_page_and_section_and_an_unchanged_reupload_writes_nothing(
    es: Elasticsearch, client: httpx.Client, kb: str, serving: tuple[str, Path], tmp_path: Path
) -> None:
    pdf, docx = fx.write_pdf(tmp_path / "guide.pdf"), fx.write_docx(tmp_path / "guide.docx")
    first = upload(client, kb, files=files_of(pdf, docx))
    counts = first["counts"]
    assert (first["state"], first["errors"], first["runs"]) == ("done", [], 1)
    assert (counts["files"], counts["documents"]) == (2, 2)
    assert counts["indexed"] == counts["embedded"] == counts["chunks"] == counts["new"] > 2
    assert counts["unchanged"] == counts["deleted"] == counts["failed"] == 0
    assert spool_emptied(serving[1])  # the spool folder goes with the job

    for source, page in (("guide.pdf", 3), ("guide.docx", None)):
        body = {"query": QUESTION, "kb": kb, "k": 3, "filters": {"sources": [source]}}
        hits = client.post("/search", json=body).json()["hits"]
        assert "2000 毫克" in hits[0]["text"]
        assert (hits[0]["page"], hits[0]["section"]) == (page, "第三章 药物治疗 / 3.2 用药")

    again = upload(client, kb, files=files_of(pdf, docx))
    assert again["state"] == "done"
    assert again["counts"] | {"files": 2} == counts | {
        "new": 0,
        "embedded": 0,
        "indexed": 0,
        "unchanged": counts["chunks"],
    }

    # A changed file replaces its chunks: the guide without its last two pages.
    (tmp_path / "short").mkdir()
    shorter = fx.write_docx(tmp_path / "short" / "guide.docx", fx.GUIDE[:2])
    before = chunks_per_doc(es, kb)
    changed = upload(client, kb, files=files_of(shorter))
    assert changed["state"] == "done" and changed["counts"]["deleted"] > 0
    after = chunks_per_doc(es, kb)
    assert after["guide.docx"] == changed["counts"]["chunks"] < before["guide.docx"]
    assert after["guide.pdf"] == before["guide.pdf"]


def test_bad_files_are_errors_of_their_own_and_the_good_file_of_the_same_request_is_indexed(
    es: Elasticsearch, client: httpx.Client, kb: str, tmp_path: Path
) -> None:
    expected = bad_files(tmp_path)
    good = tmp_path / "thyroid.md"
    good.write_text("# 甲亢饮食\n\n## 碘\n\n甲亢病人应当少吃含碘食物，例如海带和紫菜。\n", encoding="utf-8")
    job = upload(client, kb, files=files_of(*(tmp_path / name for name in expected), good))
    assert job["state"] == "done" and job["counts"]["files"] == len(expected) + 1
    errors = {error["file"]: error for error in job["errors"]}
    assert set(errors) == set(expected)
    for name, words in expected.items():
        assert words in errors[name]["reason"], errors[name]
    assert errors["corrupt.pdf"]["code"] == "corrupt" and errors["report.docx"]["code"] == "wrong_type"
    assert chunks_per_doc(es, kb)["thyroid.md"] == job["counts"]["indexed"] == 1

    # Nothing readable at all: the job fails and says so.
    nothing = upload(client, kb, files=files_of(tmp_path / "corrupt.pdf"))
    assert nothing["state"] == "failed" and "none of the 1 files could be read" in nothing["error"]


@pytest.mark.parametrize(
    ("request_", "status", "words"),
    [
        ({"files": [("files", ("setup.exe", b"MZ\x90\x00"))]}, 422, "'setup.exe' is not a document"),
        ({"files": [("files", ("a.md", b"# a")), ("files", ("a.md", b"# b"))]}, 422, "sent twice: a.md"),
        ({"files": [("files", ("big.md", b"x" * 600_000))]}, 413, "larger than MAX_UPLOAD_MB=0.5"),
        ({"files": [("files", (f"{n}.md", b"# n")) for n in range(13)]}, 413, "MAX_UPLOAD_FILES=12"),
        ({"data": {"access": "a"}, "files": []}, 415, "not 'application/x-www-form-urlencoded'"),
        ({"json": {"texts": [{"text": "甲"}] * 4}}, 413, "4 texts, more than MAX_UPLOAD_TEXTS=3"),
        ({"json": {"texts": [{"text": "甲。" * 20_000}]}}, 413, "more than MAX_JOB_CHUNKS=40"),
        ({"json": {"texts": [{"text": "甲", "id": "x"}, {"text": "乙", "id": "x"}]}}, 422, "given twice: x"),
        ({"json": {"texts": [{"text": " "}]}}, 422, "texts.0.text"),
        ({"content": b'{"texts": [', "headers": {"content-type": "application/json"}}, 400, "malformed JSON"),
    ],
)
def test_what_can_be_told_at_once_is_a_clear_4xx(
    client: httpx.Client, kb: str, serving: tuple[str, Path], request_: dict[str, Any], status: int, words: str
) -> None:
    response = client.post(f"/kbs/{kb}/documents", **request_)
    assert response.status_code == status, response.text
    body = response.json()
    assert words in (body["message"] if status == 422 else body["detail"])
    assert spool_emptied(serving[1])  # nothing left in the spool


def test_the_upload_route_has_its_own_body_limit_and_every_other_route_keeps_max_request_bytes(
    client: httpx.Client, kb: str
) -> None:
    # 12 files of 0.5 MB + 4096 bytes: over it, refused from the Content-Length before any parsing.
    over = client.post(f"/kbs/{kb}/documents", files=[("files", ("big.md", b"x" * 6_400_000))])
    assert over.status_code == 413
    assert "MAX_UPLOAD_FILES × MAX_UPLOAD_MB (12 × 0.5 MB) + MAX_REQUEST_BYTES" in over.json()["detail"]
    search = client.post("/search", json={"query": "甲" * 5000})
    assert search.status_code == 413 and "MAX_REQUEST_BYTES=4096" in search.json()["detail"]


def test_files_over_max_job_chunks_fail_the_job_naming_the_limit(client: httpx.Client, kb: str) -> None:
    job = upload(client, kb, files=[("files", ("long.txt", ("很长的一句话。" * 4900).encode()))])
    assert job["state"] == "failed" and "more than MAX_JOB_CHUNKS=40" in job["error"]


def test_texts_list_page_by_page_and_delete(
    es: Elasticsearch, client: httpx.Client, index_name: Callable[[str], str], embedder: Embedder
) -> None:
    kb = index_name("test-docs")
    create_kb(es, kb, embedder, chunk_size=200, chunk_overlap=20)
    texts = [
        {"text": "诸葛亮七擒孟获，使南中彻底归心。", "id": "t1", "title": "七擒孟获"},
        {"text": "关羽温酒斩华雄。", "id": "t2", "metadata": {"chapter": "5"}},
        {"text": "曹操煮酒论英雄。"},
    ]
    job = upload(client, kb, json={"texts": texts})
    assert job["state"] == "done" and job["counts"]["documents"] == job["counts"]["indexed"] == 3

    first = client.get(f"/kbs/{kb}/documents", params={"size": 2}).json()
    assert first["total"] == 3 and [d["doc_id"] for d in first["documents"]] == ["t1", "t2"]
    assert first["documents"][0] | {"indexed_at": None} == {
        "doc_id": "t1",
        "source": "t1",
        "title": "七擒孟获",
        "chunks": 1,
        "pages": None,
        "file_hash": None,
        "indexed_at": None,
        "chapter": None,  # a text given without chapters
        "chapter_title": None,
    }
    rest = client.get(f"/kbs/{kb}/documents", params={"size": 2, "after": first["next"]}).json()
    [third] = rest["documents"]
    assert third["doc_id"].startswith("text-") and rest["next"] is None

    deleted = client.delete(f"/kbs/{kb}/documents/t1")
    assert deleted.status_code == 200 and deleted.json() == {"kb": kb, "doc_id": "t1", "deleted": 1}
    assert set(chunks_per_doc(es, kb)) == {"t2", third["doc_id"]}
    assert client.delete(f"/kbs/{kb}/documents/t1").status_code == 404
    assert client.get("/kbs/test-no-such-base/documents").status_code == 404
    assert client.get(f"/jobs/{uuid.uuid4().hex}").status_code == 404


def test_documents_and_jobs_follow_roles_and_document_groups(
    es: Elasticsearch,
    es_url: str,
    embedder: Embedder,
    index_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    kb = index_name("test-docs-access")
    create_kb(es, kb, embedder, chunk_size=200, chunk_overlap=20)
    principals: list[dict[str, Any]] = [
        {"name": "admin", "key": "k-admin", "role": "admin"},
        {"name": "writer", "key": "k-writer", "kbs": {kb: "write"}},
        {"name": "nurse", "key": "k-nurse", "kbs": {kb: "read"}, "groups": ["medical"]},
        {"name": "reader", "key": "k-reader", "kbs": {kb: "read"}},
        {"name": "outsider", "key": "k-outsider", "kbs": {"test-some-other-base": "read"}},
    ]
    jobs = f"test-jobs-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        _env_file=None,
        es_url=es_url,
        es_index=kb,
        upload_spool=str(tmp_path / "spool"),
        jobs_index=jobs,
        keys_file=write_keys_file(principals),
    )
    try:
        with serve(create_app(settings, embedder=embedder)) as url:
            clients = {
                p["name"]: httpx.Client(base_url=url, headers={"X-API-Key": p["key"]}, timeout=60) for p in principals
            }
            restricted = {"texts": [{"text": "病历：患者空腹血糖 7.8。", "id": "r1"}], "access": ["medical"]}
            job = upload(clients["writer"], kb, json=restricted)
            assert job["state"] == "done"
            assert (
                upload(clients["writer"], kb, json={"texts": [{"text": "公开的说明。", "id": "p1"}]})["state"] == "done"
            )
            assert clients["reader"].post(f"/kbs/{kb}/documents", json=restricted).status_code == 403

            check_job_visibility(clients, job, url)
            check_job_list(es, clients, jobs, kb, job)
            check_job_cancelling(es, clients, jobs, kb, job, tmp_path)
            check_documents_follow_groups(es, clients, kb)
            for client in clients.values():
                client.close()
    finally:
        es.options(ignore_status=404).indices.delete(index=jobs)


Clients = dict[str, httpx.Client]


def check_job_visibility(clients: Clients, job: dict[str, Any], url: str) -> None:
    """The job: seen by its owner and the base's admins (its files may name restricted documents),
    a 404 like any unknown id to the others, readers of the base included."""
    for name in ("admin", "writer"):
        assert clients[name].get(f"/jobs/{job['id']}").json()["state"] == "done"
    for name in ("nurse", "reader"):
        assert clients[name].get(f"/jobs/{job['id']}").status_code == 404
    hidden = clients["outsider"].get(f"/jobs/{job['id']}")
    unknown = clients["outsider"].get(f"/jobs/{'0' * 32}")
    assert hidden.status_code == unknown.status_code == 404
    assert hidden.json()["detail"].replace(job["id"], "0" * 32) == unknown.json()["detail"]
    assert httpx.get(f"{url}/jobs/{job['id']}").status_code == 401  # no key


def check_job_list(es: Elasticsearch, clients: Clients, jobs: str, kb: str, job: dict[str, Any]) -> None:
    """The job list follows the same rule."""
    es.indices.refresh(index=jobs)

    def listed_jobs(name: str, **params: str) -> list[str]:
        response = clients[name].get("/jobs", params=params)
        assert response.status_code == 200, response.text
        return [listed["id"] for listed in response.json()["jobs"]]

    writers = listed_jobs("writer")
    assert len(writers) == 2 and writers[1] == job["id"]  # newest first
    assert listed_jobs("admin") == listed_jobs("admin", kb=kb, state="done") == writers
    assert listed_jobs("writer", state="failed") == []
    # `kb` is checked as every `?kb=`: a base the caller may not read (or none) is a 404.
    assert clients["writer"].get("/jobs", params={"kb": "test-other"}).status_code == 404
    assert listed_jobs("nurse") == listed_jobs("reader") == listed_jobs("outsider") == []
    assert clients["writer"].get("/jobs", params={"state": "lost"}).status_code == 422


def check_job_cancelling(
    es: Elasticsearch, clients: Clients, jobs: str, kb: str, job: dict[str, Any], tmp_path: Path
) -> None:
    """A queued job (a record no worker will take) is cancelled by its owner; one that ended is not."""
    waiting = Job(id=new_job_id(), kind="upload", kb=kb, owner="writer", params={"spool": str(tmp_path / "gone")})
    JobStore(es, jobs).create(waiting)
    assert clients["reader"].delete(f"/jobs/{waiting.id}").status_code == 404
    cancelled = clients["writer"].delete(f"/jobs/{waiting.id}")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "failed"
    assert cancelled.json()["error"] == "cancelled by writer before it started"
    assert clients["writer"].delete(f"/jobs/{waiting.id}").status_code == 409
    assert clients["admin"].delete(f"/jobs/{job['id']}").status_code == 409


def check_documents_follow_groups(es: Elasticsearch, clients: Clients, kb: str) -> None:
    """Listing, re-uploading and deleting documents follow the caller's role and groups."""

    def listed(name: str) -> list[str]:
        response = clients[name].get(f"/kbs/{kb}/documents")
        assert response.status_code == 200, response.text
        assert response.json()["total"] == len(response.json()["documents"])
        return [document["doc_id"] for document in response.json()["documents"]]

    assert listed("admin") == listed("nurse") == ["p1", "r1"]
    assert listed("reader") == listed("writer") == ["p1"]  # r1 is invisible without its group
    assert clients["outsider"].get(f"/kbs/{kb}/documents").status_code in (403, 404)

    # The same text again with groups the writer holds nothing of: the groups change, and the
    # text is embedded again (in the id space of what the writer cannot read: docs/api.md).
    public = {"texts": [{"text": "公开的说明。", "id": "p1"}]}
    regrouped = upload(clients["writer"], kb, json={**public, "access": ["medical"]})
    assert (regrouped["counts"]["new"], regrouped["counts"]["unchanged"]) == (1, 0)
    assert listed("reader") == [] and listed("nurse") == ["p1", "r1"]

    # Neither is the writer's to replace, and nothing says they exist: the same names go in as
    # documents of the writer's own, exactly as if the base had none, and the hidden ones stay.
    forged = {"texts": [{"text": "伪造的病历。", "id": "r1"}]}
    for attempt in (public, forged):
        accepted = upload(clients["writer"], kb, json=attempt)
        assert accepted["state"] == "done" and accepted["errors"] == [] and accepted["counts"]["new"] == 1
    es.indices.refresh(index=kb)
    texts = es.search(index=kb, query={"term": {"doc_id": "r1"}}, source_includes=["text", "access"])["hits"]["hits"]
    kept = {hit["_source"]["text"]: hit["_source"].get("access") or [] for hit in texts}
    assert kept == {"病历：患者空腹血糖 7.8。": ["medical"], "伪造的病历。": []}
    assert listed("reader") == listed("writer") == ["p1", "r1"]  # the writer's own two
    assert upload(clients["admin"], kb, json=public)["counts"]["new"] == 1  # the admin replaces p1 whole
    assert listed("reader") == ["p1", "r1"] and listed("nurse") == ["p1", "r1"]

    assert clients["writer"].delete(f"/kbs/{kb}/documents/r1").json()["deleted"] == 1  # its own only
    assert clients["nurse"].delete(f"/kbs/{kb}/documents/r1").status_code == 403  # read role only
    assert clients["admin"].delete(f"/kbs/{kb}/documents/r1").json()["deleted"] == 1  # the hidden one
    assert listed("nurse") == ["p1"]


def test_a_job_over_its_time_budget_stops_between_files_with_nothing_indexed(
    es: Elasticsearch, es_url: str, kb: str, embedder: Embedder, tmp_path: Path
) -> None:
    # A budget shorter than any job's first check (a read of the job store comes before it): 1 ms was
    # sometimes enough to read the first file on a quiet machine, and the count read was then 1.
    budget = 1e-9
    settings = Settings(
        _env_file=None, es_url=es_url, es_index=kb, upload_spool=str(tmp_path), job_time_budget_s=budget
    )
    before = chunks_per_doc(es, kb)
    with serve(create_app(settings, embedder=embedder)) as url, httpx.Client(base_url=url, timeout=120) as client:
        files = [("files", (f"budget-{n}.txt", f"第{n}份说明。".encode())) for n in range(3)]
        job = upload(client, kb, files=files)
    assert job["state"] == "failed" and job["error"].startswith(
        f"its time budget ran out (JOB_TIME_BUDGET_S={budget:g})"
    )
    assert job["error"].endswith("after 0 of 3 files were read: nothing was indexed")
    assert chunks_per_doc(es, kb) == before
