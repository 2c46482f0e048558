"""What every protocol takes as a question or a query: HTTP (`/search`, `/compare`, `/query`), OpenAI
(`/v1/chat/completions`), Dify (`/retrieval`) and MCP (`search`, `ask`) all call `valid_text`, so they
share its limits and its messages.

A text must hold a character that is not space, and be at most MAX_QUESTION_CHARS characters as
sent (a setting, so it is checked here and written into the OpenAPI schema as `maxLength` by
`service.http.openapi`). A text that is not is `InvalidText`: a 422 naming the field on HTTP and
Dify, a 400 on OpenAI, a tool error on MCP, each with the same message, before anything is searched.

Every text of every request is Unicode that UTF-8 can encode: JSON may spell a lone surrogate
(`"\\ud800"`), which Python decodes into a string no encoder takes, so one such string would fail
whatever it reaches (the embedder, Elasticsearch's client, the answer's own JSON). `unencodable`
finds one anywhere in a decoded JSON body (`service.http.middleware.UnicodeText` refuses the body
before any protocol reads it), and `valid_text` refuses one too (stdio MCP has no HTTP edge).
"""

from collections.abc import Iterator
from typing import Any

from core.config import Settings


def is_blank(text: str) -> bool:
    """No character that Python, ECMAScript or Rust would not count as space (nor a byte-order mark)."""
    return all(char.isspace() or char == "\ufeff" for char in text)


class InvalidText(ValueError):
    """A question or query no protocol takes; `str()` is `field: problem`, the message every protocol gives."""

    def __init__(self, field: str, kind: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field, self.kind, self.problem = field, kind, problem


NOT_UNICODE = "not Unicode text: a lone surrogate (such as \\ud800) that UTF-8 cannot encode"


def is_unicode(text: str) -> bool:
    """Whether UTF-8 can encode `text` (a lone surrogate is the one thing it cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _strings(value: Any) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every string of a decoded JSON value (keys too), with its path, without recursion."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            yield path, item
        elif isinstance(item, dict):
            for key, child in item.items():
                yield (*path, key), key
                stack.append(((*path, key), child))
        elif isinstance(item, list):
            stack.extend(((*path, index), child) for index, child in enumerate(item))


def unencodable(value: Any) -> list[str | int] | None:
    """The path of a string in `value` that UTF-8 cannot encode (None: there is none), each part
    itself printable (a bad key is shown with its surrogates escaped)."""
    for path, text in _strings(value):
        if not is_unicode(text):
            return [part if isinstance(part, int) or is_unicode(part) else ascii(part)[1:-1] for part in path]
    return None


def valid_text(settings: Settings, field: str, text: str) -> str:
    """`text` stripped, once checked: Unicode, not blank, at most MAX_QUESTION_CHARS characters as sent."""
    if not is_unicode(text):
        raise InvalidText(field, "string_unicode", NOT_UNICODE)
    if len(text) > settings.max_question_chars:
        problem = f"{len(text)} characters, more than MAX_QUESTION_CHARS={settings.max_question_chars}"
        raise InvalidText(field, "string_too_long", problem)
    if is_blank(text):
        raise InvalidText(field, "string_blank", "must contain a non-space character")
    return text.strip()
