"""The kind of answer a question part asks for, when its form is visible, and whether a quote holds one.

「这款电池有多重？」 is not answered by the sentence that names the battery, however many
words they share: it asks for a weight, and a quote with no number and unit of weight cannot be
the answer. Without a model this tells a plausible detail the documents never state (a weight,
an age, a length) from a quote that answers, so the extractive verdict admits it
(`retrieval.extractive.select`; measured on dev in docs/workflow.md).

Only kinds whose answer has a visible form are checked: a figure with its unit (weight, height,
length, age, duration, power, money), a year or a day, a count (some number); a text profile adds its
own (`retrieval.profiles`). A figure must be of the kind asked: a span after 每 is a frequency (每3个月充
一次电 does not say how long charging takes), a date the document takes effect on
(本办法自2024年1月1日起施行) does not say when the 年会 is. Who, where, why and what was said
are not: almost any sentence holds a name or a place, so a check would prove nothing. The kinds
are tried in order, the most specific first (多长时间 is a duration, not a length).
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass

from retrieval.conflicts import CN_DIGITS

NUMBER = rf"(?:\d+(?:\.\d+)?|[{CN_DIGITS}]+|[数半])"


@dataclass(frozen=True)
class AnswerKind:
    """`name` is what the answer says is missing (重量); `asks` finds the kind in a question part,
    `holds` the answer's form in a quote."""

    name: str
    asks: re.Pattern[str]
    holds: re.Pattern[str]
    specific: bool = True  # False for a bare count: any number holds one, so a quote holding it proves little


# 几 asks only on its own: 好几天, 十几年, 那几天 are several days, over ten years, those days.
_NOT_ASKING = "(?<![好十那这头])"
# A figure begins after no digit (the 0天 of 30天 is no figure of its own).
_FIGURE_START = rf"(?<![\d.{CN_DIGITS}])"


def kind(
    name: str, asks: str, units: str, other: str = "", specific: bool = True, after: str = "", before: str = ""
) -> AnswerKind:
    """A kind whose answer is a number followed by one of `units` (三个月, 八十公斤), or `other`; `after`:
    what may not follow the unit (a date followed by 起施行 dates the document, not what is asked);
    `before`: what may not precede the number (每: a frequency)."""
    tail = f"(?!{after})" if after else ""
    head = f"(?<![{before}])" if before else ""
    form = rf"{head}{_FIGURE_START}{NUMBER}\s?个?(?:{units}){tail}" + (f"|{other}" if other else "")
    return AnswerKind(
        name, re.compile(asks.replace("几", f"{_NOT_ASKING}几")), re.compile(form, re.IGNORECASE), specific
    )


_MEASURES = ("间", "匹", "艘", "座", "层", "楼", "条", "支|枝", "张", "本|册", "篇", "首", "部", "头")
# A date followed by these is the document's own (本办法自2024年1月1日起施行), not the date asked.
_DOCUMENT_DATE = r"[^，,。；;]{0,10}?(?:施行|生效|实施|执行|印发|发布|修订|起执行)"
KINDS = (
    # 「多久更换一次」 asks how often: a span after 每 or 隔 answers it (每六个月更换一次), a duration does not.
    AnswerKind(
        "频率",
        re.compile(r"(?:多久|多长时间|几天|几个月|几年|几周|几小时)[^，,。？?]{0,8}?一次|多久一次|频率"),
        re.compile(rf"[每隔]\s?(?:{NUMBER})?\s?个?(?:年|月|周|星期|天|日|小时|分钟|季度?)|{NUMBER}次"),
        specific=False,
    ),
    kind(
        "时长",
        # 「试用期有多长」: a period's 多长 is a duration, not a length.
        r"多久|多长时间|(?:期|假)(?:是|有|为)?多长|多少年|多少天|多少个?月|多少个?小时|多少分钟|几年|几天|几个月|几个?小时|几分钟",
        r"年|载|月|工作日|日|天|旬|小时|时|分钟|秒|周",
        specific=False,  # 二十四年 may be a year of a reign, not a span
        before="每隔",  # 每3个月充一次电 says how often, not how long
    ),
    kind("重量", r"多重|有多沉|多少斤|几斤|多少公斤|多少千克|多少克|多少吨|重量", r"斤|公斤|千克|克|吨|磅|kg|g\b"),
    kind("身高", r"身高|多高|个子|个头", r"米|厘米|cm|m\b"),
    kind(
        "长度",
        r"多长|多高|多宽|多远|多深|多厚|身高|长度|高度|(?:多少|几)(?:公里|千米|米|厘米)",
        r"米|公里|千米|厘米|毫米|英寸|km|cm|mm|m\b",
    ),
    kind("年龄", r"几岁|多少岁|多大年纪|多大岁数|年纪多大|享年|终年|年龄", r"岁"),
    kind("温度", r"多少度|几度|气温|温度|体温", r"度|℃"),
    kind("功率", r"功率|多少瓦|几瓦|多少千瓦", r"千瓦|瓦|kW|W\b"),
    kind("金额", r"多少钱|价格|价钱|售价|费用|多少元", r"元|块|钱|美元"),
    # How someone died: a quote that never says so does not answer (「某人是怎么死的」 quoting only his life).
    AnswerKind(
        "死因",
        re.compile(r"怎么死|怎样死|如何死|死因|死于什么|因何而死|怎么去世|怎样去世|怎么走的"),
        re.compile(r"死|亡|卒|逝|去世|遇害|病故|身故|自尽|自杀|自刎|缢|崩|薨|殁|归天|丧命|殒命"),
    ),
    kind("年份或日期", r"哪一年|哪年|何年|几月|几号|几日", r"年|月|日|号", after=_DOCUMENT_DATE),
    # A count of things the question names by their measure word (几间房, 多少艘船): that measure word.
    *(kind(f"以「{word[0]}」计的数目", rf"(?:多少|几)(?:{word})", word) for word in _MEASURES),
    kind(
        "数目",
        r"^(?!.*(?:谁|什么|哪)).*(?:多少|几[个位名人匹头座间条次万千百员艘支把张本篇首部层路种样句回])",
        r"",
        specific=False,
    ),
)
_MEASURED = len(KINDS) - len(_MEASURES) - 1  # where a profile's new kinds go: before the counts
# A kind named by a noun (费用, 温度) is not asked when the part asks who, where, how or why about it
# (「培训费用由谁承担」 asks a payer, 「温度过高怎么办」 a remedy).
_ASKS_ELSE = re.compile(r"谁|哪里|哪儿|哪个部门|哪位|怎么|怎样|如何|为什么|为何|是否|能否|可以吗|能不能|可不可以")
_ASKS_ITSELF = re.compile(r"多|几|少|哪|怎|如何|何|什么")  # the kind's words hold their own question word


def kinds_with(extra: Sequence[AnswerKind] = ()) -> tuple[AnswerKind, ...]:
    """The kinds, with a text profile's (`retrieval.profiles`): one of an existing name widens it (a
    weight in 斤), a new one (兵器) comes before the counts."""
    named = {kind.name: kind for kind in extra}
    merged = tuple(_widened(kind, named.pop(kind.name)) if kind.name in named else kind for kind in KINDS)
    return (*merged[:_MEASURED], *named.values(), *merged[_MEASURED:])


def _widened(kind: AnswerKind, other: AnswerKind) -> AnswerKind:
    asks = re.compile(f"{kind.asks.pattern}|{other.asks.pattern}")
    holds = re.compile(f"{kind.holds.pattern}|{other.holds.pattern}", re.IGNORECASE)
    return AnswerKind(kind.name, asks, holds, kind.specific)


# The attribute a part names and asks about: 「蓝鲸科技的CEO是谁」, 「A3的保修期是多久」 (not what is
# asked of a person or thing without naming the attribute: 赵阳用什么兵器).
# An adverb between them is not part of the attribute: 「他那天的铠甲一共有多少斤重」 asks of 铠甲.
_ATTRIBUTE = re.compile(
    r"的(?P<attribute>[\u4e00-\u9fffA-Za-z0-9]{2,6}?)(?:一共|总共|到底|究竟|大概|大约|都|又)?"
    r"(?:是|叫|有|为)(?:谁|什么|多少|多久|多长|多大|多高|多重|几|哪)"
)


def asked_attribute(part: str) -> str | None:
    """The attribute `part` names and asks for (CEO, 保修期, 血型), or None."""
    found = _ATTRIBUTE.search(part)
    return found["attribute"] if found else None


def before_attribute(part: str) -> str:
    """What `part` says before the attribute it asks for (「赵阳的兵器是什么」: 赵阳), "" if it names none:
    where its owner is named."""
    found = _ATTRIBUTE.search(part)
    return part[: found.start()] if found else ""


def asked_kind(part: str, kinds: Sequence[AnswerKind] = KINDS) -> AnswerKind | None:
    """The first of `kinds` `part` asks for, or None (who, where, why, …: no visible form to check). A
    kind named by a noun (费用) is not asked by a part asking who or how about it."""
    for kind in kinds:
        found = kind.asks.search(part)
        if found and (_ASKS_ITSELF.search(found.group()) or not _ASKS_ELSE.search(part)):
            return kind
    return None


def named_kind(attribute: str | None, kinds: Sequence[AnswerKind] = KINDS) -> AnswerKind | None:
    """The specific kind an asked attribute names (兵器 on a profile that knows weapons, 价格, 温度),
    or None: such an attribute is answered by a quote of its form, whatever word the quote uses."""
    if not attribute:
        return None
    return next((kind for kind in kinds if kind.specific and kind.asks.fullmatch(attribute)), None)


def holds(kind: AnswerKind | None, texts: list[str]) -> bool:
    """Whether some text holds an answer of `kind` (always, when no kind is asked)."""
    return kind is None or any(kind.holds.search(text) for text in texts)
