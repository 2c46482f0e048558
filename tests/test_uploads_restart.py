"""An upload job outlives its process: `python -m service` SIGKILLed mid-job, then started again,
resumes the job from its spooled file and ends with exactly the chunks of an uninterrupted run;
a job whose spooled files are gone is reported failed, with the reason, never left half-done.
The embedder is `bench.embedding_stub` behind the real OpenAI client: fast, and slow enough per
batch to be caught mid-job."""

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch

from bench.embedding_stub import EmbeddingStub
from bench.service_process import ServiceProcess
from core.config import Settings
from core.documents import document_chunks
from core.embeddings import load_embedder
from core.kbs import create_kb
from indexing.loaders import load_paths
from tests.conftest import LOAD_LIMITS, REPO_ROOT, chunks_written, delete_indices, subprocess_env
from tests.test_indexing_cli import write_novel
from tests.test_uploads import chunks_per_doc

CHUNK_SIZE, CHUNK_OVERLAP = 60, 10


@pytest.fixture
def stub() -> Iterator[EmbeddingStub]:
    with EmbeddingStub(delay=0.25) as server:
        yield server


def job_status(service: ServiceProcess, job: str) -> dict[str, Any]:
    response = httpx.get(f"{service.url}/jobs/{job}", timeout=30)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def ended(service: ServiceProcess, job: str, timeout_s: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while (status := job_status(service, job))["state"] not in ("done", "failed"):
        assert time.monotonic() < deadline, (status, service.log())
        time.sleep(0.2)
    return status


def service_env(stub: EmbeddingStub, es_url: str, kb: str, jobs: str, spool: Path) -> dict[str, str]:
    """A service embedding one chunk per request, so that a kill lands mid-way through a job."""
    return {
        "EMBEDDER": "openai:stub",
        "OPENAI_BASE_URL": stub.base_url,
        "OPENAI_API_KEY": "stub-key",
        "ES_URL": es_url,
        "ES_INDEX": kb,
        "UPLOAD_SPOOL": str(spool),
        "JOBS_INDEX": jobs,
        "EMBED_BATCH_SIZE": "1",
        "JOB_PROGRESS_INTERVAL_S": "0.2",
        "LOG_LEVEL": "WARNING",
    }


def test_a_job_killed_mid_way_is_resumed_without_duplicates_and_one_without_its_files_is_failed(
    es: Elasticsearch, es_url: str, stub: EmbeddingStub, tmp_path: Path
) -> None:
    kb, jobs = f"test-restart-{uuid.uuid4().hex[:8]}", f"test-jobs-{uuid.uuid4().hex[:8]}"
    spool, workdir = tmp_path / "spool", tmp_path / "cwd"
    workdir.mkdir()
    embedder = load_embedder("openai:stub", Settings(_env_file=None, openai_base_url=stub.base_url, openai_api_key="k"))
    create_kb(es, kb, embedder, chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    novel, other = tmp_path / "novel.txt", tmp_path / "other.txt"
    write_novel(novel, chapters=6, sentences=8)
    write_novel(other, chapters=1, sentences=2)
    expected = {
        document.doc_id: {chunk.id for chunk in document_chunks(document, CHUNK_SIZE, CHUNK_OVERLAP)}
        for document in load_paths([novel], LOAD_LIMITS).documents
    }
    env = service_env(stub, es_url, kb, jobs, spool)
    service = ServiceProcess(subprocess_env(PYTHONPATH=str(REPO_ROOT), **env), workdir, workdir / "service.log")
    try:
        service.start()
        first = httpx.post(f"{service.url}/kbs/{kb}/documents", files=[("files", ("novel.txt", novel.read_bytes()))])
        second = httpx.post(f"{service.url}/kbs/{kb}/documents", files=[("files", ("other.txt", other.read_bytes()))])
        assert first.status_code == second.status_code == 202, (first.text, second.text)
        resumed, lost = first.json()["job"], second.json()["job"]
        while chunks_written(es, kb) < 3:
            assert job_status(service, resumed)["state"] in ("queued", "running"), service.log()
            time.sleep(0.05)
        under_way = job_status(service, resumed)
        assert under_way["state"] == "running" and under_way["counts"]["chunks"] > 0  # progress while it runs
        assert job_status(service, lost)["state"] == "queued"  # JOB_CONCURRENCY=1: it waits its turn
        service.kill()
        partial = chunks_written(es, kb)
        assert 3 <= partial < sum(map(len, expected.values()))

        for path in (spool / lost).iterdir():  # the second job's spooled file is lost with the machine
            for file in path.iterdir():
                file.unlink()
        service.start()
        done = ended(service, resumed)
        assert (done["state"], done["runs"], done["errors"]) == ("done", 2, [])
        assert done["counts"]["unchanged"] >= partial and done["counts"]["chunks"] == sum(map(len, expected.values()))
        failed = ended(service, lost)
        assert failed["state"] == "failed" and "its uploaded files are gone" in failed["error"]
        assert "upload them again" in failed["error"]

        assert chunks_per_doc(es, kb) == {doc_id: len(ids) for doc_id, ids in expected.items()}
        ids = {hit["_id"] for hit in es.search(index=kb, size=1000, source=False)["hits"]["hits"]}
        assert ids == set().union(*expected.values())
        assert not any(spool.iterdir())  # both jobs' spool folders went when they ended
    finally:
        service.stop()
        delete_indices(es, kb)
        es.options(ignore_status=404).indices.delete(index=jobs)
