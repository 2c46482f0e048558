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

Writing: the answer with its `[n]`, a short note of what the workflow warned about that the
answer does not already say, then the numbered source list (a chat UI renders it as Markdown).
"""

import re
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Conversation:
    """The workflow's input: the question, the history, and what the client sent besides."""

    question: str
    history: list[ChatTurn]
    client: ClientContext
    last_message: str  # the last user message as sent: a housekeeping task is recognised on it


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
    asked = split_context(sent)
    system = [split_context(m.text()) for m in messages if m.role in ("system", "developer")]
    question = (asked.query or asked.rest).strip()
    history = [
        ChatTurn(role="user" if m.role == "user" else "assistant", content=without_sources(split_context(text).rest))
        for m in messages[:last]
        if m.role in ("user", "assistant") and (text := m.text()).strip()
    ]
    instructions = "\n".join(part.rest for part in system if part.rest.strip())
    given = [source for part in (asked, *system) for source in part.sources]
    return Conversation(question, history, ClientContext(instructions=instructions, given=given), sent)


def check_question(settings: Settings, question: str) -> None:
    """The question, not the context the client sent with it, gets the check every protocol makes
    (`service.inputs.valid_text`: the same limits and messages), in OpenAI's shape; a question too
    long is told what to do instead (OpenAI's code for input that is too long)."""
    try:
        valid_text(settings, "messages", question)
    except InvalidText as err:
        if err.kind != "string_too_long":
            raise OpenAIError(400, str(err), param="messages") from None
        hint = (
            "ask it in fewer words; to ask about a long text, attach it as a file (Open WebUI then sends it as context)"
        )
        raise OpenAIError(400, f"{err}: {hint}", param="messages", code="context_length_exceeded") from None


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


def notes(result: QueryResult) -> str:
    """The workflow's warnings the answer does not already say, as one short note."""
    unsaid = [warning for warning in result.warnings if warning not in result.answer]
    return f"{NOTES_HEADING}{'；'.join(unsaid)}" if unsaid else ""


def assistant_turn(result: QueryResult) -> str:
    """Our whole turn: the answer, the note, the sources."""
    return result.answer + notes(result) + source_list(result.citations)
