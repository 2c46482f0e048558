"""The evaluation and fusion routes over real HTTP: upload a question set (bad lines listed), run an
evaluation in the background, its report and plot, then `/search` of that base uses the chosen
fusion and names it, other bases keep the default; a person pins and resets it."""

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch
from pydantic import ValidationError

from core.config import Settings
from core.documents import Document
from core.embeddings import Embedder
from core.schema import LIST_MODES
from service.app import create_app
from service.http.routes.evaluation import FusionPin
from tests.conftest import TEST_INDICES, knowledge_base
from tests.fakes.openai_server import FakeChatServer
from tests.protocols import write_keys_file
from tests.serving import serve
from tests.test_evaluate import MEDICAL, question_lines

JOBS = f"test-eval-jobs-{uuid.uuid4().hex[:8]}"  # the evaluations' job index, this module's own


@pytest.fixture(scope="module")
def bases(es: Elasticsearch, embedder: Embedder) -> Iterator[tuple[str, str]]:
    other = [Document(doc_id="note", text="高血压患者每天食盐不超过5克。", source="note")]
    with (
        knowledge_base(es, embedder, MEDICAL.documents, "test-api-eval") as medical,
        knowledge_base(es, embedder, other, "test-api-eval-other") as second,
    ):
        yield medical, second
        for name in (medical, second):
            es.options(ignore_status=404).delete(index=TEST_INDICES["QUESTIONS_INDEX"], id=name)
        es.options(ignore_status=404).indices.delete(index=JOBS)


@pytest.fixture(scope="module")
def base_url(es_url: str, bases: tuple[str, str], embedder: Embedder) -> Iterator[str]:
    settings = Settings(_env_file=None, es_url=es_url, jobs_index=JOBS, es_index=bases[0])
    with serve(create_app(settings, embedder=embedder)) as url:
        yield url


def finished(client: httpx.Client, status_url: str) -> dict[str, Any]:
    for _ in range(600):
        status = client.get(status_url).json()
        if status["status"] in ("done", "failed"):
            return status
        time.sleep(0.5)
    raise AssertionError(f"evaluation still {status['status']} after 300 s")


def test_the_pinnable_lists_are_the_fused_lists() -> None:
    schema = FusionPin.model_json_schema()["properties"]["lists"]
    assert schema["items"]["enum"] == [str(mode) for mode in LIST_MODES]
    with pytest.raises(ValidationError, match="not a list hybrid fuses"):
        FusionPin.model_validate({"method": "rrf", "lists": ["hybrid"]})


def test_names_and_unknown_bases(base_url: str, bases: tuple[str, str]) -> None:
    with httpx.Client(base_url=base_url, timeout=60) as client:
        for path in ("/kbs/Bad*Name/fusion", "/kbs/a,b/questions", "/kbs/_all/fusion"):
            assert client.get(path).status_code == 422, path
        assert client.get("/kbs/no-such-base/fusion").status_code == 404
        assert client.put("/kbs/no-such-base/questions", json={"text": ""}).status_code == 404
        assert client.get(f"/kbs/{TEST_INDICES['QUESTIONS_INDEX']}/fusion").status_code == 404  # an index, not a base
        # Nothing uploaded yet: nothing to evaluate.
        response = client.post(f"/kbs/{bases[1]}/evaluate", json={})
        assert response.status_code == 404 and "PUT" in response.json()["detail"]
        assert client.get(f"/kbs/{bases[0]}/evaluations/0123456789abcdef").status_code == 404
        # A method the path lacks: 405 naming every method it has.
        assert client.post(f"/kbs/{bases[0]}/fusion").headers["allow"] == "DELETE, GET, PUT"


def check_kept_across_a_restart(
    status_url: str, status: dict[str, Any], medical: str, es_url: str, embedder: Embedder
) -> None:
    """The job is kept in Elasticsearch: another process (a restart) gives the same status and
    plot, and lists it with the other jobs."""
    settings = Settings(_env_file=None, es_url=es_url, jobs_index=JOBS, es_index=medical)
    with serve(create_app(settings, embedder=embedder)) as restarted:
        again = httpx.get(f"{restarted}{status_url}", timeout=60).json()
        assert again == status
        assert httpx.get(f"{restarted}{status['plot_url']}", timeout=60).content[:8] == b"\x89PNG\r\n\x1a\n"
        listed = httpx.get(f"{restarted}/jobs", params={"kb": medical}, timeout=60).json()["jobs"]
        assert [(job["id"], job["kind"], job["state"]) for job in listed][:1] == [(status["job"], "evaluation", "done")]


def check_pin_and_reset(client: httpx.Client, medical: str) -> None:
    """A person pins a fusion, then resets it."""
    pin = {"method": "rrf", "rrf_k": 30, "depth": 20, "lists": ["vector", "bm25"], "weights": {"vector": 2}}
    pinned = client.put(f"/kbs/{medical}/fusion", json=pin | {"note": "by hand"})
    assert pinned.status_code == 200, pinned.text
    expected = pin | {"weights": {"vector": 2.0}, "coverage": 1.0, "origin": None}  # coverage: the default exponent
    assert pinned.json()["effective"] | {"origin": None} == expected
    found = client.post("/search", json={"query": "高血糖吃什么", "mode": "hybrid", "k": 3}).json()
    assert (found["fusion"]["method"], found["fusion"]["origin"]) == ("rrf", "pinned")
    assert set(found["hits"][0]["explain"]) == {"vector", "bm25"}
    assert client.put(f"/kbs/{medical}/fusion", json={"method": "rrf", "lists": ["hybrid"]}).status_code == 422
    assert client.put(f"/kbs/{medical}/fusion", json={"method": "nope"}).status_code == 422
    reset = client.delete(f"/kbs/{medical}/fusion").json()
    assert reset["stored"] is None and reset["effective"]["origin"] == "default"
    found = client.post("/search", json={"query": "高血糖吃什么", "mode": "hybrid", "k": 3}).json()
    assert found["fusion"]["origin"] == "default"


def test_upload_evaluate_and_search_with_the_chosen_fusion(
    base_url: str, bases: tuple[str, str], es_url: str, embedder: Embedder
) -> None:
    medical, other = bases
    with httpx.Client(base_url=base_url, timeout=60) as client:
        summary = client.put(f"/kbs/{medical}/questions", json={"text": "\n".join(question_lines())})
        assert summary.status_code == 200, summary.text
        body = summary.json()
        good = len(question_lines()) - 5
        assert body["usable"] == good and body["lines"] == good + 5 and len(body["bad_lines"]) == 5
        assert [b["line"] for b in body["bad_lines"]] == list(range(good + 1, good + 6))
        assert client.get(f"/kbs/{medical}/questions").json()["usable"] == good

        accepted = client.post(f"/kbs/{medical}/evaluate", json={})
        assert accepted.status_code == 202, accepted.text
        status_url = accepted.json()["status_url"]
        assert accepted.headers["location"] == status_url
        status = finished(client, status_url)
        assert status["status"] == "done", status["error"]
        assert status["stored"] and status["done"] == status["total"] == good
        report = status["report"]
        assert set(report["test"]) == {"vector", "bm25", "bigram", "standard", "hybrid"}
        assert report["questions"]["bad_lines"] == body["bad_lines"]
        plot = client.get(status["plot_url"])
        assert plot.status_code == 200 and plot.headers["content-type"] == "image/png"

        check_kept_across_a_restart(status_url, status, medical, es_url, embedder)

        chosen = report["chosen"]
        fusion = client.get(f"/kbs/{medical}/fusion").json()
        assert fusion["effective"]["origin"] == "evaluation" and fusion["effective"]["method"] == chosen["method"]
        assert fusion["effective"]["depth"] == chosen["depth"] and fusion["stored"]["origin"] == "evaluation"
        # /search of that base (ES_INDEX) fuses with it and says so; the other base keeps the default.
        found = client.post("/search", json={"query": "高血糖吃什么", "mode": "hybrid", "k": 3}).json()
        assert found["fusion"]["method"] == chosen["method"] and found["fusion"]["origin"] == "evaluation"
        assert found["fusion"]["depth"] == chosen["depth"]
        assert client.get(f"/kbs/{other}/fusion").status_code == 404  # no fusion of its own: the default
        assert client.get(f"/kbs/{other}").json()["fusion"]["origin"] == "default"
        elsewhere = client.post("/search", json={"query": "高血压", "mode": "hybrid", "k": 1, "kb": other}).json()
        assert elsewhere["fusion"]["origin"] == "default"
        shown = client.get(f"/kbs/{medical}").json()["fusion"]
        assert (shown["origin"], shown["method"], shown["depth"]) == ("evaluation", chosen["method"], chosen["depth"])

        check_pin_and_reset(client, medical)

        # A dry run reports and stores nothing.
        status = finished(client, client.post(f"/kbs/{medical}/evaluate", json={"dry_run": True}).json()["status_url"])
        assert status["status"] == "done" and not status["stored"]
        assert client.get(f"/kbs/{medical}/fusion").status_code == 404  # deleted, and none stored since


def test_a_set_with_too_few_usable_questions_fails_with_a_reason(base_url: str, bases: tuple[str, str]) -> None:
    medical = bases[0]
    text = "\n".join([json.dumps({"question": "低血糖怎么办", "evidence": "立即吃15克葡萄糖", "split": "dev"}), "{x"])
    with httpx.Client(base_url=base_url, timeout=60) as client:
        assert client.put(f"/kbs/{medical}/questions", json={"text": text}).json()["usable"] == 1
        status = finished(client, client.post(f"/kbs/{medical}/evaluate", json={}).json()["status_url"])
        assert status["status"] == "failed" and "0 test questions" in status["error"]


def test_schemathesis_finds_nothing_on_these_routes_of_a_real_base(
    es_url: str, bases: tuple[str, str], embedder: Embedder, tmp_path: Path
) -> None:
    """Every check and phase on this router's operations, `kb` a real base (so the stateful phase
    uploads sets, drafts questions with the fake model, runs evaluations, pins and resets fusions)."""
    config = tmp_path / "schemathesis.toml"
    config.write_text(f'[parameters]\n"path.kb" = "{bases[1]}"\n', encoding="utf-8")
    with FakeChatServer() as llm:
        llm.on("DraftedQuestion", {"question": "高血压患者每天最多吃多少盐？"})
        settings = Settings(
            _env_file=None,
            es_url=es_url,
            jobs_index=JOBS,
            es_index=bases[0],
            openai_base_url=llm.base_url,
            model_name="fake-model",
        )
        with serve(create_app(settings, embedder=embedder)) as base_url:
            command = [str(Path(sys.executable).with_name("st")), "--config-file", str(config), "run"]
            command += [f"{base_url}/openapi.json", "--checks", "all", "--max-examples", "60", "--seed", "23"]
            command += ["--generation-deterministic", "--workers", "1", "--request-timeout", "60", "--no-color"]
            command += ["--include-path-regex", "^/kbs/[^/]+/(questions|evaluate|evaluations|fusion)"]
            run = subprocess.run(command, capture_output=True, text=True, timeout=1200, check=False, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-5000:]
    assert "passed" in run.stdout and "failed" not in run.stdout.split("SUMMARY")[-1], run.stdout[-5000:]


def test_roles_read_to_look_write_to_change(es_url: str, bases: tuple[str, str], embedder: Embedder) -> None:
    medical, other = bases
    keys = write_keys_file(
        [
            {"name": "reader", "key": "key-read", "kbs": {medical: "read"}},
            {"name": "writer", "key": "key-write", "kbs": {medical: "write"}},
        ]
    )
    settings = Settings(_env_file=None, es_url=es_url, jobs_index=JOBS, es_index=medical, keys_file=keys)
    pin = {"method": "rrf", "depth": 20}
    with serve(create_app(settings, embedder=embedder)) as url, httpx.Client(base_url=url, timeout=60) as client:
        reader, writer = {"X-API-Key": "key-read"}, {"X-API-Key": "key-write"}
        assert client.get(f"/kbs/{medical}/fusion").status_code == 401
        assert client.put(f"/kbs/{medical}/fusion", json=pin, headers=reader).status_code == 403
        assert client.put(f"/kbs/{medical}/questions", json={"text": ""}, headers=reader).status_code == 403
        assert client.post(f"/kbs/{medical}/evaluate", json={}, headers=reader).status_code == 403
        assert client.get(f"/kbs/{other}/fusion", headers=writer).status_code == 404  # not the writer's base
        assert client.put(f"/kbs/{medical}/fusion", json=pin, headers=writer).json()["effective"]["origin"] == "pinned"
        assert client.get(f"/kbs/{medical}/fusion", headers=reader).status_code == 200
        assert client.delete(f"/kbs/{medical}/fusion", headers=writer).json()["stored"] is None


def test_questions_drafted_by_the_model_are_marked_and_counted(
    es_url: str, bases: tuple[str, str], embedder: Embedder
) -> None:
    medical = bases[0]
    with FakeChatServer() as llm:
        llm.on("DraftedQuestion", *({"question": f"第{i}个模型出的问题是什么？"} for i in range(1, 4)))
        settings = Settings(
            _env_file=None,
            es_url=es_url,
            jobs_index=JOBS,
            es_index=medical,
            openai_base_url=llm.base_url,
            model_name="fake-model",
        )
        with serve(create_app(settings, embedder=embedder)) as url, httpx.Client(base_url=url, timeout=60) as client:
            client.put(f"/kbs/{medical}/questions", json={"text": "\n".join(question_lines())})
            response = client.post(f"/kbs/{medical}/questions/draft", json={"count": 3, "seed": 7})
            assert response.status_code == 200, response.text
            drafted = response.json()["drafted"]
            assert len(drafted) == 3 == len(llm.calls("DraftedQuestion"))
            texts = {d.text for d in MEDICAL.documents}
            for line in drafted:
                assert line["generated"] is True and any(line["evidence"] in text for text in texts)
            summary = response.json()["questions"]
            assert summary["generated"] == 3 and summary["usable"] == len(question_lines()) - 5 + 3
            again = client.post(f"/kbs/{medical}/questions/draft", json={"count": 2, "seed": 7, "append": False})
            assert again.json()["questions"] is None and again.json()["drafted"][0]["id"] == drafted[0]["id"]
            status = finished(
                client, client.post(f"/kbs/{medical}/evaluate", json={"dry_run": True}).json()["status_url"]
            )
            assert status["status"] == "done" and status["report"]["questions"]["generated"] == 3
    with serve(
        create_app(Settings(_env_file=None, es_url=es_url, jobs_index=JOBS, es_index=medical), embedder=embedder)
    ) as url:
        assert httpx.post(f"{url}/kbs/{medical}/questions/draft", json={}, timeout=60).status_code == 503  # no model
