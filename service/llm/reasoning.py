"""Reasoning kept out of answers: `<think>…</think>` blocks, a lone closing `</think>`, and the
`reasoning_content` field, whole (`split_reasoning`) or as a stream arrives (`ReasoningStream`).

Models put their reasoning in one of three forms: DeepSeek-R1 style `<think>…</think>` inside the
content (Ollama, vLLM without a reasoning parser); Qwen3 thinking models whose chat template
opens `<think>` in the prompt, so the content holds only the closing `</think>`; or a separate
`reasoning_content` (or `reasoning`) field (DeepSeek's API, vLLM with a reasoning parser).
"""

from dataclasses import dataclass, field
from typing import Literal

OPEN = "<think>"
CLOSE = "</think>"

ReasoningForm = Literal["think_tags", "lone_close", "field"]


def split_reasoning(text: str) -> tuple[str, str, ReasoningForm | None]:
    """(text without reasoning, the reasoning, its form or None) of one complete reply."""
    stream = ReasoningStream()
    stream.feed(text)
    stream.close()
    return stream.answer, stream.reasoning, stream.form


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that could be the start of `tag` (held back)."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


@dataclass
class ReasoningStream:
    """Text pieces in, (kind, text) pieces out: "answer" or "reasoning".

    A tag split across pieces is held back until it is whole. `lone_close=True` (a model known to
    answer `…</think>answer`) holds everything back until `</think>`; if none comes, the held text
    was the answer after all and is released at `close()`. A `</think>` with nothing opened in a
    stream not started that way turns what was passed on as answer into reasoning: `answer` (the
    totals) is right, the pieces already returned were not.
    """

    lone_close: bool = False
    answer: str = ""
    reasoning: str = ""
    form: ReasoningForm | None = None
    _buffer: str = ""
    _inside: bool = False
    _opened: bool = False  # a `<think>` was seen
    _pending: list[tuple[str, str]] = field(default_factory=list)

    def feed(self, text: str) -> list[tuple[str, str]]:
        self._buffer += text
        while self._step():
            pass
        return self._take()

    def add_reasoning(self, text: str) -> list[tuple[str, str]]:
        """A piece of the separate reasoning field."""
        if text:
            self.form = self.form or "field"
            self._emit("reasoning", text)
        return self._take()

    def close(self) -> list[tuple[str, str]]:
        rest, self._buffer = self._buffer, ""
        if self.lone_close and not self._opened and not self._inside:
            self._emit("answer", rest)  # the held-back text: no `</think>` came, it was the answer
        else:
            self._emit("reasoning" if self._inside else "answer", rest)
        return self._take()

    def _step(self) -> bool:
        """Consume what the buffer allows; True when a tag was consumed (look again)."""
        if self._inside:
            cut = self._buffer.find(CLOSE)
            if cut < 0:
                keep = _partial_suffix(self._buffer, CLOSE)
                self._emit("reasoning", self._buffer[: len(self._buffer) - keep])
                self._buffer = self._buffer[len(self._buffer) - keep :]
                return False
            self._emit("reasoning", self._buffer[:cut])
            self._buffer = self._buffer[cut + len(CLOSE) :].lstrip()
            self._inside = False
            return True
        opening, closing = self._buffer.find(OPEN), self._buffer.find(CLOSE)
        if closing >= 0 and (opening < 0 or closing < opening):
            self._lone_close(self._buffer[:closing])
            self._buffer = self._buffer[closing + len(CLOSE) :].lstrip()
            return True
        if opening >= 0:
            self._emit("answer", self._buffer[:opening])
            self._buffer = self._buffer[opening + len(OPEN) :]
            self._inside = self._opened = True
            self.form = self.form or "think_tags"
            return True
        if self.lone_close and not self._opened:
            return False  # hold everything until `</think>` or the end
        keep = max(_partial_suffix(self._buffer, OPEN), _partial_suffix(self._buffer, CLOSE))
        self._emit("answer", self._buffer[: len(self._buffer) - keep])
        self._buffer = self._buffer[len(self._buffer) - keep :]
        return False

    def _lone_close(self, before: str) -> None:
        """`</think>` with nothing opened: all text so far was reasoning."""
        self.form = self.form or "lone_close"
        self.reasoning += self.answer
        self.answer = ""
        self._emit("reasoning", before)

    def _emit(self, kind: str, text: str) -> None:
        if not text:
            return
        if kind == "answer":
            if not self.answer:
                text = text.lstrip()
                if not text:
                    return
            self.answer += text
        else:
            self.reasoning += text
        self._pending.append((kind, text))

    def _take(self) -> list[tuple[str, str]]:
        pending, self._pending = self._pending, []
        return pending
