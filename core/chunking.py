"""Chinese-aware chunking: cut at sentence ends and line breaks, characters only as a last resort.

A chunk packs whole sentences (ending in 。！？；… or a newline, closing quotes kept with their
sentence) up to `chunk_size` characters; the next chunk starts with the last sentences of the
previous one that fit in `chunk_overlap` characters, so a fact cut by a boundary is still whole
in one chunk. A sentence longer than `chunk_size` is cut into character windows
(overlapping by `chunk_overlap` too).
"""

import re

# Chosen with the retrieval evaluation (bench/, issue 4); change them there, with figures.
DEFAULT_CHUNK_SIZE = 800  # 三国: hybrid MRR@10 .621 vs .539 at 500 (docs/retrieval.md)
DEFAULT_CHUNK_OVERLAP = 50

# A sentence: anything up to a run of sentence-ending marks plus closing quotes/brackets,
# or up to a line break.
_SENTENCE = re.compile(r"[^。！？；!?;…\n]*(?:[。！？；!?;…]+[”’」』）)\"']*|\n+|$)")


def split_sentences(text: str) -> list[str]:
    """Sentences with their end marks and trailing line breaks, in order; joined they give `text`."""
    return [match.group() for match in _SENTENCE.finditer(text) if match.group()]


def _windows(sentence: str, size: int) -> list[str]:
    return [sentence[start : start + size] for start in range(0, len(sentence), size)]


def _tail(pieces: list[str], budget: int) -> list[str]:
    """The last whole pieces whose total length fits in `budget` (the next chunk's overlap)."""
    tail: list[str] = []
    used = 0
    for piece in reversed(pieces):
        if used + len(piece) > budget:
            break
        tail.insert(0, piece)
        used += len(piece)
    if not tail and budget and pieces:
        tail = [pieces[-1][-budget:]]
    return tail


def split_text(
    text: str, chunk_size: int = DEFAULT_CHUNK_SIZE, chunk_overlap: int = DEFAULT_CHUNK_OVERLAP
) -> list[str]:
    """Cut `text` into chunks of at most `chunk_size` characters (whitespace-trimmed, non-empty)."""
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    if not 0 <= chunk_overlap < chunk_size:
        raise ValueError(f"chunk_overlap must be in [0, chunk_size), got {chunk_overlap} with chunk_size {chunk_size}")
    pieces: list[str] = []
    for sentence in split_sentences(text):
        # Indentation (full-width spaces in novels) would only waste room.
        sentence = sentence.lstrip(" \t\u3000")
        if len(sentence) > chunk_size:
            # Windows leave room for the overlap the packing below prepends.
            pieces.extend(_windows(sentence, chunk_size - chunk_overlap))
        elif sentence:
            pieces.append(sentence)

    chunks: list[str] = []
    current: list[str] = []
    length = 0
    fresh = 0  # pieces in `current` that the previous chunk did not already hold
    for piece in pieces:
        if current and length + len(piece) > chunk_size:
            if fresh:
                chunks.append("".join(current))
            current = _tail(current, max(0, min(chunk_overlap, chunk_size - len(piece))))
            length = sum(map(len, current))
            fresh = 0
        current.append(piece)
        length += len(piece)
        fresh += 1
    if fresh:
        chunks.append("".join(current))
    return [chunk.strip() for chunk in chunks if chunk.strip()]
