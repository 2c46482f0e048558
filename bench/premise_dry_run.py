"""The general premise checks alone, per corpus, with every document as the hits: how many false premises
they catch, how many answerable questions they would deny (no search, no verdict: an upper bound of
what `retrieval.premises` can do once retrieval brings the right passage).

    python -m bench.premise_dry_run [--data bench/data] [--split dev] [--corpora diabetes policy doorlock] [-v]

Reads <data>/<corpus>/*.md (the documents) and <data>/<corpus>_questions.jsonl (`kind`, `trap`,
`split`); a code or quoted name the corpus never mentions (错误码E9, “30-30法则”) and a claim asked to be
confirmed (…对吧) that no sentence states (`retrieval.claims`) count as caught, as the extractive verdict
admits them; an answerable question refused so counts as denied. Results: bench/results/premises_general.md.
"""

import argparse
import json
from pathlib import Path

from bench.datasets import BENCH_DATA
from core.text import get_tokenizer
from retrieval import claims, premises


def dry_run(folder: Path, questions: Path, split: str, verbose: bool) -> tuple[int, int, int, int]:
    """(false premises caught, false premises, answerable denied, answerable) for one corpus."""
    tokenizer = get_tokenizer()
    texts = [(path.name, path.read_text(encoding="utf-8")) for path in sorted(folder.iterdir())]
    whole = "\n".join(text for _, text in texts).lower()
    caught = traps = denied = answerable = 0
    for line in questions.read_text(encoding="utf-8").splitlines():
        question = json.loads(line)
        if question["split"] != split:
            continue
        text = question["question"]
        found = (
            premises.figure_premise(text, texts, tokenizer)
            or premises.forbidden_premise(text, texts, tokenizer)
            or claims.contradicted(text, texts)
        )
        unknown = [code for code in premises.codes_of(text) if code.lower() not in whole]
        unknown += premises.unquoted_names(text, texts)
        unknown += [claim] if (claim := claims.unstated(text, texts)) and found is None else []
        if question.get("trap") == "false_premise":
            traps += 1
            caught += found is not None or bool(unknown)
            if verbose and found is None and not unknown:
                print(f"  missed: {text}")
        elif question["kind"] == "answerable":
            answerable += 1
            wrong = (found is not None and not getattr(found, "asks_leave", False)) or bool(unknown)
            denied += wrong
            if verbose and wrong:
                print(f"  denied: {text} | {found.sentence if found else unknown}")
    return caught, traps, denied, answerable


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.premise_dry_run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=BENCH_DATA)
    parser.add_argument("--split", default="dev", choices=("dev", "test"))
    parser.add_argument("--corpora", nargs="+", default=["diabetes", "policy", "doorlock"])
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    for corpus in args.corpora:
        caught, traps, denied, answerable = dry_run(
            args.data / corpus, args.data / f"{corpus}_questions.jsonl", args.split, args.verbose
        )
        print(f"{args.split} {corpus}: false premises caught {caught}/{traps}, answerable denied {denied}/{answerable}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
