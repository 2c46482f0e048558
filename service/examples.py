"""Questions a base can answer: the page's examples and a chat client's follow-up suggestions, from one source.

First the base's own question set: only the questions whose evidence is in what the caller may read
(a question about a document that is not in the base is never offered), never a model-drafted one.
Without a set the caller may see, questions made from the documents' headings (a chapter's title, a
document's title), each kept only when a search for it finds its own document first. Never a piece of
a sentence, never a pair of names: every example is a whole question someone wrote, or asks about a
heading the base holds.
"""

from typing import Literal

from elasticsearch import Elasticsearch
from pydantic import BaseModel, Field

from core.reader import Reader
from core.text import bigram_terms
from evaluation.questions import base_corpus, resolve
from evaluation.store import load_questions
from retrieval.retriever import Retriever
from service.documents import DocumentInfo, list_documents
from service.kbs import BaseAccess

MAX_EXAMPLES = 8
_HEADINGS_READ = 40  # documents whose headings are tried (each costs one search)


class Examples(BaseModel):
    kb: str
    source: Literal["questions", "headings", "none"] = Field(
        description="the base's question set, its documents' headings, or nothing to offer"
    )
    questions: list[str]


def _from_question_set(es: Elasticsearch, index: str, base: BaseAccess) -> list[str]:
    stored = load_questions(es, index, base.kb)
    if stored is None or not base.caller.sees_work_of(base.kb, stored.owner):
        return []
    ready, _ = resolve(stored.parsed, base_corpus(Reader(es, base.scope)))
    return list(dict.fromkeys(q.text for q in ready if not q.generated))


def heading_question(document: DocumentInfo) -> str:
    """A chapter asks about its title's first clause (「宴桃园豪杰三结义」), a document about its title."""
    if document.chapter_title:
        return f"「{document.chapter_title.split()[0]}」讲的是什么？"
    title = (document.title or "").strip()
    return f"《{title}》主要讲了什么？" if title else ""


def _from_headings(es: Elasticsearch, retriever: Retriever, base: BaseAccess) -> list[str]:
    found = []
    for document in list_documents(Reader(es, base.scope), _HEADINGS_READ, None).documents:
        question = heading_question(document)
        if not question:
            continue
        hits = retriever.search(base.scope, question, k=1).hits
        if hits and hits[0].doc_id == document.doc_id:
            found.append(question)
        if len(found) >= MAX_EXAMPLES:
            break
    return found


def _closeness(question: str, about: str) -> float:
    """How much of the question's character pairs the conversation shares (a follow-up stays on topic)."""
    pairs = set(bigram_terms(question))
    return len(pairs & set(bigram_terms(about))) / len(pairs) if pairs else 0.0


def example_questions(
    es: Elasticsearch,
    questions_index: str,
    retriever: Retriever,
    base: BaseAccess,
    about: str = "",
    asked: frozenset[str] = frozenset(),
    count: int = 4,
) -> Examples:
    """`count` questions the base can answer, those closest to `about` first, none of `asked`."""
    source: Literal["questions", "headings", "none"] = "questions"
    found = _from_question_set(es, questions_index, base)
    if not found:
        source, found = "headings", _from_headings(es, retriever, base)
    found = [question for question in found if question not in asked]
    if about:
        found = sorted(found, key=lambda question: -_closeness(question, about))
    return Examples(kb=base.kb, source=source if found else "none", questions=found[:count])
