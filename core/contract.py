"""Request models whose JSON types are exactly those of the OpenAPI schema built from them.

Pydantic's default (lax) mode turns `false` into 0 and `"1"` into 1, so a request the schema
calls invalid would pass. `StrictModel` validates in strict mode and forbids unknown fields (a
misspelt option is a 422, never silently ignored). Every request model of the API derives from
it. Enums are the one exception: FastAPI validates the decoded JSON, where an enum is its value
(a string), so enum fields are declared with `Choice`, e.g. `mode: Choice[Mode]`. And JSON
Schema counts `46.0` as an integer, so an integral float is taken as the integer it is.
"""

from typing import Annotated, Any, TypeVar

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
