"""The conflict check without a model, on made-up pairs of sentences from two documents.

    python -m bench.conflict_pairs

bench/data/conflict_pairs.jsonl: `{batch, part, a, b, conflict}`, the pairs written in three batches
(docs/workflow.md, "Sources that disagree"); `conflict` says whether the two sentences disagree on
the part's point. Prints, per batch, the conflicts invented (reported where there is none) and
missed, and every pair the code gets wrong.
"""

from collections import Counter

from bench.datasets import BENCH_DATA, read_jsonl
from core.text import get_tokenizer
from retrieval.conflicts import Quote, figure_conflicts


def main() -> int:
    tokenizer = get_tokenizer()
    counts: Counter[tuple[int, str]] = Counter()
    for pair in read_jsonl(BENCH_DATA / "conflict_pairs.jsonl"):
        quotes = [Quote(pair["part"], "a", "a.txt", pair["a"]), Quote(pair["part"], "b", "b.txt", pair["b"])]
        found = bool(figure_conflicts(quotes, tokenizer))
        kind = "conflicts" if pair["conflict"] else "agrees or differs in subject"
        counts[(pair["batch"], kind)] += 1
        if found != pair["conflict"]:
            counts[(pair["batch"], "missed" if pair["conflict"] else "invented")] += 1
            print(f"{'missed' if pair['conflict'] else 'invented'}: {pair['part']} | {pair['a']} | {pair['b']}")
    for batch in sorted({b for b, _ in counts}):
        print(
            f"batch {batch}: invented {counts[(batch, 'invented')]} of {counts[(batch, 'agrees or differs in subject')]},"
            f" missed {counts[(batch, 'missed')]} of {counts[(batch, 'conflicts')]}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
