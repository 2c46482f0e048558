"""Units of measure: what a figure measures, so that two figures are compared only when they can be.

`mmol/L` is a concentration, not millimetres followed by letters; 3个月 and 90天 are both durations;
一个 (one piece) is a count, never an amount a document could give otherwise. The table is modern
Chinese and the SI; a text profile adds its own (`retrieval.profiles`: the classical 里, 斤, 丈 …).
Latin units end where the letters end (5mm, not the mm of 5mmol/L), and the longest unit is read
first (个月 before 个, 千瓦 before 瓦).
"""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Unit:
    """A unit's dimension (what it measures) and its size in the dimension's base unit; `count`
    units (个, 台, 件) number things, and one of them (一个) states no amount."""

    dimension: str
    scale: float = 1.0
    count: bool = False


def _units(dimension: str, scales: Mapping[str, float]) -> dict[str, Unit]:
    return {name: Unit(dimension, scale) for name, scale in scales.items()}


_DAY = 1.0
UNITS: dict[str, Unit] = {
    **_units("浓度", {"mmol/L": 1, "mmol/l": 1, "毫摩尔/升": 1}),
    **_units("质量浓度", {"mg/dL": 1, "mg/dl": 1, "毫克/分升": 1}),
    **_units("百分比", {"%": 1, "％": 1, "成": 10}),
    **_units("温度", {"℃": 1, "°C": 1, "摄氏度": 1, "度": 1}),  # 空调26度: 26℃ (一度电 is 电能)
    **_units("金额", {"元": 1, "块钱": 1, "万元": 1e4, "亿元": 1e8}),
    **_units("美元", {"美元": 1}),
    **_units(
        "时长",
        {
            "秒": 1 / 86400,
            "秒钟": 1 / 86400,
            "分钟": 1 / 1440,
            "小时": 1 / 24,
            "个小时": 1 / 24,
            "天": _DAY,
            "日": _DAY,
            "周": 7,
            "个星期": 7,
            "星期": 7,
            "个月": 30,
            "月": 30,
            "年": 365,
        },
    ),
    **_units("工作日", {"工作日": 1, "个工作日": 1}),
    **_units("年龄", {"岁": 1, "周岁": 1}),
    **_units("长度", {"毫米": 1e-3, "mm": 1e-3, "厘米": 1e-2, "cm": 1e-2, "米": 1, "m": 1, "公里": 1e3, "千米": 1e3}),
    **_units("长度", {"km": 1e3, "英寸": 0.0254}),
    **_units(
        "质量", {"毫克": 1e-3, "mg": 1e-3, "克": 1, "g": 1, "千克": 1e3, "公斤": 1e3, "kg": 1e3, "斤": 500, "吨": 1e6}
    ),
    **_units("容量", {"毫升": 1e-3, "ml": 1e-3, "mL": 1e-3, "升": 1, "L": 1}),
    **_units("功率", {"W": 1, "瓦": 1, "kW": 1e3, "千瓦": 1e3}),
    **_units("电能", {"kWh": 1, "度电": 1, "Wh": 1e-3}),
    **_units("电量", {"mAh": 1, "毫安时": 1}),
    **_units("电压", {"V": 1, "伏": 1}),
    **_units("频率", {"Hz": 1, "kHz": 1e3, "MHz": 1e6, "GHz": 1e9}),
    **_units("数据量", {"MB": 1, "GB": 1e3, "TB": 1e6}),
    **_units("压强", {"kPa": 1, "MPa": 1e3}),
    **_units("防水", {"ATM": 1, "atm": 1}),
    **_units("声音", {"dB": 1, "分贝": 1}),
    **_units("点钟", {"点": 1, "点钟": 1}),
    **_units("人数", {"人": 1, "名": 1, "位": 1, "万人": 1e4}),
    **_units("次数", {"次": 1, "遍": 1}),
    **_units("编号", {"号线": 1, "号楼": 1, "号馆": 1, "号厅": 1, "号门": 1}),  # a label: 五号线 is not 三号线
    **{
        name: Unit(name, count=True)
        for name in (
            "个",
            "只",
            "台",
            "件",
            "张",
            "把",
            "粒",
            "片",
            "袋",
            "支",
            "滴",
            "页",
            "章",
            "卷",
            "匹",
            "艘",
            "座",
            "户",
            "颗",
            "盒",
            "瓶",
            "套",
            "条",
        )
    },
}


@cache
def unit_pattern(extra: frozenset[tuple[str, Unit]] = frozenset()) -> str:
    """A regular expression alternative of every unit (and a profile's `extra`), the longest first;
    a Latin unit may not run on into letters."""
    names = sorted({name for name in UNITS} | {name for name, _ in extra}, key=lambda name: (-len(name), name))
    return "|".join(
        re.escape(name) + ("(?![A-Za-z])" if name[-1].isascii() and name[-1].isalpha() else "") for name in names
    )


def unit_of(name: str, extra: Iterable[tuple[str, Unit]] = ()) -> Unit | None:
    """The unit called `name` (a profile's `extra` first), or None."""
    return dict(extra).get(name) or UNITS.get(name)


def comparable(a: str, b: str, extra: Iterable[tuple[str, Unit]] = ()) -> bool:
    """Whether figures in units `a` and `b` measure the same thing (3个月 and 90天; not 3次 and 3天)."""
    first, second = unit_of(a, extra), unit_of(b, extra)
    return first is not None and second is not None and first.dimension == second.dimension


def in_base(value: float, name: str, extra: Iterable[tuple[str, Unit]] = ()) -> float:
    """`value` of unit `name` in its dimension's base unit (3个月 → 90 days)."""
    unit = unit_of(name, extra)
    return value * unit.scale if unit else value
