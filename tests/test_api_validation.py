"""Validation before availability: bad input is a 422 naming the field on every endpoint, whatever
the state of Elasticsearch, the model and the web search (issue 12). Unreachable dependencies are
real closed ports on 127.0.0.1; the fake model server records that nothing reached it."""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from bench.service_process import free_port
from core.config import Settings
from core.embeddings import Embedder
from service.app import create_app
from tests.fakes.openai_server import FakeChatServer
from tests.serving import serve


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


STATES: dict[str, dict[str, Any]] = {
    "elasticsearch-down": {"es_url": "closed"},
    "no-model": {},
    "no-model-answer-mode-llm": {"answer_mode": "llm"},
    "model-down": {"openai_base_url": "closed", "model_name": "m"},
    "model-answering": {"openai_base_url": "fake", "model_name": "m"},
    "web-down": {"bocha_api_key": "k", "bocha_api_url": "closed"},
}

BAD_REQUESTS = [
    ("POST", "/search", {"query": "  "}, "query:"),
    ("POST", "/search", {"query": "孟获", "mode": "fuzzy"}, "mode:"),
    ("POST", "/compare", {"query": "孟获", "modes": ["vector"]}, "modes:"),
    ("POST", "/query", {"question": ""}, "question:"),
    ("POST", "/query", {"question": "孟获", "k": 0}, "k:"),
    ("POST", "/query/stream", {"question": "孟获", "web": "maybe"}, "web:"),
    ("POST", "/query/stream", {"k": 3}, "question:"),
    ("GET", "/gaps", {"top": 0}, "query.top:"),
]


@pytest.fixture(scope="module")
def model() -> Iterator[FakeChatServer]:
    """Scripted with nothing: any request reaching it would be an unscripted call, recorded."""
    with FakeChatServer() as server:
        yield server


@pytest.fixture(scope="module", params=list(STATES))
def state_url(request: pytest.FixtureRequest, es_url: str, model: FakeChatServer, embedder: Embedder) -> Iterator[str]:
    values = {"es_url": es_url, "es_index": "test-validation-never-built", **STATES[request.param]}
    for name, value in values.items():
        if value == "closed":
            values[name] = closed_port_url() + ("/v1" if name == "openai_base_url" else "")
        elif value == "fake":
            values[name] = model.base_url
    with serve(create_app(Settings(_env_file=None, **values), embedder=embedder)) as base:
        yield base


@pytest.mark.parametrize(("method", "path", "body", "field"), BAD_REQUESTS)
def test_bad_input_is_422_naming_the_field_in_every_state(
    state_url: str, model: FakeChatServer, method: str, path: str, body: dict[str, Any], field: str
) -> None:
    if method == "GET":
        response = httpx.get(f"{state_url}{path}", params=body, timeout=30)
    else:
        response = httpx.post(f"{state_url}{path}", json=body, timeout=30)
    assert response.status_code == 422, response.text
    assert response.json()["message"].startswith(field)
    assert model.requests == [] and model.gets == []  # judged before any dependency was asked
