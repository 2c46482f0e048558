"""Uploads: files or texts sent over HTTP, indexed in the background by the indexing pipeline.

A request is checked at once (how many files, how large, a supported suffix, distinct names;
how many texts and chunks), its files are saved to the spool folder (`UPLOAD_SPOOL/<job id>/`,
default `.cache/uploads/`) and a job of kind `upload` is queued (service/jobs.py) before the
answer. The job runs what `python -m indexing FILES --index KB` runs: the loaders (`load_files`,
each file parsed in a worker process under LOAD_TIMEOUT_S), then `index_documents` with the
base's own chunking, so ids, skipped unchanged chunks and replaced changed files are the CLI's.
A file's `source` is its uploaded name: the same name uploaded again replaces that source's
chunks (`RunScope(replace_sources=...)`), and an unchanged file writes nothing. A text is a
document of its own, its `id` (or a hash of its text) being its doc_id and its source.

A file the loaders refuse (corrupt, encrypted, not what its suffix says ...) is that file's
error in the job; the other files are indexed. The spool folder is deleted when the job ends;
a job interrupted by a restart finds its files there and runs again (nothing is written twice).
"""

import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

from elasticsearch import Elasticsearch
from pydantic import AfterValidator, AliasChoices, BaseModel, Field

from core.config import Settings
from core.contract import StrictModel
from core.documents import Document, document_chunks
from core.embeddings import Embedder
from core.kbs import read_kb
from core.schema import METADATA_DEPTH, check_metadata, content_hash
from core.text import get_tokenizer
from indexing.loaders import SUPPORTED_SUFFIXES, LoadLimits, LoadResult, SourceFile, load_files
from indexing.options import Chunking, IndexOptions, Layout, RunScope, Throughput, grant_access
from indexing.pipeline import index_documents
from service.jobs.runner import JobKind, Progress
from service.jobs.store import Job, JobFailed, Reach

logger = logging.getLogger(__name__)

UPLOAD = "upload"
_TEXTS_FILE = "texts.json"
_CHUNK_ERRORS_FILE = "chunk-errors.jsonl"
_MAX_NAME_BYTES = 255
# An upload job's counts (docs/api.md): all present from the start, at 0 until known.
COUNTS = ("files", "documents", "chunks", "new", "embedded", "indexed", "unchanged", "deleted", "failed")

Group = Annotated[str, Field(min_length=1, max_length=256, pattern=r"\S")]


class TextItem(StrictModel):
    text: str = Field(min_length=1, pattern=r"\S", description="the document's text")
    title: str = Field("", max_length=1000)
    id: str | None = Field(None, min_length=1, max_length=512, description="its doc_id; default: a hash of the text")
    metadata: Annotated[dict[str, Any], AfterValidator(check_metadata)] = Field(
        default_factory=dict, description=f"stored with every chunk, filterable; at most {METADATA_DEPTH} levels deep"
    )


class TextsUpload(StrictModel):
    """`POST /kbs/{kb}/documents` with a JSON body: texts instead of files."""

    texts: list[TextItem] = Field(min_length=1, description="at most MAX_UPLOAD_TEXTS")
    access: list[Group] = Field(default_factory=list, description="groups that may read these texts; none: everyone")


class DocumentsForm(StrictModel):
    """`POST /kbs/{kb}/documents` as multipart form data (the schema of the form; parsed by the route)."""

    files: list[bytes] = Field(min_length=1, description=f"one or more files ({', '.join(SUPPORTED_SUFFIXES)})")
    access: str | None = Field(None, description="comma-separated groups that may read these files; none: everyone")


class UploadRefused(ValueError):
    """A request that cannot become a job: `status` 413 (over a limit) or 422 (bad input), `field` the part at fault."""

    def __init__(self, status: int, field: str, message: str) -> None:
        super().__init__(message)
        self.status, self.field = status, field


def spool_root(settings: Settings) -> Path:
    return Path(settings.upload_spool or Path(".cache", "uploads")).resolve()


def file_name(given: str | None) -> str:
    """The name a file's chunks get as their `source`: the uploaded name without any folder."""
    name = PurePosixPath((given or "").replace("\\", "/")).name.strip()
    if not name or name in {".", ".."} or "\x00" in name or len(name.encode()) > _MAX_NAME_BYTES:
        raise UploadRefused(422, "files", f"a file needs a name of 1 to {_MAX_NAME_BYTES} bytes, got {given!r}")
    suffix = PurePosixPath(name).suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise UploadRefused(
            422, "files", f"{name!r} is not a document this service reads: use {', '.join(SUPPORTED_SUFFIXES)}"
        )
    return name


def check_files(names: list[str], sizes: list[int], settings: Settings) -> None:
    """Refuse at once what the limits and names already rule out (413 names the limit)."""
    if not names:
        raise UploadRefused(422, "files", "send at least one file (or a JSON body of texts)")
    if len(names) > settings.max_upload_files:
        raise UploadRefused(413, "files", f"{len(names)} files, more than MAX_UPLOAD_FILES={settings.max_upload_files}")
    for name, size in zip(names, sizes, strict=True):
        if size > settings.max_upload_mb * 1024 * 1024:
            raise UploadRefused(
                413, "files", f"{name!r} is {size / 2**20:.3g} MB, larger than MAX_UPLOAD_MB={settings.max_upload_mb:g}"
            )
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise UploadRefused(422, "files", f"each file needs its own name; sent twice: {', '.join(duplicates)}")


def text_documents(upload: TextsUpload) -> list[Document]:
    """The texts as documents: each its own source, its id or a hash of its text the doc_id."""
    documents = []
    for item in upload.texts:
        doc_id = item.id or f"text-{content_hash(item.text)}"
        documents.append(
            Document(doc_id, item.text, doc_id, title=item.title, metadata=item.metadata, access=list(upload.access))
        )
    ids = [document.doc_id for document in documents]
    duplicates = sorted({doc_id for doc_id in ids if ids.count(doc_id) > 1})
    if duplicates:
        raise UploadRefused(422, "texts", f"each text needs its own id; given twice: {', '.join(duplicates)}")
    return documents


def check_chunks(documents: Sequence[Document], chunking: Chunking, limit: int) -> int:
    """The chunks `documents` make, when at most MAX_JOB_CHUNKS (`limit`); else `UploadRefused` 413."""
    planned = sum(len(document_chunks(document, chunking.size, chunking.overlap)) for document in documents)
    if planned > limit:
        raise UploadRefused(
            413, "texts", f"the upload makes {planned} chunks, more than MAX_JOB_CHUNKS={limit}: split it"
        )
    return planned


def save_texts(folder: Path, upload: TextsUpload) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / _TEXTS_FILE).write_text(upload.model_dump_json(), encoding="utf-8")


class UploadParams(BaseModel):
    """An upload job's parameters, as stored with the job: its spool folder, each file's name (saved as
    `<n>/<name>` there), whether a texts file waits there, the groups to grant and the uploader's reach."""

    spool: str
    files: list[str] = Field(default_factory=list)
    texts: bool = False
    grant: list[str] = Field(default_factory=list, validation_alias=AliasChoices("grant", "access"))
    uploader: Reach = Field(default_factory=Reach)  # a job stored without one may replace public documents only


def id_space(uploader: Reach, grant: list[str]) -> str:
    """The space an upload's chunk ids are hashed in (core.documents.Document.id_space).

    None for an uploader who reads the whole base. Else the uploader's reach, and the groups it
    grants when it will not be able to read what it writes: a chunk id of a space is then always
    readable by every uploader of that space, so an upload never takes the id of a chunk its
    uploader may not read, and the answer is the same whether such a chunk exists or not.
    """
    if uploader.everything:
        return ""
    reach = f"reach={','.join(uploader.groups)}"
    if not grant or not set(grant).isdisjoint(uploader.groups):
        return reach
    return f"{reach};grant={','.join(sorted(set(grant)))}"


def spooled_path(folder: Path, number: int, name: str) -> Path:
    """Where file `number` of an upload waits: its own sub-folder keeps its name (the loaders take a
    document's default title from the file name)."""
    return folder / str(number) / name


@dataclass(frozen=True)
class _Observer:
    """`indexing.pipeline.Observer` writing into the job's progress."""

    progress: Progress

    def planned(self, chunks: int, new: int, unchanged: int) -> None:
        self.progress.set(chunks=chunks, new=new, unchanged=unchanged)

    def embedded(self, chunks: int) -> None:
        self.progress.add("embedded", chunks)

    def finished(self, chunks: int) -> None:
        self.progress.add("indexed", chunks)


@dataclass(frozen=True)
class Uploads:
    """What an upload job needs: the cluster, the embedder, the settings (limits, throughput)."""

    es: Elasticsearch
    embedder: Embedder
    settings: Settings

    def kind(self) -> JobKind:
        return JobKind(UPLOAD, self.run, self.finish)

    def finish(self, job: Job) -> None:
        shutil.rmtree(UploadParams.model_validate(job.params).spool, ignore_errors=True)

    def _load(self, params: UploadParams, progress: Progress) -> tuple[list[Document], set[str]]:
        """The job's documents, and the sources they replace whole (the files that loaded)."""
        folder = Path(params.spool)
        files = [SourceFile(spooled_path(folder, n, name), name) for n, name in enumerate(params.files)]
        texts = folder / _TEXTS_FILE if params.texts else None
        missing = [str(file.path) for file in files if not file.path.is_file()]
        missing += [str(texts)] if texts is not None and not texts.is_file() else []
        if missing:
            raise JobFailed(f"its uploaded files are gone ({', '.join(missing)}): upload them again")
        progress.set(**{**dict.fromkeys(COUNTS, 0), "files": len(files)})
        stopped: list[str] = []

        def go_on() -> bool:  # between files: cancelled, out of time or taken over stops the job
            reason = progress.stop_reason()
            stopped.extend([reason] if reason else [])
            return reason is None

        loaded = load_files(files, LoadResult(), LoadLimits.from_settings(self.settings), go_on)
        if stopped:
            read = len(loaded.loaded) + len({error.path for error in loaded.errors})
            raise JobFailed(f"{stopped[0]} after {read} of {len(files)} files were read: nothing was indexed")
        names = {str(file.path): file.source for file in files}
        for error in loaded.errors:
            where = f" (line {error.line})" if error.line is not None else ""
            progress.error(names.get(error.path, error.path), error.message + where, error.reason)
        for source, pages in loaded.doubtful_pages().items():
            low = self.settings.ocr_min_confidence
            message = (
                f"indexed, but OCR read pages {pages} with a confidence under OCR_MIN_CONFIDENCE={low:g}: check them"
            )
            progress.error(source, message, "low_ocr_confidence")
        documents = loaded.documents
        grant_access(documents, params.grant)
        if texts is not None:
            documents = documents + text_documents(TextsUpload.model_validate_json(texts.read_text(encoding="utf-8")))
        if files and not loaded.loaded and not documents:
            raise JobFailed(f"none of the {len(files)} files could be read: see errors")
        for document in documents:
            document.id_space = id_space(params.uploader, document.access)
        return documents, {file.source for file in loaded.loaded}

    def run(self, job: Job, progress: Progress) -> None:
        params = UploadParams.model_validate(job.params)
        documents, whole = self._load(params, progress)
        kb = read_kb(self.es, job.kb, self.settings)
        chunking = Chunking(kb.chunk_size, kb.chunk_overlap)
        try:
            check_chunks(documents, chunking, self.settings.max_job_chunks)
        except UploadRefused as err:
            raise JobFailed(str(err)) from None
        progress.set(documents=len(documents))
        progress.check()  # the last moment to stop with nothing written
        options = IndexOptions(
            chunking,
            Throughput(self.settings.embed_batch_size, self.settings.embed_concurrency),
            Layout(kb.shards, kb.replicas),
        )
        error_file = Path(params.spool, _CHUNK_ERRORS_FILE)
        error_file.unlink(missing_ok=True)
        summary = index_documents(
            self.es,
            documents,
            alias=job.kb,
            embedder=self.embedder,
            tokenizer=get_tokenizer(self.settings.jieba_user_dict),
            options=options,
            visible=params.uploader.access,  # it keeps, replaces and deletes only what the uploader reads
            scope=RunScope(replace_sources=whole),
            error_file=error_file,
            observer=_Observer(progress),
        )
        progress.set(
            chunks=summary.chunks,
            indexed=summary.indexed,
            unchanged=summary.unchanged,
            deleted=summary.deleted,
            failed=summary.failed,
        )
        if summary.failed:
            _report_chunk_errors(error_file, progress)


def _report_chunk_errors(error_file: Path, progress: Progress) -> None:
    """One job error per source whose chunks failed to embed or be written (their old chunks stay)."""
    failed: dict[str, list[dict[str, Any]]] = {}
    for line in error_file.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        failed.setdefault(str(record.get("source", "")), []).append(record)
    for source, records in failed.items():
        first = records[0]
        reason = (
            f"{len(records)} chunks failed ({first.get('stage')}: {first.get('error')}); its earlier version is kept"
        )
        progress.error(source or None, reason, "chunk_failed")
