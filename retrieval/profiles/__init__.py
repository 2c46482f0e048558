"""Text profiles: the rules a kind of text needs that no other text should run.

The default path reads any modern document: units of measure, general premise checks, answer kinds
with a visible form. A base whose documents are of a kind with rules of its own turns its profile on
(`profile` in the base's settings, `core.kbs`; set with PATCH /kbs/{kb}); a profile brings extra answer
kinds, extra units and its own premise check. On a base without one, none of them runs.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from core.text import ChineseTokenizer
from retrieval.answer_kinds import KINDS, AnswerKind, kinds_with
from retrieval.conflicts import Units
from retrieval.premises import Denial

# A profile's own premise check: (part, (source id, text) pairs best first, the caller's other names
# of the part's terms, tokenizer) → the sentence denying what the part takes for granted.
PremiseCheck = Callable[[str, Sequence[tuple[str, str]], Mapping[str, Sequence[str]], ChineseTokenizer], Denial | None]


@dataclass(frozen=True)
class TextProfile:
    """What a kind of text adds to the default path."""

    name: str
    units: Units = frozenset()
    kinds: tuple[AnswerKind, ...] = KINDS
    premises: tuple[PremiseCheck, ...] = field(default=())
    # Whether its headings say what happens and may be quoted (a novel's chapter titles: 劫乌巢孟德烧粮);
    # a modern document's headings are labels, never quotes.
    headings_quoted: bool = False


DEFAULT = TextProfile("")
ProfileName = Literal["classical-novel"]  # every named profile (`profiles`): what a base may turn on


def profiles() -> dict[str, TextProfile]:
    """Every named profile (imported on demand: the default path never loads one)."""
    from retrieval.profiles import classical_novel

    return {classical_novel.NAME: classical_novel.PROFILE}


def profile_named(name: str | None) -> TextProfile:
    """The profile `name` (the default for None or ""); `KeyError` for an unknown name."""
    return profiles()[name] if name else DEFAULT


__all__ = ["DEFAULT", "PremiseCheck", "ProfileName", "TextProfile", "kinds_with", "profile_named", "profiles"]
