"""The classical-novel profile's naming rules: 玄德 is 刘备 because 姓刘，名备，字玄德.

A classical novel names its people by 字 (courtesy name) and 号/绰号 (sobriquet) as often as by their
names; the novel states them in a few set forms (姓刘，名备，字玄德 / 董卓字仲颖 / 诸葛亮，号卧龙 / 次子名权，
字仲谋 / 却说腾字寿成 / 字长生，后改云长). These rules run only on a base whose profile is
classical-novel (`core.profiles.naming_rules`): in a modern text 字 and 号 are mostly the written
character and a number (数字, 型号). Each rule yields (alias, name, how) like the default ones
(`core.aliases`), which confirms each pair by co-occurrence as it does theirs.
"""

import re
from collections.abc import Iterable

from core.aliases import CJK, Counts, Lexicon, Naming, NamingRule, best_prefix, best_suffix
from core.text import full_name

# 姓刘，名备，字玄德 / 姓曹名操字孟德: the whole name is 姓 + 名.
_FAMILY = re.compile(rf"姓([{CJK}]{{1,2}})[，,]?名([{CJK}]{{1,2}})[，,]?(?:表)?字([{CJK}]{{2}})")
# 董卓字仲颖 / 孙坚，字文台 / 诸葛亮，号卧龙: the name is a suffix of the run before the mark.
_COURTESY = re.compile(rf"([{CJK}]{{2,4}}?)[，,]?(表字|字|绰号|浑号|诨号|外号|道号|号)([{CJK}]{{2,4}})")
# 号 and its kin name a sobriquet of 2 to 4 characters (卧龙, 及时雨, 豹子头); 字 a courtesy name of 2.
_SOBRIQUET = re.compile(r"绰号|浑号|诨号|外号|道号|号")
# 次子名权，字仲谋 / 懿字仲达 / 却说腾字寿成: a given name without its family name, which the text
# writes in full elsewhere (孙权, 司马懿: `_given`).
_NAMED_GIVEN = re.compile(rf"名([{CJK}]{{1,2}})[，,]?(?:表)?字([{CJK}]{{2}})")
_GIVEN_ALONE = re.compile(rf"(?:^|[^{CJK}]|却说|且说)([{CJK}])[，,]?字([{CJK}]{{2}})")
# 字长生，后改云长: a courtesy name changed later is a name too.
_RENAMED = re.compile(rf"^[，,]?(?:后改|后更|改字|更字)字?([{CJK}]{{2}})")
# 姓宋名江，表字公明，绰号及时雨: a sobriquet after the whole name.
_THEN_NICKNAMED = re.compile(rf"^[，,]?(?:{_SOBRIQUET.pattern})([{CJK}]{{2,4}})")
# Not a name: numerals (年二十四，字正平; 此八字), a given name without its family name (次子名权，字仲谋:
# `_given` finds the full name).
_NOT_A_NAME = re.compile(r"[一二三四五六七八九十百千万两]|^名")
# 字 before these is the written character (一字摆开, 此八字于其上), not a courtesy name.
_NOT_A_COURTESY = re.compile(r"[于其上下而儿开不之以也矣者]")
# 号 before these is a verb or a noun (号令, 号哭, 号曰), not a sobriquet.
_NOT_A_SOBRIQUET = "令哭曰召称为泣叫呼啕恸"
# 字 or 号 inside a word this common (jieba's frequency: 关键字, 数字, 型号, 号称) is a modern word,
# not a courtesy name (字义 56, 字元 3 are courtesy names of the novel).
_COMMON_WORD = 100


def _stated(sentence: str, before: str, corpus: Counts, lexicon: Lexicon) -> Iterable[tuple[str, str, Naming]]:
    """(alias, name, how) for each courtesy name or sobriquet stated with the whole name."""
    for match in _FAMILY.finditer(sentence):
        yield match.group(3), match.group(1) + match.group(2), "stated"
        if renamed := _RENAMED.match(sentence[match.end() :]):
            yield renamed.group(1), match.group(1) + match.group(2), "stated"
        if (nicknamed := _THEN_NICKNAMED.match(sentence[match.end() :])) and (
            sobriquet := best_prefix(nicknamed.group(1), corpus)
        ):
            yield sobriquet, match.group(1) + match.group(2), "stated"
    for match in _COURTESY.finditer(sentence):
        if (match.group(2) == "号" and match.group(3)[0] in _NOT_A_SOBRIQUET) or _in_word(sentence, match, lexicon):
            continue
        name = best_suffix(match.group(1), corpus)
        if name and not _NOT_A_NAME.search(name) and not _FAMILY.search(sentence) and not lexicon.refers(name):
            # A sobriquet has 2 to 4 characters; the corpus says which prefix is used (卧龙, not 卧龙先生).
            nickname = _SOBRIQUET.fullmatch(match.group(2))
            alias = best_prefix(match.group(3), corpus) if nickname else match.group(3)[:2]
            if alias and not _NOT_A_COURTESY.search(alias):
                yield alias, name, "stated"


def _given(sentence: str, before: str, corpus: Counts, lexicon: Lexicon) -> Iterable[tuple[str, str, Naming]]:
    """(alias, full name, how) for a courtesy name stated of a given name alone: the full name is the
    last one the text `before` the sentence writes it in (「先见友人法正。正字孝直」: 法正, where the corpus
    says the name starts), else, after 名 (次子名权，字仲谋), the one the corpus most often writes it with, a
    common surname first (孙权)."""
    if _FAMILY.search(sentence):  # 姓庞，名德，字令明: the whole name is stated
        return
    for pattern in (_NAMED_GIVEN, _GIVEN_ALONE):
        for match in pattern.finditer(sentence):
            given, alias = match.group(1), match.group(2)
            if _NOT_A_NAME.search(given) or _NOT_A_COURTESY.search(alias):
                continue
            if max(lexicon.frequency(given[-1] + "字"), lexicon.frequency("字" + alias[0])) >= _COMMON_WORD:
                continue  # 数字可能, 汉字编码, 字母表: a word, not a courtesy name
            full = _last_written(given, before, corpus)
            if full is None and pattern is _NAMED_GIVEN:
                full = full_name(given, corpus.corpus)
            if full:
                yield alias, full, "stated"


def _last_written(given: str, before: str, corpus: Counts) -> str | None:
    """The last full name in `before` that ends with `given` (the corpus says where it starts)."""
    at = before.rfind(given)
    while at > 0:
        run = re.search(f"[{CJK}]+$", before[max(0, at - 3) : at + len(given)])
        name = best_suffix(run.group(), corpus) if run and len(run.group()) > len(given) else None
        if name and len(name) > len(given):  # a suffix of the run: it ends with `given`
            return name
        at = before.rfind(given, 0, at)
    return None


def _in_word(sentence: str, match: re.Match[str], lexicon: Lexicon) -> bool:
    """Whether the courtesy mark of `match` (字, 号) is part of a common word (关键字, 型号, 字母)."""
    start, end = match.span(2)
    around = [sentence[max(0, start - k) : end] for k in (1, 2)] + [sentence[start : end + 1]]
    return any(lexicon.frequency(word) >= _COMMON_WORD for word in around)


RULES: tuple[NamingRule, ...] = (_stated, _given)
