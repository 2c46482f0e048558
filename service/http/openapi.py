"""The OpenAPI document states every status an operation can answer, whoever added the route.

Statuses that follow from an operation's shape are added to every operation when the schema
is first built (`document_statuses`): a JSON body can be malformed (400), too large (413) or
invalid (422); parameters can be invalid (422); a key-protected operation can refuse the key
(400, 401, 403). Statuses that follow from what a route touches (Elasticsearch, the model) are
declared by its router with `error_responses`. The bodies are `ErrorResponse` (`detail`: one
sentence) and, for 422, `ValidationErrorResponse` (the errors, and `message` naming them).
Limits that are settings (MAX_QUESTION_CHARS) and values that are (the one embedder a new base
may name) are written into the schema the same way, so a client generating requests from it never
meets an undocumented 422.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from service.http.schemas import ErrorResponse, ValidationErrorResponse

RESPONSES: dict[int, tuple[type[BaseModel], str]] = {
    400: (
        ErrorResponse,
        "the body is not JSON (or not UTF-8; `detail` says where it breaks), or a credential header is repeated",
    ),
    401: (ErrorResponse, "API key missing or invalid"),
    403: (ErrorResponse, "the API key may not do this"),
    404: (ErrorResponse, "knowledge base not built (the message gives the command)"),
    409: (ErrorResponse, "the index was built with another embedder"),
    413: (ErrorResponse, "request body larger than MAX_REQUEST_BYTES"),
    415: (ErrorResponse, "the body is in none of the media types the operation takes"),
    422: (ValidationErrorResponse, "bad input; the message names the field"),
    429: (ErrorResponse, "ANSWER_MODE=llm and the model endpoint is rate-limiting requests (with Retry-After)"),
    502: (ErrorResponse, "Elasticsearch or the model endpoint answered with an error"),
    503: (
        ErrorResponse,
        "Elasticsearch unreachable or not ready (with Retry-After), or ANSWER_MODE=llm and the model "
        "not configured or unreachable",
    ),
}
BODY_STATUSES = (400, 413, 422)
_REF = "#/components/schemas/{model}"
PARAMETER_STATUSES = (422,)
SECURED_STATUSES = (400, 401, 403)


def error_responses(*statuses: int, model: type[BaseModel] | None = None) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a router or route, from the shared descriptions above; `model`: the error body
    of a protocol that answers errors in its own shape (service.http.protocols)."""
    return {
        status: {"model": model or RESPONSES[status][0], "description": RESPONSES[status][1]} for status in statuses
    }


def request_body(content: Mapping[str, type[BaseModel]], description: str) -> dict[str, Any]:
    """`openapi_extra=` for a route that reads its body itself, in several media types (FastAPI
    documents one body model per route): each media type's schema is its model's; the models those
    refer to are moved into the components when the document is built (`_hoist_body_defs`)."""
    schemas = {media: model.model_json_schema(ref_template=_REF) for media, model in content.items()}
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {media: {"schema": schema} for media, schema in schemas.items()},
        }
    }


def document_statuses(
    app: FastAPI,
    max_lengths: Mapping[str, int],
    choices: Mapping[str, Mapping[str, Sequence[str]]],
    *,
    secured: bool,
) -> None:
    """Build `app`'s OpenAPI document with the statuses implied by each operation's shape,
    `maxLength` on every request property named in `max_lengths` (limits set by settings), and the
    only values a property of a component may take, `choices[component][property]` (set by settings).
    Not `secured` (no keys configured, the key checks let everything through): no security schemes."""
    build: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            if not secured:
                _drop_security(schema)
            _hoist_body_defs(schema)
            _add_implied(schema)
            _add_max_lengths(schema, max_lengths)
            _add_choices(schema, choices)
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema


def _add_implied(schema: dict[str, Any]) -> None:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            implied = [
                *(BODY_STATUSES if "requestBody" in operation else ()),
                *(PARAMETER_STATUSES if operation.get("parameters") else ()),
                *(SECURED_STATUSES if operation.get("security") else ()),
            ]
            for status, response in operation["responses"].items():
                _errors_as_json(status, response)
            for status in implied:
                if str(status) not in operation["responses"]:
                    model, description = RESPONSES[status]
                    operation["responses"][str(status)] = {
                        "description": description,
                        "content": {"application/json": {"schema": _component(components, model)}},
                    }
            operation["responses"] = dict(sorted(operation["responses"].items()))


def _hoist_body_defs(schema: dict[str, Any]) -> None:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            for media in operation.get("requestBody", {}).get("content", {}).values():
                components.update(media.get("schema", {}).pop("$defs", {}))


def _errors_as_json(status: str, response: dict[str, Any]) -> None:
    """Errors are JSON even on a route whose success is a stream (FastAPI gives them the route's media type)."""
    content = response.get("content")
    if status[0] in "45" and content and "application/json" not in content:
        response["content"] = {"application/json": next(iter(content.values()))}


def _drop_security(schema: dict[str, Any]) -> None:
    schema.get("components", {}).pop("securitySchemes", None)
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            operation.pop("security", None)


def _add_max_lengths(schema: dict[str, Any], max_lengths: Mapping[str, int]) -> None:
    for component in schema.get("components", {}).get("schemas", {}).values():
        for name, prop in component.get("properties", {}).items():
            if name in max_lengths and prop.get("type") == "string":
                prop["maxLength"] = max_lengths[name]


def _add_choices(schema: dict[str, Any], choices: Mapping[str, Mapping[str, Sequence[str]]]) -> None:
    components = schema.get("components", {}).get("schemas", {})
    for component, properties in choices.items():
        for name, values in properties.items():
            prop = components[component]["properties"][name]
            for branch in prop.get("anyOf", [prop]):
                if branch.get("type") == "string":
                    branch.pop("maxLength", None)
                    branch["enum"] = list(values)


def _component(components: dict[str, Any], model: type[BaseModel]) -> dict[str, str]:
    """A `$ref` to `model`, added to the components (with the models it refers to) if missing."""
    if model.__name__ not in components:
        body = model.model_json_schema(ref_template=_REF)
        components.update(body.pop("$defs", {}))
        components[model.__name__] = body
    return {"$ref": f"#/components/schemas/{model.__name__}"}
