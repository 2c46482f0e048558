"""The configured chat model as the reranker (`RERANKER=llm`): listwise over windows, pointwise
when the model cannot keep a list.

Listwise (RankGPT's sliding window): windows of `RERANK_LLM_WINDOW` candidates from the bottom of
the fused list up, half a window apart, each answered with the passage numbers best first, so the
best passages climb to the top in `ceil((n - w) / (w / 2)) + 1` calls. A window whose list is not
usable (fewer than half its numbers, after the one repair `ask_structured` makes) switches this
model to pointwise for the life of the process: one 0–10 grade per passage, a few at a time.
Every habit the workflow copes with (no tools, no JSON schema, `<think>`, fences) is handled by
`ask_structured`, as for any judgement.

The retriever calls the stage on a worker thread; the model's calls run there on their own
event loop with their own HTTP client, bounded by `RERANK_TIMEOUT_S`. Any failure is a
`RerankFailure`: the stage keeps the fused order (retrieval/rerank.py).
"""

import asyncio
import logging
from collections.abc import Sequence

import httpx
from pydantic import BaseModel, Field

from core.config import Settings
from retrieval.rerank import RerankFailure
from service.graph import prompts
from service.llm.client import ChatModel, Habits, Structured, ask_structured, chat_model
from service.llm.structured import SchemaT

logger = logging.getLogger(__name__)
_GRADES_AT_ONCE = 4  # pointwise calls in flight
_CALL_FAILED = "模型调用失败"  # the prefix of `Structured.error` when the endpoint itself failed


class RerankOrder(BaseModel):
    order: list[int] = Field(description="资料编号，从最相关到最不相关")


class RerankGrade(BaseModel):
    score: int = Field(ge=0, le=10, description="相关程度，0 到 10")


class LlmScorer:
    """A `retrieval.rerank.Scorer` on the judgement model (`EVALUATOR_MODEL_NAME` or `MODEL_NAME`)."""

    def __init__(self, settings: Settings, habits: Habits | None = None) -> None:
        self.settings, self.model = settings, settings.judge_model_name or ""
        self.habits = habits or Habits()
        self.window = settings.rerank_llm_window
        self.listwise = True  # False once the model could not keep a list

    @property
    def name(self) -> str:
        return f"llm {self.model} ({'listwise' if self.listwise else 'pointwise'})"

    def score(self, query: str, texts: Sequence[str], timeout_s: float) -> list[float]:
        try:
            return asyncio.run(asyncio.wait_for(self._score(query, list(texts)), timeout_s))
        except TimeoutError as err:
            raise RerankFailure("timeout", f"no ranking within {timeout_s:.1f} s") from err

    async def _score(self, query: str, texts: list[str]) -> list[float]:
        async with httpx.AsyncClient() as http:
            model = chat_model(self.settings, self.model, 0.0, self.habits, http_async_client=http)
            if self.listwise:
                order = await self._listwise(model, query, texts)
                if order is not None:
                    return [1.0 - order.index(i) / len(texts) for i in range(len(texts))]
                self.listwise = False
                logger.warning("model %s did not keep a ranked list: reranking pointwise from now on", self.model)
            return await self._pointwise(model, query, texts)

    async def _listwise(self, model: ChatModel, query: str, texts: list[str]) -> list[int] | None:
        """The candidates' indices best first, or None when a window's list was not usable."""
        order, step = list(range(len(texts))), max(1, self.window // 2)
        start = max(0, len(texts) - self.window)
        while True:
            part = order[start : start + self.window]
            ranked = await self._window(model, query, [texts[i] for i in part])
            if ranked is None:
                return None
            order[start : start + self.window] = [part[j] for j in ranked]
            if start == 0:
                return order
            start = max(0, start - step)

    async def _window(self, model: ChatModel, query: str, texts: list[str]) -> list[int] | None:
        messages = prompts.rerank_list_messages(query, texts)
        found = _checked(await ask_structured(model, RerankOrder, messages, prompts.OUTPUT_FORMAT))
        if found.value is None:
            return None
        numbers = list(dict.fromkeys(n for n in found.value.order if 1 <= n <= len(texts)))
        if 2 * len(numbers) < len(texts):
            return None
        return [n - 1 for n in numbers] + [i for i in range(len(texts)) if i + 1 not in numbers]

    async def _pointwise(self, model: ChatModel, query: str, texts: list[str]) -> list[float]:
        gate = asyncio.Semaphore(_GRADES_AT_ONCE)

        async def grade(text: str) -> float:
            async with gate:
                messages = prompts.rerank_grade_messages(query, text)
                found = _checked(await ask_structured(model, RerankGrade, messages, prompts.OUTPUT_FORMAT))
            if found.value is None:
                raise RerankFailure("malformed", f"no grade: {found.error}")
            return float(found.value.score)

        return list(await asyncio.gather(*(grade(text) for text in texts)))


def _checked(found: Structured[SchemaT]) -> Structured[SchemaT]:
    """A judgement, unless the endpoint itself failed (an outage is not a model that cannot rank)."""
    if found.error and found.error.startswith(_CALL_FAILED):
        raise RerankFailure("error", found.error)
    return found
