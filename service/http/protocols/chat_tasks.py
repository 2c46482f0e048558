"""A chat client's housekeeping prompts, recognised and answered as the client parses them.

After every answer Open WebUI sends the model of the chat its background tasks: a title, tags
and follow-up questions (also search queries, autocompletion and, in a call, an emoji). Each is a
`### Task:` prompt asking for one JSON object (`{"title": …}`, `{"tags": […]}`, `{"follow_ups":
[…]}`, `{"queries": […]}`, `{"text": …}`) over the conversation in `<chat_history>`. Answered as a
question, each would cost a retrieval (and with a model four calls) and come back as text the
client cannot parse. So they are recognised by that shape, never by wording (admins rewrite the
templates), and answered without retrieval or web search: with a model, by one plain call on the
client's own prompt, kept only when it parses; without one, locally, from the conversation's
terms and the base's dictionary.
"""

import asyncio
import json
import logging
import re
from dataclasses import dataclass
from typing import Literal

import openai
from langchain_core.messages import HumanMessage
from pydantic import BaseModel, Field

from core.text import CJK_CHARS, ChineseTokenizer
from service.graph import WorkflowDeps, choose_mode
from service.http.protocols.conversation import SOURCES_MARK
from service.llm.client import PlainReply, ask_plain
from service.llm.structured import OutputError, parse_output

logger = logging.getLogger(__name__)

TaskKind = Literal["title", "tags", "follow_ups", "queries", "autocomplete", "emoji"]
Turn = tuple[str, str]  # ("user" | "assistant" | "system", text) of the chat history

_TASK_HEAD = re.compile(r"\s*#{1,4}\s*Task\s*:", re.IGNORECASE)
_HISTORY = re.compile(r"<chat_history>(.*?)</chat_history>", re.DOTALL)
_ASKED = re.compile(r'\{\s*"(title|tags|follow_ups|queries|text)"\s*:')
_TURN = re.compile(r"^(USER|ASSISTANT|SYSTEM):[ \t]?", re.MULTILINE)
_TEXT = re.compile(r"<text>.*?</text>", re.DOTALL)  # autocomplete's text to continue
_EMOJI_HEAD_MAX = 1000  # the emoji task's instruction is short; the message it quotes follows
_KINDS: dict[str, TaskKind] = {
    "title": "title",
    "tags": "tags",
    "follow_ups": "follow_ups",
    "queries": "queries",
    "text": "autocomplete",
}
NO_EMOJI_MODEL = "🙂"  # without a model: a neutral face (the emoji task wants one emoji, nothing else)


@dataclass(frozen=True)
class ChatTask:
    """A recognised housekeeping prompt: what it asks for, the prompt whole (what a model is given)
    and the conversation it is about."""

    kind: TaskKind
    prompt: str
    turns: tuple[Turn, ...]

    def said_by(self, role: str) -> list[str]:
        return [text for speaker, text in self.turns if speaker == role and text]


def recognise(message: str) -> ChatTask | None:
    """The task `message` is, or None for anything else (a question is never mistaken for one: the
    JSON key is looked for outside the quoted conversation)."""
    if _is_emoji_task(message):
        return ChatTask("emoji", message, ())
    history = _HISTORY.search(message)
    if not _TASK_HEAD.match(message) or history is None:
        return None
    asked = _ASKED.search(message[: history.start()]) or _ASKED.search(message[history.end() :])
    if asked is None:
        return None
    kind = _KINDS[asked[1]]
    if kind == "autocomplete" and _TEXT.search(message, history.end()) is None:
        return None
    return ChatTask(kind, message, _turns(history[1]))


def _is_emoji_task(message: str) -> bool:
    """Open WebUI's emoji task (in a call): a short instruction naming the task and emojis, then
    `Message:` and the message in a ``` fence, last."""
    cut = message.find("Message:", 0, _EMOJI_HEAD_MAX)
    head, fenced = message[: max(cut, 0)].lower(), message[cut + len("Message:") :].strip()
    return cut >= 0 and "task" in head and "emoji" in head and len(fenced) >= 6 and fenced[:3] == fenced[-3:] == "```"


def _turns(history: str) -> tuple[Turn, ...]:
    """`USER: …` / `ASSISTANT: …` lines as turns; a line without a speaker continues the turn before."""
    pieces = _TURN.split(history)
    return tuple((role.lower(), text.strip()) for role, text in zip(pieces[1::2], pieces[2::2], strict=True))


# --- what the client parses ---------------------------------------------------------------------


class _Title(BaseModel):
    title: str = Field(min_length=1)


class _Tags(BaseModel):
    tags: list[str]


class _FollowUps(BaseModel):
    follow_ups: list[str]


class _Queries(BaseModel):
    queries: list[str]


class _Completion(BaseModel):
    text: str


_SCHEMAS: dict[TaskKind, type[BaseModel]] = {
    "title": _Title,
    "tags": _Tags,
    "follow_ups": _FollowUps,
    "queries": _Queries,
    "autocomplete": _Completion,
}


def as_parsed(task: ChatTask, reply: str) -> str | None:
    """A model's reply as the client parses it (one JSON object, no reasoning, no fence), or None
    when it holds nothing the client could use."""
    if task.kind == "emoji":
        return reply.strip().split()[0] if reply.strip() else None
    try:
        value = parse_output(reply, _SCHEMAS[task.kind])
    except OutputError:
        return None
    return json.dumps(value.model_dump(), ensure_ascii=False)


# --- answering ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskAnswer:
    """The content the client parses, who wrote it, and the tokens a model spent on it."""

    content: str
    by: Literal["model", "local"]
    prompt_tokens: int = 0
    completion_tokens: int = 0


async def answer(task: ChatTask, workflow: WorkflowDeps) -> TaskAnswer:
    """With a reachable model (`ANSWER_MODE`), one plain call on the client's prompt; without one, or
    when its reply does not parse (or in `auto` the call fails), the local answer. Never a retrieval."""
    mode, _ = await choose_mode(workflow)
    if mode == "llm":
        reply = await _ask_model(task, workflow)
        content = as_parsed(task, reply.text) if reply is not None else None
        if reply is not None and content is not None:
            return TaskAnswer(content, "model", reply.prompt_tokens, reply.completion_tokens)
    tokenizer = await asyncio.to_thread(workflow.retriever.index_tokenizer, workflow.scope)
    return TaskAnswer(local_answer(task, tokenizer), "local")


async def _ask_model(task: ChatTask, workflow: WorkflowDeps) -> PlainReply | None:
    """The judge model's reply (the smaller model, as for every other short judgement); in `auto`
    a failed call is None (and reported to the probe), in `llm` it propagates."""
    try:
        return await ask_plain(workflow.judge_llm, [HumanMessage(task.prompt)])
    except openai.APIError as err:
        if workflow.settings.answer_mode == "llm":
            raise
        logger.warning("the %s task's model call failed (%s): answering it locally", task.kind, type(err).__name__)
        if workflow.probe is not None:
            workflow.probe.report_failure(f"大模型服务调用失败（{type(err).__name__}）")
        return None


def local_answer(task: ChatTask, tokenizer: ChineseTokenizer) -> str:
    """What the client asks for, from the conversation alone: no model, no search."""
    questions, answers = task.said_by("user"), task.said_by("assistant")
    value: object
    match task.kind:
        case "emoji":
            return NO_EMOJI_MODEL
        case "title":
            value = title(questions[0] if questions else "", tokenizer)
        case "tags":
            value = tags(questions, answers, tokenizer)
        case "follow_ups":
            value = follow_ups(questions, answers[-1] if answers else "", tokenizer)
        case "queries":
            value = questions[-1:]  # the question itself: what the client then searches its own sources for
        case "autocomplete":
            value = ""  # "if unsure, return an empty text": a continuation needs a model
    (key,) = _SCHEMAS[task.kind].model_fields
    return json.dumps({key: value}, ensure_ascii=False)


# --- local answers ------------------------------------------------------------------------------

TITLE_TERMS, MAX_TAGS, MAX_FOLLOW_UPS = 4, 3, 3
_QUOTE = re.compile(r"「(.+?)」")
_SOURCE_LINE = re.compile(r"^- \[\d+\] \[?([^\]\n]+?)(?:\]\(.*\))?$", re.MULTILINE)
_CJK_WORD = re.compile(rf"[{CJK_CHARS}]+")


def _key_terms(text: str, tokenizer: ChineseTokenizer) -> list[str]:
    return list(dict.fromkeys(word for word in tokenizer.content_words(text) if len(word) > 1))


def title(question: str, tokenizer: ChineseTokenizer) -> str:
    """The question's main terms (its words without stop words), glued as Chinese writes them."""
    terms = _key_terms(question, tokenizer)[:TITLE_TERMS]
    if not terms:
        return question.strip()[:20] or "对话"
    return ("" if all(_CJK_WORD.fullmatch(term) for term in terms) else " ").join(terms)


def tags(questions: list[str], answers: list[str], tokenizer: ChineseTokenizer) -> list[str]:
    """The names the conversation mentions (the base's dictionary terms and proper nouns), the
    questions' first; then the first question's terms. Never the placeholders of the prompt."""
    found = [name for text in [*questions, *answers] for name in tokenizer.names(text)]
    found += _key_terms(questions[0], tokenizer) if questions else []
    return list(dict.fromkeys(found))[:MAX_TAGS] or ["General"]


def follow_ups(questions: list[str], last_answer: str, tokenizer: ChineseTokenizer) -> list[str]:
    """Questions the cited passages invite: about the names they mention that were not asked about,
    and about the rest of the passages cited; else about the question's own terms."""
    body, _, sources = last_answer.partition(SOURCES_MARK)
    cited = " ".join(_QUOTE.findall(body)) or body
    asked = "".join(questions)
    names = [name for name in tokenizer.names(cited) if name not in asked][: MAX_FOLLOW_UPS - 1]
    found = [f"资料里关于{name}还说了什么？" for name in names]
    found += [f"{label.split(' · ')[0]}还讲了哪些内容？" for label in _SOURCE_LINE.findall(sources)[:1]]
    if not found and questions:
        found = [f"资料里关于{term}还有哪些记载？" for term in _key_terms(questions[-1], tokenizer)[:MAX_FOLLOW_UPS]]
    return found[:MAX_FOLLOW_UPS]
