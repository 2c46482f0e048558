"""The retry policy for OpenAI-compatible endpoints (core/retry.py), through the real clients.

Chat calls, the streamed answer and the remote embedder each make at most OPENAI_ATTEMPTS
requests, retry 5xx and 429 but not other 4xx, and log one warning line per retry.
"""

import asyncio
import logging
from typing import Any

import numpy as np
import openai
import pytest
from langchain_core.messages import HumanMessage
from pydantic import SecretStr

from core.config import Settings
from core.embeddings import OpenAIEmbedder
from core.retry import OPENAI_ATTEMPTS
from service.graph.prompts import OUTPUT_FORMAT
from service.graph.schemas import RouteDecision
from service.llm.client import ask_structured, build_llms, stream_text
from tests.fakes.openai_server import ANSWER, EMBEDDINGS, FakeChatServer


def settings_for(server: FakeChatServer) -> Settings:
    return Settings(
        _env_file=None,
        openai_base_url=server.base_url,
        openai_api_key=SecretStr("sk-test-secret"),
        model_name="fake-model",
    )


def test_a_transient_chat_failure_is_retried_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="core.retry")
    with FakeChatServer() as server:
        server.on("RouteDecision", 503, {"strategy": "simple", "reason": "常识"})
        judge, _ = build_llms(settings_for(server))
        result = asyncio.run(ask_structured(judge, RouteDecision, [HumanMessage("问题")], OUTPUT_FORMAT))
    assert result.value == RouteDecision(strategy="simple", reason="常识") and result.error is None
    assert len(server.requests) == 2
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("RouteDecision call failed (") and "503" in line and "attempt 1" in line
    assert "sk-test-secret" not in caplog.text


def test_rate_limits_are_retried_up_to_the_policy_limit() -> None:
    with FakeChatServer() as server:
        server.on("RouteDecision", 429)
        judge, _ = build_llms(settings_for(server))
        result = asyncio.run(ask_structured(judge, RouteDecision, [HumanMessage("问题")], OUTPUT_FORMAT))
    error = result.error
    assert result.value is None and error is not None and error.startswith("模型调用失败") and "RateLimit" in error
    assert len(server.requests) == OPENAI_ATTEMPTS


def test_the_answer_stream_is_retried_until_its_first_piece() -> None:
    async def collect(llm: Any) -> list[str]:
        return [text async for _, text in stream_text(llm, [HumanMessage("问题")])]

    with FakeChatServer() as server:
        server.on(ANSWER, 502, "刘备、关羽、张飞在桃园结义。")
        _, answer = build_llms(settings_for(server))
        pieces = asyncio.run(collect(answer))
    assert "".join(pieces) == "刘备、关羽、张飞在桃园结义。"
    assert [r.body["stream"] for r in server.requests] == [True, True]


def test_the_remote_embedder_retries_5xx_but_not_4xx() -> None:
    with FakeChatServer() as server:
        server.on(EMBEDDINGS, 500, [[0.6, 0.8], [1.0, 0.0]])
        embedder = OpenAIEmbedder("fake-embedding", settings_for(server))
        vectors = embedder.embed_documents(["甲", "乙"])
        assert np.allclose(vectors, [[0.6, 0.8], [1.0, 0.0]]) and embedder.dim == 2
        assert len(server.requests) == 2

        server.on(EMBEDDINGS, 401)
        with pytest.raises(openai.AuthenticationError):
            embedder.embed_query("丙")
        assert len(server.requests) == 3  # one more request: a 4xx is final
