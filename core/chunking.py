"""Chinese-aware chunking: cut at sentence ends and line breaks, characters only as a last resort.

A chunk packs whole sentences (ending in 。！？；… or a newline, closing quotes kept with their
sentence) up to `chunk_size` characters; the next chunk starts with the last sentences of the
previous one that fit in `chunk_overlap` characters, so a fact cut by a boundary is still whole
in one chunk. A sentence longer than `chunk_size` is cut into character windows
(overlapping by `chunk_overlap` too).
"""

import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

# Chosen with the retrieval evaluation (bench/, issue 4); change them there, with figures.
DEFAULT_CHUNK_SIZE = 800  # 三国: hybrid MRR@10 .621 vs .539 at 500 (docs/retrieval.md)
DEFAULT_CHUNK_OVERLAP = 50
# Passage vectors (`PassageWindows`): chosen on the 三国 dev questions (docs/retrieval.md).
DEFAULT_PASSAGE_SIZE = 120  # 120/30 over 240/60: dev MRR@10 .856 vs .827 (a pilot, docs/retrieval.md)
DEFAULT_PASSAGE_OVERLAP = 30

# A sentence: anything up to a run of sentence-ending marks plus closing quotes/brackets,
# or up to a line break.
_SENTENCE = re.compile(r"[^。！？；!?;…\n]*(?:[。！？；!?;…]+[”’」』）)\"']*|\n+|$)")


def split_sentences(text: str) -> list[str]:
    """Sentences with their end marks and trailing line breaks, in order; joined they give `text`."""
    return [match.group() for match in _SENTENCE.finditer(text) if match.group()]


def sentence_start(text: str, position: int, reach: int) -> int:
    """Where the sentence holding `position` begins (as `split_sentences` cuts), when that is at most
    `reach` characters back; else `position` (a sentence longer than that: no start to give)."""
    floor = max(0, position - reach)
    ends = [
        floor + end for end in accumulate(len(sentence) for sentence in split_sentences(text[floor : position + 1]))
    ]
    starts = [end for end in ends if end <= position]
    return starts[-1] if starts else (0 if floor == 0 else position)


def sentence_end(text: str, position: int, reach: int) -> int:
    """Where the sentence (or line: a table's row) holding the character before `position` ends, with its
    line breaks, when that is at most `reach` characters on; else `position` (no end to give)."""
    if position <= 0 or position >= len(text):
        return position
    ceiling = min(len(text), position + reach)
    first = split_sentences(text[position - 1 : ceiling])[0]
    end = position - 1 + len(first)
    return end if end < ceiling or ceiling == len(text) else position


@dataclass(frozen=True)
class Span:
    """A chunk and where it lies in the text it came from (`end` exclusive): pages and
    sections of a chunk are looked up by these offsets."""

    start: int
    end: int
    text: str


def _windows(piece: Span, size: int) -> list[Span]:
    return [
        Span(piece.start + at, piece.start + min(at + size, len(piece.text)), piece.text[at : at + size])
        for at in range(0, len(piece.text), size)
    ]


def _tail(pieces: list[Span], budget: int) -> list[Span]:
    """The last whole pieces whose total length fits in `budget` (the next chunk's overlap)."""
    tail: list[Span] = []
    used = 0
    for piece in reversed(pieces):
        if used + len(piece.text) > budget:
            break
        tail.insert(0, piece)
        used += len(piece.text)
    if not tail and budget and pieces:
        last = pieces[-1]
        tail = [Span(last.end - len(last.text[-budget:]), last.end, last.text[-budget:])]
    return tail


def _pieces(text: str, chunk_size: int, chunk_overlap: int) -> list[Span]:
    """Sentences without indentation (it would only waste room), over-long ones cut into windows."""
    pieces: list[Span] = []
    offset = 0
    for sentence in split_sentences(text):
        stripped = sentence.lstrip(" \t\u3000")
        piece = Span(offset + len(sentence) - len(stripped), offset + len(sentence), stripped)
        offset += len(sentence)
        if len(stripped) > chunk_size:
            # Windows leave room for the overlap the packing in split_spans prepends.
            pieces.extend(_windows(piece, chunk_size - chunk_overlap))
        elif stripped:
            pieces.append(piece)
    return pieces


def _joined(pieces: list[Span]) -> Span | None:
    """One chunk from its pieces, whitespace-trimmed (offsets too); None when it is blank."""
    text = "".join(piece.text for piece in pieces)
    stripped = text.strip()
    if not stripped:
        return None
    leading = len(text) - len(text.lstrip())
    trailing = len(text) - len(text.rstrip())
    return Span(pieces[0].start + leading, pieces[-1].end - trailing, stripped)


def split_spans(
    text: str, chunk_size: int = DEFAULT_CHUNK_SIZE, chunk_overlap: int = DEFAULT_CHUNK_OVERLAP
) -> list[Span]:
    """Cut `text` into chunks of at most `chunk_size` characters, each with its offsets in `text`."""
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    if not 0 <= chunk_overlap < chunk_size:
        raise ValueError(f"chunk_overlap must be in [0, chunk_size), got {chunk_overlap} with chunk_size {chunk_size}")
    groups: list[list[Span]] = []
    current: list[Span] = []
    length = 0
    fresh = 0  # pieces in `current` that the previous chunk did not already hold
    for piece in _pieces(text, chunk_size, chunk_overlap):
        if current and length + len(piece.text) > chunk_size:
            if fresh:
                groups.append(current)
            current = _tail(current, max(0, min(chunk_overlap, chunk_size - len(piece.text))))
            length = sum(len(kept.text) for kept in current)
            fresh = 0
        current.append(piece)
        length += len(piece.text)
        fresh += 1
    if fresh:
        groups.append(current)
    return [span for span in map(_joined, groups) if span is not None]


def split_text(
    text: str, chunk_size: int = DEFAULT_CHUNK_SIZE, chunk_overlap: int = DEFAULT_CHUNK_OVERLAP
) -> list[str]:
    """Cut `text` into chunks of at most `chunk_size` characters (whitespace-trimmed, non-empty)."""
    return [span.text for span in split_spans(text, chunk_size, chunk_overlap)]


@dataclass(frozen=True)
class PassageWindows:
    """How a chunk is cut into the passages its vectors are computed from (the nested passage
    kNN): sentence windows of at most `size` characters sharing up to `overlap` characters, cut
    by the chunking above (a chunk stays whole as context and BM25 unit, its vectors get small)."""

    size: int
    overlap: int

    def __post_init__(self) -> None:
        split_spans("", self.size, self.overlap)  # the chunking's own check of the two sizes

    @classmethod
    def from_meta(cls, stored: dict[str, Any] | None) -> "PassageWindows | None":
        """The windows an index records in its `_meta.passages` (`to_meta`); None: it has no passages."""
        return cls(int(stored["size"]), int(stored["overlap"])) if stored else None

    def to_meta(self) -> dict[str, int]:
        return {"size": self.size, "overlap": self.overlap}

    def spans(self, text: str) -> list[Span]:
        """The passages of a chunk's `text`, each with its offsets in it."""
        return split_spans(text, self.size, self.overlap)
