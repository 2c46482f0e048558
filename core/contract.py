"""Request models whose JSON types are exactly those of the OpenAPI schema built from them.

Pydantic's default (lax) mode turns `false` into 0 and `"1"` into 1, so a request the schema
calls invalid would pass. `StrictModel` validates in strict mode and forbids unknown fields (a
misspelt option is a 422, never silently ignored). Every request model of the API derives from
it. Enums are the one exception: FastAPI validates the decoded JSON, where an enum is its value
(a string), so enum fields are declared with `Choice`, e.g. `mode: Choice[Mode]`. And JSON
Schema counts `46.0` as an integer, so an integral float is taken as the integer it is.

JSON the service reads itself (an upload's texts, question sets, JSONL files) is parsed by
`parse_json`, whose nesting is bounded, and measured by `json_depth` where a field has a depth limit.
"""

from typing import Annotated, Any, TypeVar

import pydantic_core
from pydantic import BaseModel, ConfigDict, Strict, field_validator

E = TypeVar("E")

Choice = Annotated[E, Strict(False)]


class StrictModel(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _integral_floats(cls, value: Any) -> Any:
        """46.0 → 46 (a float field takes the int back as 46.0; a string or boolean field refuses both)."""
        return int(value) if isinstance(value, float) and value.is_integer() else value


class JSONTooDeep(ValueError):
    """JSON nested past the parser's limit: no request of this service is."""


def parse_json(data: str | bytes) -> Any:
    """`data` parsed by pydantic-core's JSON parser, which does not recurse in Python: malformed JSON
    is a `ValueError` naming line and column, and nesting past its limit (200 levels) `JSONTooDeep`,
    where the standard library's decoder raises `RecursionError` near 1,000 levels (a 500, not a 4xx)."""
    try:
        return pydantic_core.from_json(data)
    except ValueError as err:
        if str(err).startswith("recursion limit exceeded"):
            raise JSONTooDeep(str(err)) from None
        raise


def json_depth(value: Any) -> int:
    """How deep `value` nests: 0 for a scalar, 1 for a flat object or list (counted level by level,
    without recursion)."""
    depth, level = 0, [value]
    while containers := [item for item in level if isinstance(item, dict | list)]:
        depth += 1
        level = [child for item in containers for child in (item.values() if isinstance(item, dict) else item)]
    return depth
