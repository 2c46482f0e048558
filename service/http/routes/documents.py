"""Documents over HTTP: upload (files or texts) as a background job, list, delete.

`POST /kbs/{kb}/documents` answers 202 with the job's id once the files are spooled and the
job stored; the indexing runs in the background (service/jobs/upload.py, service/jobs/runner.py).
The jobs' own routes are service/http/routes/jobs.py.
"""

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from core.config import Settings
from core.contract import parse_json
from core.reader import Reader
from indexing.options import Chunking, parse_groups
from service.deps import ServicesDep, WriteBase, base_in_path, get_caller
from service.documents import MAX_PAGE, DeleteIncomplete, DocumentDeleted, DocumentList, delete_document, list_documents
from service.http.middleware import LargerBody
from service.http.openapi import error_responses, request_body
from service.http.routes.kbs import invalid
from service.http.schemas import JobAccepted
from service.jobs.store import Reach, new_job_id
from service.jobs.upload import (
    UPLOAD,
    DocumentsForm,
    TextsUpload,
    UploadParams,
    UploadRefused,
    check_chunks,
    check_files,
    file_name,
    save_texts,
    spool_root,
    spooled_path,
    text_documents,
)
from service.kbs import BaseAccess, KnowledgeBases

_MB = 1024 * 1024


router = APIRouter(
    tags=["documents"],
    dependencies=[Depends(get_caller)],
    responses=error_responses(401, 403, 404, 502, 503),
)


def upload_body_limits(settings: Settings) -> list[LargerBody]:
    """The upload route's own body limits, by media type: files, every file at its largest plus a
    small form's worth; texts (JSON), MAX_UPLOAD_JSON_MB (held whole and parsed at once)."""
    path = re.compile(r"/kbs/[^/]+/documents")
    files = int(settings.max_upload_files * settings.max_upload_mb * _MB) + settings.max_request_bytes
    named = (
        f"MAX_UPLOAD_FILES × MAX_UPLOAD_MB ({settings.max_upload_files} × {settings.max_upload_mb:g} MB) "
        f"+ MAX_REQUEST_BYTES = {files}"
    )
    texts = int(settings.max_upload_json_mb * _MB)
    return [
        LargerBody("POST", path, "multipart/form-data", files, named),
        LargerBody(
            "POST",
            path,
            "application/json",
            texts,
            f"MAX_UPLOAD_JSON_MB ({settings.max_upload_json_mb:g} MB) = {texts}",
        ),
    ]


def _refused(err: UploadRefused) -> Exception:
    """A 413 naming the limit, or a 422 naming the field (the shape of every 422)."""
    if err.status == 422:
        return invalid(err.field, str(err))
    return HTTPException(err.status, f"{err.field}: {err}")


def _save_files(folder: Path, files: list[UploadFile], names: list[str]) -> None:
    for number, (upload, name) in enumerate(zip(files, names, strict=True)):
        path = spooled_path(folder, number, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        upload.file.seek(0)
        with path.open("wb") as out:
            shutil.copyfileobj(upload.file, out)


def _form_parts(form: FormData) -> tuple[list[UploadFile], list[str]]:
    """The form's files and its groups; any other field, or a text where a file belongs, is a 422."""
    unknown = sorted(set(form.keys()) - set(DocumentsForm.model_fields))
    if unknown:
        raise UploadRefused(422, unknown[0], "unknown form field: send `files` (one or more) and `access`")
    files = form.getlist("files")
    if not all(isinstance(part, UploadFile) for part in files):
        raise UploadRefused(422, "files", "each `files` part must be a file (with a file name)")
    access = form.getlist("access")
    if len(access) > 1 or not all(isinstance(value, str) for value in access):
        raise UploadRefused(422, "access", "one text field of comma-separated groups")
    return [part for part in files if isinstance(part, UploadFile)], parse_groups(str(access[0]) if access else None)


async def _spool_form(request: Request, settings: Settings, folder: Path) -> UploadParams:
    try:
        async with request.form(max_files=settings.max_upload_files, max_fields=8) as form:
            files, groups = _form_parts(form)
            names = [file_name(upload.filename) for upload in files]
            check_files(names, [upload.size or 0 for upload in files], settings)
            await run_in_threadpool(_save_files, folder, files, names)
    except StarletteHTTPException as err:  # Starlette's own limit: a 400 naming its parameter, not ours
        if "Too many files" in str(err.detail):
            raise UploadRefused(413, "files", f"more than MAX_UPLOAD_FILES={settings.max_upload_files} files") from None
        raise
    return UploadParams(spool=str(folder), files=names, grant=groups)


def _texts(body: bytes, settings: Settings) -> TextsUpload:
    """The JSON body (at most MAX_UPLOAD_JSON_MB: `upload_body_limits`) as texts: 400 when it is not JSON
    (or nests past the parser's limit), 422 naming the field, 413 over the limits."""
    try:
        data = parse_json(body)
    except ValueError as err:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body",), "msg": str(err)}]) from None
    try:
        upload = TextsUpload.model_validate(data)
    except ValidationError as err:
        raise RequestValidationError(
            [{**error, "loc": ("body", *error["loc"])} for error in err.errors(include_url=False)]
        ) from None
    if len(upload.texts) > settings.max_upload_texts:
        raise UploadRefused(
            413, "texts", f"{len(upload.texts)} texts, more than MAX_UPLOAD_TEXTS={settings.max_upload_texts}"
        )
    return upload


def _check_texts(kbs: KnowledgeBases, kb: str, upload: TextsUpload, settings: Settings) -> None:
    base = kbs.read(kb)
    check_chunks(text_documents(upload), Chunking(base.chunk_size, base.chunk_overlap), settings.max_job_chunks)


async def _spool_texts(
    request: Request, settings: Settings, kbs: KnowledgeBases, kb: str, folder: Path
) -> UploadParams:
    upload = await run_in_threadpool(_texts, await request.body(), settings)  # parsing megabytes: off the loop
    await run_in_threadpool(_check_texts, kbs, kb, upload, settings)
    await run_in_threadpool(save_texts, folder, upload)
    return UploadParams(spool=str(folder), texts=True)


_UPLOAD_LIMITS = "MAX_UPLOAD_FILES, MAX_UPLOAD_MB, MAX_UPLOAD_TEXTS or MAX_JOB_CHUNKS"


@router.post(
    "/kbs/{kb}/documents",
    status_code=202,
    response_model=JobAccepted,
    openapi_extra=request_body(
        {"multipart/form-data": DocumentsForm, "application/json": TextsUpload},
        "files as multipart form data, or texts as JSON",
    ),
    responses={
        413: {"model": error_responses(413)[413]["model"], "description": f"over {_UPLOAD_LIMITS} (named)"},
        **error_responses(415),
    },
)
async def upload_documents(request: Request, base: WriteBase, services: ServicesDep) -> JSONResponse:
    """Index files (multipart `files`, optional `access`: comma-separated groups) or texts (JSON) into
    the base, in the background: 202 with the job at once; follow it at `/jobs/{id}`."""
    settings = services.settings
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    job_id = new_job_id()
    folder = spool_root(settings) / job_id
    try:
        if media == "multipart/form-data":
            params = await _spool_form(request, settings, folder)
        elif media == "application/json":
            params = await _spool_texts(request, settings, services.kbs, base.kb, folder)
        else:
            raise HTTPException(415, f"send multipart/form-data (files) or application/json (texts), not {media!r}")
        params.uploader = Reach.of(base.scope.documents)
        owner = base.caller.name
        await run_in_threadpool(services.jobs.submit, UPLOAD, base.kb, owner, params.model_dump(), job_id)
    except UploadRefused as err:
        shutil.rmtree(folder, ignore_errors=True)
        raise _refused(err) from None
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return JobAccepted(job=job_id, status_url=f"/jobs/{job_id}").response()


@dataclass(frozen=True)
class Page:
    size: int
    after: str | None


def page(
    size: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    after: Annotated[str | None, Query(min_length=1, max_length=512, description="`next` of the page before")] = None,
) -> Page:
    return Page(size, after)


@router.get("/kbs/{kb}/documents", response_model=DocumentList)
def documents(
    asked: Annotated[Page, Depends(page)],
    base: Annotated[BaseAccess, Depends(base_in_path("read", page))],
    services: ServicesDep,
) -> DocumentList:
    """The documents of the base the caller may read, `size` at a time in doc_id order."""
    return list_documents(Reader(services.es, base.scope), asked.size, asked.after)


@router.delete("/kbs/{kb}/documents/{doc_id:path}", response_model=DocumentDeleted)
def delete(
    base: WriteBase, services: ServicesDep, doc_id: Annotated[str, PathParam(min_length=1, max_length=512)]
) -> Any:
    """Delete a document's chunks (the write role); 404 for a document absent or hidden from the caller."""
    try:
        deleted = delete_document(Reader(services.es, base.scope), doc_id)
    except DeleteIncomplete as err:
        raise HTTPException(503, str(err), headers={"Retry-After": "5"}) from None
    if deleted is None:
        raise HTTPException(404, f"no document {doc_id!r} in knowledge base {base.kb!r}")
    return DocumentDeleted(kb=base.kb, doc_id=doc_id, deleted=deleted)
