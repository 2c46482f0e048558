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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import openai
from langchain_core.messages import HumanMessage
from pydantic import BaseModel, Field

from core.text import CJK_CHARS, ChineseTokenizer, stopwords
from retrieval.extractive import CLOSEST
from service.graph import WorkflowDeps, choose_mode
from service.http.protocols.conversation import SOURCES_MARK, without_attachments
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
    """`USER: …` / `ASSISTANT: …` lines as turns (without Open WebUI's `<attached_files>` blocks); a
    line without a speaker continues the turn before."""
    pieces = _TURN.split(history)
    return tuple(
        (role.lower(), without_attachments(text)[0].strip())
        for role, text in zip(pieces[1::2], pieces[2::2], strict=True)
    )


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


Suggest = Callable[[str, frozenset[str]], list[str]]  # (the conversation, its questions) -> questions to offer


async def answer(task: ChatTask, workflow: WorkflowDeps, suggest: Suggest) -> TaskAnswer:
    """Follow-ups are questions the base can answer (`suggest`: the page's example questions, those
    closest to the conversation), never a model's guess. Any other task: with a reachable model
    (`ANSWER_MODE`), one plain call on the client's prompt; without one, or when its reply does not
    parse (or in `auto` the call fails), or when the prompt is too long for a judgement model (a huge
    text pasted in the chat), the local answer. Never a retrieval."""
    if task.kind == "follow_ups":
        about = " ".join(text[:_READ_CHARS] for _, text in task.turns)
        found = await asyncio.to_thread(suggest, about, frozenset(task.said_by("user")))
        return TaskAnswer(json.dumps({"follow_ups": found[:MAX_FOLLOW_UPS]}, ensure_ascii=False), "local")
    mode, _ = await choose_mode(workflow)
    if mode == "llm" and len(task.prompt) <= TASK_MODEL_MAX_CHARS:
        reply = await _ask_model(task, workflow)
        content = as_parsed(task, reply.text) if reply is not None else None
        if reply is not None and content is not None:
            return TaskAnswer(content, "model", reply.prompt_tokens, reply.completion_tokens)
    tokenizer = await asyncio.to_thread(workflow.retriever.readable_tokenizer, workflow.scope)  # no hidden terms
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
            value = []  # questions the base can answer come from `answer`'s `suggest`, not from the conversation
        case "queries":
            value = questions[-1:]  # the question itself: what the client then searches its own sources for
        case "autocomplete":
            value = ""  # "if unsure, return an empty text": a continuation needs a model
    (key,) = _SCHEMAS[task.kind].model_fields
    return json.dumps({key: value}, ensure_ascii=False)


# --- local answers ------------------------------------------------------------------------------

TITLE_TERMS, MAX_TAGS, MAX_FOLLOW_UPS = 4, 3, 3
TASK_MODEL_MAX_CHARS = 24_000  # a longer task prompt (a huge pasted text in the history) is answered locally
_READ_CHARS = 2000  # of each turn, what the local answers read: a title comes from the first sentence
_QUOTE = re.compile(r"「(.+?)」")
_CJK_WORD = re.compile(rf"[{CJK_CHARS}]+")
_FIRST_SENTENCE = re.compile(r"[^。！？!?；;\n]+")
_NAMES = ("nr", "ns", "nt", "nz")  # proper nouns: a title keeps them first
_NOT_KEY = "mrdcpuqeyoz"  # numerals, pronouns, adverbs, conjunctions, particles, ...: never a key term
# What follows a name in a phrase, as jieba tags it: a particle (等), a classifier (道: 说道), a
# classical morpheme (the speech verbs of old texts).
_TRAILING = ("u", "q", "zg")
_NUMERALS = re.compile(r"[0-9一二三四五六七八九十百千万两余数几]")
# What a question word asks for, as a title names it: 「年假有几天」 is titled 「年假天数」.
_ASKED_FOR = {
    "几天": "天数",
    "多少天": "天数",
    "多久": "时长",
    "多长时间": "时长",
    "几年": "年数",
    "多少年": "年数",
    "几次": "次数",
    "多少次": "次数",
    "多少钱": "费用",
    "多重": "重量",
    "多高": "高度",
    "多远": "距离",
    "几岁": "年龄",
    "多大": "年龄",
    "几个": "数量",
    "多少": "数量",
    "几人": "人数",
    "多少人": "人数",
    "何时": "时间",
    "什么时候": "时间",
    "哪年": "时间",
    "哪里": "地点",
    "何处": "地点",
    "哪儿": "地点",
    "为什么": "原因",
    "为何": "原因",
    "何故": "原因",
    "如何": "方法",
    "怎么办": "方法",
}


def first_sentence(text: str) -> str:
    found = _FIRST_SENTENCE.search(text[:_READ_CHARS])
    return found[0].strip() if found else ""


def key_terms(text: str, tokenizer: ChineseTokenizer) -> list[str]:
    """The question's key terms in order: its words without stop words, runs of single characters
    glued (年/假 → 年假), a question word as what it asks for (几天 → 天数)."""
    stop = stopwords()
    terms: list[str] = []
    glue = ""
    for word in tokenizer.words(text):
        if len(word) == 1 and _CJK_WORD.fullmatch(word) is not None and word not in stop:
            glue += word
            continue
        if len(glue) > 1:
            terms.append(glue)
        glue = ""
        if word in _ASKED_FOR:
            terms.append(_ASKED_FOR[word])
        elif len(word) > 1 and word not in stop and _tag(word)[0] not in _NOT_KEY and not _NUMERALS.search(word):
            terms.append(word)
    if len(glue) > 1:
        terms.append(glue)
    return list(dict.fromkeys(terms))


def subject_terms(text: str, tokenizer: ChineseTokenizer) -> list[str]:
    """The base's dictionary terms `text` mentions that can be what a question is about, in order of
    first mention: names and nouns (林晓舟, 青禾科技, 杭州), never a count (十余), an adverb (厉声), a
    verb (却说) or a piece of a phrase (林晓舟等). Read through the index's tokenizer (its corpus
    dictionary), so whatever dictionary the base carries is used as it is."""
    found: dict[str, int] = {}
    for term in sorted(tokenizer.corpus_terms, key=len, reverse=True):
        at = text.find(term)
        if at >= 0 and _is_subject(term) and not any(term in longer for longer in found):
            found[term] = at
    return sorted(found, key=found.__getitem__)


def _tag(word: str) -> str:
    """jieba's part of speech of `word` in its own dictionary; "n" for a word it does not know."""
    import jieba.posseg  # its tables load on import: only the local answers pay for them

    return str(jieba.posseg.dt.word_tag_tab.get(word) or "n")


def _is_subject(term: str) -> bool:
    """A name: a term jieba does not know (the corpus taught it: 林晓舟, 青禾科技) or knows as a proper
    noun; never a common word the corpus repeats (国家, 将军), a count or a phrase's piece."""
    known = _tag(term) if _known(term) else None
    plain = known is None or known.startswith(_NAMES)
    return plain and len(term) > 1 and not _NUMERALS.search(term) and not (known is None and _trailed(term))


def _trailed(term: str) -> bool:
    """Whether a term the corpus taught is a name and the particle or verb of speech that follows it
    (林晓舟等, 林晓舟道): two characters or more, then one jieba tags as a particle or a classifier."""
    return len(term) > 2 and _known(term[-1]) and _tag(term[-1]) in _TRAILING


def _known(word: str) -> bool:
    import jieba.posseg

    return word in jieba.posseg.dt.word_tag_tab


def title(question: str, tokenizer: ChineseTokenizer) -> str:
    """The first sentence's key terms (what it asks for included), glued as Chinese writes them."""
    sentence = first_sentence(question)
    terms = key_terms(sentence, tokenizer)
    named = set(subject_terms(sentence, tokenizer)) | set(_ASKED_FOR.values())
    kept = set(sorted(terms, key=lambda term: term not in named and _tag(term)[:2] not in _NAMES)[:TITLE_TERMS])
    terms = [term for term in terms if term in kept]
    if not terms:
        return sentence[:20] or "对话"
    return ("" if all(_CJK_WORD.fullmatch(term) for term in terms) else " ").join(terms)


def tags(questions: list[str], answers: list[str], tokenizer: ChineseTokenizer) -> list[str]:
    """The dictionary terms the questions mention, then those of the passages the answers quote,
    then the first question's key terms. Never the placeholders of the prompt, never a guessed name."""
    quoted = [evidence(answer) for answer in answers]
    found = [term for text in [*questions, *quoted] for term in subject_terms(text[:_READ_CHARS], tokenizer)]
    found += key_terms(first_sentence(questions[0]), tokenizer) if questions else []
    return list(dict.fromkeys(found))[:MAX_TAGS] or ["General"]


def evidence(answer: str) -> str:
    """What an answer of ours quotes as evidence: its 「…」 quotes (the whole body for a model's
    answer), nothing when it says it found none (the closest text it shows confirms nothing)."""
    body = answer.partition(SOURCES_MARK)[0][:_READ_CHARS]
    if CLOSEST in body:
        return ""
    return " ".join(_QUOTE.findall(body)) or body
