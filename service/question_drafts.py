"""Evaluation questions drafted by the configured model from sampled chunks of a base.

A chunk is sampled (seeded), one of its sentences becomes the evidence, and the judgement model
writes a question that sentence answers (prompts in service/graph/prompts.py). Each line is marked
`"generated": true`, so a report says how many of its questions a model wrote: they are easier
than a person's (the model saw the sentence) and should not be the only questions of a set.
"""

import re
from typing import Any

from elasticsearch import Elasticsearch
from pydantic import BaseModel, Field

from service.graph import prompts
from service.llm import ChatModel, ask_structured

_SENTENCE_END = re.compile(r"(?<=[。！？!?；;])|\n")
_CLAUSE_END = re.compile(r"(?<=[，,：:、])")
MIN_SENTENCE, MAX_SENTENCE = 8, 60  # characters of a usable evidence sentence


class DraftedQuestion(BaseModel):
    question: str = Field(min_length=2, max_length=200)


def evidence_sentence(text: str) -> str | None:
    """The chunk's longest sentence of `MIN_SENTENCE`..`MAX_SENTENCE` characters, else its longest
    such clause of a longer sentence (None: neither)."""
    sentences = [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]
    for pieces in (sentences, [c.strip() for s in sentences for c in _CLAUSE_END.split(s) if c.strip()]):
        fitting = [p for p in pieces if MIN_SENTENCE <= len(p) <= MAX_SENTENCE]
        if fitting:
            return max(fitting, key=len)
    return None


def sample_chunks(es: Elasticsearch, kb: str, count: int, seed: int) -> list[tuple[str, str]]:
    """(chunk id, text) of `count` chunks of `kb` drawn by a seeded random score."""
    query = {"function_score": {"query": {"match_all": {}}, "random_score": {"seed": seed, "field": "_seq_no"}}}
    hits = es.search(index=kb, query=query, size=count, source_includes=["text"])["hits"]["hits"]
    return [(hit["_id"], str(hit["_source"].get("text", ""))) for hit in hits]


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
        if reply.value is not None and sentence not in reply.value.question:
            drafted.append(
                {
                    "id": f"gen-{chunk_id[:12]}",
                    "question": reply.value.question,
                    "evidence": sentence,
                    "generated": True,
                }
            )
    return drafted
