"""What the page needs to read from the service, so it never holds a second copy: `/about` (the model's
state in words, whether web search is set up, the file types uploads take and the limits a person
meets) and `/kbs/{kb}/examples` (questions the base can answer: service/examples.py)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from indexing.loaders import SUPPORTED_SUFFIXES
from service.deps import Services, ServicesDep, base_in_path, get_caller
from service.examples import MAX_EXAMPLES, Examples, example_questions
from service.http.openapi import error_responses
from service.kbs import BaseAccess

router = APIRouter(tags=["page"], dependencies=[Depends(get_caller)], responses=error_responses(401))


class ModelState(BaseModel):
    configured: bool = Field(description="a chat model is set up (OPENAI_BASE_URL / MODEL_NAME)")
    connected: bool = Field(description="answers are written by it now")
    reason: str = Field(description="why not, in Chinese (empty when connected)")


class About(BaseModel):
    model: ModelState
    web_search: bool = Field(description="a web-search key is set (BOCHA_API_KEY)")
    upload_types: list[str] = Field(description="the file suffixes an upload takes (indexing.loaders)")
    max_question_chars: int
    max_upload_mb: float
    max_upload_files: int


async def model_state(services: Services) -> ModelState:
    """The model as the next answer will find it: the workflow's own probe, so the page and the answer agree."""
    settings, probe = services.settings, services.workflow.probe
    if not settings.llm_configured or probe is None:
        return ModelState(configured=False, connected=False, reason="未配置大模型，回答为原文摘录")
    if settings.answer_mode == "extractive":
        return ModelState(configured=True, connected=False, reason="服务设为只摘录原文作答")
    why_not = await probe.unavailable()
    return ModelState(configured=True, connected=why_not is None, reason=why_not or "")


@router.get("/about", response_model=About)
async def about(services: ServicesDep) -> About:
    """Service-wide facts the page shows (nothing of any base)."""
    settings = services.settings
    return About(
        model=await model_state(services),
        web_search=services.workflow.web_search is not None,
        upload_types=list(SUPPORTED_SUFFIXES),
        max_question_chars=settings.max_question_chars,
        max_upload_mb=settings.max_upload_mb,
        max_upload_files=settings.max_upload_files,
    )


def examples_count(count: Annotated[int, Query(ge=1, le=MAX_EXAMPLES)] = 4) -> int:
    return count


@router.get("/kbs/{kb}/examples", response_model=Examples, responses=error_responses(404, 422))
async def examples(
    count: Annotated[int, Depends(examples_count)],
    base: Annotated[BaseAccess, Depends(base_in_path("read", examples_count))],
    services: ServicesDep,
) -> Examples:
    """Questions the base can answer, as the caller may read it: its question set's, else its headings'."""
    return await run_in_threadpool(
        example_questions, services.es, services.settings.questions_index, services.retriever, base, count=count
    )
