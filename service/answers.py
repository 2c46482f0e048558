"""The answer log: every answer the service gives, kept under the id its asker rates it by.

One document per answer in `ANSWERS_INDEX`: the base, the asker and what it may read there, the
question and answer (unless `ANSWER_LOG_QUESTIONS=false`), the cited chunks, the answer mode, the
verdicts, warnings and timings; then the asker's rating and what an admin made of it. An answer
is seen by its asker (while it may read the base) and by the base's admins, exactly as a job or a
question set is (`Caller.sees_work_of`); to anyone else it is absent. Answers older than
`ANSWER_RETENTION_DAYS` are gone (read as absent at once, deleted at the next write).

Nothing here changes retrieval: a rating is evidence about one question. An admin turns it into a
question of the base's question set, and only an evaluation of that set changes the fusion.
"""

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from elasticsearch import Elasticsearch, NotFoundError
from pydantic import BaseModel, Field

from core.config import Settings
from core.store import wait_until_readable
from service.graph import QueryResult
from service.principals import Caller

logger = logging.getLogger(__name__)

GAP_MARK = "无法从上下文确认"  # what an answer says about what its context does not confirm
Vote = Literal["up", "down"]
Kind = Literal["all", "down", "up", "gap"]
Channel = Literal["query", "stream", "openai", "mcp"]  # the protocol an answer went out on
PURGE_EVERY_S = 3600.0

_MAPPING: dict[str, Any] = {
    # Only what is filtered or sorted on is indexed; the rest is kept in `_source`.
    "dynamic": False,
    "properties": {
        "kb": {"type": "keyword"},
        "owner": {"type": "keyword"},
        "gap": {"type": "boolean"},
        "created_at": {"type": "date"},
        "rating": {"properties": {"vote": {"type": "keyword"}, "rated_at": {"type": "date"}}},
        "accepted": {"properties": {"kind": {"type": "keyword"}}},
    },
}


class CitedChunk(BaseModel):
    chunk_id: str
    label: str = ""
    snippet: str = ""


class Rating(BaseModel):
    vote: Vote
    comment: str = ""
    chunk_id: str | None = Field(None, description="the passage the asker says answers the question")
    rated_at: str


class Acceptance(BaseModel):
    """What an admin made of a rating: a question of the base's set, or a knowledge gap."""

    kind: Literal["question", "gap"]
    question_id: str | None = Field(None, description="its id in the base's question set")
    chunk_ids: list[str] = Field(default_factory=list, description="the question's relevant chunks")
    by: str
    at: str


class LoggedAnswer(BaseModel):
    id: str
    kb: str
    owner: str = Field(description="the asker")
    access_scope: str = Field(description="what the asker may read of the base (DocumentAccess.key)")
    protocol: Channel
    question: str = Field(description="empty when ANSWER_LOG_QUESTIONS=false")
    answer: str = Field(description="empty when ANSWER_LOG_QUESTIONS=false")
    mode: str = Field(description="llm or extractive")
    retrieval_mode: str
    cited: list[CitedChunk] = Field(description="the local passages the answer cites")
    verdicts: list[dict[str, Any]] = Field(description="the evaluator's verdicts: enough, missing, with_web")
    gap: bool = Field(description=f"the answer says {GAP_MARK}")
    warnings: list[str]
    timings: dict[str, float]
    created_at: str
    rating: Rating | None = None
    accepted: Acceptance | None = None

    @property
    def cited_ids(self) -> list[str]:
        return [chunk.chunk_id for chunk in self.cited]


@dataclass(frozen=True)
class Asked:
    """Who asked, where and how: the caller, its base and what it reads there, the protocol."""

    caller: Caller
    kb: str
    access_scope: str
    protocol: Channel
    retrieval_mode: str = "hybrid"


def new_answer_id() -> str:
    return uuid.uuid4().hex


def logged_answer(answer_id: str, asked: "Asked", result: QueryResult, keep_text: bool) -> LoggedAnswer:
    """The log's record of `result`, as `asked`."""
    return LoggedAnswer(
        id=answer_id,
        kb=asked.kb,
        owner=asked.caller.name,
        access_scope=asked.access_scope,
        protocol=asked.protocol,
        question=result.question if keep_text else "",
        answer=result.answer if keep_text else "",
        mode=result.answer_mode,
        retrieval_mode=str(asked.retrieval_mode),
        cited=[
            CitedChunk(chunk_id=c.chunk_id, label=c.label, snippet=c.snippet if keep_text else "")
            for c in result.citations
            if c.kind == "local" and c.chunk_id
        ],
        verdicts=[e.model_dump(include={"enough", "missing", "with_web"}) for e in result.evaluations],
        gap=GAP_MARK in result.answer,
        warnings=result.warnings,
        timings=result.timings,
        created_at=datetime.now(UTC).isoformat(),
    )


class AnswerLog:
    """The log in Elasticsearch (created on first write); reads see only answers within retention."""

    def __init__(self, es: Elasticsearch, settings: Settings) -> None:
        self.es = es
        self.index = settings.answers_index
        self.keep_text = settings.answer_log_questions
        self.retention_days = settings.answer_retention_days
        self.replicas = settings.es_replicas
        self._ready = False
        self._purged_at: float | None = None  # never yet, in this process

    def _cutoff(self) -> str | None:
        if not self.retention_days:
            return None
        return (datetime.now(UTC) - timedelta(days=self.retention_days)).isoformat()

    def _ensure(self) -> None:
        if self._ready:
            return
        if not self.es.indices.exists(index=self.index):
            self.es.options(ignore_status=400).indices.create(  # 400: another process created it first
                index=self.index, mappings=_MAPPING, settings={"number_of_replicas": self.replicas}
            )
        wait_until_readable(self.es, self.index, lambda: self.es.options(ignore_status=404).count(index=self.index))
        self._ready = True

    def record(self, answer: LoggedAnswer) -> None:
        """Keep one answer (blocking), and delete expired ones at most once an hour."""
        self._ensure()
        self.es.index(index=self.index, id=answer.id, document=answer.model_dump(mode="json"))
        cutoff = self._cutoff()
        if cutoff and (self._purged_at is None or time.monotonic() - self._purged_at > PURGE_EVERY_S):
            self._purged_at = time.monotonic()
            self._purge(cutoff)

    def _purge(self, cutoff: str) -> None:
        """Delete answers older than `cutoff`, a thousand at a time (no `_delete_by_query`: a node
        without the reindex module has none)."""
        self.es.indices.refresh(index=self.index)
        while True:
            expired = self.es.search(
                index=self.index, query={"range": {"created_at": {"lt": cutoff}}}, size=1000, source=False
            )["hits"]["hits"]
            if not expired:
                return
            self.es.bulk(
                operations=[{"delete": {"_index": self.index, "_id": hit["_id"]}} for hit in expired], refresh=True
            )

    def get(self, answer_id: str) -> LoggedAnswer | None:
        """The answer, if it exists and is within retention (the caller's right to see it is `visible`)."""
        try:
            source = self.es.get(index=self.index, id=answer_id)["_source"]
        except NotFoundError:
            return None
        answer = LoggedAnswer.model_validate(source)
        cutoff = self._cutoff()
        return None if cutoff and answer.created_at < cutoff else answer

    def save(self, answer: LoggedAnswer) -> None:
        """Write a rated or accepted answer back (visible to searches at once: the review lists it)."""
        self.es.index(index=self.index, id=answer.id, document=answer.model_dump(mode="json"), refresh=True)

    def listed(self, kb: str, owner: str | None, kind: Kind, size: int) -> list[LoggedAnswer]:
        """The newest `size` answers of `kb` (only `owner`'s unless None) of `kind`: voted down, voted
        up, or gaps (the answer said it could not confirm, or a downvote named no passage)."""
        filters: list[dict[str, Any]] = [{"term": {"kb": kb}}]
        if owner is not None:
            filters.append({"term": {"owner": owner}})
        if cutoff := self._cutoff():
            filters.append({"range": {"created_at": {"gte": cutoff}}})
        if kind in ("up", "down"):
            filters.append({"term": {"rating.vote": kind}})
        elif kind == "gap":
            either = [{"term": {"gap": True}}, {"term": {"rating.vote": "down"}}]
            filters.append({"bool": {"should": either, "minimum_should_match": 1}})
        try:
            response = self.es.search(
                index=self.index, query={"bool": {"filter": filters}}, sort=[{"created_at": "desc"}], size=size
            )
        except NotFoundError:
            return []
        found = [LoggedAnswer.model_validate(hit["_source"]) for hit in response["hits"]["hits"]]
        # A downvote "with no passage" is read from `_source` (the chunk id is not indexed).
        return [a for a in found if kind != "gap" or a.gap or (a.rating is not None and a.rating.chunk_id is None)]


def visible(caller: Caller, answer: LoggedAnswer) -> bool:
    """Its asker (while it may read the base) and the base's admins see an answer: it may quote
    documents of groups other readers do not hold."""
    return caller.sees_work_of(answer.kb, answer.owner)
