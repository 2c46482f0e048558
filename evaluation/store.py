"""A base's question set, kept in Elasticsearch: the JSONL text as uploaded, one document per base
in `index`, so it survives a restart and an evaluation reads exactly what was uploaded.

It is checked whole before it is stored (`parse_questions`): its bad lines are reported, but a
line nested past the JSON parser's limit (no question line is) refuses the set
(`UnreadableQuestions`), which is then never kept in place of the last one.
"""

from dataclasses import dataclass
from datetime import UTC, datetime

from elasticsearch import Elasticsearch, NotFoundError

from evaluation.questions import QuestionSet, parse_questions

# `QUESTIONS_INDEX` (Settings.questions_index) is not a knowledge base: it has no `_meta.embedder`,
# so `core.kbs.list_kb_names` skips it.


@dataclass(frozen=True)
class StoredQuestions:
    """The set as uploaded, with who uploaded it: its lines may quote documents only they may read."""

    kb: str
    text: str
    uploaded_at: str
    owner: str = ""

    @property
    def parsed(self) -> QuestionSet:
        return parse_questions(self.text.splitlines())


class UnreadableQuestions(ValueError):
    """A question set with a line nested past the JSON parser's limit: hostile input, refused whole."""

    def __init__(self, parsed: QuestionSet) -> None:
        lines = ", ".join(map(str, parsed.too_deep[:5]))
        super().__init__(f"line {lines}: JSON nested deeper than 200 levels, which no question line is: nothing stored")


def save_questions(es: Elasticsearch, index: str, kb: str, text: str, owner: str) -> StoredQuestions:
    """Keep `text` as the base's question set (replacing the last one), uploaded by `owner`; a set
    with a line nested too deep is `UnreadableQuestions`, and nothing is stored."""
    parsed = parse_questions(text.splitlines())
    if parsed.too_deep:
        raise UnreadableQuestions(parsed)
    if not es.indices.exists(index=index):
        es.options(ignore_status=400).indices.create(  # 400: another request created it first
            index=index,
            mappings={"dynamic": False, "properties": {"kb": {"type": "keyword"}, "uploaded_at": {"type": "date"}}},
            settings={"number_of_shards": 1, "auto_expand_replicas": "0-1"},
        )
    stored = StoredQuestions(kb, text, datetime.now(UTC).isoformat(), owner)
    # Read back by id only (`load_questions`), which Elasticsearch answers in real time: no refresh to wait for.
    es.index(index=index, id=kb, document=stored.__dict__)
    return stored


def load_questions(es: Elasticsearch, index: str, kb: str) -> StoredQuestions | None:
    """The base's uploaded question set (None: nothing uploaded)."""
    try:
        source = es.get(index=index, id=kb)["_source"]
    except NotFoundError:
        return None
    return StoredQuestions(source["kb"], source["text"], source["uploaded_at"], source.get("owner", ""))
