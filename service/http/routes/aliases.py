"""`/kbs/{kb}/aliases`: the names a base's keyword lists take as one (core/aliases.py), for its admins
to read and correct, as JSON or as CSV for a spreadsheet.

    GET /kbs/{kb}/aliases[?format=csv]  every pair with where it was found (removed pairs apart)
    PUT /kbs/{kb}/aliases               the pairs the base has: JSON, or CSV with columns alias,name

A PUT is the whole list: a mined pair left out is kept as removed (the next indexing run does not
mine it back), a new pair is the admin's and counts as much as a mined one. The CSV that a GET
gives can be edited and sent back as it is: its other columns are ignored, and a row whose
`origin` is `removed` stays removed.
"""

import csv
import io
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from core.aliases import Alias, Origin, corrected
from core.contract import StrictModel, parse_json
from service.deps import AdminBase, BaseAccess, ServicesDep, base_in_path, get_caller
from service.http.middleware import LargerBody
from service.http.openapi import error_responses, request_body
from service.inputs import NOT_UNICODE, is_unicode

router = APIRouter(tags=["knowledge bases"], dependencies=[Depends(get_caller)], responses=error_responses(404, 503))

MAX_ALIASES = 5000
# The whole list in one body: 5,000 pairs of 40 four-byte characters each fit in 2 MiB (MAX_REQUEST_BYTES does not).
MAX_ALIASES_BYTES = 2 * 1024 * 1024
CSV_COLUMNS = ("alias", "name", "origin", "source")
# Two characters at least (one would expand every query that holds it), no control characters,
# no space at either end.
AliasText = Annotated[
    str, Field(min_length=2, max_length=40, pattern=r"^[^\s\x00-\x1f\x7f]([^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?$")
]


class AliasPair(StrictModel):
    alias: AliasText = Field(description="the other name (子昂, HbA1c)")
    name: AliasText = Field(description="the name it stands for (赵阳, 糖化血红蛋白)")

    @field_validator("alias", "name")
    @classmethod
    def _unicode(cls, text: str) -> str:
        if not is_unicode(text):
            raise ValueError(NOT_UNICODE)
        return text


class AliasesPut(StrictModel):
    aliases: list[AliasPair] = Field(max_length=MAX_ALIASES, description="every pair the base has")

    @model_validator(mode="after")
    def _distinct(self) -> "AliasesPut":
        seen: set[tuple[str, str]] = set()
        for pair in self.aliases:
            if pair.alias == pair.name:
                raise ValueError(f"{pair.alias!r} is given as an alias of itself")
            if (pair.alias, pair.name) in seen:
                raise ValueError(f"{pair.alias!r} → {pair.name!r} is given twice")
            seen.add((pair.alias, pair.name))
        return self


class AliasSourceView(BaseModel):
    sentence: str = Field(description="the sentence that states it")
    doc_id: str
    label: str = Field(description="how the document is cited (《三国演义》第1回 …)")


class AliasView(BaseModel):
    alias: str
    name: str
    origin: Origin = Field(description="mined from the documents, added by an admin, or removed by one")
    sources: list[AliasSourceView]


class AliasList(BaseModel):
    kb: str
    aliases: list[AliasView] = Field(description="the pairs queries are expanded with")
    removed: list[AliasView] = Field(description="mined pairs an admin removed: never used, never mined back")


def _view(entry: Alias) -> AliasView:
    sources = [AliasSourceView(sentence=s.sentence, doc_id=s.doc_id, label=s.label) for s in entry.sources]
    return AliasView(alias=entry.alias, name=entry.name, origin=entry.origin, sources=sources)


def _listing(kb: str, aliases: tuple[Alias, ...] | list[Alias]) -> AliasList:
    views = [_view(entry) for entry in aliases]
    return AliasList(
        kb=kb,
        aliases=[view for view in views if view.origin != "removed"],
        removed=[view for view in views if view.origin == "removed"],
    )


def _csv(listing: AliasList) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for view in [*listing.aliases, *listing.removed]:
        source = f"{view.sources[0].label}: {view.sources[0].sentence}" if view.sources else ""
        writer.writerow([view.alias, view.name, view.origin, source])
    return out.getvalue()


def aliases_body_limits() -> list[LargerBody]:
    """The PUT's own body limit, in both media types (the middleware's 413 names it)."""
    path = re.compile(r"/kbs/[^/]+/aliases")
    named = f"{MAX_ALIASES_BYTES} bytes for a list of at most {MAX_ALIASES} aliases"
    return [LargerBody("PUT", path, media, MAX_ALIASES_BYTES, named) for media in ("application/json", "text/csv")]


def _invalid(errors: Sequence[Mapping[str, Any]]) -> RequestValidationError:
    """A 422 in the shape of FastAPI's own, each error's place under `body`."""
    return RequestValidationError([{**error, "loc": ("body", *error.get("loc", ()))} for error in errors])


def _rows(text: str) -> dict[str, list[dict[str, str]]]:
    """A CSV body as the JSON body it stands for (a header row naming `alias` and `name` first)."""
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or not {"alias", "name"} <= {f.strip() for f in reader.fieldnames}:
        raise _invalid([{"type": "csv_header", "loc": (), "msg": "the first row must name the columns alias,name"}])
    rows = [{k.strip(): (v or "").strip() for k, v in row.items() if k} for row in reader]
    return {"aliases": [{"alias": r["alias"], "name": r["name"]} for r in rows if r.get("origin") != "removed"]}


async def aliases_body(request: Request) -> AliasesPut:
    """The PUT's body, JSON or CSV, checked before the base (bad input is a 422 whatever the base)."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in ("application/json", "text/csv"):
        raise HTTPException(415, f"send application/json or text/csv, not {media!r}")
    raw = await request.body()
    try:
        data = _rows(raw.decode("utf-8-sig")) if media == "text/csv" else parse_json(raw)
        return AliasesPut.model_validate(data)
    except UnicodeDecodeError as err:
        raise _invalid([{"type": "csv_encoding", "loc": (), "msg": f"CSV must be UTF-8: {err.reason}"}]) from None
    except csv.Error as err:  # a field over the csv module's limit, a NUL byte …
        raise _invalid([{"type": "csv_invalid", "loc": (), "msg": f"not CSV: {err}"}]) from None
    except ValidationError as err:
        raise _invalid(err.errors(include_url=False)) from None
    except ValueError as err:
        raise _invalid([{"type": "json_invalid", "loc": (), "msg": str(err)}]) from None


AliasesBody = Annotated[AliasesPut, Depends(aliases_body)]
_CSV = {
    "schema": {"type": "string", "description": "a header row naming alias,name (other columns ignored), then rows"}
}
_PUT_BODY = request_body({"application/json": AliasesPut}, "every pair the base has, as JSON or as CSV")
_PUT_BODY["requestBody"]["content"]["text/csv"] = _CSV


@router.get(
    "/kbs/{kb}/aliases",
    response_model=AliasList,
    responses={200: {"content": {"text/csv": _CSV}, "description": "JSON, or CSV with `format=csv`"}},
)
def get_aliases(
    base: AdminBase, services: ServicesDep, as_: Annotated[Literal["json", "csv"], Query(alias="format")] = "json"
) -> AliasList | Response:
    """The base's aliases (its admins only: they name documents of every group), each with the sentence
    and document it was found in; `format=csv` for a spreadsheet."""
    listing = _listing(base.kb, services.kbs.aliases(base.kb))
    if as_ == "csv":
        return Response(_csv(listing), media_type="text/csv; charset=utf-8")
    return listing


@router.put(
    "/kbs/{kb}/aliases",
    response_model=AliasList,
    openapi_extra=_PUT_BODY,
    responses={
        413: {"model": error_responses(413)[413]["model"], "description": f"a body over {MAX_ALIASES_BYTES} bytes"},
        **error_responses(415, 422),
    },
)
def put_aliases(
    body: AliasesBody, base: Annotated[BaseAccess, Depends(base_in_path("admin", aliases_body))], services: ServicesDep
) -> AliasList:
    """Set the pairs the base has: mined pairs left out are removed (and stay so), new ones are the
    admin's; the next search expands queries with them."""
    stored = services.kbs.aliases(base.kb)
    aliases = corrected(stored, [(pair.alias, pair.name) for pair in body.aliases])
    services.kbs.write_aliases(base.kb, aliases)
    return _listing(base.kb, aliases)
