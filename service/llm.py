"""Chat models behind any OpenAI-compatible endpoint (langchain-openai `ChatOpenAI`).

Judgements (rewrite, route, decompose, plan, evaluate) use `temperature=0` and may use a
smaller model (`EVALUATOR_MODEL_NAME`); the answer uses `GENERATION_TEMPERATURE` and streams.

Structured outputs use tool calling (`method="function_calling"`). langchain-openai 1.7's
`ChatOpenAI.with_structured_output` defaults to `json_schema` (OpenAI Structured Outputs via
`response_format`), which several OpenAI-compatible servers (older vLLM, DashScope, DeepSeek)
reject or ignore; forced tool calls are the protocol they all speak.
"""

import logging
from typing import Any, TypeVar

import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, SecretStr

from core.config import Settings

logger = logging.getLogger(__name__)

SchemaT = TypeVar("SchemaT", bound=BaseModel)


class LLMNotConfiguredError(RuntimeError):
    """No chat model is configured, so the service cannot answer questions."""

    def __init__(self) -> None:
        super().__init__(
            "no LLM configured: set OPENAI_BASE_URL (or OPENAI_API_KEY for api.openai.com) and MODEL_NAME "
            "(optionally EVALUATOR_MODEL_NAME for judgements) in the environment or .env"
        )


def chat_model(settings: Settings, model: str, temperature: float) -> ChatOpenAI:
    """One client of the configured endpoint; a keyless local server gets a placeholder key."""
    return ChatOpenAI(
        model=model,
        temperature=temperature,
        base_url=settings.openai_base_url,
        api_key=settings.openai_api_key or SecretStr("not-needed"),
        timeout=settings.llm_timeout,
        max_retries=1,
    )


def build_llms(settings: Settings) -> tuple[ChatOpenAI | None, ChatOpenAI | None]:
    """(judge, answer) models, or (None, None) when no endpoint/model is configured."""
    if not settings.llm_configured:
        return None, None
    judge = chat_model(settings, settings.judge_model_name or "", temperature=0.0)
    answer = chat_model(settings, settings.model_name or "", temperature=settings.generation_temperature)
    return judge, answer


async def ask_structured(
    llm: BaseChatModel | None, schema: type[SchemaT], messages: list[BaseMessage]
) -> tuple[SchemaT | None, str | None]:
    """(parsed, None) or (None, why): a bad or missing tool call is a result, never a crash."""
    if llm is None:
        raise LLMNotConfiguredError()
    runnable = llm.with_structured_output(schema, method="function_calling", include_raw=True)
    try:
        output: dict[str, Any] = await runnable.ainvoke(messages)  # type: ignore[assignment]
    except openai.APIError as err:
        logger.warning("%s call failed: %s", schema.__name__, err)
        return None, f"模型调用失败：{type(err).__name__}"
    parsed = output.get("parsed")
    if isinstance(parsed, schema):
        return parsed, None
    error = output.get("parsing_error")
    raw = output.get("raw")
    logger.warning(
        "unparseable %s output (%s): %.300r", schema.__name__, error or "no tool call", getattr(raw, "content", raw)
    )
    if error or getattr(raw, "invalid_tool_calls", None):
        return None, "结构化输出无法解析"
    return None, "模型未按要求返回结构化结果"
