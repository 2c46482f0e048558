"""What every protocol takes as a question or a query: HTTP (`/search`, `/compare`, `/query`), OpenAI
(`/v1/chat/completions`), Dify (`/retrieval`) and MCP (`search`, `ask`) all call `valid_text`, so they
share its limits and its messages.

A text must hold a character that is not space, and be at most MAX_QUESTION_CHARS characters as
sent (a setting, so it is checked here and written into the OpenAPI schema as `maxLength` by
`service.http.openapi`). A text that is not is `InvalidText`: a 422 naming the field on HTTP and
Dify, a 400 on OpenAI, a tool error on MCP, each with the same message, before anything is searched.
"""

from core.config import Settings


def is_blank(text: str) -> bool:
    """No character that Python, ECMAScript or Rust would not count as space (nor a byte-order mark)."""
    return all(char.isspace() or char == "\ufeff" for char in text)


class InvalidText(ValueError):
    """A question or query no protocol takes; `str()` is `field: problem`, the message every protocol gives."""

    def __init__(self, field: str, kind: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field, self.kind, self.problem = field, kind, problem


def valid_text(settings: Settings, field: str, text: str) -> str:
    """`text` stripped, once checked: not blank, at most MAX_QUESTION_CHARS characters as sent."""
    if len(text) > settings.max_question_chars:
        problem = f"{len(text)} characters, more than MAX_QUESTION_CHARS={settings.max_question_chars}"
        raise InvalidText(field, "string_too_long", problem)
    if is_blank(text):
        raise InvalidText(field, "string_blank", "must contain a non-space character")
    return text.strip()
