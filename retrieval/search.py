"""Command line search: `python -m retrieval.search "问题" [--mode hybrid | --compare vector,hybrid]`.

Searches the knowledge base `--index` (default `ES_INDEX`) with the service's own settings,
embedder and tokenizer; `--compare` prints the modes side by side with their overlap, the
chunks only one mode found and how far each chunk's rank moved.
"""

import argparse
import json
import sys
import unicodedata
from collections.abc import Sequence

from core.access import Scope
from core.config import Settings
from core.embeddings import load_embedder
from core.schema import Mode
from core.store import EmbedderMismatchError, IndexNotFoundError, create_client
from retrieval.compare import Comparison
from retrieval.results import Hit, SearchResult
from retrieval.retriever import build_retriever

_COLUMN = 44  # display columns per mode (a CJK character takes two)


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _fit(text: str, width: int) -> str:
    """`text` cut and padded to exactly `width` display columns."""
    out, used = "", 0
    for ch in text.replace("\n", " "):
        w = _width(ch)
        if used + w > width:
            break
        out, used = out + ch, used + w
    return out + " " * (width - used)


def _label(hit: Hit) -> str:
    where = f"第{hit.chapter}章 " if hit.chapter is not None else (f"{hit.title} " if hit.title else "")
    return f"{hit.score:.3f} {where}{hit.text}"


def _why(hit: Hit) -> str:
    """A hybrid hit's rank in each list and that list's contribution: (vector#3 +0.0159, bm25#1 +0.0164)."""
    if not hit.explain:
        return ""
    shown = [f"{name}#{part.rank} +{part.contribution:.4f}" for name, part in hit.explain.items() if part.rank]
    return f"  ({', '.join(shown)})" if shown else ""


def format_result(result: SearchResult) -> str:
    lines = [f"mode={result.mode}  {len(result.hits)} hits  {result.took_ms:.1f} ms"]
    for rank, hit in enumerate(result.hits, start=1):
        lines.append(f"{rank:>2}. [{hit.id[:8]}] {_fit(_label(hit), 90).rstrip()}{_why(hit)}")
    return "\n".join(lines)


def format_comparison(comparison: Comparison) -> str:
    """The modes in columns, then overlap@k, the chunks only one mode found and rank moves."""
    modes = comparison.modes
    lines = [f"query: {comparison.query}   k={comparison.k}", ""]
    lines.append("    " + " | ".join(_fit(f"{m} ({comparison.results[m].took_ms:.0f} ms)", _COLUMN) for m in modes))
    for row in range(comparison.k):
        cells = []
        for mode in modes:
            hits = comparison.results[mode].hits
            cells.append(_fit(f"[{hits[row].id[:6]}] {_label(hits[row])}" if row < len(hits) else "", _COLUMN))
        if any(cell.strip() for cell in cells):
            lines.append(f"{row + 1:>2}. " + " | ".join(cells))
    lines.append("")
    for overlap in comparison.overlaps:
        a, b = overlap.modes
        lines.append(f"overlap@{comparison.k} {a}/{b}: {overlap.overlap_at_k:.2f} ({len(overlap.shared)} shared)")
    for mode, ids in comparison.only.items():
        lines.append(f"only {mode}: {', '.join(i[:6] for i in ids) or '-'}")
    moved = [difference for difference in comparison.ranks if difference.spread > 0]
    if moved:
        lines.append("rank differences:")
        for difference in moved:
            ranks = ", ".join(f"{m}#{r if r is not None else '-'}" for m, r in difference.ranks.items())
            lines.append(f"  [{difference.id[:6]}] {ranks} (spread {difference.spread})")
    return "\n".join(lines)


def _modes(value: str) -> list[Mode]:
    try:
        modes = [Mode.from_str(m.strip()) for m in value.split(",") if m.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if len(set(modes)) < 2:
        raise argparse.ArgumentTypeError("--compare needs at least two distinct modes, e.g. vector,hybrid")
    return modes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rag-search", description=__doc__.splitlines()[0])
    parser.add_argument("query")
    parser.add_argument("--mode", choices=[m.value for m in Mode], default=Mode.HYBRID.value)
    parser.add_argument("--compare", type=_modes, metavar="MODE,MODE[,...]", help="e.g. vector,hybrid")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--index", help="knowledge-base alias (default: ES_INDEX)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.k < 1:
        parser.error("--k must be at least 1")

    settings = Settings()
    index = args.index or settings.es_index
    es = create_client(settings)
    try:
        retriever = build_retriever(settings, es, load_embedder(settings.embedder, settings))
        retriever.tokenizer.query_terms("预热")  # load jieba's dictionary before anything is timed
        if args.compare:
            result: SearchResult | Comparison = retriever.compare(Scope.whole(index), args.query, args.k, args.compare)
        else:
            result = retriever.search(Scope.whole(index), args.query, args.mode, args.k)
    except (IndexNotFoundError, EmbedderMismatchError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        es.close()
    if args.json:
        print(json.dumps(result.model_dump(mode="json"), ensure_ascii=False, indent=2))
    elif isinstance(result, Comparison):
        print(format_comparison(result))
    else:
        print(format_result(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
