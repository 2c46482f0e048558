"""A fake OpenAI-compatible server: `POST /v1/chat/completions` and `/v1/embeddings`, scripted per test.

Requests are classified by what the client asked for: a forced tool call (structured output
with `method="function_calling"`, the name being the pydantic class), a `json_schema`
response format (langchain-openai's own default), or plain text (the answer, streamed as SSE
chunks when `stream=true`). Replies for a name are given in order, the last one repeating:
a dict becomes the tool-call arguments, a str is sent verbatim as the arguments (to test
malformed output), `Text(...)` answers with plain content instead of a tool call, an int is
an HTTP error status, and a callable receives the request body and returns any of these.
Embedding requests are scripted under EMBEDDINGS: a list of vectors, or an int status.
`GET /v1/models` (the service's reachability probe) answers `models_status` (200: a listing).
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


class FakeChatServer(FakeServer):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: dict[str, Script] = {}
        self.unscripted: list[str] = []
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

    @staticmethod
    def kind(body: dict[str, Any]) -> str:
        if body.get("tools"):
            choice = body.get("tool_choice")
            if isinstance(choice, dict):
                return choice["function"]["name"]
            return body["tools"][0]["function"]["name"]
        response_format = body.get("response_format") or {}
        if response_format.get("type") == "json_schema":
            return response_format["json_schema"]["name"]
        return ANSWER

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
                self._stream(model, text, usage=bool((body.get("stream_options") or {}).get("include_usage")))
                if body.get("stream")
                else self._message(model, {"role": "assistant", "content": text}, "stop")
            )
        if isinstance(reply, Text):
            return self._message(model, {"role": "assistant", "content": reply.content}, "stop")
        arguments = reply if isinstance(reply, str) else json.dumps(reply, ensure_ascii=False)
        if not body.get("tools"):
            return self._message(model, {"role": "assistant", "content": arguments}, "stop")
        call = {
            "id": f"call_{len(self.requests)}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        return self._message(model, {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")

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
    def _stream(model: str, text: str, *, usage: bool) -> Response:
        def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            return {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            }

        events: list[Any] = [chunk({"role": "assistant", "content": ""}, None)]
        events += [chunk({"content": piece}, None) for piece in chunks(text)]
        events.append(chunk({}, "stop"))
        if usage:  # stream_options.include_usage: one more chunk, without choices, with the counts
            events.append({**chunk({}, None), "choices": [], "usage": STREAM_USAGE})
        events.append("[DONE]")
        return Response(200, events, sse=True)
