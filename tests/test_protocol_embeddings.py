"""`POST /v1/embeddings` through the clients people point at it: the `openai` SDK (which asks for
base64 by default and decodes it) and LangChain's `OpenAIEmbeddings`, against the service under
uvicorn; the vectors must be the service's own embedder's, query and passage sides as E5 wants."""

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from langchain_openai import OpenAIEmbeddings
from pydantic import SecretStr

from core.embeddings import Embedder
from tests.protocols import KEY, STRANGER_KEY, protocol_settings, service

TEXTS = ["诸葛亮七擒七纵孟获。", "员工每年享有带薪年假十天。"]


@pytest.fixture(scope="module")
def base(es_url: str, protocol_kb: str, embedder: Embedder) -> Iterator[str]:
    with service(protocol_settings(es_url, protocol_kb, None, max_embedding_inputs=4), embedder) as url:
        yield url


def client(base: str, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=60)


def test_the_sdk_gets_the_embedders_vectors_in_both_encodings(base: str, embedder: Embedder) -> None:
    sdk = client(base)
    # The SDK asks for base64 unless told otherwise, and decodes it.
    default = sdk.embeddings.create(model=embedder.name, input=TEXTS)
    floats = sdk.embeddings.create(model=embedder.name, input=TEXTS, encoding_format="float")
    expected = embedder.embed_documents(TEXTS)
    for answer in (default, floats):
        assert [item.index for item in answer.data] == [0, 1] and answer.model == embedder.name
        assert np.allclose(np.array([item.embedding for item in answer.data]), expected, atol=1e-5)
        assert answer.usage.prompt_tokens == answer.usage.total_tokens > 0
    one = sdk.embeddings.create(model=embedder.name, input="query: 孟获是谁？", encoding_format="float")
    assert np.allclose(one.data[0].embedding, embedder.embed_query("孟获是谁？"), atol=1e-5)  # E5's query side


def test_langchain_embeds_documents_and_queries(base: str, embedder: Embedder) -> None:
    embeddings = OpenAIEmbeddings(
        model=embedder.name,
        openai_api_base=f"{base}/v1",
        openai_api_key=SecretStr(KEY),
        check_embedding_ctx_length=False,
        max_retries=0,
    )
    assert np.allclose(embeddings.embed_documents(TEXTS), embedder.embed_documents(TEXTS), atol=1e-5)
    vector = embeddings.embed_query("年假有几天？")
    assert len(vector) == embedder.dim and np.allclose(vector, embedder.embed_documents(["年假有几天？"])[0], atol=1e-5)


def test_the_input_type_field_picks_the_query_side(base: str, embedder: Embedder) -> None:
    """Open WebUI with RAG_EMBEDDING_PREFIX_FIELD_NAME=input_type sends the side as a field."""
    response = httpx.post(
        f"{base}/v1/embeddings",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": embedder.name, "input": ["孟获是谁？"], "input_type": "query"},
    )
    assert response.status_code == 200
    assert np.allclose(response.json()["data"][0]["embedding"], embedder.embed_query("孟获是谁？"), atol=1e-5)


def test_it_is_listed_and_its_errors_are_openais(base: str, embedder: Embedder) -> None:
    sdk = client(base)
    listed = {model.id: (model.model_extra or {}).get("kind") for model in sdk.models.list()}
    assert listed[embedder.name] == "embedding" and listed["rag"] == "chat"
    cases: list[tuple[dict[str, Any], type[openai.APIStatusError], str]] = [
        ({"model": "text-embedding-3-small", "input": "x"}, openai.NotFoundError, "embedding model: " + embedder.name),
        ({"model": embedder.name, "input": [[1, 2, 3]]}, openai.BadRequestError, "check_embedding_ctx_length=False"),
        ({"model": embedder.name, "input": ["a"] * 5}, openai.BadRequestError, "MAX_EMBEDDING_INPUTS=4"),
        ({"model": embedder.name, "input": ["ok", " "]}, openai.BadRequestError, "input[1] is empty"),
        ({"model": embedder.name, "input": "x", "dimensions": 7}, openai.BadRequestError, "not 7"),
    ]
    for arguments, error, message in cases:
        with pytest.raises(error) as caught:
            sdk.embeddings.create(**arguments)
        body = caught.value.body
        assert isinstance(body, dict) and message in body["message"] and set(body) >= {"type", "param", "code"}
    with pytest.raises(openai.AuthenticationError):
        client(base, "wrong-key").embeddings.create(model=embedder.name, input="x")


def test_a_key_that_may_read_no_base_may_not_embed(base: str, embedder: Embedder) -> None:
    """Embedding reads no base, but a key that may read none here is refused, in OpenAI's shape."""
    with pytest.raises(openai.PermissionDeniedError) as caught:
        client(base, STRANGER_KEY).embeddings.create(model=embedder.name, input="x")
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "permission_error" and "may not embed" in body["message"]
