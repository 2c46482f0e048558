"""Question sets: JSON lines whose relevant chunks are decided before anything is searched.

One line, one question: `{"question": "...", "evidence": "..." | ["...", ...], "chunk_ids": [...],
"doc_id": "..." | [...], "id"?, "split"?: "dev"|"test", "generated"?: bool}`, at least one of
`evidence`, `chunk_ids`, `doc_id`. A chunk is relevant when it contains one of the evidence
strings (whatever the chunk boundaries), is one of the chunk ids, or belongs to one of the
documents; every string, id and document given must resolve to some chunk. These are the rules
the benchmarks' sets use too (bench/datasets.py builds on `Corpus`).

Every line that cannot be used (not JSON, no question, no evidence, an unknown chunk id or
document, evidence found nowhere, a repeated id) becomes a `BadLine` naming its line and why;
the others still run. A question without a `split` gets a seeded one from its id (else its
text), so the split never changes between runs.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from core.contract import JSONTooDeep, parse_json
from core.reader import Reader
from evaluation.metrics import SPLITS, seeded_split

MAX_QUESTION_LINES = 5000


@dataclass(frozen=True)
class Corpus:
    """A base's chunks as relevance needs them: chunk id -> (document id, text)."""

    chunks: Mapping[str, tuple[str, str]]

    def containing(self, evidence: str) -> set[str]:
        """The chunks whose text contains `evidence` verbatim."""
        return {id_ for id_, (_doc, text) in self.chunks.items() if evidence in text}

    @cached_property
    def _of_document(self) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for id_, (doc_id, _text) in self.chunks.items():
            found.setdefault(doc_id, set()).add(id_)
        return found

    def of_document(self, doc_id: str) -> set[str]:
        """Every chunk of the document `doc_id` (empty when there is no such document)."""
        return self._of_document.get(doc_id, set())

    @property
    def texts(self) -> dict[str, str]:
        return {id_: text for id_, (_doc, text) in self.chunks.items()}


def base_corpus(reader: Reader) -> Corpus:
    """Every chunk the reader's scope sees of its base (one scroll over id, document and text): a
    question's evidence is looked for only where its author may read."""
    hits = reader.scan({"_source": ["doc_id", "text"]})
    return Corpus(
        {hit["_id"]: (str(hit["_source"].get("doc_id", "")), str(hit["_source"].get("text", ""))) for hit in hits}
    )


def split_of(given: object, key: str) -> str:
    """The question's own `split`, else a seeded one from `key`; `ValueError` for anything but dev/test."""
    split = given or seeded_split(key)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    return str(split)


@dataclass(frozen=True)
class Question:
    """A question with its relevant chunks, ready to be searched."""

    id: str
    text: str
    relevant: frozenset[str]
    split: str
    line: int = 0  # 1-based line in the question set (0: not from a file)
    generated: bool = False  # drafted by a model from a sampled chunk


@dataclass(frozen=True)
class BadLine:
    line: int
    error: str
    text: str  # the line's start, to find it
    absent: bool = False  # a valid line whose evidence is not in the base (skipped, not wrong)


class NotInBase(ValueError):
    """A valid line whose evidence, chunk or document is not in (what the caller may read of) the base."""


@dataclass(frozen=True)
class Entry:
    """One parsed line, before its evidence is looked up in a base."""

    line: int
    id: str
    question: str
    split: str
    evidence: tuple[str, ...] = ()
    chunk_ids: tuple[str, ...] = ()
    doc_ids: tuple[str, ...] = ()
    generated: bool = False


@dataclass
class QuestionSet:
    entries: list[Entry] = field(default_factory=list)
    bad_lines: list[BadLine] = field(default_factory=list)
    lines: int = 0  # non-blank lines read
    # Lines nested past the JSON parser's limit (also bad lines): no question set holds one, so a
    # set with one is refused whole (evaluation.store), not kept with a bad line.
    too_deep: list[int] = field(default_factory=list)

    @property
    def generated(self) -> int:
        return sum(entry.generated for entry in self.entries)


def _strings(item: Mapping[str, Any], *names: str) -> tuple[str, ...]:
    """The non-empty strings under any of `names` (each a string or a list of strings)."""
    found: list[str] = []
    for name in names:
        value = item.get(name)
        if value is None:
            continue
        values = [value] if isinstance(value, str | int) else value
        if not isinstance(values, list) or not all(isinstance(v, str | int) and str(v).strip() for v in values):
            raise ValueError(f"`{name}` must be a non-empty string or a list of them")
        found += [str(v) for v in values]
    return tuple(found)


def _entry(number: int, raw: str, seen: set[str]) -> Entry:
    try:
        item = parse_json(raw)  # nesting is bounded: never a RecursionError
    except ValueError as err:
        raise type(err)(f"not JSON: {err}") from None  # `JSONTooDeep` stays one
    if not isinstance(item, dict):
        raise ValueError("not a JSON object")
    question = item.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("`question` is missing or empty")
    id_ = str(item["id"]) if item.get("id") is not None else f"line-{number}"
    if id_ in seen:
        raise ValueError(f"id {id_!r} repeats an earlier line")
    entry = Entry(
        line=number,
        id=id_,
        question=question.strip(),
        split=split_of(item.get("split"), str(item["id"]) if item.get("id") is not None else question.strip()),
        evidence=_strings(item, "evidence"),
        chunk_ids=_strings(item, "chunk_ids", "chunk_id"),
        doc_ids=_strings(item, "doc_id", "doc_ids"),
        generated=item.get("generated") is True,
    )
    if not (entry.evidence or entry.chunk_ids or entry.doc_ids):
        raise ValueError("no evidence: give `evidence` (strings), `chunk_ids` or `doc_id`")
    return entry


def parse_questions(lines: Iterable[str]) -> QuestionSet:
    """Every usable line of a JSONL question set, and every other one as a `BadLine` (blank lines skipped)."""
    parsed = QuestionSet()
    seen: set[str] = set()
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        parsed.lines += 1
        if parsed.lines > MAX_QUESTION_LINES:
            parsed.bad_lines.append(BadLine(number, f"more than {MAX_QUESTION_LINES} questions", raw[:80]))
            continue
        try:
            entry = _entry(number, raw, seen)
        except ValueError as err:
            parsed.bad_lines.append(BadLine(number, str(err), raw.strip()[:80]))
            if isinstance(err, JSONTooDeep):
                parsed.too_deep.append(number)
            continue
        seen.add(entry.id)
        parsed.entries.append(entry)
    return parsed


def _relevant(entry: Entry, corpus: Corpus) -> frozenset[str]:
    relevant: set[str] = set()
    for evidence in entry.evidence:
        found = corpus.containing(evidence)
        if not found:
            raise NotInBase(f"evidence {evidence[:40]!r} is in no chunk of the base")
        relevant |= found
    unknown = [id_ for id_ in entry.chunk_ids if id_ not in corpus.chunks]
    if unknown:
        raise NotInBase(f"unknown chunk id {unknown[0]!r}")
    relevant |= set(entry.chunk_ids)
    for doc_id in entry.doc_ids:
        found = corpus.of_document(doc_id)
        if not found:
            raise NotInBase(f"unknown document {doc_id!r}")
        relevant |= found
    return frozenset(relevant)


def resolve(questions: QuestionSet, corpus: Corpus) -> tuple[list[Question], list[BadLine]]:
    """The questions whose evidence is in `corpus`, and the set's bad lines plus those whose evidence is not."""
    ready, bad = [], list(questions.bad_lines)
    for entry in questions.entries:
        try:
            relevant = _relevant(entry, corpus)
        except NotInBase as err:
            bad.append(BadLine(entry.line, str(err), entry.question[:80], absent=True))
            continue
        ready.append(Question(entry.id, entry.question, relevant, entry.split, entry.line, entry.generated))
    return ready, sorted(bad, key=lambda b: b.line)
