"""Request models whose JSON types are exactly those of the OpenAPI schema built from them.

Pydantic's default (lax) mode turns `false` into 0 and `"1"` into 1, so a request the schema
calls invalid would pass. `StrictModel` validates in strict mode and forbids unknown fields (a
misspelt option is a 422, never silently ignored). Every request model of the API derives from
it. Enums are the one exception: FastAPI validates the decoded JSON, where an enum is its value
(a string), so enum fields are declared with `Choice`, e.g. `mode: Choice[Mode]`.
"""

from typing import Annotated, TypeVar

from pydantic import BaseModel, ConfigDict, Strict

E = TypeVar("E")

Choice = Annotated[E, Strict(False)]


class StrictModel(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
