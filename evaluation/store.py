"""A base's question set, kept in Elasticsearch: the JSONL text as uploaded, one document per base
in `index`, so it survives a restart and an evaluation reads exactly what was uploaded.

It is checked whole before it is stored (`parse_questions`): a set that cannot be read is refused,
never kept.
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


def save_questions(es: Elasticsearch, index: str, kb: str, text: str, owner: str) -> StoredQuestions:
    """Keep `text` as the base's question set (replacing the last one), uploaded by `owner`."""
    if not es.indices.exists(index=index):
        es.options(ignore_status=400).indices.create(  # 400: another request created it first
            index=index,
            mappings={"dynamic": False, "properties": {"kb": {"type": "keyword"}, "uploaded_at": {"type": "date"}}},
            settings={"number_of_shards": 1, "auto_expand_replicas": "0-1"},
        )
    stored = StoredQuestions(kb, text, datetime.now(UTC).isoformat(), owner)
    es.index(index=index, id=kb, document=stored.__dict__, refresh="wait_for")
    return stored


def load_questions(es: Elasticsearch, index: str, kb: str) -> StoredQuestions | None:
    """The base's uploaded question set (None: nothing uploaded)."""
    try:
        source = es.get(index=index, id=kb)["_source"]
    except NotFoundError:
        return None
    return StoredQuestions(source["kb"], source["text"], source["uploaded_at"], source.get("owner", ""))
