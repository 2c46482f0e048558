"""The indexing pipeline: documents → chunks → embeddings → Elasticsearch, safe to re-run.

1. **Plan** (indexing/plan.py): chunk every document and look up what the index holds: new
   chunks, unchanged ones (skipped, never re-embedded), stale ones.
2. **Embed and write, overlapped** (indexing/embed.py, indexing/write.py): embedding batches in
   flight while finished ones are analysed and bulk-written.
3. **Clean up**: delete stale chunks (changed documents; and what the run's `RunScope` removes:
   documents gone from a source, files deleted from a synced folder, everything not given),
   refresh, and with `recreate` swap the alias to the new index only when nothing failed. A
   document's (a source's) old chunks are deleted only when all of its new chunks were written,
   so a file is never half replaced.

An interrupted run leaves only whole, correct chunks behind (each bulk write is of finished
chunks), so re-running completes it without duplicates or gaps. With a `Partition`, the job
sees only the documents whose id hashes to its part, so N workers together write exactly
the chunks of one run. The options (indexing/options.py) are validated when they are built.
"""

import logging
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from elasticsearch import Elasticsearch
from pydantic import BaseModel, Field
from tqdm import tqdm

from core.access import ALL_DOCUMENTS, DocumentAccess, Scope
from core.aliases import Alias, MinedFrom, merged, mine
from core.documents import Chunk, Document, source_label
from core.embeddings import Embedder
from core.kbs import write_base_aliases
from core.profiles import chapter_marks, naming_rules
from core.reader import Reader
from core.store import (
    concrete_indices,
    create_index,
    ensure_index,
    read_index_meta,
    swap_alias,
    update_kb_meta,
    versioned_name,
    write_aliases,
)
from core.text import ChineseTokenizer
from indexing.compact import compact
from indexing.dictionary import corpus_tokenizer
from indexing.embed import Embedding, embed_and_write
from indexing.loaders.text import chapters_of
from indexing.options import Chunking, IndexOptions, RunScope
from indexing.plan import Plan, checked_documents, orphans, plan_chunks
from indexing.write import ErrorLog, Progress, Writer, clean_up

logger = logging.getLogger(__name__)

NOTHING_ELSE = RunScope()  # a run that only adds and updates its documents' chunks


class Observer(Protocol):
    """Follows a run from another thread's point of view (the service's job status): the plan's
    figures once known, then the chunks embedded, and finished (written, or failed), as each batch ends."""

    def planned(self, chunks: int, new: int, unchanged: int) -> None: ...

    def embedded(self, chunks: int) -> None: ...

    def finished(self, chunks: int) -> None: ...


@dataclass(frozen=True)
class _Observed:
    """The progress bar, and the observer told of the same chunks."""

    bar: tqdm
    observer: Observer

    def update(self, n: float | None = 1) -> bool | None:
        self.observer.finished(int(n or 0))
        return self.bar.update(n)


class FileCounts(BaseModel):
    """What `--sync` did with the files of the folder."""

    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0


class IndexSummary(BaseModel):
    """The job's outcome; the CLI prints it as one line (JSON with `--json`)."""

    index: str
    alias: str
    documents: int
    chunks: int
    indexed: int
    unchanged: int
    deleted: int
    failed: int
    seconds: float
    chunks_per_s: float
    embed_seconds: float
    write_seconds: float
    swapped: bool = False
    compacted: bool = False  # the recovery source left behind (indexing/compact.py)
    load_errors: int = 0
    error_file: str | None = None
    partition: str | None = None
    parse_seconds: float = 0.0  # reading and parsing files (set by the CLI), beside embed_seconds
    files: FileCounts | None = None  # `--sync` only
    # Per file, the pages OCR read with a confidence under OCR_MIN_CONFIDENCE (set by the CLI).
    low_confidence_pages: dict[str, list[int]] = Field(default_factory=dict)


@dataclass(frozen=True)
class _Written:
    """What the run did to the index, for the summary."""

    plan: Plan
    indexed: int
    deleted: int
    compactable: bool  # a load into an empty passage base, its first batch a segment of its own
    embed_seconds: float
    write_seconds: float


def _open_index(es: Elasticsearch, alias: str, embedder: Embedder, scope: RunScope, options: IndexOptions) -> str:
    """The index to write: a new versioned one (`recreate`) or the one behind `alias`.

    Partition workers that find no index all create the same name, so they share one.
    """
    layout, passages = options.layout, options.passages
    if not scope.recreate:
        name = f"{alias}-v0" if scope.partition is not None else None
        return ensure_index(
            es, alias, embedder, shards=layout.shards, replicas=layout.replicas, name=name, passages=passages
        )
    index = versioned_name(alias)
    create_index(es, index, embedder, shards=layout.shards, replicas=layout.replicas, passages=passages)
    # Nobody searches the new index before the swap: skip periodic refreshes while loading.
    es.indices.put_settings(index=index, settings={"index": {"refresh_interval": "-1"}})
    return index


def _record_chunking(es: Elasticsearch, index: str, chunking: Chunking) -> None:
    """A new base remembers the chunking it is built with, so uploads and later runs chunk alike."""
    if "chunk_size" not in read_index_meta(es, index).kb:
        update_kb_meta(es, index, {"chunk_size": chunking.size, "chunk_overlap": chunking.overlap})


def _finish_recreate(es: Elasticsearch, alias: str, index: str, failures: int) -> bool:
    """Swap `alias` to the rebuilt `index` when nothing failed (else delete it); True when swapped."""
    if failures == 0:
        swap_alias(es, alias, index)
        return True
    logger.error("%d failures: alias %r left unchanged, new index %s deleted", failures, alias, index)
    es.options(ignore_status=404).indices.delete(index=index)
    return False


@dataclass(frozen=True)
class _Run:
    """One run's fixed inputs, handed to its steps."""

    es: Elasticsearch
    index: str
    alias: str
    embedder: Embedder
    options: IndexOptions
    scope: RunScope
    visible: DocumentAccess  # what the run sees of the base: it keeps, replaces and deletes only that
    errors: ErrorLog
    progress: bool
    observer: Observer | None


def _write(run: _Run, documents: list[Document], tokenizer: ChineseTokenizer, profile: str | None) -> _Written:
    """Plan, embed and write, clean up, refresh: steps 1 to 3 of the module docstring."""
    es, index = run.es, run.index
    reader = Reader(es, Scope(index, run.visible))
    # Whether the base is empty is the base's own fact (its corpus dictionary is made anew then).
    empty = run.scope.recreate or Reader(es, Scope.whole(index)).count() == 0
    tokenizer = corpus_tokenizer(es, index, documents, tokenizer, fresh=empty)
    carried = admins_aliases(es, run.alias) if run.scope.recreate else ()
    learn_aliases(es, index, documents, tokenizer, carried, run.visible, profile)
    # The index's own passages (a base built before passage vectors keeps one vector per chunk).
    windows = read_index_meta(es, index).passages
    plan = plan_chunks(reader, documents, run.options.chunking, empty, rewrite_outdated=windows is not None)
    logger.info(
        "%d chunks: %d new, %d unchanged, %d stale", plan.chunks, len(plan.new), plan.unchanged, len(plan.stale)
    )
    bar = tqdm(
        total=len(plan.new), unit="chunk", desc=f"indexing {run.alias}", disable=not run.progress, file=sys.stderr
    )
    progress: Progress = bar
    if run.observer is not None:
        run.observer.planned(plan.chunks, len(plan.new), plan.unchanged)
        progress = _Observed(bar, run.observer)
    with bar:
        if run.observer is not None:
            embedding = Embedding(run.embedder, windows, run.errors, progress, run.observer.embedded)
        else:
            embedding = Embedding(run.embedder, windows, run.errors, progress)
        writer = Writer(es, index, tokenizer, run.errors, progress)
        wanted = empty and windows is not None and run.options.compact_wait_s > 0
        compactable = _load(run, plan.new, embedding, writer, own_first_segment=wanted)
    deleted = clean_up(es, index, plan, orphans(reader, documents, run.scope), run.errors)
    if run.scope.recreate:
        es.indices.put_settings(index=index, settings={"index": {"refresh_interval": None}})
    es.indices.refresh(index=index)
    return _Written(
        plan, writer.indexed, deleted, compactable and writer.indexed > 0, embedding.seconds, writer.seconds
    )


def _load(run: _Run, chunks: list[Chunk], embedding: Embedding, writer: Writer, *, own_first_segment: bool) -> bool:
    """Embed and write `chunks`; with `own_first_segment` the first batch is refreshed into a segment
    of its own, since Lucene never merges a lone segment (indexing/compact.py). True when it was (a
    load of one batch is not worth compacting)."""
    throughput = run.options.throughput
    first = throughput.batch_size if own_first_segment and len(chunks) > throughput.batch_size else 0
    if first:
        embed_and_write(chunks[:first], throughput, embedding, writer)
        run.es.indices.refresh(index=run.index)
    embed_and_write(chunks[first:], throughput, embedding, writer)
    return first > 0


def admins_aliases(es: Elasticsearch, alias: str) -> tuple[Alias, ...]:
    """What the base's admins said of its aliases (pairs added or removed): a rebuild keeps it."""
    if not concrete_indices(es, alias):
        return ()
    return tuple(entry for entry in read_index_meta(es, alias).aliases if entry.origin != "mined")


def _text_profile(run: _Run) -> str | None:
    """The base's text profile, on the index the run writes before anything is mined: the run's own
    (`IndexOptions.profile`), else the one the base stores (a rebuild carries it to its new index)."""
    if run.options.profile is not None:
        profile = run.options.profile or None
    elif concrete_indices(run.es, run.alias):
        profile = read_index_meta(run.es, run.alias).kb.get("profile") or None
    else:
        return None
    if run.options.profile is not None or run.scope.recreate:
        update_kb_meta(run.es, run.index, {"profile": profile})
    return profile


def learn_aliases(
    es: Elasticsearch,
    index: str,
    documents: list[Document],
    tokenizer: ChineseTokenizer,
    carried: Sequence[Alias] = (),
    visible: DocumentAccess = ALL_DOCUMENTS,
    profile: str | None = None,
) -> None:
    """Mine the documents' aliases (core/aliases.py, with the naming rules of the base's text `profile`)
    into the base's, replacing what these documents said before as far as the run sees them (`visible`);
    `carried`: an admin's pairs from the index a rebuild replaces."""
    mined = mine(
        [
            MinedFrom(document.doc_id, document.text, document_label(document), tuple(document.access))
            for document in documents
        ],
        tokenizer,
        naming_rules(profile),
    )
    stored = (*read_index_meta(es, index).aliases, *carried)
    if mined or stored:
        write_aliases(es, index, merged(stored, mined, {document.doc_id for document in documents}, visible))


def remine_aliases(es: Elasticsearch, alias: str, tokenizer: ChineseTokenizer, profile: str | None) -> int:
    """Mine the base's aliases again from its chunks, with the naming rules of its text `profile`: a
    base whose profile changes learns (or forgets) the pairs its documents state in that profile's
    forms without being indexed again; an admin's pairs stay. Returns how many pairs it holds now."""
    chunks: dict[str, list[tuple[int, str]]] = {}
    about: dict[str, tuple[str, tuple[str, ...]]] = {}
    fields = ["doc_id", "chunk_index", "text", "title", "source", "chapter", "chapter_title", "access"]
    for hit in Reader(es, Scope.whole(alias)).scan({"query": {"match_all": {}}, "_source": fields}):
        chunk = hit["_source"]
        chunks.setdefault(chunk["doc_id"], []).append((chunk.get("chunk_index", 0), chunk.get("text", "")))
        label = source_label(
            title=chunk.get("title", ""),
            source=chunk.get("source", ""),
            chapter=chunk.get("chapter"),
            chapter_title=chunk.get("chapter_title"),
        )
        about[chunk["doc_id"]] = (label, tuple(chunk.get("access") or ()))
    documents = [MinedFrom(doc_id, _joined(parts), *about[doc_id]) for doc_id, parts in chunks.items()]
    mined = mine(documents, tokenizer, naming_rules(profile))
    aliases = merged(read_index_meta(es, alias).aliases, mined, set(chunks))
    write_base_aliases(es, alias, aliases)
    return len(aliases)


_MIN_OVERLAP = 8  # characters two chunks must share to be read as overlapping


def _joined(chunks: list[tuple[int, str]]) -> str:
    """A document's text again from its chunks in order, each less what it shares with the one before
    (the chunking's overlap, at least `_MIN_OVERLAP` characters), so no sentence is counted twice."""
    text = ""
    for _, chunk in sorted(chunks):
        longest = min(len(text), len(chunk))
        shared = next((n for n in range(longest, _MIN_OVERLAP - 1, -1) if text.endswith(chunk[:n])), 0)
        text += chunk[shared:]
    return text


def document_label(document: Document) -> str:
    return source_label(
        title=document.title,
        source=document.source,
        chapter=document.chapter,
        chapter_title=document.chapter_title,
    )


def index_documents(
    es: Elasticsearch,
    documents: Iterable[Document],
    *,
    alias: str,
    embedder: Embedder,
    tokenizer: ChineseTokenizer,
    options: IndexOptions,
    visible: DocumentAccess,
    scope: RunScope = NOTHING_ELSE,
    error_file: Path | None = None,
    progress: bool = False,
    observer: Observer | None = None,
) -> IndexSummary:
    """Index `documents` into the knowledge base `alias`; see the module docstring.

    `visible` is what the run sees of the base (`ALL_DOCUMENTS` for the job; an uploader's own
    groups): it keeps, replaces and deletes only chunks it sees. `scope` says what else the run
    may replace or delete (indexing/options.py). With
    `recreate`, a failed run deletes its new index and the old one keeps serving. Failed chunks
    go to `error_file` (JSON lines, appended); `observer` is told of the plan and of each finished
    batch. A base without a stored chunking records this run's. Raises
    `store.EmbedderMismatchError` when `alias` was built with another embedder.
    """
    started = time.perf_counter()
    documents = checked_documents(documents, None)  # bad input refused before anything is written
    index = _open_index(es, alias, embedder, scope, options)
    _record_chunking(es, index, options.chunking)
    run = _Run(es, index, alias, embedder, options, scope, visible, ErrorLog(error_file), progress, observer)
    try:
        profile = _text_profile(run)  # its chapter headings (a classical novel's 第N回) cut its files
        documents = checked_documents(chapters_of(documents, chapter_marks(profile)), scope.partition)
        written = _write(run, documents, tokenizer, profile)
    except BaseException:
        if scope.recreate:
            es.options(ignore_status=404).indices.delete(index=index)
        raise
    swapped = _finish_recreate(es, alias, index, run.errors.count) if scope.recreate else False
    kept = swapped or not scope.recreate  # a failed rebuild's index is deleted
    compacted = kept and written.compactable and compact(es, index, options.compact_wait_s)
    seconds = time.perf_counter() - started
    failed = run.errors.count
    return IndexSummary(
        index=index,
        alias=alias,
        documents=len(documents),
        chunks=written.plan.chunks,
        indexed=written.indexed,
        unchanged=written.plan.unchanged,
        deleted=written.deleted,
        failed=failed,
        seconds=round(seconds, 3),
        chunks_per_s=round(written.indexed / seconds, 3) if seconds else 0.0,
        embed_seconds=round(written.embed_seconds, 3),
        write_seconds=round(written.write_seconds, 3),
        swapped=swapped,
        compacted=compacted,
        error_file=str(error_file) if error_file is not None and failed else None,
        partition=str(scope.partition) if scope.partition else None,
    )
