"""Answers without a model: question parts, quoted sentences, a sufficiency verdict in code.

When no chat model is configured or reachable (`ANSWER_MODE=auto`), or always with
`ANSWER_MODE=extractive`, the answer is built from the knowledge base's own sentences:

1. `split_question` cuts a compound question into parts on Chinese conjunctions and
   punctuation (the seeds' decomposition without a model); each part gets its own search.
2. `select` cuts the part's top passages into sentences (`core.chunking.split_sentences`) and
   scores each (with its neighbours) against the part: embedding similarity (the same
   embedder as retrieval, only for the windows that share the most terms with the part, to
   keep it affordable) plus keyword coverage of the part's query terms (the index's own
   query analysis: `core.text`, stop and question words dropped).
3. A part is answered when the quoted windows cover enough of its query terms and the best
   similarity clears a threshold, both tuned on dev questions (bench/extractive_eval.py).
4. `compose` writes only quotes and fixed template phrases: nothing is paraphrased or invented.

The service's extractive graph runs these steps node by node (with a web fallback between
selecting and composing); `answer_locally` runs them in one call over the knowledge base
alone, for bench/extractive_eval.py.
"""

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from itertools import accumulate

from pydantic import BaseModel

from core.access import Scope
from core.aliases import Expansion
from core.chunking import DEFAULT_PASSAGE_OVERLAP, sentence_end, sentence_start, split_sentences
from core.config import Settings
from core.embeddings import Embedder, cosine_similarities
from core.schema import Mode
from core.text import ChineseTokenizer
from retrieval.answer_kinds import AnswerKind, asked_attribute, asked_kind, before_attribute, holds, named_kind
from retrieval.claims import contradicted, unstated
from retrieval.conflicts import Conflict, describe
from retrieval.premises import (
    PREMISE_DENIED,
    Denial,
    Prohibited,
    figure_premise,
    forbidden_premise,
    unknown_codes,
    unquoted_names,
)
from retrieval.profiles import DEFAULT, TextProfile
from retrieval.results import Hit, interleave
from retrieval.retriever import Retriever

HEADER = "（抽取式回答：未使用大模型，以下句子均为资料原文摘录）"
NO_EVIDENCE = "资料中没有找到足以回答的原文"
CLOSEST = "最接近的原文（不足以确认）："
UNCONFIRMED = "无法从上下文确认"
FORBIDDEN = "资料明确提醒不要这样做"  # a part asking whether it may do what a source forbids

_SENTENCE_ENDS = "[？?！!；;。\n]+"
_CONJUNCTIONS = "另外|此外|并且|而且|以及|还有|同时|然后|再者|顺便问一下"
_SPLIT = re.compile(rf"({_SENTENCE_ENDS}|{_CONJUNCTIONS})")
_QUESTION_MARK = re.compile(
    r"什么|哪|谁|几|多[少重长大高久远]|怎|如何|为何|为什么|何人|何处|何时|何故|何以|吗|呢|是否|是不是|有没有|介绍|说说|讲讲|列出|给出"
)
_ELLIPTICAL = re.compile(r"(?:有|是|又|还|在|会|能|用)")  # no subject of its own: 有多重…
# A follow-up that opens with its question word names no subject either (多久更换一次？, 几点开门？).
_ASKS_FIRST = re.compile(r"(?:多[久长少大高重远]|几|什么时候|怎么|如何|为什么|为何|哪)")
_PRONOUN = re.compile(r"(?:他|她|它|其|该|此|这|那)")  # a subject named in the part before: 他的…
# 「赵阳、孙越、李通各自用什么兵器？」: two or more short subjects, then 各自/分别/各 and what each is asked
# (各自的兵器 → 赵阳的兵器). Not 「赵阳与孙夫人分别后…」: 分别 the verb (to part), followed by
# 后/时/之际/以来/多年/的.
_DISTRIBUTIVE = re.compile(
    r"^(?P<subjects>[^，,。？?；;]{2,40}?)(?:各自|分别(?!后|时|之|以|多年|的)|各(?!自))(?P<asked>[^，,。？?；;]+)$"
)
_SUBJECT_SEPARATORS = re.compile(r"、|和|与|及|跟|同")
_OTHER_PERSON = re.compile(r"其人|此人|那人|这人|彼|他|她")  # someone other than the subject named before
_LINK_REQUEST = re.compile(r"链接|网址|网页|url|link", re.IGNORECASE)
_TRIM = " \t\u3000，,、：:"
MIN_SENTENCE_CHARS = 4
_BLANK = " \t\u3000\n"


class Extract(BaseModel):
    """One quote (a chosen sentence with its neighbours) and where it comes from (`source_id`: a
    chunk id or a URL), with the figures that chose it."""

    text: str
    source_id: str
    # book order: (web?, chapter, chunk, retrieval rank, offset); web after local, and documents
    # without chapters in the order the search ranked them
    order: tuple[int, int, int, int, int]
    similarity: float
    coverage: float
    score: float


class PartAnswer(BaseModel):
    """The verdict on one question part: its quotes (book order) and why it is (not) answered."""

    part: str
    extracts: list[Extract]
    answered: bool
    best_similarity: float
    coverage: float
    wants_links: bool = False
    unknown: list[str] = []  # the part's terms that neither its sources nor the base mention (血型, 手机)
    strangers: list[str] = []  # people of `unknown` (李白, 孙悟空): a part naming one is not answered
    absent_attribute: str | None = None  # the attribute asked (CEO, 保修期) that no document mentions: not answered
    unsourced_attribute: str | None = None  # the attribute asked (妻子) that the base mentions, none of the sources
    wanted: str | None = None  # the kind of answer the part asks for, when it has a visible form (重量)
    wanted_found: bool = True  # whether a quote holds one (`retrieval.answer_kinds`)
    premise_denied: str | None = None  # the premise a source contradicts (`retrieval.premises`): the quote says so
    forbidden: str | None = None  # what the part asks leave to do and a source forbids: the quote says so
    unstated_claim: str | None = None  # the claim a confirmation question states (…对吧) that no source states
    vouched: bool = False  # a distributed part's own sentence holds the specific kind asked (`select`)
    headings_quoted: bool = False  # its base's text profile quotes headings (a novel's chapter titles)


@dataclass(frozen=True)
class Source:
    """A text sentences may be quoted from: a local passage, a web result, or a text the client sent
    with the question (`given`: a file attached in a chat client)."""

    id: str
    text: str
    chapter: int = 0
    chunk: int = 0
    web: bool = False
    given: bool = False
    # Where the search found the part in this text (`Hit.passages`: character offsets), best first.
    matched: tuple[tuple[int, int], ...] = ()
    # Every passage of this text with its cosine to the part, as Elasticsearch scored the stored
    # passage vectors (`score_passages`; a base with passage vectors): (start, end, cosine).
    passages: tuple[tuple[int, int, float], ...] = ()


@dataclass(frozen=True)
class Thresholds:
    """The verdict's thresholds and the selection's sizes (settings `EXTRACTIVE_*`)."""

    min_similarity: float
    min_coverage: float
    sentences: int  # best windows quoted per part (a window: a sentence and `context` neighbours each side)
    context: int
    candidates: int  # windows embedded per part at most, the best by keyword coverage first
    coverage_weight: float
    passage_weight: float  # a window's bonus for lying in a passage the search matched
    kind_weight: float  # a window's bonus for holding the kind of answer asked (a weight, a year…)
    max_gap: float  # how far below the best a further quote may score
    max_unknown_terms: int  # a part naming more terms that the base never mentions is not answered

    @classmethod
    def from_settings(cls, settings: Settings) -> "Thresholds":
        return cls(
            min_similarity=settings.extractive_min_similarity,
            min_coverage=settings.extractive_min_coverage,
            sentences=settings.extractive_sentences,
            context=settings.extractive_context,
            candidates=settings.extractive_candidates,
            coverage_weight=settings.extractive_coverage_weight,
            passage_weight=settings.extractive_passage_weight,
            kind_weight=settings.extractive_kind_weight,
            max_gap=settings.extractive_max_gap,
            max_unknown_terms=settings.extractive_max_unknown_terms,
        )


def local_sources(hits: Sequence[Hit]) -> list[Source]:
    """Retrieved passages as sources to quote, in book order keys (chapter, chunk), with the passages
    the search matched in them."""
    return [
        Source(
            hit.id, hit.text, hit.chapter or 0, hit.chunk_index, matched=tuple((p.start, p.end) for p in hit.passages)
        )
        for hit in hits
    ]


def score_passages(retriever: Retriever, scope: Scope, part: str, sources: list[Source]) -> list[Source]:
    """`sources` with every passage of each local one scored against `part` by Elasticsearch
    (`Retriever.scored_passages`): on a base with passage vectors the quotes are its passages, chosen
    without embedding them; web results, the client's texts and a base built before keep sentence windows."""
    local = [source.id for source in sources if not source.web]
    scored = retriever.scored_passages(scope, local, part)
    return [
        replace(source, passages=tuple((p.start, p.end, p.cosine) for p in scored[source.id]))
        if source.id in scored
        else source
        for source in sources
    ]


def link_answer(part: str, links: Sequence[tuple[str, str]]) -> PartAnswer:
    """A request for links is answered by the web results' (title, URL) pairs, and by nothing local."""
    extracts = [
        Extract(text=title, source_id=url, order=(1, 0, i, 0, 0), similarity=1.0, coverage=1.0, score=1.0)
        for i, (title, url) in enumerate(links)
    ]
    answered = bool(links)
    return PartAnswer(
        part=part, extracts=extracts, answered=answered, best_similarity=float(answered), coverage=1.0, wants_links=True
    )


def split_question(question: str, max_parts: int = 8) -> list[str]:
    """Parts of a compound question, in order, each searched on its own.

    Cuts at sentence ends and conjunctions, then glues back what cannot stand alone: a fragment
    that asks nothing joins the next part ("赵阳以及孙越在哪里结义？" stays whole), one without a
    subject (有多重…) stays with the part before. A part that opens with a pronoun (他…, 这把刀…)
    stays a part (it is judged on its own words) and is searched with the part before
    (`search_texts`). A request for links is a part of its own. Past `max_parts`, the rest
    joins the last part (nothing is dropped).
    """
    parts = [each for clause in _clauses(question) for each in distribute(clause)]
    if len(parts) > max_parts:
        parts = [*parts[: max_parts - 1], "；".join(parts[max_parts - 1 :])]
    return parts or [question.strip()]


def _clauses(question: str) -> list[str]:
    """The question cut at sentence ends and conjunctions, what cannot stand alone glued back
    (`split_question`), before a distributive clause becomes one part per subject."""
    pieces = _SPLIT.split(question)
    parts: list[str] = []
    pending, before = "", ""
    for piece, separator in zip(pieces[::2], [*pieces[1::2], ""], strict=True):
        text = piece.strip(_TRIM)
        if not text:
            before += separator
            continue
        text = pending + text
        if not (_QUESTION_MARK.search(text) or wants_links(text)):
            pending = text + separator
            continue
        if parts and _ELLIPTICAL.match(text) and not wants_links(text) and not wants_links(parts[-1]):
            parts[-1] += before + text
        else:
            parts.append(text)
        pending, before = "", separator
    if tail := pending.strip(_TRIM + "？?！!；;。\n"):
        if parts and not wants_links(parts[-1]):
            parts[-1] += before + tail
        else:
            parts.append(tail)
    return parts


def _subjects(clause: str) -> tuple[list[str], str] | None:
    """The subjects a distributive clause asks the same of, and what it asks (「赵阳、孙越、李通各自用什么
    兵器」 → [赵阳, 孙越, 李通], 用什么兵器); None for any other clause."""
    found = _DISTRIBUTIVE.match(clause)
    if found is None:
        return None
    subjects = [s.strip(_TRIM) for s in _SUBJECT_SEPARATORS.split(found["subjects"])]
    if len(subjects) < 2 or not all(1 < len(s) <= 8 for s in subjects):
        return None
    return subjects, found["asked"]


def distribute(part: str) -> list[str]:
    """A part asking the same of several subjects, one part per subject: 「赵阳、孙越、李通各自用什么
    兵器」 asks 赵阳用什么兵器, 孙越用什么兵器 and 李通用什么兵器, and each is answered by its own quote
    (the one sentence naming all three weapons is found for each). Anything else stays whole."""
    found = _subjects(part)
    return [f"{subject}{found[1]}" for subject in found[0]] if found else [part]


@dataclass(frozen=True)
class Distributed:
    """A part `distribute` made: the subject it asks about and the clause's other subjects (its quotes
    are what is said of it, not of them: `select`), and the clause as the user asked it (what it is
    searched with, `search_texts`)."""

    subject: str
    clause: str
    others: tuple[str, ...] = ()


def distributed(question: str) -> dict[str, Distributed]:
    """The parts of `question` that `distribute` made, each with its subject and clause."""
    found: dict[str, Distributed] = {}
    for clause in _clauses(question):
        if subjects := _subjects(clause):
            names, asked = subjects
            joint = "、".join(names) + asked
            found |= {
                part: Distributed(name, joint, tuple(other for other in names if other != name))
                for name, part in zip(names, distribute(clause), strict=True)
            }
    return found


def search_texts(parts: list[str], question: str) -> list[list[str]]:
    """What to search for each part of `question`, the hits of its texts interleaved (`interleave`).
    A part `distribute` made is searched alone and with its clause: 「赵阳、孙越、李通用什么兵器」 finds
    the one sentence naming the three weapons (赵阳用什么兵器 alone finds those in 孙夫人's room), and
    周平字什么 alone finds 「姓曹名操字孟德」, which the clause misses (dev, docs/workflow.md). A part
    opening with a pronoun carries the part before it, so 他的口号是什么 is searched with 张角是谁
    (without a model the pronoun is not resolved)."""
    together = distributed(question)
    return [
        [part, together[part].clause]
        if part in together
        else [f"{parts[i - 1]} {part}" if i and _PRONOUN.match(part) and not wants_links(parts[i - 1]) else part]
        for i, part in enumerate(parts)
    ]


def follow_up_terms(earlier: str, question: str, tokenizer: ChineseTokenizer, limit: int = 4) -> list[str]:
    """The earlier question's key terms that a follow-up leans on (他的…, 那李通呢, 还有…, 多久…): searched
    with it, since without a model nothing rewrites it. None when the question names its subject."""
    if not (_PRONOUN.search(question) or _ELLIPTICAL.match(question) or _ASKS_FIRST.match(question)):
        return []
    terms = [word for word in tokenizer.content_words(earlier) if len(word) > 1 and word not in question]
    return list(dict.fromkeys(terms))[:limit]


def wants_links(part: str) -> bool:
    return bool(_LINK_REQUEST.search(part))


# Question words jieba glues to a measure word (几天, 哪一年, 哪家, 多长时间, 打几折): the stop list
# drops 几, 哪, 多少 alone; glued, they are asked, never answered, so no quote covers them.
_ASKING = re.compile(
    r"^[打占有]?(?:(?:几|哪一?|多少)[个位名人匹头座间条次万千百员艘支把张本篇首部层路种样句回天年月日点岁号楼家门国块些折]"
    r"|多[长大久高重远宽深厚](?:时间)?)$"
)


def content_terms(part: str, tokenizer: ChineseTokenizer) -> list[str]:
    """The part's query terms, as retrieval analyses it (stop words dropped, sub-words added), less
    glued question words and their sub-words (哪一年, so not 一年)."""
    words = [word for word in tokenizer.content_words(part) if not _ASKING.match(word)]
    return list(dict.fromkeys(term for word in words for term in tokenizer.expand(word)))


def _covers(term: str, text: str) -> bool:
    """A term is covered when it appears as is (letters in any case: FlyBike, flybike), or (3+
    characters) when most of its bigrams do."""
    text = text.lower()
    if term in text:
        return True
    if len(term) < 3:
        return False
    bigrams = [term[i : i + 2] for i in range(len(term) - 1)]
    return sum(b in text for b in bigrams) * 2 > len(bigrams)


Names = Mapping[str, Sequence[str]]  # a query term → the other names the base gives it (孙越 → 伯远)


def other_names(expansions: Sequence[Expansion]) -> dict[str, list[str]]:
    """The query's alias expansions (`Retriever.expansions`: those the caller may see) by query term."""
    names: dict[str, list[str]] = {}
    for expansion in expansions:
        names.setdefault(expansion.term, []).append(expansion.expansion)
    return names


def _named(term: str, text: str, names: Names) -> bool:
    """The term, or another name of what it names, is in the text (孙越 asked, 伯远 written)."""
    return any(_covers(form, text) for form in (term, *names.get(term, ())))


def coverage(terms: Sequence[str], text: str, names: Names | None = None) -> float:
    if not terms:
        return 1.0
    return sum(_named(term, text, names or {}) for term in terms) / len(terms)


def rarity_coverage(terms: Sequence[str], texts: Sequence[str], names: Names) -> list[float]:
    """Each text's coverage of `terms`, a term weighted by how few of the texts hold it (log (n+1) /
    (held+½)): the subject's name, in every candidate, tells none apart; the term only the answering
    passage shares does (dev: quoting .596 → .635 against plain coverage, docs/workflow.md)."""
    if not terms:
        return [1.0] * len(texts)
    held = [[_named(term, text, names) for term in terms] for text in texts]
    weights = [math.log((len(texts) + 1) / (sum(row[i] for row in held) + 0.5)) for i in range(len(terms))]
    total = sum(weights)
    return [sum(w for w, hit in zip(weights, row, strict=True) if hit) / total for row in held]


def _span(pieces: list[str], position: int, context: int) -> tuple[int, int]:
    """Up to `context` sentences either side of `position`, never across a paragraph break."""
    first, last = position, position
    while first > 0 and position - first < context and not pieces[first - 1].endswith("\n"):
        first -= 1
    while last + 1 < len(pieces) and last - position < context and not pieces[last].endswith("\n"):
        last += 1
    return first, last


@dataclass(frozen=True)
class Window:
    """A quotable stretch of a source, verbatim: characters `start..end` (end exclusive), either a
    sentence with its neighbours or a passage of the index; whether it overlaps a passage the search
    matched (`Source.matched`), and its cosine to the part when Elasticsearch already gave it (a
    scored passage: nothing left to embed)."""

    source: Source
    start: int
    end: int
    text: str
    matched: bool = False
    similarity: float | None = None


def _sentence_windows(source: Source, context: int) -> list[Window]:
    """A window around every quotable sentence: the answer often sits next to the sentence that
    names the subject (说…, then what was said), so a sentence is scored and quoted with its neighbours."""
    pieces = split_sentences(source.text)
    offsets = [0, *accumulate(len(piece) for piece in pieces)]
    found = []
    for position, raw in enumerate(pieces):
        if len(raw.strip(_BLANK)) < MIN_SENTENCE_CHARS:
            continue
        first, last = _span(pieces, position, context)
        start, end = offsets[position], offsets[position + 1]
        matched = any(a < end and start < b for a, b in source.matched)
        text = source.text[offsets[first] : offsets[last + 1]].strip(_BLANK)
        found.append(Window(source, offsets[first], offsets[last + 1], text, matched))
    return found


# How far past its end a passage's window runs to end its last sentence or line: a passage cut mid-row
# (「| 满10年不满20年 |」) holds the row's subject, not its figure (dev: docs/workflow.md).
_END_REACH = 2 * DEFAULT_PASSAGE_OVERLAP


def _passage_windows(source: Source) -> list[Window]:
    """A source's scored passages (`Source.passages`), each from the start of its first sentence (an
    overlap may open one mid-word: 「水等级为5ATM…」) to the end of its last (or of its last line: a
    table's row), the too short left out."""
    found = []
    for start, cut, similarity in source.passages:
        begin = sentence_start(source.text, start, DEFAULT_PASSAGE_OVERLAP)
        end = sentence_end(source.text, cut, _END_REACH)
        text = source.text[begin:end].strip(_BLANK)
        if len(text) >= MIN_SENTENCE_CHARS:
            found.append(Window(source, begin, end, text, similarity=similarity))
    return found


def windows_of(sources: Sequence[Source], context: int) -> list[Window]:
    """The quotable windows of every source, each distinct text once: a source's scored passages when
    it has them, else a window around each of its sentences."""
    seen: set[str] = set()
    found = []
    for source in sources:
        for window in _passage_windows(source) or _sentence_windows(source, context):
            if window.text not in seen:
                seen.add(window.text)
                found.append(window)
    return found


def _merge(chosen: list[tuple[Window, Extract]]) -> list[Extract]:
    """Overlapping or adjacent windows of one source become one quote (the better figures kept)."""
    chosen = sorted(chosen, key=lambda pair: (pair[0].source.id, pair[0].start))
    merged: list[tuple[Window, Extract]] = []
    for window, extract in chosen:
        if merged and merged[-1][0].source.id == window.source.id and window.start <= merged[-1][0].end:
            previous, best = merged[-1]
            end = max(previous.end, window.end)
            text = window.source.text[previous.start : end].strip(_BLANK)
            better = best if best.score >= extract.score else extract
            merged[-1] = (Window(window.source, previous.start, end, text), better)
        else:
            merged.append((window, extract))
    return [
        extract.model_copy(update={"text": window.text, "order": (*extract.order[:4], window.start)})
        for window, extract in merged
    ]


def _similarities(part: str, windows: list[Window], embedder: Embedder) -> list[float]:
    """Each window's cosine to `part`: as Elasticsearch gave it, the others embedded (one call)."""
    todo = [window.text for window in windows if window.similarity is None]
    vectors = embedder.embed_documents(todo) if todo else None
    computed = iter(cosine_similarities(vectors, embedder.embed_query(part)) if vectors is not None else [])
    return [window.similarity if window.similarity is not None else float(next(computed)) for window in windows]


def _scored(
    part: str,
    terms: list[str],
    names: Names,
    kind: AnswerKind | None,
    candidates: list[Window],
    embedder: Embedder,
    limits: Thresholds,
) -> list[tuple[Window, Extract]]:
    """The shortlisted windows, best first: similarity to the part + weighted keyword coverage (+ the
    matched-passage prior, + a bonus for holding the `kind` of answer asked). Scored passages are all
    kept; of the other windows only those sharing the most terms with the part (or lying in a matched
    passage, or holding the kind) are embedded (ties: retrieval order)."""
    covered = rarity_coverage(terms, [window.text for window in candidates], names)
    prior = [
        limits.passage_weight * window.matched + limits.kind_weight * (kind is not None and holds(kind, [window.text]))
        for window in candidates
    ]
    preset = [i for i, window in enumerate(candidates) if window.similarity is not None]
    to_embed = [i for i, window in enumerate(candidates) if window.similarity is None]
    shortlist = preset + sorted(to_embed, key=lambda i: -(covered[i] + prior[i]))[: limits.candidates]
    similarities = _similarities(part, [candidates[i] for i in shortlist], embedder)
    ranks: dict[str, int] = {}
    for window in candidates:  # the sources' order: the search's ranking
        ranks.setdefault(window.source.id, len(ranks))
    scored = []
    for i, similarity in zip(shortlist, similarities, strict=True):
        window = candidates[i]
        source = window.source
        order = (int(source.web), source.chapter, source.chunk, ranks[source.id], window.start)
        score = similarity + limits.coverage_weight * covered[i] + prior[i]
        extract = Extract(
            text=window.text,
            source_id=window.source.id,
            order=order,
            similarity=similarity,
            coverage=covered[i],
            score=score,
        )
        scored.append((window, extract))
    return sorted(scored, key=lambda pair: -pair[1].score)


def select(
    part: str,
    sources: Sequence[Source],
    embedder: Embedder,
    tokenizer: ChineseTokenizer,
    limits: Thresholds,
    held: Callable[[Sequence[str]], set[str]] | None = None,
    names: Names | None = None,
    origin: Distributed | None = None,
    profile: TextProfile = DEFAULT,
) -> PartAnswer:
    """The best sentence windows for `part`, in book order, and whether they answer it. `held`
    tells which terms the whole base holds: a term of the part that neither the sources nor the
    base mention (血型, 高铁) is `unknown`, and too many unknown terms mean no answer. A part that
    asks for a kind of answer with a visible form (a weight, an age: `retrieval.answer_kinds`) is
    answered only when a quote holds one. A part `distribute` made (`origin`) quotes what is said of
    its subject, and its subject's own sentence holding the specific kind asked answers it (`_about`)."""
    terms = content_terms(part, tokenizer)
    candidates = windows_of(sources, limits.context)
    if not candidates:
        return PartAnswer(part=part, extracts=[], answered=False, best_similarity=0.0, coverage=0.0)
    kind = asked_kind(part, profile.kinds)
    names = names or {}
    scored = _scored(part, terms, names, kind, candidates, embedder, limits)
    kept = _quoted(scored, any(source.given for source in sources), limits)
    named = named_kind(asked_attribute(part), profile.kinds)  # 兵器, 价格: an attribute with a form
    # vouched: the subject's own sentence holds the specific kind asked (「李通造丈八点钢矛。」)
    kept, vouched = _about(kept, origin or _owned(part, tokenizer, kind or named), names, kind or named, limits)
    union = coverage(terms, "".join(e.text for e in kept), names)
    top_similarity = max(extract.similarity for _, extract in scored)
    unknown, absent, unsourced = _unmentioned(part, terms, sources, tokenizer, held, names, not (named and vouched))
    # people and codes (错误码E9) the base never mentions
    strangers = [*(t for t in unknown if tokenizer.is_person(t)), *unknown_codes(part, unknown)] if held else []
    wanted = next((k for k in (kind, named) if not holds(k, [e.text for e in kept])), None) or kind or named
    # A vouched part is answered however far the shared clause's cosine falls: one sentence about three
    # subjects is far from each. `wanted`: the kind asked, or the one named (兵器) its quotes lack.
    answered = (
        union >= limits.min_coverage
        and (top_similarity >= limits.min_similarity or vouched)
        and len(unknown) <= limits.max_unknown_terms
        and holds(wanted, [e.text for e in kept])
        and not strangers
        and absent is None
        and unsourced is None
    )
    return PartAnswer(
        part=part,
        extracts=kept,
        answered=answered,
        best_similarity=top_similarity,
        coverage=union,
        unknown=unknown,
        strangers=strangers,
        absent_attribute=absent,
        unsourced_attribute=unsourced,
        wanted=wanted.name if wanted else None,
        wanted_found=holds(wanted, [e.text for e in kept]),
        vouched=vouched,
        headings_quoted=profile.headings_quoted,
    )


def _owned(part: str, tokenizer: ChineseTokenizer, kind: AnswerKind | None) -> Distributed | None:
    """A part asking for an attribute of the specific kind of someone or something it names (「赵阳的兵器
    是什么」, 「X1的售价是多少」) as a part about that owner: its owner's own sentence holding the kind
    answers it, however far the whole part's cosine falls (`_about`)."""
    if kind is None or not kind.specific:
        return None
    owner = tokenizer.content_words(before_attribute(part))
    return Distributed(owner[-1], part) if owner else None


def _unmentioned(
    part: str,
    terms: list[str],
    sources: Sequence[Source],
    tokenizer: ChineseTokenizer,
    held: Callable[[Sequence[str]], set[str]] | None,
    names: Names,
    check_attribute: bool = True,
) -> tuple[list[str], str | None, str | None]:
    """The part's `terms` that neither its sources nor the base mention (血型, 高铁), and the attribute
    it names and asks for (蓝鲸科技的CEO是谁: CEO) when none of its sources mentions it: absent (the
    base never speaks of it either) or unsourced (the base does, of something else: 孙越的妻子叫什么名字,
    and the passages found about 孙越 never say 妻子). Either way no quote can answer: the question
    names what it wants, so this is a plausible detail, not a paraphrase (dev: docs/workflow.md).
    Not checked (`check_attribute` False) for an attribute naming a kind with a visible form (兵器,
    价格) that its owner's own sentence holds (`_owned`): 「…打造双股剑」 never says 兵器, 售价1999元
    never says 价格. A figure of that form said of something else (1.8米 of a deer for 赵鹏的身高) is
    no such sentence: the attribute is checked.
    The base is asked once, for both."""
    attribute = asked_attribute(part) if check_attribute else None
    wanted = [term for term in content_terms(attribute, tokenizer) if len(term) > 1] if attribute else []

    def unsaid(candidates: list[str]) -> list[str]:
        return [t for t in candidates if len(t) > 1 and not any(_named(t, source.text, names) for source in sources)]

    unknown, missing = unsaid(terms), unsaid(wanted)
    in_base = held(list(dict.fromkeys(unknown + missing))) if held is not None and (unknown or missing) else set()
    unknown = [term for term in unknown if term not in in_base]
    if not wanted or missing != wanted:
        return unknown, None, None
    absent = held is not None and not in_base & set(wanted)
    return unknown, attribute if absent else None, None if absent else attribute


def _quoted(scored: list[tuple[Window, Extract]], given: bool, limits: Thresholds) -> list[Extract]:
    """The quotes of the scored windows: the best, and the next ones sharing a term with the part and
    scoring within `max_gap` of it, overlapping windows merged, in book order."""
    floor = scored[0][1].score - limits.max_gap
    best = [
        pair
        for rank, pair in enumerate(scored[: limits.sentences])
        if rank == 0 or (pair[1].coverage > 0 and pair[1].score >= floor)
    ]
    if not given:
        return sorted(_merge(best), key=lambda e: e.order)
    # The client's text (`given`) competes with the base on relevance: quotes best first, and no quote
    # that could not answer on its own (an unrelated passage of the base) pads the best one.
    best = [pair for rank, pair in enumerate(best) if rank == 0 or pair[1].similarity >= limits.min_similarity]
    return sorted(_merge(best), key=lambda e: -e.score)


def _about(
    extracts: list[Extract], origin: Distributed | None, names: Names, kind: AnswerKind | None, limits: Thresholds
) -> tuple[list[Extract], bool]:
    """A distributed or owned part's (`_owned`) quotes cut to their sentences that name its subject and hold the specific
    kind asked, each quoted on its own (赵阳用什么兵器: 「子昂谢别二客，便命良匠打造双股剑。」, not the
    sentence of all three weapons three times), the `limits.sentences` best: such a sentence answers the part
    (True). Otherwise its quotes less those about another subject of the clause and not its own
    (高血糖有什么症状: not 「低血糖是指…」), all of them when that leaves none: a sentence naming
    someone proves less (in 「子昂看其人：身长九尺」 the height is the other man's)."""
    if origin is None:
        return extracts, False
    subject = origin.subject
    if kind is not None and kind.specific:
        sentences = {
            text: extract
            for extract in extracts
            for sentence in split_sentences(extract.text)
            if len(text := sentence.strip(_BLANK)) >= MIN_SENTENCE_CHARS and _said_of(subject, text, names, kind)
        }
        best = sorted(sentences.items(), key=lambda pair: -pair[1].score)[: limits.sentences]
        if best:
            return sorted((e.model_copy(update={"text": text}) for text, e in best), key=lambda e: e.order), True
    own = [
        extract
        for extract in extracts
        if _named(subject, extract.text, names)
        or not any(_named(other, extract.text, names) for other in origin.others)
    ]
    return own or extracts, False


def _said_of(subject: str, text: str, names: Names, kind: AnswerKind) -> bool:
    """`text` names `subject` (or another name of it) and holds an answer of `kind`, with no other
    person referred to between the two (「子昂回视其人，身长八尺」 is 其人's height, not 子昂's)."""
    found = kind.holds.search(text)
    if found is None:
        return False
    for form in (subject, *names.get(subject, ())):
        at = text.find(form)
        first, last = sorted((at, found.start()))
        if at >= 0 and not _OTHER_PERSON.search(text[first:last]):
            return True
    return False


def deny_premise(
    answer: PartAnswer,
    sources: Sequence[Source],
    names: Names,
    tokenizer: ChineseTokenizer,
    profile: TextProfile = DEFAULT,
) -> PartAnswer:
    """`answer`, unless a sentence of `sources` (the part's every hit, best first) contradicts what its
    part takes for granted (`retrieval.premises`, `retrieval.claims`, and the base's text profile's own
    check): then that sentence is the part's only quote, and the part is not answered. A part asking
    whether it may do what a source forbids is answered by the prohibition, quoted first (`forbidden`).
    A part quoting a name no hit holds, or asking to confirm a claim (…对吧) no source states, is not
    answered (`strangers`, `unstated_claim`)."""
    texts = [(s.id, s.text) for s in sources]
    part = answer.part
    denied: Denial | None = next((d for check in profile.premises if (d := check(part, texts, names, tokenizer))), None)
    denied = (
        denied
        or figure_premise(part, texts, tokenizer, profile.units)
        or forbidden_premise(part, texts, tokenizer)
        or contradicted(part, texts)
    )
    if denied is None and (missing := unquoted_names(part, texts)):
        return answer.model_copy(update={"answered": False, "strangers": [*answer.strangers, *missing]})
    if denied is None:
        claim = unstated(part, texts, profile.units)
        return answer.model_copy(update={"answered": False, "unstated_claim": claim}) if claim else answer
    quote = Extract(
        text=denied.sentence, source_id=denied.source_id, order=(0, 0, 0, 0, 0), similarity=0.0, coverage=0.0, score=0.0
    )
    if isinstance(denied, Prohibited) and denied.asks_leave:
        others = [extract for extract in answer.extracts if denied.sentence not in extract.text]
        return answer.model_copy(
            update={"extracts": [quote, *others[:1]], "answered": True, "forbidden": denied.clause}
        )
    return answer.model_copy(update={"extracts": [quote], "answered": False, "premise_denied": denied.clause})


def lacks(part: PartAnswer) -> str | None:
    """Why a part is not answered, beyond its figures: it names someone, or asks for an attribute, the
    base never mentions, or asks for an attribute its sources never mention, or its quotes hold no
    answer of the kind it asks for."""
    unmentioned = [*part.strangers, *([part.absent_attribute] if part.absent_attribute else [])]
    if unmentioned:
        return f"资料中没有提到{'、'.join(unmentioned)}"
    if part.unsourced_attribute:
        return f"找到的原文没有提到所问的{part.unsourced_attribute}"
    if part.unstated_claim:
        return f"资料原文没有这样说（「{part.unstated_claim}」）"
    return None if part.wanted_found else f"所引原文没有给出所问的{part.wanted}"


@dataclass(frozen=True)
class Quoted:
    """What `compose` needs to know of a quoted source: its number, and its URL for web results."""

    number: int
    url: str | None = None
    title: str = ""


# A heading: a short line with no punctuation of a sentence (「三、低血糖的处理」, 「## 保修」). Never a quote.
_HEADING = re.compile(r"^[^。！？!?；;，,：:]{1,30}$")
_TABLE_ROW = re.compile(r"^\|.*\|$")  # a Markdown table's row: 「| 锂电池 | 1年 |」, as short as a heading
_TABLE_RULE = re.compile(r"^\|[\s:|-]*\|$")  # the line under a table's header: 「|---|---|」


def is_heading(line: str) -> bool:
    """Whether a line of a source is a heading (or a table's rule), not a sentence that could be quoted.
    A table's row is quoted: 「| 锂电池 | 1年 |」 answers 锂电池保修多久."""
    text = line.strip(_BLANK)
    if _TABLE_ROW.match(text):
        return bool(_TABLE_RULE.match(text))
    return bool(_HEADING.match(text))


def compose(
    parts: Sequence[PartAnswer],
    sources: dict[str, Quoted],
    why_not: Sequence[str],
    notes: Sequence[str] = (),
    disagreements: Sequence[Conflict] = (),
) -> str:
    """The answer: the header and `notes` (how the question was searched), then per part what answers
    first: its quotes `「…」[n]` (web ones with their URL); or, for a part not answered, 「无法从上下文确认：…」
    and why, then the sentence denying its premise or at most one closest quote; then the sources that
    disagree (`disagreements`, each side quoted). Only quotes and fixed phrases; a heading is never quoted."""
    lines = [HEADER, *notes]
    numbered = len(parts) > 1
    web = [quoted for quoted in sources.values() if quoted.url]
    for index, part in enumerate(parts, start=1):
        if numbered:
            lines.append(f"{index}. {part.part}")
        if part.wants_links:
            lines += [f"「{quoted.title}」{quoted.url}[{quoted.number}]" for quoted in web]
            continue
        extracts = part.extracts
        if not part.answered:
            lines.append(_unconfirmed(part, why_not))
            if part.premise_denied:
                lines.append(f"{PREMISE_DENIED}（问题假定「{part.premise_denied}」），资料原文：")
            elif extracts := _closest(extracts, part.headings_quoted):
                lines.append(CLOSEST)
        elif part.forbidden:
            lines.append(f"{FORBIDDEN}（「{part.forbidden}」），资料原文：")
        for extract in extracts:
            lines += _quote_lines(extract, sources[extract.source_id], part.headings_quoted)
    if disagreements:
        lines.append(describe(disagreements))
    return "\n".join(lines)


def _unconfirmed(part: PartAnswer, why_not: Sequence[str]) -> str:
    """「无法从上下文确认：<part>（why）。」"""
    denied = [PREMISE_DENIED] if part.premise_denied else []
    lacking = [reason] if (reason := lacks(part)) else []
    return f"{UNCONFIRMED}：{part.part}（{'；'.join([NO_EVIDENCE, *denied, *lacking, *why_not])}）。"


def _closest(extracts: Sequence[Extract], headings: bool = False) -> list[Extract]:
    """The one best-scoring quote that is more than a heading (unless `headings` are quoted), if any."""
    quotable = [
        e
        for e in extracts
        if headings or not all(is_heading(line) for line in e.text.split("\n") if line.strip(_BLANK))
    ]
    return sorted(quotable, key=lambda e: -e.score)[:1]


def quoted_paragraphs(extract: Extract, headings: bool = False) -> list[str]:
    """What an answer quotes of `extract`: its paragraphs (a passage may run over a paragraph break), its
    headings left out (unless `headings` are quoted: a text profile's whose headings say what happens)."""
    paragraphs = (line.strip(_BLANK) for line in extract.text.split("\n"))
    kept = [paragraph for paragraph in paragraphs if paragraph and (headings or not is_heading(paragraph))]
    return kept or [extract.text.strip(_BLANK)]


def _quote_lines(extract: Extract, quoted: Quoted, headings: bool = False) -> list[str]:
    """A quote's lines, each cited."""
    link = f"（{quoted.url}）" if quoted.url else ""
    return [f"「{paragraph}」[{quoted.number}]{link}" for paragraph in quoted_paragraphs(extract, headings)]


def quoted_ids(parts: Sequence[PartAnswer]) -> list[str]:
    """The ids of the quoted sources, in the order of their first quote: their citation numbers."""
    return list(dict.fromkeys(extract.source_id for part in parts for extract in part.extracts))


@dataclass(frozen=True)
class LocalAnswer:
    answer: str
    parts: list[PartAnswer]


def answer_locally(
    retriever: Retriever,
    scope: Scope,
    question: str,
    *,
    mode: Mode,
    k: int,
    max_parts: int,
    passages: int,
    limits: Thresholds,
    profile: TextProfile | None = None,
) -> LocalAnswer:
    """The extractive answer from the knowledge base alone: the steps of the service's extractive
    graph with web search off, in one call (each part searched `k` deep, its top `passages` quoted), with
    the base's text profile unless `profile` is given."""
    parts = split_question(question, max_parts)
    tokenizer = retriever.index_tokenizer(scope)
    profile = profile or retriever.text_profile(scope)
    origins = distributed(question)
    answers = []
    for part, texts in zip(parts, search_texts(parts, question), strict=True):
        if wants_links(part):
            answers.append(link_answer(part, []))
            continue
        every = local_sources(interleave([retriever.search(scope, text, mode, k).hits for text in texts], k))
        held = partial(retriever.terms_held, scope)
        origin = origins.get(part)
        sources = score_passages(retriever, scope, part, every[:passages])
        names = other_names(retriever.expansions(scope, part))
        selected = select(part, sources, retriever.embedder, tokenizer, limits, held, names, origin, profile)
        answers.append(deny_premise(selected, every, names, tokenizer, profile))
    numbers = {source_id: Quoted(number) for number, source_id in enumerate(quoted_ids(answers), start=1)}
    return LocalAnswer(compose(answers, numbers, []), answers)
