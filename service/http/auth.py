"""The API key of a request: `X-API-Key`, or `Authorization: Bearer <key>`; a 401 when it is wrong."""

from fastapi import HTTPException

UNAUTHORIZED = "missing or invalid API key: send `Authorization: Bearer <key>` or `X-API-Key: <key>`"


def presented_key(headers: dict[str, str]) -> str:
    """The key of a request's (lower-cased) headers: `X-API-Key`, or `Authorization: Bearer <key>`."""
    scheme, _, bearer = headers.get("authorization", "").partition(" ")
    return headers.get("x-api-key") or (bearer.strip() if scheme.lower() == "bearer" else "")


def unauthorized() -> HTTPException:
    return HTTPException(status_code=401, detail=UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})
