"""Sources that disagree on a number, a date or a day of the week, found in code (answers without a model).

The extractive answer quotes sentences from several sources for one question part. When two
quotes from different documents state a figure about the same thing and the figures differ
(5.5 千瓦 against 7.5 千瓦, 建安十三年 against 建安十二年, 2019年3月 against 2021年3月), the answer
must say so rather than quote one in silence. "About the same thing" is decided narrowly, so a
conflict is never invented where the sources agree or talk about different things:

- the figures have the same unit (年, 千瓦, 人, %, …) and, for a year under 100, the same era
  written before it (建安十三年 is not compared with 公元208年);
- each figure's clause (the text between punctuation marks around it, the figure removed) shares
  most of its character bigrams with the other's (`MIN_ANCHOR_OVERLAP`), the character next to
  each figure (what it measures: 功率, 生于, 卒于, fillers such as 为 skipped) is in the other's
  clause, and both
  sentences name one of the part's terms, and no model number sets them apart (X200, Y100);
- the clauses do not each name something the other does not (整机 against 电池: two things), and
  neither holds a figure of its own (工作满十年的员工…15天: another case);
- they come from different documents (one document's several figures are its own business).

With a model, the judgement finds conflicts of any kind (names, yes/no too): `service/graph`.
"""

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal

import cn2an
from pydantic import BaseModel, Field

from core.chunking import split_sentences
from core.text import ChineseTokenizer, bigram_terms
from retrieval.units import Unit, unit_pattern

Units = frozenset[tuple[str, Unit]]  # a text profile's own units, beside `retrieval.units.UNITS`

DISAGREE = "资料之间有出入"
CHECK_THE_ORIGINALS = "请对照原始资料核实，本回答不替资料做取舍"
# Where the documents date themselves, the newer version supersedes the older, by their own words.
SUPERSEDES = "按资料自身的日期，[{number}]（{date}）是较新的版本，取代较早的版本"

MIN_ANCHOR_OVERLAP = 0.5  # shared character bigrams / the smaller clause's
# Clauses this alike say one thing, whatever words the question used (本机充满约需90分钟 against 120分钟 for
# 「多长时间能充好」): no term of the part need be in them.
SAME_STATEMENT = 0.8

CN_DIGITS = "零〇一二两三四五六七八九十百千万亿"
_DATE = re.compile(
    r"(\d{4}|[〇零一二三四五六七八九]{4})年(\d{1,2}|[一二三四五六七八九十]{1,3})月(?:(\d{1,2}|[一二三四五六七八九十]{1,3})[日号])?"
)
# 3月31日 (顺延至次年3月31日): a day of the year, compared with another document's day of the year.
_MONTH_DAY = re.compile(r"(\d{1,2}|[一二三四五六七八九十]{1,3})月(\d{1,2}|[一二三四五六七八九十]{1,3})[日号]")
MONTH_DAY = "月日"
_DIGITS = re.compile(r"\d")
_NEGATIVE = re.compile(r"(?:零下|负|(?<![0-9A-Za-z.])[-－−])$")  # 是-25℃ too; not the 5-10 of a range
_BOUNDS = set("高低上下前后多少大小早晚长短")  # the side of a range a bound is on
# Between the two bounds of one range (低于0℃或高于50℃, 3至5天): the other bound is no condition of its own.
_RANGE_JOINT = re.compile(r"^[^，,；;。]{0,4}?(?:或|至|到|~|～|-|－|—|和|、)[^，,；;。]{0,4}$")
# A day of the week (每周一闭馆, 星期四, 礼拜天), not a count (每周一次: once a week).
_WEEKDAY = re.compile(r"(?:星期|礼拜|周)([一二三四五六日天])(?![次个遍回])")
WEEKDAY = "星期"
_WEEKDAY_NUMBER = {
    day: number for number, days in enumerate(("一", "二", "三", "四", "五", "六", "日天"), 1) for day in days
}
_CLAUSE_EDGE = re.compile(r"[，,；;。！!？?\n]")
_ERA_CHARS = 2
_CODE = re.compile(r"[A-Za-z]+-?\d[A-Za-z0-9-]*")  # model numbers: X200, GB-2760, iPhone15

_ASKED = re.compile(r"几|多少|哪|什么|何|谁|怎")  # a question word, and what sits right before it is asked
_FILLERS = "为是约有达共计在于的了仅只近逾超过不"  # 功率为5.5千瓦, 剂量不超过3克: what is measured is 功率, 剂量
_WORD_CHAR = re.compile(r"[\w\u4e00-\u9fff]")


@dataclass(frozen=True)
class Quote:
    """A quoted text of one question part and where it is from (`document`: what makes two sources
    different documents: a file, a URL, a client's source)."""

    part: str
    source_id: str
    document: str
    text: str
    # The whole text the quote is from (a chunk): which of the part's names it holds says what it is
    # about when the quote does not (a paragraph naming its plant once, then 生长于海拔100米…). The
    # quote itself when empty.
    context: str = ""


@dataclass(frozen=True)
class Figure:
    """A number or date stated in a quote, with what it is about."""

    quote: Quote
    sentence: str
    unit: str  # "年", "千瓦", …, "date" for a full date, `WEEKDAY` for a day of the week
    era: str  # the two characters before a year under 100 (建安); "" otherwise
    value: tuple[float, ...]
    clause: str  # the clause holding it, verbatim: what the source says
    anchor: frozenset[str]  # the clause's character bigrams, the figure removed (no tokenizer's whims)
    next_to: str  # the character next to the figure (before it, else after it): what it measures
    context: str  # the text the anchor is read from: the clause (or, when too short, the sentence) less the figure
    conditions: tuple[str, ...]  # the clause's other figures (工作满十年的员工…15天: 十年), sorted
    said: str  # the two characters after the figure in its clause (每周一闭馆: 闭馆): what a day is said to be
    lead: str = ""  # its clause before it, verbatim (血糖低于): the direction and what it is said of


@dataclass(frozen=True)
class FigureConflict:
    """One part's quotes from different documents that state different figures about one thing."""

    part: str
    figures: list[Figure]  # one per distinct value, in the order quoted


@cache
def _figure_pattern(extra: Units = frozenset()) -> re.Pattern[str]:
    """A number and its unit (`retrieval.units`, and a profile's `extra`)."""
    return re.compile(rf"(\d+(?:\.\d+)?|[{CN_DIGITS}]+)\s?({unit_pattern(extra)})")


def _number(text: str) -> float | None:
    try:
        return float(cn2an.cn2an(text, "smart"))
    except (ValueError, KeyError, IndexError):
        return None


def _bigrams(text: str) -> frozenset[str]:
    kept = "".join(_WORD_CHAR.findall(text))
    return frozenset(kept[i : i + 2] for i in range(len(kept) - 1))


def _figure(
    quote: Quote,
    sentence: str,
    span: tuple[int, int],
    unit: str,
    value: tuple[float, ...],
    extra: Units = frozenset(),
) -> Figure:
    """The figure at `span` of `sentence`, with its clause and the characters around it. A clause
    too short to say what it is about (卒于234年) is read with the rest of its sentence."""
    start, end = span
    edges = [m.start() for m in _CLAUSE_EDGE.finditer(sentence)]
    first = max((e + 1 for e in edges if e < start), default=0)
    last = min((e for e in edges if e >= end), default=len(sentence))
    before = "".join(_WORD_CHAR.findall(sentence[first:start]))
    after = "".join(_WORD_CHAR.findall(sentence[end:last]))
    context = f"{before}，{after}"  # apart: the words either side of the figure are not glued into one
    if len(_bigrams(context)) < 2:
        context = f"{sentence[:start]}，{sentence[end:]}"
    next_to = before.rstrip(_FILLERS)[-1:] or after[:1]
    clause = sentence[first:last]
    conditions = tuple(sorted(_conditions(sentence, span, first, last, unit, extra)))
    era = sentence[max(0, start - _ERA_CHARS) : start] if unit == "年" and value[0] < 100 else ""
    return Figure(
        quote,
        sentence,
        unit,
        era,
        value,
        clause.strip(),
        _bigrams(context),
        next_to,
        context,
        conditions,
        after[:2],
        sentence[first:start],
    )


def _conditions(sentence: str, span: tuple[int, int], first: int, last: int, unit: str, extra: Units) -> list[str]:
    """The clause's other figures (工作满十年的员工…15天: 十年), less the other bound of a range the
    figure is one end of (低于0℃或高于50℃: 50℃ is no condition of 0℃)."""
    start, end = span
    found = []
    for match in _figure_pattern(extra).finditer(sentence, first, last):
        if match.start() < end and start < match.end():
            continue
        between = sentence[end : match.start()] if match.start() >= end else sentence[match.end() : start]
        if match.group(2) == unit and _RANGE_JOINT.match(between):
            continue
        found.append(match.group())
    return found


def said_alike(a: Figure, b: Figure) -> bool:
    """Whether two figures can be about one thing as far as days go: two days of the week only when the
    same is said of them (周一闭馆 and 周三闭馆; not 周六照常供应 and 周日不供应: two days' own facts)."""
    return a.unit != WEEKDAY or a.said == b.said


def figures_of(quote: Quote, extra: Units = frozenset()) -> list[Figure]:
    """Every date (with or without its year), number with a unit (`retrieval.units`, and a profile's
    `extra`) and day of the week in the quote, each with its clause."""
    found: list[Figure] = []
    for sentence in split_sentences(quote.text):
        taken: list[tuple[int, int]] = []
        for pattern, unit in ((_DATE, "date"), (_MONTH_DAY, MONTH_DAY)):
            for match in pattern.finditer(sentence):
                parts = [_number(group) for group in match.groups() if group]
                if all(part is not None for part in parts) and not _overlaps(match.span(), taken):
                    taken.append(match.span())
                    date = tuple(part for part in parts if part is not None)
                    found.append(_figure(quote, sentence, match.span(), unit, date, extra))
        for match in _figure_pattern(extra).finditer(sentence):
            value = _number(match.group(1))
            if value is None or _overlaps(match.span(), taken):
                continue
            if _NEGATIVE.search(sentence[: match.start()]):  # 零下10℃, -20℃ (not the 5-10 of a range)
                value = -value
            unit = match.group(2).replace("％", "%")
            found.append(_figure(quote, sentence, match.span(), unit, (value,), extra))
        for match in _WEEKDAY.finditer(sentence):
            found.append(_figure(quote, sentence, match.span(), WEEKDAY, (_WEEKDAY_NUMBER[match.group(1)],)))
    return found


def _overlaps(span: tuple[int, int], taken: Sequence[tuple[int, int]]) -> bool:
    return any(a < span[1] and span[0] < b for a, b in taken)


def _same_subject(a: Figure, b: Figure, part_terms: set[str], words: Callable[[Figure], set[str]]) -> bool:
    if a.unit != b.unit or a.era != b.era or not a.anchor or not b.anchor or a.conditions != b.conditions:
        return False  # 满十年的员工 has its own 年假
    if _qualified_apart(a, b, words):  # 整机保修期 is not 电池保修期; 成人剂量 is not 儿童剂量
        return False
    if a.next_to not in b.clause or b.next_to not in a.clause:  # 生于181年 is not 234年去世
        return False
    if a.next_to != b.next_to and {a.next_to, b.next_to} <= _BOUNDS:  # 低于0℃ is not the 高于50℃ of one range
        return False
    if not said_alike(a, b):
        return False
    shared = len(a.anchor & b.anchor) / min(len(a.anchor), len(b.anchor))
    if shared < MIN_ANCHOR_OVERLAP:
        return False
    codes_a, codes_b = set(_CODE.findall(a.sentence)), set(_CODE.findall(b.sentence))
    if codes_a and codes_b and not codes_a & codes_b:  # X200's power is not Y100's
        return False
    return shared >= SAME_STATEMENT or any(term in a.sentence and term in b.sentence for term in part_terms)


def _qualified_apart(a: Figure, b: Figure, words: Callable[[Figure], set[str]]) -> bool:
    """Each clause names something the other does not (整机 against 电池, 成人 against 儿童): they are
    about two things. One clause saying more (本产品保修期 against 保修期) is still about the same. A
    word shares none of its character bigrams with the other clause to count as its own (jieba cuts
    张三于 and 张三出 from two sentences about 张三)."""

    def own(figure: Figure, other: Figure) -> bool:
        return any(not _bigrams(word) & other.anchor for word in words(figure))

    return own(a, b) and own(b, a)


def figure_conflicts(
    quotes: Sequence[Quote], tokenizer: ChineseTokenizer, units: Units = frozenset()
) -> list[FigureConflict]:
    """Per question part, the figures about one subject on which different documents disagree (their
    whole texts naming the same of the part's words); `units`: a text profile's own."""
    conflicts: list[FigureConflict] = []

    def words(figure: Figure) -> set[str]:  # with their dictionary sub-words: 普通商品 names 普通
        return {
            sub
            for word in tokenizer.content_words(figure.context)
            if len(word) > 1 and not _DIGITS.search(word)  # the other bound of a range (0℃或高于50℃) is no qualifier
            for sub in tokenizer.expand(word)
        }

    for part in dict.fromkeys(quote.part for quote in quotes):
        # the part's words, and its character pairs where jieba cuts them apart (年假有几天: 年 / 假)
        terms = {term for term in [*tokenizer.query_terms(part), *bigram_terms(part)] if len(term) > 1}
        names = _subject_words(part, tokenizer)
        figures = [f for quote in quotes if quote.part == part for f in figures_of(quote, units)]
        topic = {quote: _named(quote, names) for quote in dict.fromkeys(f.quote for f in figures)}  # once a quote
        reported: set[int] = set()
        for i, first in enumerate(figures):
            if i in reported:
                continue
            group = [first]
            for j in range(i + 1, len(figures)):
                other = figures[j]
                # Whole texts naming different ones of the part's words are about different things.
                same_topic = topic[first.quote] == topic[other.quote]
                if j not in reported and same_topic and _same_subject(first, other, terms, words):
                    group.append(other)
                    reported.add(j)
            documents = {f.quote.document for f in group}
            values = {f.value for f in group}
            if len(documents) > 1 and len(values) > 1 and _split_by_document(group):
                conflicts.append(FigureConflict(part, _one_per_value(group)))
    return conflicts


def _named(quote: Quote, names: set[str]) -> frozenset[str]:
    """Which of the part's words the quote's whole text holds: a sentence that leaves its subject to its
    paragraph (生长于海拔100米至2,800米的地区) is about the paragraph's (雷公藤 in one, 五月艾 in the
    other), however alike two such sentences are."""
    return frozenset(name for name in names if name in (quote.context or quote.text))


def _subject_words(part: str, tokenizer: ChineseTokenizer) -> set[str]:
    """The part's words that name what it is about: not those of what it asks (星期 in 星期几, 海拔 in
    海拔多少, 何时), which each source may word its own way."""
    return {
        word
        for word in tokenizer.query_terms(part)
        if len(word) > 1 and not _ASKED.search(word) and not re.search(f"{re.escape(word)}(?:{_ASKED.pattern})", part)
    }


def _split_by_document(group: list[Figure]) -> bool:
    """True when two documents each state a value the other does not (a document that states 5.5
    and 7.5 does not contradict one that states 5.5: it may be listing models)."""
    by_document: dict[str, set[tuple[float, ...]]] = {}
    for figure in group:
        by_document.setdefault(figure.quote.document, set()).add(figure.value)
    values = list(by_document.values())
    return any(not a <= b and not b <= a for i, a in enumerate(values) for b in values[i + 1 :])


def _one_per_value(group: list[Figure]) -> list[Figure]:
    """The first figure stating each value, one per document and value."""
    seen: set[tuple[str, tuple[float, ...]]] = set()
    kept = []
    for figure in group:
        key = (figure.quote.document, figure.value)
        if key not in seen:
            seen.add(key)
            kept.append(figure)
    return kept


class ConflictSource(BaseModel):
    """What one cited source says on the disputed point."""

    number: int = Field(description="the source's citation number [n] in the answer")
    kind: Literal["local", "web", "given"] = Field(description="the knowledge base, a web page, or the client's source")
    title: str
    url: str | None = None
    says: str = Field(description="the source's own words on the point (a quote without a model)")


class Conflict(BaseModel):
    """Sources the answer rests on that disagree: the point, and each side with its citation."""

    claim: str = Field(description="what the sources disagree on")
    sources: list[ConflictSource] = Field(min_length=2)
    newest: int | None = Field(
        default=None, description="the citation number of the side whose document dates itself latest, if all do"
    )
    newest_date: str = Field(default="", description="that document's own date, as it writes it")


# A document's own date: when it takes effect or was issued (自2024年1月1日起施行, 2023年修订), or its edition
# (2024年版, 2024版).
_OWN_DATE = re.compile(
    r"(?P<date>(?P<year>\d{4})年(?:(?P<month>\d{1,2})月(?:(?P<day>\d{1,2})日)?)?)起?(?:施行|生效|实施|执行|修订|发布|印发|版)"
    r"|(?P<edition>(?P<edition_year>\d{4})版)"
)


def document_date(*texts: str) -> tuple[tuple[int, ...], str] | None:
    """The latest date the texts (a document's title, file name, chunk) give the document itself, and its
    wording, or None."""
    found: list[tuple[tuple[int, ...], str]] = []
    for text in texts:
        for match in _OWN_DATE.finditer(text or ""):
            if match["edition"]:
                found.append(((int(match["edition_year"]), 0, 0), match["edition"]))
            else:
                parts = (match["year"], match["month"], match["day"])
                found.append((tuple(int(part or 0) for part in parts), match.group()))
    return max(found) if found else None


def newest_side(dates: Sequence[tuple[int, tuple[tuple[int, ...], str] | None]]) -> tuple[int, str] | None:
    """Of the sides' (citation number, document date), the number and date wording of the newest, when
    every side dates itself and one date is the latest alone."""
    if len(dates) < 2 or any(date is None for _, date in dates):
        return None
    ranked = sorted(((date[0], number, date[1]) for number, date in dates if date), reverse=True)
    return (ranked[0][1], ranked[0][2]) if ranked[0][0] != ranked[1][0] else None


def describe(conflicts: Sequence[Conflict]) -> str:
    """The conflicts as the answer states them: each point with every side quoted and cited."""
    lines = []
    for conflict in conflicts:
        sides = "；".join(
            f"{_KIND_LABEL[source.kind]}[{source.number}]：「{source.says}」" for source in conflict.sources
        )
        newer = f"{SUPERSEDES.format(number=conflict.newest, date=conflict.newest_date)}；" if conflict.newest else ""
        lines.append(f"{DISAGREE}（{conflict.claim}）：{sides}。{newer}{CHECK_THE_ORIGINALS}。")
    return "\n".join(lines)


_KIND_LABEL = {"local": "本地资料", "web": "网络资料", "given": "对话中提供的资料"}
