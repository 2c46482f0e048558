"""Requests shaped like those chat clients send to an OpenAI-compatible model, for benchmarks and tests.

Open WebUI sends the model of a chat, besides the user's questions, its background tasks: a
`### Task:` prompt with `### Guidelines:`, an `### Output:` naming the JSON object it will parse
and the conversation inside `<chat_history>` (`USER: …` / `ASSISTANT: …` lines). With a file
attached or its own web search on, it puts its RAG template (the context as `<source id="1"
name="…">` inside `<context>`) in front of the user's message. The title, tags, follow-ups and
queries prompts are Open WebUI 0.12.4's own, as recorded from it (`recorded`), over any
conversation; autocomplete, emoji and the RAG template helpers follow its shape in our words.
"""

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Turns = Sequence[tuple[str, str]]  # (role, text): "user" or "assistant"
RECORDED = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "openwebui"
_HISTORY = re.compile(r"<chat_history>.*?</chat_history>", re.DOTALL)


def chat_history(turns: Turns) -> str:
    """The conversation as Open WebUI writes it into a task prompt."""
    return "\n".join(f"{role.upper()}: {text}" for role, text in turns)


def recorded(name: str) -> dict[str, Any]:
    """A request body Open WebUI 0.12.4 sent (tests/fixtures/openwebui/, README there says how)."""
    return dict(json.loads((RECORDED / f"{name}.json").read_text(encoding="utf-8")))


def _task(name: str, turns: Turns) -> str:
    """Open WebUI's own task prompt as it sent it, over the conversation `turns`."""
    prompt = str(recorded(name)["messages"][0]["content"])
    history = f"<chat_history>\n{chat_history(turns)}\n</chat_history>"
    return _HISTORY.sub(lambda _: history, prompt, count=1)


def title_task(turns: Turns) -> str:
    return _task("title", turns)


def tags_task(turns: Turns) -> str:
    return _task("tags", turns)


def follow_ups_task(turns: Turns) -> str:
    return _task("follow_ups", turns)


def queries_task(turns: Turns) -> str:
    return _task("queries", turns)


def autocomplete_task(turns: Turns, text: str, kind: str = "General") -> str:
    return (
        "### Task:\nContinue the text in `<text>` as the completion type in `<type>` asks.\n"
        '### Output Rules:\n- Respond only in JSON format: `{ "text": "<your_completion>" }`.\n'
        f"### Context:\n<chat_history>\n{chat_history(turns)}\n</chat_history>\n"
        f"<type>{kind}</type>\n<text>{text}</text>\n#### Output:\n"
    )


def emoji_task(message: str) -> str:
    return (
        "Your task is to reflect the speaker's likely facial expression through a fitting emoji. "
        f"Pick one that fits the message.\n\nMessage: ```{message}```"
    )


TASKS: dict[str, Callable[[Turns], str]] = {
    "title": title_task,
    "tags": tags_task,
    "follow_ups": follow_ups_task,
    "queries": queries_task,
}


def rag_context(sources: Sequence[tuple[str, str]]) -> str:
    """Open WebUI's RAG template over `sources` ((name, text); numbered in order), without the query."""
    blocks = "\n".join(f'<source id="{i}" name="{name}">{text}</source>' for i, (name, text) in enumerate(sources, 1))
    return (
        "### Task:\nAnswer the user query from the context below, citing [id] when a <source> has an id.\n"
        "### Guidelines:\n- Say so when you do not know.\n- Answer in the language of the query.\n"
        f"- Do not write XML tags.\n\n<context>\n{blocks}\n</context>\n"
    )


def rag_user_message(query: str, sources: Sequence[tuple[str, str]]) -> str:
    """The user message as Open WebUI sends it with a file or its web search: the template, then the query."""
    return f"{rag_context(sources)}\n{query}"
