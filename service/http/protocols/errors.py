"""Errors in a protocol's own shape: the app's mapping (status, message) rendered as that protocol's body.

A protocol router uses `ProtocolRoute(render)` as its route class: any exception a request raises
(validation, a missing index, Elasticsearch away, an unexpected failure) gets the status and
message the rest of the API gives it (`service.http.errors`), in the body that protocol's clients parse.

Some answers are made before any route runs: the body-size limit (413), the Host/Origin check, an
unknown path or method, MCP's key check. `ProtocolErrors`, the outermost middleware, renders those
(a JSON body with the API's `detail`) in the shape of the protocol whose path they were sent to, so
an OpenAI SDK shows the message, not "Error code: 413".
"""

import json
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.http.errors import error_response

# (status, message, the exception if one was raised) -> (status, body): a protocol's error answer.
Render = Callable[[int, str, Exception | None], tuple[int, dict[str, Any]]]


def protocol_route(render: Render) -> type[APIRoute]:
    """A route class whose errors are rendered by `render`."""

    class ProtocolRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def route(request: Request) -> Response:
                try:
                    return await handler(request)
                except Exception as err:
                    answer = await error_response(request, err)
                    status, rendered = render(answer.status_code, _message(json.loads(bytes(answer.body))), err)
                    headers = {
                        k: v for k, v in answer.headers.items() if k.lower() not in ("content-length", "content-type")
                    }
                    return JSONResponse(rendered, status_code=status, headers=headers)

            return route

    return ProtocolRoute


def _message(body: dict[str, Any]) -> str:
    """The API's message of an error body: `message`, else `detail` (a list: each problem's `msg`)."""
    detail = body.get("message") or body.get("detail") or ""
    if isinstance(detail, list):
        return "; ".join(str(item.get("msg", item)) if isinstance(item, dict) else str(item) for item in detail)
    return str(detail)


class ProtocolErrors:
    """An error answered in the API's shape (`{"detail": …}`) under a protocol's path prefix is
    rendered by that protocol's `Render`; everything else passes untouched (streams included)."""

    def __init__(self, app: ASGIApp, shapes: Sequence[tuple[str, Render]]) -> None:
        self.app, self.shapes = app, shapes

    def _render(self, path: str) -> Render | None:
        return next((render for prefix, render in self.shapes if path == prefix or path.startswith(prefix + "/")), None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        render = self._render(scope["path"]) if scope["type"] == "http" else None
        if render is None:
            await self.app(scope, receive, send)
            return
        held: list[Message] = []  # an error's start and body, until the body is whole

        async def reshaping(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 400 and _is_json(message):
                held.append(message)
            elif not held:
                await send(message)
            else:
                held.append(message)
                if not message.get("more_body", False):
                    await self._send(send, held, render)

        await self.app(scope, receive, reshaping)

    @staticmethod
    async def _send(send: Send, held: list[Message], render: Render) -> None:
        start, raw = held[0], b"".join(message.get("body", b"") for message in held[1:])
        status, body = start["status"], raw
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and "detail" in parsed:
            status, shaped = render(status, _message(parsed), None)
            body = json.dumps(shaped, ensure_ascii=False).encode()
        headers = [(name, value) for name, value in start["headers"] if name.lower() != b"content-length"]
        await send({**start, "status": status, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def _is_json(start: Message) -> bool:
    return any(name.lower() == b"content-type" and b"json" in value for name, value in start["headers"])
