"""Questions drafted by the judgement model, one per sampled chunk with a usable evidence sentence
(evaluation/drafts.py picks the chunks and sentences and makes the lines)."""

from typing import Any

from pydantic import BaseModel, Field

from evaluation.drafts import drafted_line, evidence_sentence
from service.graph import prompts
from service.llm.client import ChatModel, ask_structured


class DraftedQuestion(BaseModel):
    question: str = Field(min_length=2, max_length=200)


async def draft_questions(model: ChatModel | None, chunks: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """One question line per chunk with a usable sentence and a valid model answer."""
    drafted = []
    for chunk_id, text in chunks:
        sentence = evidence_sentence(text)
        if sentence is None:
            continue
        reply = await ask_structured(
            model, DraftedQuestion, prompts.draft_question_messages(text, sentence), prompts.OUTPUT_FORMAT
        )
        line = drafted_line(chunk_id, sentence, reply.value.question) if reply.value is not None else None
        if line is not None:
            drafted.append(line)
    return drafted
