"""A question that takes for granted what the documents say otherwise, and the sentence that says so.

Three general checks, for any base (a text profile may add its own: `retrieval.profiles`):

- **A figure about the same subject** (`figure_premise`): 「试用期工资是转正工资的80%」 states 80% of what
  its words before the figure name (试用期, 工资, 转正). It is compared with the figures of the same
  dimension (`retrieval.units`: mmol/L is a concentration, 3个月 a duration, 一个 no amount) that the
  sources say of the same subject, the figures whose own clause shares most of those words, not with
  any number of the hits: 病假期间发放基本工资的80% shares only 工资, so 试用期工资为转正工资的70% denies it.
  A direction is part of the figure: 「血糖高于3.9 mmol/L」 is denied by 「血糖低于3.9 mmol/L」 (高/低, 以上/
  以下, 超过/不足, 之前/之后).
- **An action the documents forbid** (`forbidden_premise`): what the part proposes (「开封后放冷冻室」,
  「昏迷了，喂糖水」) against what follows 切勿, 禁止, 不得, 请勿, 不宜, 不要, 严禁 … in a source (「切勿给
  昏迷者喂食物或糖水」), in any phrasing. A part that asks what happens or what to do after it (会怎样,
  怎么办) takes nothing forbidden for granted; one asking whether it may (能…吗) is answered by the
  prohibition (`Prohibited.asks_leave`).
- **A code or model the base never mentions** (`unknown_codes`): 错误码E9 when the manual lists E1–E8.

The part is then not answered: the answer quotes the sentence and says the documents say otherwise
(`retrieval.extractive.compose`).
"""

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from core.chunking import split_sentences
from core.text import ChineseTokenizer
from retrieval.conflicts import MONTH_DAY, WEEKDAY, Figure, Quote, Units, figures_of, said_alike
from retrieval.units import comparable, in_base, unit_of

PREMISE_DENIED = "资料所述与问题的前提不符"  # said in the answer, with or without a model

_FIRST_CALENDAR_YEAR = 1000  # a figure in 年 from here on is a year, not a span
# Right before a figure, what makes it no amount stated: an ordinal or an asked count (第二次, 哪两个, 几个).
_NOT_STATED = re.compile(r"(?:第|哪|几|多少)$")
# Directions either side of a figure: (before it, after it) → its sense.
_DIRECTIONS = (
    (
        re.compile(r"(?:高于|超过|大于|多于|不低于|不少于|至少|(?<![不未])满|超出)$"),
        re.compile(r"^(?:以上|及以上|或以上|之上)"),
        "above",
    ),
    (
        re.compile(r"(?:低于|不足|小于|少于|不超过|不高于|未满|不满|不到|至多|最多)$"),
        re.compile(r"^(?:以下|及以下|以内|之内|内)"),
        "below",
    ),
    (re.compile(r"(?:提前)$"), re.compile(r"^(?:之前|以前|前)"), "before"),
    (re.compile(r"(?:推迟|延后)$"), re.compile(r"^(?:之后|以后|后)"), "after"),
)
_OPPOSITE = {"above": "below", "below": "above", "before": "after", "after": "before"}
_FILLERS = "为是约有达共计在的了仅只近逾需要"


@dataclass(frozen=True)
class Denial:
    """What a part takes for granted (`clause`) and the source sentence that says otherwise."""

    clause: str
    source_id: str
    sentence: str


def _direction(figure: Figure) -> str | None:
    """The sense the clause gives the figure (低于3.9: below; 30天以上: above), or None."""
    lead = figure.lead.rstrip(" " + _FILLERS)
    for before_mark, after_mark, sense in _DIRECTIONS:
        if before_mark.search(lead) or after_mark.match(figure.said):
            return sense
    return None


def is_amount(figure: Figure, units: Units) -> bool:
    """Whether a figure of a question states an amount the documents could give otherwise: not an
    ordinal or an asked count (第二次, 哪两个), a year of the calendar (a subject has many) or one of a
    count (一个: 主刷多少钱一个 asks a price)."""
    if _NOT_STATED.search(figure.lead.rstrip()) or figure.unit == "date":
        return False
    if figure.unit == "年" and figure.value[0] >= _FIRST_CALENDAR_YEAR:
        return False
    unit = unit_of(figure.unit, units)
    return figure.unit in (WEEKDAY, MONTH_DAY) or (unit is not None and not (unit.count and figure.value == (1.0,)))


def _alike(asked: Figure, stated: Figure, units: Units) -> bool:
    """Two figures that measure the same thing (3个月 and 90天; two days the same is said of)."""
    if asked.unit in (WEEKDAY, MONTH_DAY, "date") or stated.unit in (WEEKDAY, MONTH_DAY, "date"):
        return asked.unit == stated.unit and said_alike(asked, stated)
    return (
        comparable(asked.unit, stated.unit, units) and asked.era == stated.era and _counts_alike(asked, stated, units)
    )


def _counts_alike(asked: Figure, stated: Figure, units: Units) -> bool:
    """Two counts (of pieces or people) count one thing when the same follows them, or nothing follows the
    stated one (「| 指纹容量 | 100枚 |」): 两位候选人 is not 7000名观察员, 六条天皇 not 八条院 (CMRC dev)."""
    unit = unit_of(asked.unit, units)
    if unit is None or not (unit.count or unit.dimension == _PEOPLE):
        return True
    said = stated.said.strip()
    return not said or not said[0].isalnum() or said == asked.said.strip()


_PEOPLE = "人数"  # the dimension of 人, 名, 位 (retrieval/units.py)


def _value(figure: Figure, units: Units) -> tuple[float, ...]:
    if len(figure.value) > 1:
        return figure.value
    return (round(in_base(figure.value[0], figure.unit, units), 6),)


Subject = list[tuple[str, ...]]  # a figure's subject: per word, its forms (the word and its sub-words: 洗脚水, 洗脚)


def _subject(figure: Figure, tokenizer: ChineseTokenizer) -> tuple[Subject, Subject]:
    """The words of a question's figure's subject: those before it in its clause (试用期, 工资, 转正 in
    试用期工资是转正工资的80%), and those after it (低血糖 in 血糖低于3.9就是低血糖吗), each with its
    dictionary sub-words (洗脚水 is said as 洗脚)."""
    after = figure.context.split("，", 1)[1] if "，" in figure.context else ""

    def words(text: str, forms: bool) -> Subject:
        found = dict.fromkeys(w for w in tokenizer.content_words(text) if len(w) > 1 and not _numeric(w))
        return [(w, *(sub for sub in tokenizer.expand(w) if forms and len(sub) > 1 and sub != w)) for w in found]

    # after the figure, a word only as written: 低血糖 is not the 血糖 of 血糖高于13.9为高血糖
    return words(figure.lead, True), words(after, False)


def _said(subject: Subject, text: str) -> int:
    """How many of a subject's words `text` says, in any of their forms."""
    return sum(any(form in text for form in forms) for forms in subject)


def _numeric(word: str) -> bool:
    """A number, a direction or a copula: no word of what a figure is said of."""
    return bool(re.search(r"[\d一二三四五六七八九十百千万两]", word)) or word in _NOT_SUBJECT


_NOT_SUBJECT = frozenset(
    [
        "不满",
        "未满",
        "高于",
        "低于",
        "超过",
        "不足",
        "以上",
        "以下",
        "大于",
        "小于",
        "多于",
        "少于",
        "不超过",
        "以内",
        "之内",
        "之前",
        "以前",
        "之后",
        "以后",
        "至少",
        "最多",
        "达到",
        "就是",
        "就算",
        "算是",
        "延长",
        "缩短",
        "最低",
        "最高",
        "最长",
        "最短",
        "最多",
        "最少",
        "只能",
        "零下",
        "零上",
    ]
)


def figure_premise(
    part: str, texts: Sequence[tuple[str, str]], tokenizer: ChineseTokenizer, units: Units = frozenset()
) -> Denial | None:
    """The figure `part` states that the sources ((id, text) pairs, best first) give otherwise for the
    same subject: of the figures of the same dimension, those whose clause (then sentence) names most
    of the words before the part's figure, at least half of them; none of them with the part's value,
    or one with its value and the opposite direction."""
    for asked in figures_of(Quote(part, "", "", part), units):
        if not is_amount(asked, units) or any(_bound(other, asked.unit) for other in asked.conditions):
            continue  # no amount, or a bound of a range the part states (满10年不满20年): a case, not a claim
        lead, rest = _subject(asked, tokenizer)
        if not lead and not rest:
            continue
        others = {(f.unit, f.value) for f in figures_of(Quote(asked.clause, "", "", asked.clause), units)}
        others.discard((asked.unit, asked.value))
        denial = _denied_figure(asked, lead or rest, rest if lead else [], texts, units, _supposed(asked), others)
        if denial is not None:
            return denial
    return None


def _bound(condition: str, unit: str) -> bool:
    """Whether a figure of the clause (`condition`) bounds a range in the figure's `unit` (满10年不满20年),
    not a year of the calendar (2012年与建业续约5年)."""
    return condition.endswith(unit) and not _CALENDAR_YEAR.fullmatch(condition)


_CALENDAR_YEAR = re.compile(r"\d{4}年")


# A figure in a supposed condition (低于5℃时能充电吗, 如果超过30天): asked about, not taken for granted.
_SUPPOSED = re.compile(r"^(?:时|的时候|的话)")
_SUPPOSING = re.compile(r"如果|假如|假设|若是|要是|万一")


def _supposed(figure: Figure) -> bool:
    after = figure.context.split("，", 1)[-1]
    return _direction(figure) is not None and bool(_SUPPOSED.match(after) or _SUPPOSING.search(figure.lead))


def _denied_figure(
    asked: Figure,
    lead: Subject,
    rest: Subject,
    texts: Sequence[tuple[str, str]],
    units: Units,
    supposed: bool = False,
    others: frozenset[tuple[str, tuple[float, ...]]] | set[tuple[str, tuple[float, ...]]] = frozenset(),
) -> Denial | None:
    """The best sentence about `asked`'s subject that gives it otherwise (`figure_premise`); of a
    `supposed` figure (低于5℃时), only one giving its value the opposite direction. When sentences say
    the part's value with the `others` figures of its clause (超过30分钟才扣50元: 50元), those decide its
    direction (「30分钟以内，每次扣发50元」), not one about another case (「超过30分钟不满2小时的」)."""
    needed = len(lead) // 2  # at least half of them, filler verbs aside (密码最长可以设置: 密码)
    ranked: list[tuple[tuple[int, int, int], Figure]] = []
    alike: list[Figure] = []
    for source_id, text in texts:
        for stated in figures_of(Quote(asked.quote.part, source_id, source_id, text), units):
            if not _alike(asked, stated, units):
                continue
            alike.append(stated)
            said = _said(lead, stated.sentence)
            if said >= max(1, needed):
                ranked.append(((_said(lead, stated.clause), said, _said(rest, stated.clause)), stated))
    if not ranked:
        return None
    best = max(score for score, _ in ranked)
    top = [stated for score, stated in ranked if score == best]
    value, sense = _value(asked, units), _direction(asked)
    same = [stated for stated in top if _value(stated, units) == value]
    if not sense and all(_direction(stated) for stated in top):
        return None  # an instance of a threshold (一万元的报销 against 超过5000元的报销), not another value
    if not same and not supposed and not _within(asked, top, units):
        return Denial(asked.clause, top[0].quote.source_id, top[0].sentence.strip())
    same, alike = _with_others(same, others, units) or same, _with_others(alike, others, units) or alike
    reversed_ = [stated for stated in same if sense and _direction(stated) == _OPPOSITE[sense]]
    # A bound of two ranges (满1年不满10年 and 满10年不满20年): the value said the part's way anywhere is no denial.
    said_so = any(_value(f, units) == value and _direction(f) == sense for f in alike)
    if reversed_ and len(reversed_) == len(same) and not said_so:
        return Denial(asked.clause, reversed_[0].quote.source_id, reversed_[0].sentence.strip())
    return None


# A bound the part claims (最低只能到零下10℃): a value inside the stated range is no bound of it.
_EXTREME = re.compile(r"最低|最高|最长|最短|最多|最少|最大|最小|最快|最慢|最早|最晚|至少|至多")


def _within(asked: Figure, top: list[Figure], units: Units) -> bool:
    """Whether a sentence of `top` states a range holding `asked`'s value (零下二十度 within -25℃～60℃),
    unless the part claims a bound of it (最低零下10℃ is not the -25℃ the range starts at)."""
    if _EXTREME.search(asked.lead):
        return False
    value = _value(asked, units)[0]
    for sentence in {f.sentence for f in top}:
        bounds = [_value(f, units)[0] for f in top if f.sentence == sentence]
        if len(bounds) > 1 and min(bounds) <= value <= max(bounds):
            return True
    return False


def _with_others(figures: list[Figure], others: Iterable[tuple[str, tuple[float, ...]]], units: Units) -> list[Figure]:
    """The figures whose sentence also says one of `others` (unit, value) figures."""
    wanted = set(others)
    return [
        f
        for f in figures
        if wanted & {(g.unit, g.value) for g in figures_of(Quote(f.sentence, "", "", f.sentence), units)}
    ]


# A prohibition in a document: what follows the marker, to the clause's end, is forbidden.
_FORBIDDEN = re.compile(
    r"(?:请勿|切勿|切忌|严禁|禁止|不得(?!已|不)|不适用于|不宜|不要|不可(?!抗|能|少|逆|避|思|靠|缺|分|取|信|测|以|用(?![于来作]))|避免|忌)"
    r"(?P<forbidden>[^，,。；;！!？?：:“”]+)"
)
# A part asking what follows an act, or what to do about it, takes nothing forbidden for granted.
_CONSEQUENCE = re.compile(
    r"会怎样|会怎么样|会不会|会有什么|后果|怎么办|如何处理|怎么处理|有什么影响|有何影响|为什么不|为何不"
)
# A part asking whether it may (能给他喂糖水吗): the prohibition is its answer, not a denied premise.
_LEAVE = re.compile(
    r"能不能|可不可以|能否|可否|行不行|是否可以|是否能|可以吗|能吗|行吗|(?:能|可以|可)[^，,。？?]{1,20}吗"
)
# A part that names a prohibition asks about it (禁止带刀的规定是什么时候宣布的).
_ASKS_ABOUT = re.compile(r"请勿|切勿|严禁|禁止|不得|不宜|不要|不可|(?<!能)不能|为什么|为何")
# A scene the part sets (放在浴室里用时, 过滤海水以后): any of its words forbidden denies it.
_WHEN = re.compile(r"^(?P<premise>[^，,。？?]{2,30}?)(?:的时候|时(?!候)|之后|以后)")  # not 什么时候: it asks
# Words of a prohibition that say nothing of what is forbidden (请勿在浴室…使用本机: 浴室 is what matters).
_GENERIC = frozenset({"本机", "本品", "本产品", "产品", "设备", "机器", "使用", "进行", "操作", "其中", "情况", "时候"})


@dataclass(frozen=True)
class Prohibited(Denial):
    """A prohibition against the act a part proposes; `asks_leave`: the part asks whether it may."""

    asks_leave: bool = False


def forbidden_premise(part: str, texts: Sequence[tuple[str, str]], tokenizer: ChineseTokenizer) -> Prohibited | None:
    """The first sentence of `texts` (best first) forbidding the act `part` proposes: the part shares
    half the prohibition's words, two at least (昏迷, 糖水 of 切勿给昏迷者喂食物或糖水), or its last word
    when the hits rarely say it (冷冻室 of 切勿放入冷冻室), or a rare word of a scene the part sets (浴室 of
    放在浴室里用时). Words most hits hold (胰岛素 in a diabetes guide) and names do not count."""
    if _CONSEQUENCE.search(part) or _ASKS_ABOUT.search(part):
        return None
    names = set(tokenizer.names(part))
    words = {word for word in tokenizer.content_words(part) if word not in names}
    scene = _WHEN.match(part)
    scenery = (
        {w for w in tokenizer.content_words(scene["premise"]) if len(w) > 1 and w not in names} if scene else set()
    )
    common, rare = _common(texts, tokenizer)
    for source_id, text in texts:
        for sentence in split_sentences(text):
            for found in _FORBIDDEN.finditer(sentence):
                act = [w for w in tokenizer.content_words(found["forbidden"]) if len(w) > 1]
                act = [w for w in act if w not in _GENERIC | common | names]
                if _proposes(act, words, part, rare) or any(w in act and w in rare for w in scenery):
                    clause = scene["premise"] if scene else part
                    return Prohibited(clause, source_id, sentence.strip(), bool(_LEAVE.search(part)))
    return None


_COMMON_SHARE = 0.5  # a word in more than this share of the hits (3 at least) says nothing of an act
_RARE_SENTENCES = 2  # a word in at most this many sentences of the hits is what a prohibition is about


def _common(texts: Sequence[tuple[str, str]], tokenizer: ChineseTokenizer) -> tuple[set[str], set[str]]:
    """The words most of the hits hold (公司 in a staff handbook: sharing one proves nothing), and those
    few of their sentences say (冷冻室, 浴室: sharing one does)."""
    in_texts: dict[str, int] = {}
    in_sentences: dict[str, int] = {}
    for _, text in texts:
        for word in set(tokenizer.content_words(text)):
            in_texts[word] = in_texts.get(word, 0) + 1
        for sentence in split_sentences(text):
            for word in set(tokenizer.content_words(sentence)):
                in_sentences[word] = in_sentences.get(word, 0) + 1
    common = {w for w, n in in_texts.items() if len(texts) >= 3 and n >= 3 and n > _COMMON_SHARE * len(texts)}
    return common, {w for w, n in in_sentences.items() if n <= _RARE_SENTENCES}


def _proposes(act: list[str], words: set[str], part: str, rare: set[str]) -> bool:
    """Whether the part's words meet a prohibition's (`forbidden_premise`)."""
    shared = [w for w in act if w in words or w in part]
    most = max(2, (len(act) + 1) // 2)
    last = bool(act) and act[-1] in shared and act[-1] in rare
    verb = len(act) == 1 or any(w[0] in part for w in act[:-1])  # 放 of 放入冷冻室; not 扎手指 for 挤压手指
    return len(shared) >= most or (last and verb)


# A code or a model: letters then a digit (E9, X200, AB-12), never a unit (5V, 3GB).
_CODE = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{1,4}-?\d{1,5}[A-Za-z]?(?![A-Za-z0-9])")


def codes_of(part: str) -> list[str]:
    """The codes and model names a part names (错误码E9, X200 型号)."""
    return list(dict.fromkeys(found.group() for found in _CODE.finditer(part)))


def unknown_codes(part: str, unknown: Sequence[str]) -> list[str]:
    """The part's codes that neither its sources nor the base mention (`unknown`: its terms so found,
    lower-cased as the index holds them): the documents do not mention them."""
    missing = {term.lower() for term in unknown}
    return [code for code in codes_of(part) if code.lower() in missing]


# A name the question quotes (手册里说的“30-30法则”, 《员工守则》): the documents would hold it verbatim.
_QUOTED = re.compile(r"[“\"「『《]([^“”\"「」『』《》]{2,20})[”\"」』》]")
_SPACES = re.compile(r"\s+")


def unquoted_names(part: str, texts: Sequence[tuple[str, str]]) -> list[str]:
    """The names `part` quotes that none of `texts` (its every hit: a keyword search finds a name held
    verbatim) holds, spaces and case aside: the documents do not mention them."""
    held = [_SPACES.sub("", text).lower() for _, text in texts]
    return [
        name
        for name in dict.fromkeys(found.group(1) for found in _QUOTED.finditer(part))
        if not any(_SPACES.sub("", name).lower() in text for text in held)
    ]
