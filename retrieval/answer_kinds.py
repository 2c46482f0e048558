"""The kind of answer a question part asks for, when its form is visible, and whether a quote holds one.

「张飞的丈八点钢矛有多重？」 is not answered by the sentence that names the spear, however many
words they share: it asks for a weight, and a quote with no number and unit of weight cannot be
the answer. Without a model this tells a plausible detail the documents never state (a weight,
an age, a length) from a quote that answers, so the extractive verdict admits it
(`retrieval.extractive.select`; measured on dev in docs/workflow.md).

Only kinds whose answer has a visible form are checked: a figure with its unit (weight, height,
length, age, duration, power, money), a year or a day, a weapon or a mount (named by its class: …剑, …马), a
count (some number). Who, where, why and what was said
are not: almost any sentence holds a name or a place, so a check would prove nothing. The kinds
are tried in order, the most specific first (多长时间 is a duration, not a length).
"""

import re
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


def _kind(name: str, asks: str, units: str, other: str = "", specific: bool = True) -> AnswerKind:
    """A kind whose answer is a number followed by one of `units` (三个月, 八十二斤), or `other`."""
    form = rf"{NUMBER}\s?个?(?:{units})" + (f"|{other}" if other else "")
    return AnswerKind(
        name, re.compile(asks.replace("几", f"{_NOT_ASKING}几")), re.compile(form, re.IGNORECASE), specific
    )


_ARMS = "剑刀枪矛戟槊斧钺锤锏弓弩箭叉棍"
_MEASURES = ("间", "匹", "艘", "座", "层", "楼", "条", "支|枝", "张", "本|册", "篇", "首", "部", "头")
KINDS = (
    _kind(
        "时长",
        # 「试用期有多长」: a period's 多长 is a duration, not a length.
        r"多久|多长时间|(?:期|假)(?:是|有|为)?多长|多少年|多少天|多少个?月|多少个?小时|几年|几天|几个月|几个?小时",
        r"年|载|月|工作日|日|天|旬|小时|时|分钟|秒|周",
        specific=False,  # 二十四年 may be a year of a reign (建安二十四年), not a span
    ),
    _kind(
        "重量", r"多重|有多沉|多少斤|几斤|多少公斤|多少千克|多少克|多少吨|重量", r"斤|两|钧|公斤|千克|克|吨|磅|kg|g\b"
    ),
    _kind("身高", r"身高|多高|个子|个头", r"尺|寸|米|厘米|cm|m\b"),  # not 里 or 步: a height, not a distance
    _kind(
        "长度",
        r"多长|多高|多宽|多远|多深|多厚|身高|长度|高度|(?:多少|几)(?:公里|千米|里|米|尺|丈|寸|步)",
        r"尺|丈|寸|里|步|米|公里|千米|厘米|毫米|km|cm|mm|m\b",
    ),
    _kind(
        "年龄", r"几岁|多少岁|多大年纪|多大岁数|年纪多大|享年|终年|年龄", r"岁", rf"(?:年|寿|年方|时年){NUMBER}"
    ),  # 年二十四: the classical age
    _kind("温度", r"多少度|几度|气温|温度|体温", r"度|℃"),
    _kind("功率", r"功率|多少瓦|几瓦|多少千瓦", r"千瓦|瓦|kW|W\b"),
    _kind("金额", r"多少钱|价格|价钱|售价|费用|多少元", r"元|块|钱|两|金|贯|文|美元"),
    _kind("年份或日期", r"哪一年|哪年|何年|几月|几号|几日", r"年|月|日|号", "元年"),
    # A weapon or a mount is named by its class: 双股剑, 青龙偃月刀, 丈八点钢矛; 赤兔马, 的卢.
    # Not a soldier named by his arm (弓手, 弓箭手, 刀斧手).
    # A whip is a weapon when named as one (钢鞭, 铁鞭, 双鞭), not the rider's (扬鞭, 加鞭, 以鞭指).
    AnswerKind("兵器", re.compile(r"兵器|武器"), re.compile(rf"(?:[{_ARMS}]|(?<=[钢铁双节金])鞭)(?![{_ARMS}]*手)")),
    AnswerKind("坐骑", re.compile(r"坐骑|骑(?:的是)?(?:什么|哪匹|哪一匹)马?"), re.compile(r"马|驹|骑")),
    # A count of things the question names by their measure word (几间房, 多少艘船): that measure word.
    *(_kind(f"以「{word[0]}」计的数目", rf"(?:多少|几)(?:{word})", word) for word in _MEASURES),
    _kind(
        "数目",
        r"^(?!.*(?:谁|什么|哪)).*(?:多少|几[个位名人匹头座间条次万千百员艘支把张本篇首部层路种样句回])",
        r"",
        specific=False,
    ),
)


# The attribute a part names and asks about: 「蓝鲸科技的CEO是谁」, 「A3的保修期是多久」 (not what is
# asked of a person or thing without naming the attribute: 刘备用什么兵器).
# An adverb between them is not part of the attribute: 「他那天的铠甲一共有多少斤重」 asks of 铠甲.
_ATTRIBUTE = re.compile(
    r"的(?P<attribute>[\u4e00-\u9fffA-Za-z0-9]{2,6}?)(?:一共|总共|到底|究竟|大概|大约|都|又)?"
    r"(?:是|叫|有|为)(?:谁|什么|多少|多久|多长|多大|多高|多重|几|哪)"
)


def asked_attribute(part: str) -> str | None:
    """The attribute `part` names and asks for (CEO, 保修期, 血型), or None."""
    found = _ATTRIBUTE.search(part)
    return found["attribute"] if found else None


def asked_kind(part: str) -> AnswerKind | None:
    """The first kind `part` asks for, or None (who, where, why, …: no visible form to check)."""
    return next((kind for kind in KINDS if kind.asks.search(part)), None)


def holds(kind: AnswerKind | None, texts: list[str]) -> bool:
    """Whether some text holds an answer of `kind` (always, when no kind is asked)."""
    return kind is None or any(kind.holds.search(text) for text in texts)
