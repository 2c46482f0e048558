"""One fake OpenAI-compatible server per habit of the endpoints people run (issue 18).

Each is `FakeChatServer(HABITS[name])`: the same scripted replies as the tidy server, dressed as
that kind of server sends them. The first strategy each one accepts is in `STRATEGY`.
"""

from tests.fakes.openai_server import TIDY, Habit

HABITS: dict[str, Habit] = {
    habit.name: habit
    for habit in (
        TIDY,
        # Ollama with a model whose template has no tools (deepseek-r1, many GGUF imports).
        Habit("no_tools", refuses=frozenset({"tools"})),
        # Tools accepted but answered in prose, and `json_schema` rejected (older vLLM, DashScope models).
        Habit("no_json_schema", ignores_tools=True, refuses=frozenset({"json_schema"})),
        # deepseek-r1 on Ollama or vLLM without a reasoning parser: `<think>…</think>` in the content.
        Habit("think_inline", refuses=frozenset({"tools"}), reasoning="think_tags"),
        # Qwen3 thinking models whose template opens `<think>` in the prompt: only `</think>` comes back.
        Habit("lone_close", refuses=frozenset({"tools"}), reasoning="lone_close"),
        # DeepSeek's API (deepseek-reasoner), vLLM with a reasoning parser: `reasoning_content`.
        Habit("reasoning_field", reasoning="field"),
        # A server that speaks neither tools nor response formats; the model fences its JSON.
        Habit("fenced", refuses=frozenset({"tools", "json_schema", "json_object"}), fenced=True),
        # A weaker model: cut-off JSON first, valid once shown its output and the error.
        Habit("invalid_first", invalid_first=True),
    )
}

STRATEGY = {
    "tidy": "tools",
    "no_tools": "json_schema",
    "no_json_schema": "json_object",
    "think_inline": "json_schema",
    "lone_close": "json_schema",
    "reasoning_field": "tools",
    "fenced": "prompt",
    "invalid_first": "tools",
}
