"""A fake OpenAI-compatible server: `POST /v1/chat/completions` and `/v1/embeddings`, scripted per test.

Requests are classified by what the client asked for: a forced tool call (the name being the
pydantic class), a `json_schema` response format, a JSON schema in the prompt (JSON mode or a
plain completion: the schema's `"title"` names it), or plain text (the answer, streamed as SSE
chunks when `stream=true`). Replies for a name are given in order, the last one repeating:
a dict becomes the tool-call arguments, a str is sent verbatim as the arguments (to test
malformed output), `Text(...)` answers with plain content instead of a tool call, an int is
an HTTP error status, and a callable receives the request body and returns any of these.
Embedding requests are scripted under EMBEDDINGS: a list of vectors, or an int status.
`GET /v1/models` (the service's reachability probe) answers `models_status` (200: a listing).

A `Habit` (tests/fakes/habits.py) makes the server behave like a real one that is not tidy: it
refuses tools or response formats, reasons in one of three forms, fences its JSON, or gets the
JSON wrong until it is shown its own output again. Refused requests are kept in `refused`.
"""

import base64
import json
import struct
import time
from dataclasses import dataclass
from typing import Any

from tests.fakes.server import FakeServer, Recorded, Response, Script, chunks

ANSWER = "answer"
EMBEDDINGS = "embeddings"
# Token counts of every reply: a structured (tool-call) reply, and a streamed answer that asked for them.
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
STREAM_USAGE = {"prompt_tokens": 40, "completion_tokens": 20, "total_tokens": 60}


@dataclass(frozen=True)
class Text:
    content: str


@dataclass(frozen=True)
class Habit:
    """How a server departs from the tidy one (every field off: tidy)."""

    name: str = "tidy"
    refuses: frozenset[str] = frozenset()  # "tools", "json_schema", "json_object": HTTP 400 naming it
    ignores_tools: bool = False  # a tools request answered with plain text, no tool call
    reasoning: str | None = None  # "think_tags", "lone_close" or "field" (reasoning_content)
    fenced: bool = False  # JSON in a ```json fence after a sentence of preamble
    invalid_first: bool = False  # truncated JSON until the request shows that output again
    reasoning_text: str = "嗯，让我想想：先看编号资料，再核对网络资料，最后组织答案。"


TIDY = Habit()


def prompt_text(body: dict[str, Any]) -> str:
    """Every message's text, as the model reads it."""
    return "\n".join(str(m.get("content") or "") for m in body.get("messages", []))


class FakeChatServer(FakeServer):
    def __init__(self, habit: Habit = TIDY) -> None:
        super().__init__()
        self.habit = habit
        self.scripts: dict[str, Script] = {}
        self.unscripted: list[str] = []
        self.refused: list[Recorded] = []  # requests refused (HTTP 400) or answered without the tool call
        self.models_status = 200

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def on(self, name: str, *replies: Any) -> "FakeChatServer":
        """Script the replies to requests for `name` (a schema class name, or ANSWER)."""
        self.scripts[name] = Script(list(replies))
        return self

    def calls(self, name: str | None = None) -> list[Recorded]:
        return [r for r in self.requests if name is None or self.kind(r.body) == name]

    def names(self) -> list[str]:
        """Kinds of the requests received, in order (a per-call trace of the model's use)."""
        return [self.kind(r.body) for r in self.requests]

    def accepted(self) -> list[str]:
        """`names()` of the requests that were not refused."""
        return [self.kind(r.body) for r in self.requests if not any(r is x for x in self.refused)]

    def kind(self, body: dict[str, Any]) -> str:
        if body.get("tools"):
            choice = body.get("tool_choice")
            if isinstance(choice, dict):
                return choice["function"]["name"]
            return body["tools"][0]["function"]["name"]
        response_format = body.get("response_format") or {}
        if response_format.get("type") == "json_schema":
            return response_format["json_schema"]["name"]
        prompt = prompt_text(body)
        named = [name for name in self.scripts if f'"title": "{name}"' in prompt]
        return named[0] if named else ANSWER

    def strategy(self, body: dict[str, Any]) -> str:
        """The structured-output strategy a request uses ("answer" for the streamed answer)."""
        if body.get("tools"):
            return "tools"
        if body.get("response_format"):
            return str(body["response_format"]["type"])
        return "answer" if body.get("stream") else "prompt"

    def respond_get(self, request: Recorded) -> Response:
        if request.path != "/v1/models":
            return super().respond_get(request)
        if self.models_status != 200:
            return Response(self.models_status, {"error": {"message": f"scripted HTTP {self.models_status}"}})
        return Response(200, {"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "tests"}]})

    def respond(self, request: Recorded) -> Response:
        body = request.body
        if request.path == "/v1/embeddings":
            name = EMBEDDINGS
        elif request.path == "/v1/chat/completions":
            name = self.kind(body)
        else:
            return Response(404, {"error": {"message": f"no route {request.path}"}})
        if name != EMBEDDINGS and (refusal := self._refusal(body)) is not None:
            self.refused.append(request)
            return refusal
        script = self.scripts.get(name)
        if script is None or not script.replies:
            self.unscripted.append(name)
            return Response(
                400, {"error": {"message": f"fake server has no script for {name!r}", "type": "invalid_request_error"}}
            )
        reply = script.next()
        if callable(reply):
            reply = reply(body)
        if isinstance(reply, int):
            return Response(reply, {"error": {"message": f"scripted HTTP {reply}", "type": "server_error"}})
        model = body.get("model", "fake")
        if name == EMBEDDINGS:
            return self._embeddings(model, reply, body.get("encoding_format") == "base64")
        if name == ANSWER:
            text = reply.content if isinstance(reply, Text) else str(reply)
            return (
                self._stream(
                    model, text, self.habit, usage=bool((body.get("stream_options") or {}).get("include_usage"))
                )
                if body.get("stream")
                else self._message(model, self._reasoned(text), "stop")
            )
        if isinstance(reply, Text):
            return self._message(model, self._reasoned(reply.content), "stop")
        arguments = reply if isinstance(reply, str) else json.dumps(reply, ensure_ascii=False)
        if self.habit.invalid_first and arguments[:-1] not in prompt_text(body):
            arguments = arguments[:-1]  # cut off until the model is shown this output again
        if not body.get("tools"):
            return self._message(model, self._reasoned(self._fenced(arguments)), "stop")
        if self.habit.ignores_tools:
            self.refused.append(request)
            return self._message(model, self._reasoned("好的，我来判断这个问题。"), "stop")
        call = {
            "id": f"call_{len(self.requests)}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        message = {**self._reasoned(""), "content": None, "tool_calls": [call]}
        return self._message(model, message, "tool_calls")

    def _refusal(self, body: dict[str, Any]) -> Response | None:
        """The 400 a server that does not speak this request's strategy answers (its own words)."""
        strategy = self.strategy(body)
        if strategy not in self.habit.refuses:
            return None
        if strategy == "tools":  # Ollama, for a model whose template has no tools
            message = f"registry.ollama.ai/library/{body.get('model')}:latest does not support tools"
        else:  # vLLM / DashScope wording differs; all name the parameter
            message = f"'response_format.type' {strategy} is not supported by this model"
        return Response(400, {"error": {"message": message, "type": "invalid_request_error", "param": None}})

    def _fenced(self, text: str) -> str:
        return f"好的，下面是判断结果：\n```json\n{text}\n```\n以上。" if self.habit.fenced else text

    def _reasoned(self, content: str) -> dict[str, Any]:
        """An assistant message with the habit's reasoning around (or beside) `content`."""
        thought = self.habit.reasoning_text
        if self.habit.reasoning == "think_tags":
            return {"role": "assistant", "content": f"<think>{thought}</think>\n\n{content}"}
        if self.habit.reasoning == "lone_close":
            return {"role": "assistant", "content": f"{thought}\n</think>\n\n{content}"}
        if self.habit.reasoning == "field":
            return {"role": "assistant", "content": content, "reasoning_content": thought}
        return {"role": "assistant", "content": content}

    @staticmethod
    def _message(model: str, message: dict[str, Any], finish: str) -> Response:
        return Response(
            200,
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": USAGE,
            },
        )

    @staticmethod
    def _embeddings(model: str, vectors: list[list[float]], as_base64: bool) -> Response:
        def encode(vector: list[float]) -> Any:
            return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode() if as_base64 else vector

        data = [{"object": "embedding", "index": i, "embedding": encode(v)} for i, v in enumerate(vectors)]
        return Response(
            200, {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": 1, "total_tokens": 1}}
        )

    @staticmethod
    def _stream(model: str, text: str, habit: Habit = TIDY, *, usage: bool) -> Response:
        def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            return {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            }

        events: list[Any] = [chunk({"role": "assistant", "content": ""}, None)]
        thought = habit.reasoning_text
        if habit.reasoning == "field":
            events += [chunk({"reasoning_content": piece}, None) for piece in chunks(thought)]
        elif habit.reasoning == "think_tags":  # pieces of 3 characters split both tags
            text = f"<think>{thought}</think>\n\n{text}"
        elif habit.reasoning == "lone_close":
            text = f"{thought}\n</think>\n\n{text}"
        events += [chunk({"content": piece}, None) for piece in chunks(text)]
        events.append(chunk({}, "stop"))
        if usage:  # stream_options.include_usage: one more chunk, without choices, with the counts
            events.append({**chunk({}, None), "choices": [], "usage": STREAM_USAGE})
        events.append("[DONE]")
        return Response(200, events, sse=True)
