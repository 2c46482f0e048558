"""The evaluation datasets as documents plus queries whose relevant chunk ids are known in advance.

Relevance is decided before anything is indexed: documents are chunked with the indexing
job's own `document_chunks`, so every chunk has the id the pipeline will give it and a hit
is relevant when its id is in the query's set. The rules themselves (evidence containment, a
document's chunks, the seeded split) are retrieval/questions.py's, which a knowledge base's own
question set follows too.

- `cmrc`: CMRC 2018 dev + trial; every paragraph is one document (and one chunk: paragraphs
  are at most 980 characters, so they are chunked with size 1000), every question a query,
  its own paragraph the relevant document.
- `sanguo`: 《三国演义》 by chapter, with bench/data/sanguo_questions.jsonl; a chunk is relevant
  when it contains the question's evidence string, whatever the chunk boundaries.
- `medical`: bench/data/medical_passages.jsonl and medical_queries.jsonl, look-alike passage
  pairs over 20 term pairs (高/低血糖, 甲亢/甲减, 左/右心衰, …), split dev/test by term pair.
- `handbook`: bench/data/handbook_corpus.jsonl (short made-up rules and manuals) and the answerable
  questions of handbook_questions.jsonl; a chunk is relevant when it holds the evidence.
- `diabetes`, `policy`, `doorlock` (`MODERN`): Markdown documents in bench/data/NAME/, read by the
  indexing job's own Markdown loader (headings become sections), with the answerable questions of
  bench/data/NAME_questions.jsonl (bench/data/README.md).
- `cmrc-small`: the first `CMRC_SMALL` paragraphs of CMRC 2018 dev and their questions: quick.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE
from core.documents import Document, document_chunks
from core.profiles import chapter_marks
from evaluation.questions import Corpus, split_of
from indexing.loaders import chapters_of, load_text

BENCH_DATA = Path(__file__).resolve().parent / "data"
CMRC_CHUNK_SIZE = 1000  # longer than any CMRC paragraph: one paragraph, one chunk
CMRC_SMALL = 80  # paragraphs of `cmrc-small`: Wikipedia prose beside the made-up corpora, indexed in a minute
MODERN = ("diabetes", "policy", "doorlock")  # modern Markdown corpora (bench/data/README.md)


DATA = Path(__file__).resolve().parents[1] / "data"  # the corpora the project carries (data/README.md)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The objects of a JSON-lines file (blank lines skipped)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def sanguo_book() -> Path:
    """《三国演义》 in data/: the demo corpus and the 三国 evaluation's book."""
    return DATA / "sanguo" / "sanguo_yanyi.txt"


@dataclass
class Query:
    id: str
    text: str
    relevant: set[str]  # chunk ids
    split: str = "test"  # "dev" (tune on it) or "test" (report on it)
    style: str = ""  # how the question was written: literal/paraphrase (三国), plain/colloquial (medical)


@dataclass
class Dataset:
    name: str
    documents: list[Document]
    queries: list[Query]
    chunk_size: int
    chunk_overlap: int
    chunks: dict[str, str] = field(default_factory=dict)  # chunk id -> text, as the pipeline will index them
    skipped: list[str] = field(default_factory=list)  # ids of questions left out: blank in the source
    prefix: str = "eval"  # of its indices' names: several checkouts share one Elasticsearch

    @property
    def alias(self) -> str:
        return f"{self.prefix}-{self.name}"


def corpus_of(documents: list[Document], chunk_size: int, chunk_overlap: int) -> Corpus:
    """The chunks of `documents` exactly as `indexing.pipeline` chunks and names them."""
    return Corpus(
        {
            chunk.id: (document.doc_id, chunk.text)
            for document in documents
            for chunk in document_chunks(document, chunk_size, chunk_overlap)
        }
    )


def cmrc_answers(root: Path | None = None) -> dict[str, str]:
    """Each CMRC 2018 question's first answer, verbatim (its span in the paragraph), by question id."""
    root = root or DATA / "cmrc2018"
    return {
        qa["id"]: qa["answers"][0]["text"]
        for split in ("dev", "trial")
        for article in json.loads((root / f"cmrc2018_{split}.json").read_text(encoding="utf-8"))["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
        if qa["answers"]
    }


def load_cmrc(root: Path | None = None, paragraphs_kept: int | None = None) -> Dataset:
    """All of CMRC 2018 dev + trial (or its first `paragraphs_kept` paragraphs: `cmrc-small`); a
    paragraph's questions are all dev or all test (seeded by its id)."""
    root = root or DATA / "cmrc2018"
    paragraphs = []
    for split in ("dev", "trial"):
        data = json.loads((root / f"cmrc2018_{split}.json").read_text(encoding="utf-8"))["data"]
        paragraphs += [paragraph for article in data for paragraph in article["paragraphs"]]
    paragraphs = paragraphs[:paragraphs_kept]
    documents = [Document(doc_id=p["id"], text=p["context"], source="cmrc2018") for p in paragraphs]
    corpus = corpus_of(documents, CMRC_CHUNK_SIZE, 0)
    questions = [(p["id"], qa) for p in paragraphs for qa in p["qas"]]
    queries = [Query(qa["id"], qa["question"], corpus.of_document(pid), split_of(None, pid)) for pid, qa in questions]
    blank = [query.id for query in queries if not query.text.strip()]  # two in the trial set
    kept = [query for query in queries if query.text.strip()]
    name = "cmrc" if paragraphs_kept is None else "cmrc-small"
    return Dataset(name, documents, kept, CMRC_CHUNK_SIZE, 0, corpus.texts, skipped=blank)


def _split_of(item: dict[str, str]) -> str:
    """The question's own `split` field; questions written before splits existed get a seeded one."""
    try:
        return split_of(item.get("split"), item["id"])
    except ValueError as err:
        raise ValueError(f"question {item['id']}: {err}") from None


def load_sanguo(
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    path: Path | None = None,
    questions: Path = BENCH_DATA / "sanguo_questions.jsonl",
) -> Dataset:
    path = path or sanguo_book()
    documents = chapters_of(load_text(path, path.name), chapter_marks("classical-novel"))  # 第N回
    corpus = corpus_of(documents, chunk_size, chunk_overlap)
    queries = []
    for item in read_jsonl(questions):
        relevant = corpus.containing(item["evidence"])
        if not relevant:
            raise ValueError(
                f"{questions}: evidence of {item['id']} is in no {chunk_size}-character chunk: {item['evidence']!r}"
            )
        queries.append(Query(item["id"], item["question"], relevant, _split_of(item), item.get("style", "")))
    return Dataset(f"sanguo-{chunk_size}", documents, queries, chunk_size, chunk_overlap, corpus.texts)


def load_medical(
    passages: Path = BENCH_DATA / "medical_passages.jsonl", queries: Path = BENCH_DATA / "medical_queries.jsonl"
) -> Dataset:
    documents = [
        Document(doc_id=i["id"], text=i["text"], source="medical", title=i["title"]) for i in read_jsonl(passages)
    ]
    corpus = corpus_of(documents, DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_OVERLAP)
    found = []
    for item in read_jsonl(queries):
        relevant = set().union(*(corpus.of_document(doc) for doc in item["relevant"]))
        found.append(Query(item["id"], item["question"], relevant, _split_of(item), item.get("style", "")))
    return Dataset("medical", documents, found, DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_OVERLAP, corpus.texts)


def handbook_documents() -> list[Document]:
    """bench/data/handbook_corpus.jsonl: one document per line."""
    return [
        Document(item["id"], item["text"], item["source"], title=item["title"])
        for item in read_jsonl(BENCH_DATA / "handbook_corpus.jsonl")
    ]


def modern_documents(name: str) -> list[Document]:
    """The Markdown files of bench/data/NAME/, as the indexing job loads them (sections from headings)."""
    return [doc for path in sorted((BENCH_DATA / name).glob("*.md")) for doc in load_text(path, path.name)]


def evidence_dataset(name: str, documents: list[Document], questions: Path, chunk_size: int, overlap: int) -> Dataset:
    """`documents` and the answerable questions of `questions`, relevant where their evidence is."""
    corpus = corpus_of(documents, chunk_size, overlap)
    queries = []
    for item in read_jsonl(questions):
        if item["kind"] != "answerable":
            continue
        relevant = corpus.containing(item["evidence"])
        if not relevant:
            raise ValueError(f"{questions}: evidence of {item['id']} is in no {chunk_size}-character chunk")
        queries.append(Query(item["id"], item["question"], relevant, _split_of(item), item.get("style", "")))
    return Dataset(name, documents, queries, chunk_size, overlap, corpus.texts)


def load_modern(name: str, chunk_size: int = DEFAULT_CHUNK_SIZE, overlap: int = DEFAULT_CHUNK_OVERLAP) -> Dataset:
    """A modern corpus: `handbook` (JSON lines) or one of `MODERN` (Markdown)."""
    documents = handbook_documents() if name == "handbook" else modern_documents(name)
    return evidence_dataset(name, documents, BENCH_DATA / f"{name}_questions.jsonl", chunk_size, overlap)


def load_named(name: str) -> Dataset:
    """A dataset by its command-line name: `cmrc` (all paragraphs), `cmrc-small`, `sanguo`, `medical`,
    `handbook` and the `MODERN` corpora."""
    if name == "cmrc":
        return load_cmrc()
    if name == "cmrc-small":
        return load_cmrc(paragraphs_kept=CMRC_SMALL)
    if name == "sanguo":
        return load_sanguo()
    if name == "medical":
        return load_medical()
    if name == "handbook" or name in MODERN:
        return load_modern(name)
    raise ValueError(
        f"unknown dataset {name!r}: use cmrc, cmrc-small, sanguo, medical, handbook or {', '.join(MODERN)}"
    )
