"""An unexpected error: a 500 naming an error id, and exactly one traceback in the log."""

import dataclasses
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from elasticsearch import Elasticsearch
from fastapi import FastAPI

from core.config import Settings
from core.embeddings import Embedder
from core.kbs import create_kb, delete_kb
from service.app import create_app
from tests.serving import serve


class ExplodingRetriever:
    def search(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("secret internals")


@pytest.fixture
def app(settings: Settings, embedder: Embedder, es: Elasticsearch) -> Iterator[FastAPI]:
    """The app over an empty base (which exists, so the request reaches the retriever)."""
    create_kb(es, settings.es_index, embedder, chunk_size=settings.chunk_size, chunk_overlap=settings.chunk_overlap)
    yield create_app(settings, embedder=embedder)
    delete_kb(es, settings.es_index)


@contextmanager
def uvicorn_records(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """uvicorn's logger does not propagate to the root logger, and uvicorn resets its handlers
    when it starts: attach the capture once the server runs."""
    uvicorn_logger = logging.getLogger("uvicorn")
    uvicorn_logger.addHandler(caplog.handler)
    try:
        yield
    finally:
        uvicorn_logger.removeHandler(caplog.handler)


def test_an_unexpected_error_is_a_500_with_an_id_and_one_traceback(
    app: FastAPI, caplog: pytest.LogCaptureFixture
) -> None:
    with serve(app) as url, uvicorn_records(caplog):
        app.state.services = dataclasses.replace(app.state.services, retriever=ExplodingRetriever())
        response = httpx.post(f"{url}/search", json={"query": "孟获"})
        metrics = httpx.get(f"{url}/metrics").text
    assert response.status_code == 500
    detail = response.json()["detail"]
    match = re.fullmatch(r"internal error ([0-9a-f]{12}) \(RuntimeError\); details are in the service log", detail)
    assert match, detail
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and match.group(1) in tracebacks[0].getMessage()
    assert 'rag_errors_total{endpoint="/search",kind="internal"} 1.0' in metrics
    assert 'rag_http_requests_total{endpoint="/search",method="POST",status="500"} 1.0' in metrics
