"""Secrets out of anything that is logged or returned: URLs lose their user:password."""

from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str) -> str:
    """The URL (or comma-separated URLs) without user:password, safe to return and to log."""
    return ",".join(_redact_one(part.strip()) for part in url.split(","))


def _redact_one(url: str) -> str:
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit(parts._replace(netloc=netloc))
    return url
