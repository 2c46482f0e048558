"""Requests shaped like those chat clients send to an OpenAI-compatible model, for benchmarks and tests.

Open WebUI sends the model of a chat, besides the user's questions, its background tasks: a
`### Task:` prompt with `### Guidelines:`, an `### Output:` naming the JSON object it will parse
and the conversation inside `<chat_history>` (`USER: …` / `ASSISTANT: …` lines). With a file
attached or its own web search on, it puts its RAG template (the context as `<source id="1"
name="…">` inside `<context>`) in front of the user's message. The texts below follow that shape
in our own words: what a client may send, never what the service answers.
"""

from collections.abc import Callable, Sequence

Turns = Sequence[tuple[str, str]]  # (role, text): "user" or "assistant"


def chat_history(turns: Turns) -> str:
    """The conversation as Open WebUI writes it into a task prompt."""
    return "\n".join(f"{role.upper()}: {text}" for role, text in turns)


def _task(task: str, guidelines: str, output: str, turns: Turns) -> str:
    return (
        f"### Task:\n{task}\n### Guidelines:\n{guidelines}\n### Output:\n{output}\n"
        f"### Chat History:\n<chat_history>\n{chat_history(turns)}\n</chat_history>"
    )


def title_task(turns: Turns) -> str:
    return _task(
        "Give the conversation a short title.",
        "- Two to four words, no emoji, no quotation marks.\n- Use the conversation's language.",
        'JSON format: { "title": "your concise title here" }',
        turns,
    )


def tags_task(turns: Turns) -> str:
    return _task(
        "Tag the conversation: one to three broad tags, then one to three narrower ones.",
        '- Broad domains first (Science, History, Health, ...).\n- If unsure, only ["General"].',
        'JSON format: { "tags": ["tag1", "tag2", "tag3"] }',
        turns,
    )


def follow_ups_task(turns: Turns) -> str:
    return _task(
        "Suggest three to five questions the user might ask next.",
        "- Written as the user, to the assistant.\n- Short, on the topic, nothing already answered.",
        'JSON format: { "follow_ups": ["Question 1?", "Question 2?", "Question 3?"] }',
        turns,
    )


def queries_task(turns: Turns) -> str:
    return _task(
        "Decide whether a search would help and write one to three search queries.",
        '- Only the JSON object.\n- If no search can help, return { "queries": [] }.',
        'Strictly return in JSON format:\n{\n  "queries": ["query1", "query2"]\n}',
        turns,
    )


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
