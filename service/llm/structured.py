"""Structured output on any OpenAI-compatible endpoint: the four request strategies, how an
endpoint refuses one, and the tolerant, strict parsing of what comes back.

Strategies, most constrained first: a forced tool call (`tools`), OpenAI Structured Outputs
(`json_schema`), JSON mode (`json_object`), and a plain completion whose prompt carries the JSON
schema (`prompt`). `json_object` and `prompt` add the schema to the system prompt (the words are
`OutputPrompts`, kept with every other prompt in `service/graph/prompts.py`).

Parsing is tolerant of form and strict on content: reasoning (`service.llm.reasoning`), code fences
and preamble are removed, the first JSON object is taken, and the pydantic schema decides.
"""

import json
import re
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.runnables import Runnable
from pydantic import BaseModel, ValidationError

from service.llm.reasoning import ReasoningForm, split_reasoning

SchemaT = TypeVar("SchemaT", bound=BaseModel)
Strategy = Literal["tools", "json_schema", "json_object", "prompt"]
STRATEGIES: tuple[Strategy, ...] = ("tools", "json_schema", "json_object", "prompt")

_FENCE = re.compile(r"```[ \t]*(?:json[c5]?|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
# What servers say when they do not speak a strategy (Ollama: "… does not support tools";
# vLLM/DashScope: "response_format … json_schema … not supported"): the words name the feature.
_REFUSAL_WORDS: dict[Strategy, re.Pattern[str]] = {
    "tools": re.compile(r"tool|function", re.IGNORECASE),
    "json_schema": re.compile(r"response_format|json_schema|structured|guided", re.IGNORECASE),
    "json_object": re.compile(r"response_format|json_object|json mode", re.IGNORECASE),
    "prompt": re.compile(r"(?!)"),  # a plain completion has nothing to refuse
}


@dataclass(frozen=True)
class OutputPrompts:
    """The words the protocol adds: `schema` (with `{schema}`) for `json_object` and `prompt`,
    and `repair` (with `{output}` and `{error}`) for the one second attempt after a bad output."""

    schema: str
    repair: str


class OutputError(ValueError):
    """An output that is not a valid instance of the schema; `str()` says why, for the repair prompt."""


def schema_json(schema: type[BaseModel]) -> dict[str, Any]:
    return schema.model_json_schema()


def request(llm: BaseChatModel, strategy: Strategy, schema: type[BaseModel]) -> Runnable[Any, BaseMessage]:
    """The model bound for one strategy (`prompt`: the model itself)."""
    if strategy == "tools":
        return llm.bind_tools([schema], tool_choice=schema.__name__)
    if strategy == "json_schema":
        format_ = {"type": "json_schema", "json_schema": {"name": schema.__name__, "schema": schema_json(schema)}}
        return llm.bind(response_format=format_)
    if strategy == "json_object":
        return llm.bind(response_format={"type": "json_object"})
    return llm


def with_format(
    messages: list[BaseMessage], strategy: Strategy, schema: type[BaseModel], prompts: OutputPrompts
) -> list[BaseMessage]:
    """`json_object` and `prompt` carry the schema in the system prompt (JSON mode also needs the word JSON)."""
    if strategy not in ("json_object", "prompt"):
        return messages
    note = prompts.schema.format(schema=json.dumps(schema_json(schema), ensure_ascii=False))
    if messages and isinstance(messages[0], SystemMessage):
        return [SystemMessage(f"{messages[0].text}\n\n{note}"), *messages[1:]]
    return [SystemMessage(note), *messages]


def is_refusal(error: openai.APIStatusError, strategy: Strategy) -> bool:
    """A 400/422 whose message names the strategy's feature: the endpoint does not speak it."""
    if error.status_code not in (400, 422):
        return False
    return bool(_REFUSAL_WORDS[strategy].search(_error_text(error)))


def _error_text(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        body = body.get("message") or body.get("error") or body
    return f"{error.message} {body}"


@dataclass(frozen=True)
class Reply:
    """What one reply carries: the output text (tool arguments or content; None: a tools request
    answered without a tool call), the reasoning, and its form."""

    output: str | None
    reasoning: str
    form: ReasoningForm | None


def read_reply(message: BaseMessage, strategy: Strategy) -> Reply:
    content = message.text
    body, inline, form = split_reasoning(content)
    field = str(message.additional_kwargs.get("reasoning_content") or "")
    reasoning = "\n".join(part for part in (field, inline) if part)
    form = "field" if field else form
    if strategy != "tools":
        return Reply(body, reasoning, form)
    calls = message.tool_calls if isinstance(message, AIMessage) else []
    if calls:
        return Reply(json.dumps(calls[0]["args"], ensure_ascii=False), reasoning, form)
    invalid = message.invalid_tool_calls if isinstance(message, AIMessage) else []
    if invalid:
        return Reply(str(invalid[0].get("args") or ""), reasoning, form)
    return Reply(None, reasoning, form)


def parse_output(text: str, schema: type[SchemaT]) -> SchemaT:
    """The schema instance in `text` (reasoning, fences and preamble ignored), or `OutputError`."""
    body, _, _ = split_reasoning(text)
    value = _json_object(body)
    try:
        return schema.model_validate(value)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in err.errors())
        raise OutputError(f"字段不符合要求：{problems}") from err


def _json_object(text: str) -> dict[str, Any]:
    """The first JSON object in a fenced block, else in the text (a sentence of preamble allowed)."""
    decoder = json.JSONDecoder()
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for candidate in candidates:
        start = candidate.find("{")
        while start >= 0:
            try:
                value, _ = decoder.raw_decode(candidate, start)
            except json.JSONDecodeError:
                start = candidate.find("{", start + 1)
                continue
            if isinstance(value, dict):
                return value
            start = candidate.find("{", start + 1)
    if not text.strip():
        raise OutputError("输出为空")
    raise OutputError("输出中没有完整的 JSON 对象")
