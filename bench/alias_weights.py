"""Choose ALIAS_WEIGHT on dev from the keyword lists alone: no vectors, so no embedding.

    python -m bench.alias_weights --weights 0,0.25,0.5,1

The book is indexed once by the indexing job with a constant stub embedder (index
`bench-aliases-sanguo`, its aliases mined as the service mines them), then every question runs
through the three keyword lists (`Retriever.ranked_lists`) at each weight, and the lists are
fused as hybrid fuses them (z-score, depth 10). Reports R@5 and MRR@10 of each list and of the
fusion per split, and the fusion's R@5 on the questions naming a person by 字 or title
(`bench.retrieval_eval.person_questions`). The hybrid figures with aliases on and off are in
`bench.retrieval_eval`'s vector ablation.
"""

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.datasets import load_named
from bench.retrieval_eval import RESULTS, machine, person_questions
from core.access import ALL_DOCUMENTS, Scope
from core.config import Settings
from core.schema import Mode
from core.store import concrete_indices, create_client, read_index_meta
from core.text import get_tokenizer
from evaluation.metrics import fused_ids, mean_metrics, query_metrics
from indexing.options import Chunking, IndexOptions, RunScope
from indexing.pipeline import index_documents
from retrieval.retriever import RetrievalParams, Retriever

KEYWORD_LISTS = (Mode.BM25, Mode.BIGRAM, Mode.STANDARD)
FUSION = {"method": "zscore", "k": 60, "lists": KEYWORD_LISTS, "vector_weight": 1.0, "depth": 10}


class StubEmbedder:
    """The same vector for every text: the keyword lists need none, the index's mapping does."""

    name, dim = "stub", 4

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), self.dim), dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return np.ones(self.dim, dtype=np.float32)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default="0,0.25,0.5,1")
    parser.add_argument("--out", type=Path, default=RESULTS / "alias_weights.json")
    args = parser.parse_args(argv)
    settings = Settings()
    es, stub = create_client(settings), StubEmbedder()
    dataset, alias = load_named("sanguo"), "bench-aliases-sanguo"
    if not concrete_indices(es, alias):
        chunking = Chunking(dataset.chunk_size, dataset.chunk_overlap)
        options = replace(IndexOptions.from_settings(settings), chunking=chunking)
        index_documents(
            es, dataset.documents, alias=alias, visible=ALL_DOCUMENTS, embedder=stub,
            tokenizer=get_tokenizer(None), options=options, scope=RunScope(recreate=True),
        )  # fmt: skip
    person = person_questions(dataset, read_index_meta(es, alias).aliases)
    report: dict = {"machine": machine(es, stub), "aliases": len(read_index_meta(es, alias).aliases), "rows": []}
    for weight in map(float, args.weights.split(",")):
        params = replace(RetrievalParams.from_settings(settings), alias_weight=weight)
        retriever = Retriever(es, stub, get_tokenizer(None), params)
        for split in ("dev", "test"):
            questions = [q for q in dataset.queries if q.split == split]
            lists = {q.id: retriever.ranked_lists(Scope.whole(alias), q.text, KEYWORD_LISTS, 50) for q in questions}
            row: dict = {"weight": weight, "split": split}
            for name in [*KEYWORD_LISTS, "fusion"]:
                found = [
                    query_metrics(
                        fused_ids(lists[q.id], FUSION) if name == "fusion" else [i for i, _ in lists[q.id][name]],
                        q.relevant,
                    )
                    for q in questions
                ]
                row[name] = mean_metrics(found)
                if name == "fusion":
                    named = [m for m, q in zip(found, questions, strict=True) if q.id in person]
                    row["fusion, person"] = mean_metrics(named) | {"n": len(named)}
            report["rows"].append(row)
            print(json.dumps(row, ensure_ascii=False), file=sys.stderr)
    args.out.write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
