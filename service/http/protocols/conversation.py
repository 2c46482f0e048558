"""A chat client's conversation, both ways: its messages read as the workflow's input, and our
turn written as a chat UI shows it.

Reading: the last user message is the question and the user/assistant turns before it the
history (our own source list removed from earlier answers); `system`/`developer` messages are
the client's instructions, which shape how the answer is written and nothing else. A client that
retrieved on its own puts its context into a message: Open WebUI, with a file attached or its web
search on, sends its RAG template (the context as `<source id="1" name="…">` inside `<context>`)
in front of the user's message, or (`RAG_SYSTEM_CONTEXT`) at the end of the system message. The
template is cut out: its sources become the client's sources (`GivenSource`, cited under their
own numbers), and the question is what the user wrote (`<user_query>` when the template names it).
Open WebUI 0.12 (native function calling, its default) also puts an `<attached_files>` block of file
references (`<file type="file" id=… name=…/>`) before the question: cut out too, never part of the
question; when it names files whose content did not come, the answer's note says so and which
setting sends it (`FILE_NOT_SENT`).

Writing: the answer with its `[n]`, a short note of what the workflow warned about that the
answer does not already say, then the numbered source list (a chat UI renders it as Markdown).
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.config import Settings
from service.graph import ChatTurn, Citation, ClientContext, GivenSource, QueryResult
from service.http.protocols.openai_wire import ChatMessage, OpenAIError
from service.inputs import InvalidText, valid_text

SOURCES_MARK = "**来源**"
SOURCES_HEADING = f"\n\n---\n{SOURCES_MARK}\n"
NOTES_HEADING = "\n\n> 说明："
GIVEN_MARK = "（对话中提供）"

_CONTEXT = re.compile(r"<context>(.*?)</context>", re.DOTALL)
_SOURCE = re.compile(r"<source\b([^>]*)>(.*?)</source>", re.DOTALL)
_ATTRIBUTE = re.compile(r'(\w+)\s*=\s*"([^"]*)"')
_TAGGED_QUERY = re.compile(r"<(user_query|query)>(.*?)</\1>", re.DOTALL)
_TEMPLATE_HEAD = "### Task:"
_ATTACHED = re.compile(r"<attached_files>(.*?)</attached_files>\s*", re.DOTALL)
_FILE = re.compile(r"<file\b([^>]*?)/?>")
FILE_NOT_SENT = (
    "附件{names}的内容没有发到本服务（Open WebUI 只发来了文件引用）：请在 Open WebUI 的 管理员面板 → 设置 → 文档 "
    "打开“绕过嵌入和检索”（Bypass Embedding and Retrieval），或把嵌入模型设为本服务的 /v1/embeddings"
    "（RAG_EMBEDDING_ENGINE=openai），文件内容才会随问题发来"
)


@dataclass(frozen=True)
class Conversation:
    """The workflow's input: the question, the history, and what the client sent besides."""

    question: str
    history: list[ChatTurn]
    client: ClientContext
    last_message: str  # the last user message as sent: a housekeeping task is recognised on it
    attached: list[str] = field(default_factory=list)  # files the question references (`<attached_files>`)

    @property
    def notes(self) -> list[str]:
        """What the answer's note says about the request itself: files whose content never came."""
        if not self.attached or self.client.given:
            return []
        return [FILE_NOT_SENT.format(names="、".join(f"「{name}」" for name in self.attached))]

    @property
    def given_chars(self) -> int:
        return sum(len(source.text) for source in self.client.given)


@dataclass(frozen=True)
class _Split:
    rest: str  # the text without the RAG template
    sources: list[GivenSource]
    query: str | None  # the query the template names (`<user_query>`), if it does


def split_context(text: str) -> _Split:
    """Cut Open WebUI's RAG template out of `text`: from the `### Task:` before `<context>` to
    `</context>` (and a `<user_query>` after it); its sources, merged by id (one file's chunks
    share one id), in order."""
    found = _CONTEXT.search(text)
    if found is None:
        return _Split(text, [], None)
    start = text.rfind(_TEMPLATE_HEAD, 0, found.start())
    start, end = (found.start() if start < 0 else start), found.end()
    tagged = _TAGGED_QUERY.search(text, end)
    if tagged is not None and not text[end : tagged.start()].strip():
        end = tagged.end()
    query = tagged[2].strip() if tagged is not None else None
    return _Split((text[:start] + text[end:]).strip(), _sources(found[1]), query)


def without_attachments(text: str) -> tuple[str, list[str]]:
    """`text` without Open WebUI's `<attached_files>` blocks, and the names of the files they reference."""
    names = [
        dict(_ATTRIBUTE.findall(attributes)).get("name") or dict(_ATTRIBUTE.findall(attributes)).get("id", "")
        for block in _ATTACHED.findall(text)
        for attributes in _FILE.findall(block)
    ]
    return _ATTACHED.sub("", text), [name for name in names if name]


def _sources(context: str) -> list[GivenSource]:
    merged: dict[str, GivenSource] = {}
    for number, (attributes, body) in enumerate(_SOURCE.findall(context), start=1):
        named = dict(_ATTRIBUTE.findall(attributes))
        key, text = named.get("id") or str(number), body.strip()
        if key in merged:
            merged[key] = merged[key].model_copy(update={"text": f"{merged[key].text}\n\n{text}"})
        elif text:
            merged[key] = GivenSource(id=key, name=named.get("name") or named.get("src") or f"来源 {key}", text=text)
    if not merged and context.strip():  # a context without <source> tags: one source
        return [GivenSource(id="1", name="对话中提供的资料", text=context.strip())]
    return list(merged.values())


def read_conversation(messages: list[ChatMessage]) -> Conversation:
    """The question (the last user message, without a RAG template), the turns before it, and the
    client's instructions and sources; a request without a user question is a 400."""
    last = max((i for i, message in enumerate(messages) if message.role == "user"), default=None)
    if last is None:
        raise OpenAIError(400, "messages hold no user message: the last user message is the question", param="messages")
    sent = messages[last].text()
    text, attached = without_attachments(sent)
    asked = split_context(text)
    system = [split_context(m.text()) for m in messages if m.role in ("system", "developer")]
    question = without_attachments(asked.query or asked.rest)[0].strip()
    history = [
        ChatTurn(role="user" if m.role == "user" else "assistant", content=earlier)
        for m in messages[:last]
        if m.role in ("user", "assistant") and (earlier := _earlier(m.text()))
    ]
    instructions = "\n".join(part.rest for part in system if part.rest.strip())
    given = [source for part in (asked, *system) for source in part.sources]
    return Conversation(question, history, ClientContext(instructions=instructions, given=given), sent, attached)


def _earlier(text: str) -> str:
    """An earlier turn as the history keeps it: no file references, no RAG template, no source list of ours."""
    return without_sources(split_context(without_attachments(text)[0]).rest).strip()


def check_question(settings: Settings, conversation: Conversation) -> None:
    """The question, not the context the client sent with it, gets the check every protocol makes
    (`service.inputs.valid_text`: the same limits), in OpenAI's shape; what is too long (the question,
    or the context sent with it over `MAX_GIVEN_CHARS`) is refused in the user's language, saying what
    to do instead (OpenAI's code for input that is too long; `TooLong.reason` labels it in `/metrics`)."""
    question, chinese = conversation.question, speaks_chinese(conversation.question)
    try:
        valid_text(settings, "messages", question)
    except InvalidText as err:
        if err.kind != "string_too_long":
            raise OpenAIError(400, str(err), param="messages") from None
        limit = settings.max_question_chars
        message = _QUESTION_TOO_LONG[chinese].format(n=len(question), limit=limit, shared=err)
        raise TooLong("question_too_long", message) from None
    if conversation.given_chars > settings.max_given_chars:
        message = _CONTEXT_TOO_LONG[chinese].format(n=conversation.given_chars, limit=settings.max_given_chars)
        raise TooLong("context_too_long", message)


class TooLong(OpenAIError):
    """A 400 for input over a limit (`code: context_length_exceeded`); `reason` is its `/metrics` label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(400, message, param="messages", code="context_length_exceeded")
        self.reason = reason


def speaks_chinese(text: str) -> bool:
    """Whether the user writes Chinese: a refusal is written in the user's language."""
    sample = text[:2000]
    letters = [char for char in sample if char.isalpha()]
    return bool(letters) and sum(bool(_HAN.match(char)) for char in letters) * 5 >= len(letters)


_HAN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_QUESTION_TOO_LONG = {
    True: (
        "问题有 {n} 字，超过上限 MAX_QUESTION_CHARS={limit}：请把问题缩短；要就一篇长文提问，请把它作为文件附上"
        "（Open WebUI 打开“绕过嵌入和检索”时文件全文随问题发来，或把嵌入模型设为本服务的 /v1/embeddings），"
        "或把它加入知识库（{shared}）"
    ),
    False: (
        "{shared}: ask it in fewer words; to ask about a long text, attach it as a file (Open WebUI sends it as "
        "context with Bypass Embedding and Retrieval on, or with this service's /v1/embeddings as its embedding "
        "engine) or add it to the knowledge base"
    ),
}
_CONTEXT_TOO_LONG = {
    True: (
        "随问题发来的资料（附件或网页）共 {n} 字，超过上限 MAX_GIVEN_CHARS={limit}：请只附上相关的部分，"
        "或关掉 Open WebUI 的“绕过嵌入和检索”让它只发来相关的片段，或把文件加入知识库"
    ),
    False: (
        "messages: the context sent with the question (attached files, web pages) has {n} characters, more than "
        "MAX_GIVEN_CHARS={limit}: attach only the relevant part, or switch Open WebUI's Bypass Embedding and "
        "Retrieval off so it sends the relevant chunks only, or add the file to the knowledge base"
    ),
}


def without_sources(text: str) -> str:
    """An earlier answer of ours without its source list (the history is the conversation, not our footer)."""
    return text.split(SOURCES_HEADING, 1)[0]


def source_list(citations: list[Citation]) -> str:
    """The cited sources as Markdown a chat UI renders: `[n] label`, a web page as a link, a source
    the client sent marked as such."""
    if not citations:
        return ""
    lines = []
    for citation in citations:
        name = citation.label or citation.title or citation.source
        if citation.url:
            name = f"[{citation.title or citation.url}]({citation.url})"
        lines.append(f"- [{citation.number}] {name}{GIVEN_MARK if citation.kind == 'given' else ''}")
    return SOURCES_HEADING + "\n".join(lines)


def notes(result: QueryResult, about_request: Sequence[str] = ()) -> str:
    """What the request lacked (`Conversation.notes`) and the workflow's warnings the answer does not
    already say, as one short note."""
    unsaid = [*about_request, *(warning for warning in result.warnings if warning not in result.answer)]
    return f"{NOTES_HEADING}{'；'.join(unsaid)}" if unsaid else ""


def assistant_turn(result: QueryResult, about_request: Sequence[str] = ()) -> str:
    """Our whole turn: the answer, the note, the sources."""
    return result.answer + notes(result, about_request) + source_list(result.citations)
