"""Ratings of answers, and what an admin makes of them: the one place every protocol rates through.

- `rate`: only the asker rates its answer; a new rating replaces the old. A hidden answer, an
  absent one and a passage the asker may not read all get the same `AbsentAnswer`, word for word.
- `accept`: an admin turns a rated answer into a line of the base's question set (the passage
  picked, by the asker or by the admin, or the cited ones of an upvote), split by the set's own
  rule (seeded from the line's id); a downvote with no passage becomes a knowledge gap.
- `undo`: the line leaves the set again.

Nothing here changes retrieval: only an evaluation of the question set does, when an admin runs it.
"""

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from elasticsearch import Elasticsearch

from core.contract import parse_json
from core.store import IndexNotFoundError
from evaluation.store import StoredQuestions, load_questions, save_questions
from retrieval.retriever import Retriever
from service.answers import Acceptance, AnswerLog, LoggedAnswer, Rating, Vote, visible
from service.principals import Caller

CHAT_PREFIX = "chatcmpl-"  # an OpenAI chat completion's id is its answer's id with this prefix


class AbsentAnswer(LookupError):
    """No answer of this id that the caller may see, or a passage it may not read: one message for all."""

    def __init__(self, answer_id: str) -> None:
        super().__init__(f"no answer {answer_id!r}")


class NotTheAsker(PermissionError):
    def __init__(self) -> None:
        super().__init__("only the caller who asked may rate an answer")


class NotAcceptable(ValueError):
    """An answer that cannot become a question (unrated, or logged without its question)."""


def answer_key(answer_id: str) -> str:
    """The log's id of an answer named by its id or by its chat completion's id."""
    return answer_id.removeprefix(CHAT_PREFIX)


def seen(log: AnswerLog, caller: Caller, answer_id: str) -> LoggedAnswer:
    """The answer, when the caller may see it (its asker, the base's admins); else `AbsentAnswer`."""
    answer = log.get(answer_key(answer_id))
    if answer is None or not visible(caller, answer):
        raise AbsentAnswer(answer_id)
    return answer


def _readable(retriever: Retriever, caller: Caller, kb: str, chunk_id: str) -> bool:
    try:
        return retriever.chunk(caller.scope(kb), chunk_id) is not None
    except IndexNotFoundError:
        return False


@dataclass(frozen=True)
class Rated:
    answer: LoggedAnswer
    first: bool  # the answer had no rating before


def rate(
    log: AnswerLog, retriever: Retriever, caller: Caller, answer_id: str, vote: Vote, comment: str, chunk_id: str | None
) -> Rated:
    """The asker's rating of its answer, replacing any earlier one."""
    answer = seen(log, caller, answer_id)
    if answer.owner != caller.name:
        raise NotTheAsker()
    if chunk_id is not None and not _readable(retriever, caller, answer.kb, chunk_id):
        raise AbsentAnswer(answer_id)  # a passage it may not read reads as an answer that is not there
    now = datetime.now(UTC).isoformat()
    rated = answer.model_copy(update={"rating": Rating(vote=vote, comment=comment, chunk_id=chunk_id, rated_at=now)})
    log.save(rated)
    return Rated(rated, first=answer.rating is None)


def question_id(answer: LoggedAnswer) -> str:
    return f"answer-{answer.id[:16]}"


def _relevant(answer: LoggedAnswer, picked: str | None) -> list[str]:
    """The question's relevant chunks: the admin's pick, else the asker's, else (an upvote) the cited ones."""
    rating = answer.rating
    if picked:
        return [picked]
    if rating is not None and rating.chunk_id:
        return [rating.chunk_id]
    if rating is not None and rating.vote == "up":
        return answer.cited_ids
    return []


def _without(stored: StoredQuestions | None, line_id: str) -> list[str]:
    """The set's lines, less the one of id `line_id` (kept as written, bad lines included)."""
    lines = stored.text.splitlines() if stored else []
    return [line for line in lines if line.strip() and _line_id(line) != line_id]


def _line_id(line: str) -> str | None:
    try:
        item = parse_json(line)  # nesting bounded: never a RecursionError
    except ValueError:
        return None
    return str(item.get("id")) if isinstance(item, dict) and item.get("id") is not None else None


@dataclass(frozen=True)
class Accepted:
    answer: LoggedAnswer
    line: dict[str, object] | None  # the question-set line added (None: a knowledge gap)
    questions: StoredQuestions | None  # the set after the change


def accept(
    log: AnswerLog, es: Elasticsearch, questions_index: str, admin: Caller, answer: LoggedAnswer, picked: str | None
) -> Accepted:
    """`answer` (rated, seen by `admin`, an admin of its base) as a question of the base's set, or,
    a downvote with no passage, as a knowledge gap. The set is stored as the admin's (its lines may
    now quote what only admins read)."""
    if answer.rating is None:
        raise NotAcceptable("only a rated answer can be accepted")
    relevant = _relevant(answer, picked)
    now = datetime.now(UTC).isoformat()
    if not relevant:
        gap = Acceptance(kind="gap", by=admin.name, at=now)
        log.save(answer.model_copy(update={"accepted": gap}))
        return Accepted(
            answer.model_copy(update={"accepted": gap}), None, load_questions(es, questions_index, answer.kb)
        )
    if not answer.question:
        raise NotAcceptable("the answer log keeps no question text (ANSWER_LOG_QUESTIONS=false): nothing to ask")
    line_id = question_id(answer)
    line: dict[str, object] = {"id": line_id, "question": answer.question, "chunk_ids": relevant, "answer": answer.id}
    lines = [*_without(load_questions(es, questions_index, answer.kb), line_id), json.dumps(line, ensure_ascii=False)]
    saved = save_questions(es, questions_index, answer.kb, "\n".join(lines) + "\n", admin.name)
    taken = Acceptance(kind="question", question_id=line_id, chunk_ids=relevant, by=admin.name, at=now)
    accepted = answer.model_copy(update={"accepted": taken})
    log.save(accepted)
    return Accepted(accepted, line, saved)


def undo(log: AnswerLog, es: Elasticsearch, questions_index: str, admin: Caller, answer: LoggedAnswer) -> Accepted:
    """The acceptance of `answer` undone: its line leaves the base's set (a gap leaves the report)."""
    stored = load_questions(es, questions_index, answer.kb)
    if answer.accepted is not None and answer.accepted.kind == "question" and stored is not None:
        remaining = _without(stored, question_id(answer))
        stored = save_questions(es, questions_index, answer.kb, "\n".join(remaining) + "\n", admin.name)
    undone = answer.model_copy(update={"accepted": None})
    log.save(undone)
    return Accepted(undone, None, stored)
