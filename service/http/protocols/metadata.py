"""Dify's `metadata_condition` as Elasticsearch filter clauses on the fields a chunk has.

A condition names a field and compares it: `{"name": "chapter", "comparison_operator": "≥",
"value": 3}`. Names are our fields (`source`, `doc_id`, `section`, `chapter_title`: keywords;
`title`: text; `chapter`, `page`: numbers; `indexed_at`: a date, compared with Unix seconds as Dify
sends them, or an ISO date) or, for any other name, a key
of the document's own metadata (a JSONL record's `metadata`, indexed as `metadata_terms`, whose
values are whole keywords). Each kind of field takes the operators it can answer exactly; any
other operator is a 422 that says which ones it takes, never a filter silently left out.

A chunk's `page` is the range `page_start..page_end`: a comparison holds when some page of the
chunk satisfies it (page = 4 finds a chunk on pages 3-4). A list of names (Dify's older
`name: ["category", "tag"]`) holds when the condition holds for any one of them.

Every value is checked here, so that Elasticsearch never refuses the query (which would look like
an outage): a date is an ISO 8601 date or date-time, or epoch milliseconds; a number is finite, and
whole where the field holds whole numbers; a text is at most MAX_VALUE_CHARS characters, a
`contains` or `end with` pattern at most MAX_PATTERN_CHARS; at most MAX_VALUES values in a list and
MAX_CONDITIONS conditions, and at most MAX_CLAUSES clauses in all (names × values, summed).

Elasticsearch's cost budget (issue 58): a pattern (`contains`, `not contains`, `start with`, `end
with` on a keyword field: a wildcard or prefix query) walks every term of the field in every shard,
so a request holds at most MAX_PATTERN_CLAUSES of them (names × conditions). 1,024 of them in a
10.7 KB request kept the shared cluster busy for 15-22 s and tripped its request circuit breaker.
"""

import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

Operator = Literal[
    "contains",
    "not contains",
    "start with",
    "end with",
    "is",
    "is not",
    "in",
    "not in",
    "empty",
    "not empty",
    "null",
    "not null",
    "=",
    "≠",
    "!=",
    ">",
    "<",
    "≥",
    ">=",
    "≤",
    "<=",
    "before",
    "after",
]
# A keyword longer than this is not indexed (`ignore_above` of `metadata_terms`): it matches nothing.
MAX_VALUE_CHARS = 1024
# A wildcard pattern is an automaton, built per shard; from about 500 characters Elasticsearch refuses it.
MAX_PATTERN_CHARS = 64
MAX_PATTERN_CLAUSES = 8
PATTERN_OPERATORS = frozenset({"contains", "not contains", "start with", "end with"})
MAX_VALUES = 100
MAX_CONDITIONS = 32
# Names × values, summed over the conditions: the filter clauses one request may make (a 3.7 KB
# request of many names made about 80,000 clauses, 17 MB to Elasticsearch).
MAX_CLAUSES = 1024
_LARGEST = 2**31 - 1  # chapter and page are integer fields
Scalar = Annotated[str, Field(max_length=MAX_VALUE_CHARS)] | int | float
Value = Scalar | Annotated[list[Scalar], Field(max_length=MAX_VALUES)] | None
Clause = dict[str, Any]

KEYWORD_FIELDS = ("source", "doc_id", "section", "chapter_title")
NUMBER_FIELDS = ("chapter",)
METADATA_FIELD = "metadata_terms"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
# Years 1 to 9999, the dates Python and Elasticsearch both have.
_FIRST_SECOND, _LAST_SECOND = -62135596800, 253402300800
_HIGHEST = "\U0010ffff"  # an upper bound above every string (ranges on metadata need both bounds)
_SAME = {"!=": "≠", ">=": "≥", "<=": "≤", "null": "empty", "not null": "not empty"}


def _names(value: object) -> object:
    return [value] if isinstance(value, str) else value


class Condition(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: Annotated[list[Annotated[str, Field(min_length=1)]], BeforeValidator(_names)] = Field(min_length=1)
    comparison_operator: Operator
    value: Value = None

    def to_es(self) -> Clause:
        clauses = [
            _compare(name, _SAME.get(self.comparison_operator, self.comparison_operator), self.value)
            for name in self.name
        ]
        return clauses[0] if len(clauses) == 1 else {"bool": {"should": clauses, "minimum_should_match": 1}}


class MetadataCondition(BaseModel):
    """Dify's `metadata_condition`; `to_es()` gives the filter clauses (checked on arrival: a 422 names what is wrong)."""

    model_config = ConfigDict(extra="ignore")

    logical_operator: Literal["and", "or"] | None = "and"
    conditions: list[Condition] | None = Field(None, max_length=MAX_CONDITIONS)

    @model_validator(mode="after")
    def _translatable(self) -> "MetadataCondition":
        clauses = sum(
            len(condition.name) * (len(condition.value) if isinstance(condition.value, list) else 1) or 1
            for condition in self.conditions or []
        )
        if clauses > MAX_CLAUSES:
            raise ValueError(
                f"{clauses} filter clauses (names × values, summed over the conditions), more than {MAX_CLAUSES}"
            )
        patterns = sum(
            len(condition.name)
            for condition in self.conditions or []
            if condition.comparison_operator in PATTERN_OPERATORS
        )
        if patterns > MAX_PATTERN_CLAUSES:
            raise ValueError(
                f"{patterns} pattern clauses (contains, start with, end with: names × conditions), more than "
                f"{MAX_PATTERN_CLAUSES}: each scans every term of its field"
            )
        self.to_es()
        return self

    def to_es(self) -> list[Clause]:
        clauses = [condition.to_es() for condition in self.conditions or []]
        if self.logical_operator == "or" and len(clauses) > 1:
            return [{"bool": {"should": clauses, "minimum_should_match": 1}}]
        return clauses


def _not(clause: Clause) -> Clause:
    return {"bool": {"must_not": [clause]}}


def _text(value: Value, operator: str) -> str:
    if value is None or isinstance(value, list) or (isinstance(value, str) and not value):
        raise ValueError(f"{operator!r} needs a non-empty value")
    return str(value)


def _values(value: Value, operator: str) -> list[str]:
    """`in` takes a list, or one string of comma-separated values."""
    items = value if isinstance(value, list) else str(value or "").split(",")
    found = [str(item).strip() for item in items if str(item).strip()]
    if not found:
        raise ValueError(f"{operator!r} needs a list of values")
    if len(found) > MAX_VALUES:
        raise ValueError(f"{operator!r} takes at most {MAX_VALUES} values, got {len(found)}")
    return found


def _pattern(value: Value, operator: str) -> str:
    """A `contains` or `end with` text, short enough for a wildcard query."""
    text = _text(value, operator)
    if len(text) > MAX_PATTERN_CHARS:
        raise ValueError(f"{operator!r} takes at most {MAX_PATTERN_CHARS} characters, got {len(text)}")
    return text


def _finite(value: Value, operator: str) -> float:
    try:
        if isinstance(value, bool | list) or value is None:
            raise ValueError
        number = float(value)
    except (ValueError, OverflowError):
        raise ValueError(f"{operator!r} needs a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{operator!r} needs a finite number, got {value!r}")
    return number


def _number(value: Value, operator: str) -> float:
    """A number to compare an integer field (chapter, page) with: within the field's range."""
    number = _finite(value, operator)
    if abs(number) > _LARGEST:
        raise ValueError(f"{operator!r} needs a number from -{_LARGEST} to {_LARGEST}, got {value!r}")
    return number


def _whole(value: Value, operator: str) -> int:
    """A number an integer field can equal."""
    number = _number(value, operator)
    if not number.is_integer():
        raise ValueError(f"{operator!r} needs a whole number here, got {value!r}")
    return int(number)


def _escape(text: str) -> str:
    """`text` taken literally inside a wildcard pattern."""
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("?", "\\?")


def _keyword(field: str, operator: str, value: Value) -> Clause:
    """Exact keyword comparisons; substrings through `wildcard` (case-sensitive)."""
    if operator in ("is", "=", "is not", "≠"):
        clause: Clause = {"term": {field: _text(value, operator)}}
        return _not(clause) if operator in ("is not", "≠") else clause
    if operator in ("in", "not in"):
        clause = {"terms": {field: _values(value, operator)}}
        return _not(clause) if operator == "not in" else clause
    if operator in ("contains", "not contains"):
        clause = {"wildcard": {field: {"value": f"*{_escape(_pattern(value, operator))}*"}}}
        return _not(clause) if operator == "not contains" else clause
    if operator == "start with":
        return {"prefix": {field: _text(value, operator)}}
    if operator == "end with":
        return {"wildcard": {field: {"value": f"*{_escape(_pattern(value, operator))}"}}}
    if operator in ("empty", "not empty"):
        has_value = {"bool": {"filter": [{"exists": {"field": field}}], "must_not": [{"term": {field: ""}}]}}
        return has_value if operator == "not empty" else _not(has_value)
    raise _unsupported(
        field, operator, "is, is not, in, not in, contains, not contains, start with, end with, empty, not empty"
    )


def _date_text(value: Value, operator: str) -> str:
    """A metadata date is ISO text, compared as text: a number (Unix seconds) becomes its UTC date-time."""
    if isinstance(value, str) and not _NUMBER.fullmatch(value.strip()):
        return _text(value, operator)
    return datetime.fromtimestamp(_seconds(value, operator), UTC).replace(tzinfo=None).isoformat(timespec="seconds")


def _metadata(key: str, operator: str, value: Value) -> Clause:
    """A key of the document's metadata: whole values only (`flattened` has no wildcard), dates as ISO text."""
    field = f"{METADATA_FIELD}.{key}"
    if operator in ("contains", "not contains", "end with"):
        raise _unsupported(field, operator, _METADATA_OPERATORS)
    if operator in ("before", "after"):
        bound = _date_text(value, operator)
        return {"range": {field: {"gte": "", "lt": bound} if operator == "before" else {"gt": bound, "lte": _HIGHEST}}}
    if operator in (">", "<", "≥", "≤"):
        raise _unsupported(field, operator, _METADATA_OPERATORS + " (values are compared as text)")
    if operator in ("=", "≠"):
        number = _finite(value, operator)
        text = str(int(number)) if number.is_integer() else str(number)
        return _keyword(field, "is" if operator == "=" else "is not", text)
    return _keyword(field, operator, value)


_METADATA_OPERATORS = (
    "is, is not, in, not in, start with, empty, not empty, =, ≠, before, after (ISO dates or Unix seconds)"
)
_RANGE = {">": "gt", "<": "lt", "≥": "gte", "≤": "lte"}


def _numeric(field: str, operator: str, value: Value) -> Clause:
    if operator in _RANGE:
        return {"range": {field: {_RANGE[operator]: _number(value, operator)}}}
    if operator in ("=", "is", "≠", "is not"):
        clause: Clause = {"term": {field: _whole(value, operator)}}
        return _not(clause) if operator in ("≠", "is not") else clause
    if operator in ("in", "not in"):
        clause = {"terms": {field: [_whole(item, operator) for item in _values(value, operator)]}}
        return _not(clause) if operator == "not in" else clause
    if operator in ("empty", "not empty"):
        clause = {"exists": {"field": field}}
        return clause if operator == "not empty" else _not(clause)
    raise _unsupported(field, operator, "=, ≠, >, <, ≥, ≤, is, is not, in, not in, empty, not empty")


def _page(operator: str, value: Value) -> Clause:
    """Some page of the chunk (page_start..page_end) satisfies the comparison."""
    if operator in ("empty", "not empty"):
        return _numeric("page_start", operator, value)
    if operator in ("=", "is", "≠", "is not"):
        page = _number(value, operator)
        covers: Clause = {
            "bool": {"filter": [{"range": {"page_start": {"lte": page}}}, {"range": {"page_end": {"gte": page}}}]}
        }
        return _not(covers) if operator in ("≠", "is not") else covers
    if operator in ("in", "not in"):
        pages = [_page("=", item) for item in _values(value, operator)]
        any_page: Clause = {"bool": {"should": pages, "minimum_should_match": 1}}
        return _not(any_page) if operator == "not in" else any_page
    if operator in (">", "≥"):
        return _numeric("page_end", operator, value)
    if operator in ("<", "≤"):
        return _numeric("page_start", operator, value)
    raise _unsupported("page", operator, "=, ≠, >, <, ≥, ≤, is, is not, in, not in, empty, not empty")


def _title(operator: str, value: Value) -> Clause:
    """The title is analysed text: it can contain a phrase, not equal a string."""
    if operator in ("contains", "not contains"):
        clause: Clause = {"match_phrase": {"title": _text(value, operator)}}
        return _not(clause) if operator == "not contains" else clause
    raise _unsupported("title", operator, "contains, not contains")


def _seconds(value: Value, operator: str) -> float:
    """A moment as Unix seconds: Dify compares dates as Unix seconds (a number, or its digits as
    text); an ISO 8601 date or date-time works too (UTC when it names no zone)."""
    seconds = _as_seconds(value)
    if seconds is None or not _FIRST_SECOND <= seconds < _LAST_SECOND:
        raise ValueError(f"{operator!r} needs a date: Unix seconds or an ISO 8601 date, got {value!r}")
    return seconds


def _as_seconds(value: Value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if not isinstance(value, str):
        return float(value)
    if _NUMBER.fullmatch(text := value.strip()):
        return float(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _date(field: str, operator: str, value: Value) -> Clause:
    """A date field compared with a moment (Elasticsearch would read a bare number as milliseconds)."""
    if operator in ("before", "after"):
        bound = round(_seconds(value, operator) * 1000)
        return {"range": {field: {"lt" if operator == "before" else "gt": bound, "format": "epoch_millis"}}}
    raise _unsupported(field, operator, "before, after")


def _compare(name: str, operator: str, value: Value) -> Clause:
    if name in KEYWORD_FIELDS:
        return _keyword(name, operator, value)
    if name in NUMBER_FIELDS:
        return _numeric(name, operator, value)
    if name == "page":
        return _page(operator, value)
    if name == "title":
        return _title(operator, value)
    if name == "indexed_at":
        return _date(name, operator, value)
    return _metadata(name.removeprefix("metadata."), operator, value)


def _unsupported(field: str, operator: str, supported: str) -> ValueError:
    return ValueError(f"{field!r} does not take {operator!r}: it takes {supported}")
