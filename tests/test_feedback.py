"""Answers people rate, and ratings that become evaluation questions, over real HTTP, the OpenAI SDK
and the MCP SDK: ask, vote down with the right passage, an admin accepts it into the base's
question set, an evaluation runs and stores its fusion, the change is shown with intervals and
undone. Access: only the asker rates; another's answer and a passage the asker may not read get
the absent answer's 404, word for word; the review shows a reader its own answers only."""

import asyncio
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import httpx2
import pytest
from elasticsearch import Elasticsearch
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from openai import OpenAI

from core.config import Settings
from core.documents import Document
from core.embeddings import Embedder
from service.answers import AnswerLog, LoggedAnswer, Rating
from service.app import create_app
from service.feedback import NotAcceptable, accept
from service.principals import Caller
from tests.conftest import TEST_INDICES, knowledge_base
from tests.protocols import write_keys_file
from tests.serving import serve
from tests.test_api_evaluation import finished
from tests.test_evaluate import MEDICAL, question_lines

SECRET = "会诊密档七七四九号：胰岛素泵参数仅限医生"
HIDDEN = Document(doc_id="consult-secret", text=f"高血糖会诊记录。{SECRET}。", source="secret.txt", access=["doctors"])
KEYS = {"admin": "fb-admin", "alice": "fb-alice", "bob": "fb-bob", "outsider": "fb-outsider"}
METRICS_KEY = "fb-metrics"  # /metrics: the service's admins and its scraper only
QUESTION = "高血糖的人饮食上要注意什么？"
ABSENT = "0" * 32


@dataclass
class Service:
    url: str
    kb: str
    es: Elasticsearch

    def client(self, who: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"X-API-Key": KEYS[who]}, timeout=120)


@pytest.fixture(scope="module")
def service(es: Elasticsearch, es_url: str, embedder: Embedder) -> Iterator[Service]:
    with knowledge_base(es, embedder, [*MEDICAL.documents, HIDDEN], "test-feedback") as kb:
        principals = [
            {"name": "admin", "key": KEYS["admin"], "kbs": {kb: "admin"}},
            {"name": "alice", "key": KEYS["alice"], "kbs": {kb: "read"}},
            {"name": "bob", "key": KEYS["bob"], "kbs": {kb: "read"}},
            {"name": "outsider", "key": KEYS["outsider"], "kbs": {f"{kb}-elsewhere": "admin"}},
        ]
        jobs = f"test-feedback-jobs-{uuid.uuid4().hex[:8]}"
        settings = Settings(
            _env_file=None,
            es_url=es_url,
            es_index=kb,
            jobs_index=jobs,
            keys_file=write_keys_file(principals),
            metrics_key=METRICS_KEY,
        )
        try:
            with serve(create_app(settings, embedder=embedder)) as url:
                yield Service(url, kb, es)
        finally:
            es.options(ignore_status=404).delete(index=TEST_INDICES["QUESTIONS_INDEX"], id=kb)
            es.options(ignore_status=404).indices.delete(index=jobs)


def _chunk_of(service: Service, doc_id: str) -> str:
    service.es.indices.refresh(index=service.kb)
    found = service.es.search(index=service.kb, query={"term": {"doc_id": doc_id}}, size=1)
    return str(found["hits"]["hits"][0]["_id"])


def _ask(client: httpx.Client, kb: str) -> dict[str, Any]:
    response = client.post("/query", json={"question": QUESTION, "kb": kb, "web": False})
    assert response.status_code == 200, response.text
    return dict(response.json())


def _absent_like(response: httpx.Response, answer_id: str) -> bool:
    """Answered exactly as an answer id that does not exist."""
    return response.status_code == 404 and response.json() == {"detail": f"no answer {answer_id!r}"}


def test_every_answer_has_an_id_and_its_citations_name_their_chunks(service: Service) -> None:
    with service.client("alice") as alice:
        answer = _ask(alice, service.kb)
        assert re.fullmatch(r"[0-9a-f]{32}", answer["answer_id"])
        assert answer["citations"] and all(c["chunk_id"] for c in answer["citations"] if c["kind"] == "local")
        logged = alice.get(f"/answers/{answer['answer_id']}").json()
        assert logged["question"] == QUESTION and logged["owner"] == "alice" and logged["protocol"] == "query"
        assert logged["cited"] and [c["chunk_id"] for c in logged["cited"]] == [
            c["chunk_id"] for c in answer["citations"] if c["kind"] == "local"
        ]
        assert set(logged["timings"]) >= {"total"} and logged["mode"] == "extractive"
        # The stream's last event carries it too.
        with alice.stream("POST", "/query/stream", json={"question": QUESTION, "kb": service.kb, "web": False}) as s:
            events = [line for line in s.iter_lines() if line.startswith("data:")]
        final = json.loads(events[-1].removeprefix("data:"))
        assert re.fullmatch(r"[0-9a-f]{32}", final["answer_id"]) and final["answer_id"] != answer["answer_id"]
        assert alice.get(f"/answers/{final['answer_id']}").json()["protocol"] == "stream"


def test_only_the_asker_rates_and_hidden_reads_as_absent(service: Service) -> None:
    hidden_chunk = _chunk_of(service, HIDDEN.doc_id)
    public_chunk = _chunk_of(service, "hyperglycemia_diet")
    with service.client("alice") as alice, service.client("bob") as bob, service.client("admin") as admin:
        answer_id = _ask(alice, service.kb)["answer_id"]
        # Bad input is a 422 before anything is looked up.
        for body in ({"vote": "sideways"}, {"vote": "up", "comment": "x" * 2001}, {"vote": "up", "extra": 1}, {}):
            assert alice.post(f"/answers/{answer_id}/feedback", json=body).status_code == 422, body
        assert alice.post("/answers/not-an-id/feedback", json={"vote": "up"}).status_code == 422
        # Another reader: the same 404 as an id that does not exist, for reading and for rating.
        absent = bob.post(f"/answers/{ABSENT}/feedback", json={"vote": "down"})
        assert _absent_like(absent, ABSENT)
        assert _absent_like(bob.post(f"/answers/{answer_id}/feedback", json={"vote": "down"}), answer_id)
        assert _absent_like(bob.get(f"/answers/{answer_id}"), answer_id)
        # The asker naming a passage it may not read: the same 404, and nothing stored.
        named = alice.post(f"/answers/{answer_id}/feedback", json={"vote": "down", "chunk_id": hidden_chunk})
        assert _absent_like(named, answer_id) and SECRET not in named.text
        assert alice.get(f"/answers/{answer_id}").json()["rating"] is None
        # The base's admin sees the answer, but does not rate it for the asker.
        assert admin.get(f"/answers/{answer_id}").status_code == 200
        assert admin.post(f"/answers/{answer_id}/feedback", json={"vote": "up"}).status_code == 403
        # The asker rates; a new rating replaces the old.
        first = alice.post(f"/answers/{answer_id}/feedback", json={"vote": "up"})
        assert first.status_code == 200 and first.json()["rating"]["vote"] == "up"
        body = {"vote": "down", "comment": "没说主食", "chunk_id": public_chunk}
        again = alice.post(f"/answers/{answer_id}/feedback", json=body).json()["rating"]
        assert (again["vote"], again["comment"], again["chunk_id"]) == ("down", "没说主食", public_chunk)
        # The review: a reader sees its own answers only; the admin everyone's.
        assert answer_id in [a["id"] for a in alice.get(f"/kbs/{service.kb}/answers?kind=down").json()["answers"]]
        assert bob.get(f"/kbs/{service.kb}/answers").json()["answers"] == []
        assert answer_id in [a["id"] for a in admin.get(f"/kbs/{service.kb}/answers?kind=down").json()["answers"]]
        assert bob.post(f"/kbs/{service.kb}/answers/{answer_id}/accept", json={}).status_code == 403
    with service.client("outsider") as outsider:
        assert _absent_like(outsider.get(f"/answers/{answer_id}"), answer_id)
        refused = outsider.get("/metrics")
        assert refused.status_code == 403 and service.kb not in refused.text  # the scraper's and service admins' only
    with httpx.Client(base_url=service.url, headers={"Authorization": f"Bearer {METRICS_KEY}"}) as scraper:
        metrics = scraper.get("/metrics").text
    assert f'rag_answer_votes_total{{kb="{service.kb}",vote="down"}}' in metrics
    assert re.search(rf'rag_answers_rated_share{{kb="{service.kb}"}} 0\.\d+', metrics)


def test_the_loop_over_http_accept_evaluate_undo(service: Service) -> None:
    right = _chunk_of(service, "hyperglycemia_diet")
    with service.client("alice") as alice, service.client("admin") as admin:
        assert admin.put(f"/kbs/{service.kb}/questions", json={"text": "\n".join(question_lines())}).status_code == 200
        before = admin.get(f"/kbs/{service.kb}/questions").json()["usable"]
        answer_id = _ask(alice, service.kb)["answer_id"]
        voted = alice.post(f"/answers/{answer_id}/feedback", json={"vote": "down", "comment": "不对"})
        assert voted.status_code == 200
        # Nothing changed retrieval: the base still has no fusion of its own.
        assert admin.get(f"/kbs/{service.kb}/fusion").status_code == 404
        # A downvote with no passage is in the gap report (the asker's own, and the admin's).
        assert answer_id in [g["answer_id"] for g in alice.get("/gaps").json()["reported"]]
        review = admin.get(f"/kbs/{service.kb}/answers?kind=gap").json()["answers"]
        assert answer_id in [a["id"] for a in review]
        # The admin picks the right passage: the answer becomes a question of the set.
        accepted = admin.post(f"/kbs/{service.kb}/answers/{answer_id}/accept", json={"chunk_id": right})
        assert accepted.status_code == 200, accepted.text
        line = accepted.json()["line"]
        assert line["question"] == QUESTION and line["chunk_ids"] == [right]
        assert accepted.json()["questions"]["usable"] == before + 1
        assert accepted.json()["answer"]["accepted"]["question_id"] == line["id"]
        assert admin.post(f"/kbs/{service.kb}/answers/{ABSENT}/accept", json={}).status_code == 404
        missing = admin.post(f"/kbs/{service.kb}/answers/{answer_id}/accept", json={"chunk_id": "nope"})
        assert missing.status_code == 422
        # The evaluation runs as before, says what its choice changes (with intervals), and stores it.
        status = finished(admin, admin.post(f"/kbs/{service.kb}/evaluate", json={}).json()["status_url"])
        assert status["status"] == "done" and status["stored"] and status["previous"] is None
        change = status["report"]["before"]
        assert set(change["change"]) == {"R@1", "R@5", "R@10", "MRR@10", "nDCG@10"}
        assert all(c["interval"][0] <= c["diff"] <= c["interval"][1] for c in change["change"].values())
        assert admin.get(f"/kbs/{service.kb}/fusion").json()["effective"]["origin"] == "evaluation"
        # Undo: the fusion goes back; a second undo has nothing to undo.
        undone = admin.post(f"/kbs/{service.kb}/evaluations/{status['job']}/undo")
        assert undone.status_code == 200 and undone.json()["stored"] is None
        assert admin.post(f"/kbs/{service.kb}/evaluations/{status['job']}/undo").status_code == 409
        assert alice.post(f"/kbs/{service.kb}/evaluations/{status['job']}/undo").status_code in (403, 404)
        # Undo the acceptance: the line leaves the set.
        back = admin.delete(f"/kbs/{service.kb}/answers/{answer_id}/accept").json()
        assert back["answer"]["accepted"] is None and back["questions"]["usable"] == before


def test_openai_completion_ids_are_answer_ids(service: Service) -> None:
    client = OpenAI(base_url=f"{service.url}/v1", api_key=KEYS["alice"])
    reply = client.chat.completions.create(model="rag", messages=[{"role": "user", "content": QUESTION}])
    assert reply.id.startswith("chatcmpl-")
    stream = client.chat.completions.create(model="rag", messages=[{"role": "user", "content": QUESTION}], stream=True)
    streamed = {chunk.id for chunk in stream}
    assert len(streamed) == 1 and streamed != {reply.id}
    with service.client("alice") as alice:
        for completion_id in (reply.id, *streamed):
            rated = alice.post(f"/answers/{completion_id}/feedback", json={"vote": "up"})
            assert rated.status_code == 200, rated.text
            assert rated.json()["protocol"] == "openai" and rated.json()["id"] == completion_id.removeprefix(
                "chatcmpl-"
            )


def test_the_loop_over_mcp(service: Service) -> None:
    right = _chunk_of(service, "hyperglycemia_diet")
    hidden = _chunk_of(service, HIDDEN.doc_id)

    async def run(key: str, answer_id: str | None = None) -> dict[str, Any]:
        async with (
            httpx2.AsyncClient(headers={"X-API-Key": key}, timeout=120) as http,
            Client(streamable_http_client(f"{service.url}/mcp", http_client=http)) as session,
        ):
            if answer_id is None:
                asked = await session.call_tool("ask", {"question": QUESTION, "web": False})
                answer_id = (asked.structured_content or {})["answer_id"]
            bad = await session.call_tool("rate_answer", {"answer_id": answer_id, "vote": "down", "chunk_id": hidden})
            rated = await session.call_tool("rate_answer", {"answer_id": answer_id, "vote": "down", "chunk_id": right})
            wrong = await session.call_tool("rate_answer", {"answer_id": answer_id, "vote": "meh"})
            return {"id": answer_id, "bad": bad, "rated": rated, "wrong": wrong}

    mine = asyncio.run(run(KEYS["alice"]))
    assert mine["bad"].is_error and f"no answer {mine['id']!r}" in str(mine["bad"].content)
    assert SECRET not in str(mine["bad"].content)
    assert not mine["rated"].is_error and mine["rated"].structured_content["chunk_id"] == right
    assert mine["wrong"].is_error
    others = asyncio.run(run(KEYS["bob"], mine["id"]))  # bob rating alice's answer: absent
    assert others["rated"].is_error and f"no answer {mine['id']!r}" in str(others["rated"].content)
    with service.client("admin") as admin:
        logged = admin.get(f"/answers/{mine['id']}").json()
        assert logged["protocol"] == "mcp" and logged["rating"]["chunk_id"] == right
        accepted = admin.post(f"/kbs/{service.kb}/answers/{mine['id']}/accept", json={})
        assert accepted.status_code == 200 and accepted.json()["line"]["chunk_ids"] == [right]
        admin.delete(f"/kbs/{service.kb}/answers/{mine['id']}/accept")


def test_retention_and_a_log_without_questions(service: Service, es: Elasticsearch) -> None:
    settings = Settings(_env_file=None, answer_retention_days=1, answer_log_questions=False)
    log = AnswerLog(es, settings)
    old = LoggedAnswer(
        id=uuid.uuid4().hex,
        kb=service.kb,
        owner="alice",
        access_scope="",
        protocol="query",
        question="",
        answer="",
        mode="extractive",
        retrieval_mode="hybrid",
        cited=[],
        verdicts=[],
        gap=False,
        warnings=[],
        timings={},
        created_at=(datetime.now(UTC) - timedelta(days=2)).isoformat(),
    )
    log.record(old)
    assert log.get(old.id) is None  # expired: absent at once
    es.indices.refresh(index=settings.answers_index)
    fresh = old.model_copy(update={"id": uuid.uuid4().hex, "created_at": datetime.now(UTC).isoformat()})
    AnswerLog(es, settings).record(fresh)  # a new process: its first write deletes what expired
    assert log.get(fresh.id) is not None
    assert not es.exists(index=settings.answers_index, id=old.id)
    # Kept without its question, a rated answer cannot become a question.
    rated = fresh.model_copy(update={"rating": Rating(vote="down", chunk_id="c1", rated_at=fresh.created_at)})
    admin = Caller("admin", role="admin")
    with pytest.raises(NotAcceptable, match="ANSWER_LOG_QUESTIONS=false"):
        accept(log, es, settings.questions_index, admin, rated, None)
