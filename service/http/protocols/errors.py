"""Errors in a protocol's own shape: the app's mapping (status, message) rendered as that protocol's body.

A protocol router uses `ProtocolRoute(render)` as its route class: any exception a request raises
(validation, a missing index, Elasticsearch away, an unexpected failure) gets the status and
message the rest of the API gives it (`service.http.errors`), in the body that protocol's clients parse.
"""

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from service.http.errors import error_response

# (status, message, the exception) -> (status, body): a protocol's error answer.
Render = Callable[[int, str, Exception], tuple[int, dict[str, Any]]]


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
                    body = json.loads(bytes(answer.body))
                    message = body.get("message") or body.get("detail") or ""
                    status, rendered = render(answer.status_code, str(message), err)
                    headers = {
                        k: v for k, v in answer.headers.items() if k.lower() not in ("content-length", "content-type")
                    }
                    return JSONResponse(rendered, status_code=status, headers=headers)

            return route

    return ProtocolRoute
