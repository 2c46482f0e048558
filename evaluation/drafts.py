"""Question drafts from sampled chunks of a base: which chunks, which sentence is the evidence, and
the question-set line a drafted question becomes.

A chunk is sampled (seeded) among those its drafter may read, one of its sentences becomes the
evidence, and the judgement model writes a question that sentence answers (service/llm/drafts.py,
prompts in service/graph/prompts.py). Each line is marked `"generated": true`, so a report says
how many of its questions a model wrote: they are easier than a person's (the model saw the
sentence) and should not be the only questions of a set.
"""

import re
from typing import Any

from core.reader import Reader

_SENTENCE_END = re.compile(r"(?<=[。！？!?；;])|\n")
_CLAUSE_END = re.compile(r"(?<=[，,：:、])")
MIN_SENTENCE, MAX_SENTENCE = 8, 60  # characters of a usable evidence sentence


def evidence_sentence(text: str) -> str | None:
    """The chunk's longest sentence of `MIN_SENTENCE`..`MAX_SENTENCE` characters, else its longest
    such clause of a longer sentence (None: neither)."""
    sentences = [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]
    for pieces in (sentences, [c.strip() for s in sentences for c in _CLAUSE_END.split(s) if c.strip()]):
        fitting = [p for p in pieces if MIN_SENTENCE <= len(p) <= MAX_SENTENCE]
        if fitting:
            return max(fitting, key=len)
    return None


def sample_chunks(reader: Reader, count: int, seed: int) -> list[tuple[str, str]]:
    """(chunk id, text) of `count` chunks the reader sees, drawn by a seeded random score."""
    query = {"function_score": {"query": {"match_all": {}}, "random_score": {"seed": seed, "field": "_seq_no"}}}
    hits = reader.search({"query": query, "size": count, "_source": ["text"]})["hits"]["hits"]
    return [(hit["_id"], str(hit["_source"].get("text", ""))) for hit in hits]


def drafted_line(chunk_id: str, sentence: str, question: str) -> dict[str, Any] | None:
    """The question-set line of a drafted question (None: it quotes its evidence, so it tests nothing)."""
    if sentence in question:
        return None
    return {"id": f"gen-{chunk_id[:12]}", "question": question, "evidence": sentence, "generated": True}
