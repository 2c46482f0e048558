"""Aliases mined from a base's own documents: 简称 and 全称, 又名, a term and its equivalent in brackets.

People and things are named many ways (简称, 全称, 又称, 俗称, 别名, 学名, 原名, 古称, 英文缩写,
（以下简称“甲方”）, English abbreviations in brackets) and a keyword list knows one of them. While
indexing, `mine` finds the naming patterns of modern Chinese in the documents, and those of the base's
text profile (`core.profiles`: a classical novel's 字 and 号); a
candidate is kept only when the corpus confirms it (both names occur elsewhere: co-occurrence, not
a one-off phrase), and the name before the pattern is cut where the corpus says a name ends (林晓舟,
not 乃林晓舟), or, for a definition, where jieba's nouns end (北京蓝鲸科技有限公司, not 本合同由…).
Brackets also hold remarks (（可选）, （草案））, which are told apart (`_bracketed`).
Each alias keeps the sentence it came from, its document and that document's access groups: an
alias mined only from documents a caller may not read is neither used nor shown for that caller
(`visible`). At query time `expansions` gives, for a query naming one side, the other.
"""

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from core.access import ALL_DOCUMENTS, DocumentAccess
from core.text import NAME_TAGS

logger = logging.getLogger(__name__)

Origin = Literal["mined", "admin", "removed"]
# How a sentence names a pair: said in words (简称, 又名 …), defined for what precedes (（以下简称“甲方”）),
# or only put in brackets (马铃薯（土豆）).
Naming = Literal["stated", "defined", "bracketed"]

CJK = "\u4e00-\u9fff"
# 世界卫生组织，简称世卫组织 / 又名“青鸟号”: 又名, 又称, 简称, 全称, 俗称 …
_ALSO_NAMED = "又名|又称|亦称|别称|俗称|简称|全称|又叫"
_ALSO = re.compile(
    rf"(?P<name>[{CJK}A-Za-z0-9]{{2,12}})[，,]?(?:也|亦|又|通|一般)?(?:{_ALSO_NAMED})"
    + rf"(?:为|作)?[“\"「『《]?(?P<alias>[{CJK}A-Za-z0-9]{{2,12}})"
)
# 鲁迅，原名周树人 / 北京，古称燕京 / 氯化钠的俗名叫食盐 / 中央处理器，英文缩写CPU: another name, an older
# one, or the English one. These follow a clause as often as a name (本站在1900年启用时，原名糠之目), so the
# name is the whole run from the sentence's start or its last punctuation, and the corpus must confirm it
# as it stands; a Latin name runs to its last letter (Apple Inc., not Apple).
_ENGLISH_NAMED = "英文名称|英文名|英文全称|英文简称|英文缩写|缩写"  # these name a Latin name
_FORMERLY_NAMED = f"别名|亦名|也叫|也称|俗名|学名|古称|古名|旧称|旧名|原名|本名|曾用名|正式名称|全名|{_ENGLISH_NAMED}"
_FORMERLY = re.compile(
    rf"(?<![{CJK}A-Za-z0-9、])(?P<name>(?:(?!的)[{CJK}A-Za-z0-9]){{2,12}})的?[，,]?(?P<marker>{_FORMERLY_NAMED})"
    + rf"(?:为|作|是|叫)?[:：]?[“\"「『《]?(?P<alias>[{CJK}]{{2,12}}|[A-Za-z][A-Za-z0-9.&\- ]{{0,40}}[A-Za-z0-9.])"
)
# A term and what its brackets say it is also called (`_bracketed`): a definition's whole name may be
# long (中华人民共和国个人信息保护法), the start of another name is looked for in the last `_NAME_RUN`.
_NAME_RUN = 12
_BRACKETED = re.compile(
    rf"(?P<name>[{CJK}]{{2,30}}|[A-Za-z][A-Za-z0-9\-]{{1,15}})[（(](?P<inner>[^（）()]{{1,60}})[)）]"
)
# 榅桲（又名木梨） / 老舍（原名：舒庆春）: another name in brackets (a Latin one is an abbreviation's: `_LABEL`).
_MARKED = re.compile(
    rf"^(?:也|亦|又)?(?:{_ALSO_NAMED}|{_FORMERLY_NAMED})(?:为|作|是|叫)?[:：]?(?P<alias>[{CJK}]{{2,12}})$"
)
# 乙方（以下简称“用户”） / （下称本产品） / （简称：ECS）: a name the document defines for what precedes.
_HEREINAFTER = re.compile(rf"^(?:以下|下文|下)?(?:简称|称)(?:为|作)?[:：]?(?P<alias>[{CJK}A-Za-z0-9]{{2,12}})$")
# 英文缩写/简称/即 … before an abbreviation in brackets: （Elastic Compute Service，简称ECS）
_LABEL = re.compile(r"^(?:英文(?:名称?|全称|缩写|简称)?|缩写|简称|又称|亦称|即)(?:为|是)?[:：]?\s*")
# An abbreviation: a letter first, a capital somewhere (WHO, HbA1c; not mg or optional, a unit or a remark).
_ABBREVIATION = re.compile(r"^(?=[^A-Z]*[A-Z])[A-Za-z][A-Za-z0-9\-.]{1,15}$")
_QUOTES = str.maketrans("", "", "“”\"「」『』‘’'")
_SENTENCE = re.compile(r"[^。！？；!?\n]*[。！？；!?\n]?")

_BEFORE = 200  # characters before a sentence a profile's rule may read (an earlier full name)
MIN_COUNT = 2  # each side must occur at least this often in the corpus (the defining sentence included)
MAX_SOURCES = 3  # sentences kept per pair (the first documents that define it)
# Budgets (issue 58): one document names at most so many pairs (a glossary, not 2,000 names for one word),
# a base keeps at most so many (an admin's first), and a query term gets at most so many expansions
# (the best attested first), a query at most `MAX_EXPANSIONS` in all.
MAX_PER_DOCUMENT = 64
MAX_PER_BASE = 5000
MAX_PER_TERM = 4
MAX_EXPANSIONS = 12
# Words that name a role, not someone: every contract has its 甲方, every handbook its 用户 and 患者. The
# other generic words are found, not listed: a word jieba knows as a common word (not tagged a proper
# noun) this often (公司 45,604, 用户 7,103, 患者 3,932, against 高血压 876, 土豆 493), or such a word
# after a deictic 本/该/此 … (本公司, 本产品).
GENERIC_REFERENTS = frozenset({"甲方", "乙方", "丙方", "丁方", "买方", "卖方", "患者", "本人", "用户"})
_GENERIC_FREQUENCY = 2000
_DEICTIC = "本该此其贵我"
# A preposition or conjunction a definition's name may be cut with (适用于青禾智能科技有限公司 → 于…).
_LEADING_FUNCTION = "于对向在从由与和及被把将给为自以按经凡"


@dataclass(frozen=True)
class AliasSource:
    """Where a pair was found (or who added it): the sentence, its document and the document's groups."""

    sentence: str
    doc_id: str
    label: str  # how the document is cited (《员工手册》第3章 …)
    access: tuple[str, ...] = ()  # the document's groups; empty: everyone who reads the base

    def to_meta(self) -> dict[str, Any]:
        return {"sentence": self.sentence, "doc_id": self.doc_id, "label": self.label, "access": list(self.access)}


@dataclass(frozen=True)
class Alias:
    """`alias` names what `name` names; `origin` mined from the documents, added by an admin, or a mined
    pair an admin removed (kept so that the next run does not mine it back; never used)."""

    alias: str
    name: str
    sources: tuple[AliasSource, ...]
    origin: Origin = "mined"

    def to_meta(self) -> dict[str, Any]:
        return {
            "alias": self.alias,
            "name": self.name,
            "origin": self.origin,
            "sources": [source.to_meta() for source in self.sources],
        }

    @classmethod
    def from_meta(cls, stored: dict[str, Any]) -> "Alias":
        sources = tuple(
            AliasSource(s.get("sentence", ""), s.get("doc_id", ""), s.get("label", ""), tuple(s.get("access") or ()))
            for s in stored.get("sources", [])
        )
        return cls(stored["alias"], stored["name"], sources, stored.get("origin", "mined"))

    def visible(self, access: DocumentAccess) -> "Alias | None":
        """This pair with only the sources `access` may read (None: none). An admin's pair has no
        source document and is for everyone; a removed pair is for no one."""
        if self.origin != "mined":
            return self if self.origin == "admin" else None
        readable = tuple(source for source in self.sources if access.allows(list(source.access)))
        return Alias(self.alias, self.name, readable, self.origin) if readable else None


@dataclass(frozen=True)
class MinedFrom:
    """A document as the miner sees it."""

    doc_id: str
    text: str
    label: str
    access: tuple[str, ...] = ()


class Lexicon(Protocol):
    """What the miner asks of the tokenizer (`core.text.ChineseTokenizer`)."""

    def frequency(self, word: str) -> int: ...

    def trailing_name(self, text: str) -> str: ...

    def refers(self, text: str) -> bool: ...

    def word_tag(self, word: str) -> str | None: ...


class Counts(dict[str, int]):
    """How often each asked string occurs in the corpus (counted once)."""

    def __init__(self, corpus: str) -> None:
        super().__init__()
        self.corpus = corpus

    def __missing__(self, key: str) -> int:
        self[key] = self.corpus.count(key)
        return self[key]


# A profile's naming rule (`core.profiles`): (sentence, the text just before it, corpus counts, lexicon) →
# (alias, name, how) for each pair the sentence names in the profile's own forms.
NamingRule = Callable[[str, str, Counts, Lexicon], Iterable[tuple[str, str, Naming]]]


def best_suffix(run: str, corpus: Counts) -> str | None:
    """Where a name starts in `run`: its longest suffix (2 characters or more) the corpus uses at least
    half as often as the most used one (林晓舟, not 随后林晓舟; 世界卫生组织, not 组织)."""
    return _longest_used([run[i:] for i in range(0, len(run) - 1)], corpus)


def _longest_used(candidates: list[str], corpus: Counts) -> str | None:
    floor = max(MIN_COUNT, max(corpus[c] for c in candidates) / 2)
    used = [c for c in candidates if corpus[c] >= floor]
    return max(used, key=len) if used else None


def _candidates(sentence: str, corpus: Counts, lexicon: Lexicon) -> Iterable[tuple[str, str, Naming]]:
    """(alias, name, how) for each pair one sentence names."""
    for match in _ALSO.finditer(sentence):
        if not _in_brackets(sentence, match.start()) and (name := _name_of(match["name"], corpus)):
            yield match["alias"], name, "stated"
    for match in _FORMERLY.finditer(sentence):
        english = re.fullmatch(_ENGLISH_NAMED, match["marker"])
        if (
            (not english or re.match("[A-Za-z]", match["alias"]))  # not 英文名取为「Mercy…」
            and not _in_brackets(sentence, match.start())
            and not lexicon.refers(match["name"])  # 本站原名…, 从前的旧名…
        ):
            yield match["alias"], match["name"], "stated"
    yield from _bracketed(sentence, corpus, lexicon)


def _in_brackets(sentence: str, position: int) -> bool:
    """Whether `position` lies inside brackets opened before it (`_bracketed` reads those)."""
    opened = max(sentence.rfind("（", 0, position), sentence.rfind("(", 0, position))
    return opened > max(sentence.rfind("）", 0, position), sentence.rfind(")", 0, position))


def _name_of(run: str, corpus: Counts) -> str | None:
    """The name a pattern follows: where the corpus says it starts (Chinese), or the run itself (Latin)."""
    return best_suffix(run, corpus) if re.match(f"[{CJK}]", run) else run


def _bracketed(sentence: str, corpus: Counts, lexicon: Lexicon) -> Iterable[tuple[str, str, Naming]]:
    """A term and what its brackets call it. 北京蓝鲸科技有限公司（以下简称“甲方”） defines 甲方 for the whole
    name before it (jieba's nouns back to the first other word: not 本合同由…); 云服务器（Elastic Compute
    Service，简称ECS） and 糖化血红蛋白（HbA1c） state an abbreviation; 马铃薯（土豆） only puts a word in
    brackets, which counts when it reads as a name (not 可选, 推荐, 一线用药: remarks) and, in `mine`,
    follows no other term."""
    for match in _BRACKETED.finditer(sentence):
        inner = match["inner"].translate(_QUOTES).strip()
        if defined := _HEREINAFTER.match(inner):
            if whole := lexicon.trailing_name(match["name"]):
                yield defined["alias"], whole, "defined"
            continue
        if not (name := _name_of(match["name"][-_NAME_RUN:], corpus)):
            continue
        for segment in re.split(r"[，,、；;]", inner):
            labelled = _LABEL.sub("", segment.strip())
            if _ABBREVIATION.match(labelled):
                yield labelled, name, "stated" if labelled != segment.strip() else "bracketed"
            elif marked := _MARKED.match(segment.strip()):
                # The whole name jieba reads before the brackets (山东女子学院, not the corpus's most used
                # end, 学院), else where the corpus says it starts (榅桲, a word jieba does not know).
                yield marked["alias"], lexicon.trailing_name(match["name"]) or name, "stated"
        if re.fullmatch(f"[{CJK}]{{2,8}}", inner) and lexicon.trailing_name(inner) == inner:
            yield inner, name, "bracketed"


def best_prefix(run: str, corpus: Counts) -> str | None:
    """Where a name ends in `run` (a profile's rule reads one after its mark), the same way (青鸟, not
    青鸟先生 when that is rarer)."""
    return _longest_used([run[: i + 1] for i in range(1, len(run))], corpus)


def generic(word: str, lexicon: Lexicon) -> bool:
    """Whether `word` names a role or a kind (公司, 本公司, 患者, 本人, 用户, 本产品), not someone or something."""
    if word in GENERIC_REFERENTS:
        return True
    if word[0] in _DEICTIC and len(word) > 2 and (lexicon.frequency(word[1:]) > 0 or generic(word[1:], lexicon)):
        return True  # 本公司, 该产品, 本合同: "this" and a word
    tag = lexicon.word_tag(word)
    return tag is not None and not tag.startswith(NAME_TAGS) and lexicon.frequency(word) >= _GENERIC_FREQUENCY


def _bare(name: str, lexicon: Lexicon) -> str:
    """`name` after a preposition or conjunction it was cut with (适用于青禾智能科技有限公司 → 于青禾…, 本协议由
    青禾… → 协议由青禾…: jieba glues 于青禾 as a name): the last such character that is no part of a word
    (共和国, 和平) and leaves three characters or more. A short name (于洋, 于晓明) is left whole."""
    # `around`: the words of two to four characters the character could belong to (以色列, 共和国).
    for at in range(len(name) - 4, -1, -1):
        around = (name[start:end] for start in range(max(0, at - 3), at + 1) for end in range(at + 1, at + 5))
        if name[at] in _LEADING_FUNCTION and not any(len(word) > 1 and lexicon.frequency(word) for word in around):
            return name[at + 1 :]
    return name


def _stated(
    document: MinedFrom, corpus: Counts, lexicon: Lexicon, rules: Sequence[NamingRule]
) -> Iterable[tuple[str, str, str, Naming]]:
    """(sentence, alias, name, how) of every candidate pair the document states (by the profile's `rules`,
    then the default patterns), both sides bare."""
    for span in _SENTENCE.finditer(document.text):
        sentence, before = span.group(), document.text[max(0, span.start() - _BEFORE) : span.start()]
        profiled = (pair for rule in rules for pair in rule(sentence, before, corpus, lexicon))
        for alias, name, how in (*profiled, *_candidates(sentence, corpus, lexicon)):
            yield sentence, _bare(alias, lexicon), _bare(name, lexicon), how


def _named(
    documents: Sequence[MinedFrom], lexicon: Lexicon, rules: Sequence[NamingRule]
) -> Iterable[tuple[MinedFrom, str, str, str, Naming]]:
    """(document, sentence, alias, name, how) of every pair the corpus confirms, neither side generic, at
    most `MAX_PER_DOCUMENT` distinct pairs a document."""
    corpus = Counts("\n".join(document.text for document in documents))
    for document in documents:
        pairs: set[tuple[str, str]] = set()
        for sentence, alias, name, how in _stated(document, corpus, lexicon, rules):
            if alias == name or corpus[alias] < MIN_COUNT or corpus[name] < (1 if how == "defined" else MIN_COUNT):
                continue
            if generic(alias, lexicon) or generic(name, lexicon):
                continue
            if (alias, name) not in pairs and len(pairs) >= MAX_PER_DOCUMENT:
                logger.warning("document %r names over %d aliases: the rest are ignored", document.doc_id, len(pairs))
                break
            pairs.add((alias, name))
            yield document, sentence, alias, name, how


def mine(documents: Sequence[MinedFrom], lexicon: Lexicon, rules: Sequence[NamingRule] = ()) -> list[Alias]:
    """Every pair the documents state and the corpus confirms (each side at least `MIN_COUNT` times; a
    name defined for what precedes it is often written out once, its short name is what recurs), with
    up to `MAX_SOURCES` defining sentences, in the order first found. A pair only put in brackets is
    dropped when the same brackets follow another term too (（草案）, （可选）: a remark, not a name); a
    generic word (`generic`) is no side of a pair. `rules`: the base's text profile's own naming rules
    (`core.profiles.naming_rules`), run before the default patterns; none on the default path."""
    found: dict[tuple[str, str], list[AliasSource]] = {}
    bracketed: dict[str, set[str]] = {}  # an alias only put in brackets → the terms it followed
    for document, sentence, alias, name, how in _named(documents, lexicon, rules):
        if how == "bracketed":
            bracketed.setdefault(alias, set()).add(name)
        sources = found.setdefault((alias, name), [])
        if len(sources) < MAX_SOURCES and all(s.doc_id != document.doc_id for s in sources):
            sources.append(AliasSource(sentence.strip(), document.doc_id, document.label, document.access))
    remarks = {alias for alias, names in bracketed.items() if len(names) > 1}
    return [Alias(alias, name, tuple(sources)) for (alias, name), sources in found.items() if alias not in remarks]


def merged(
    stored: Sequence[Alias], mined: Sequence[Alias], doc_ids: set[str], visible: DocumentAccess = ALL_DOCUMENTS
) -> list[Alias]:
    """A base's aliases after a run over `doc_ids` that sees `visible`: an admin's pairs (added or removed)
    kept, other documents' sources kept, the run's documents' sources it may read replaced by what was
    mined from them now. A source the run may not read stays: an upload under a hidden document's id
    changes nothing of that document's. At most `MAX_PER_BASE` pairs, an admin's first, then the
    stored ones, then the new."""
    pairs: dict[tuple[str, str], Alias] = {}
    for entry in stored:
        kept = tuple(
            source
            for source in entry.sources
            if entry.origin != "mined" or source.doc_id not in doc_ids or not visible.allows(list(source.access))
        )
        if kept or entry.origin != "mined":
            pairs[(entry.alias, entry.name)] = Alias(entry.alias, entry.name, kept, entry.origin)
    for entry in mined:
        old = pairs.get((entry.alias, entry.name))
        if old is None:
            pairs[(entry.alias, entry.name)] = entry
        elif old.origin == "mined":
            pairs[(entry.alias, entry.name)] = Alias(entry.alias, entry.name, (*old.sources, *entry.sources))
    ordered = sorted(pairs.values(), key=lambda entry: entry.origin == "mined")  # stable: an admin's first
    if len(ordered) > MAX_PER_BASE:
        logger.warning("%d aliases, more than MAX_PER_BASE=%d: the last mined are dropped", len(ordered), MAX_PER_BASE)
    return ordered[:MAX_PER_BASE]


def corrected(stored: Sequence[Alias], wanted: Sequence[tuple[str, str]]) -> list[Alias]:
    """The base's aliases once an admin says which pairs it has (`wanted`, (alias, name)): a pair already
    there keeps its sources (a removed one comes back as mined), a new one is the admin's, and a mined
    pair left out is kept as removed, so that re-indexing does not mine it back."""
    before = {(entry.alias, entry.name): entry for entry in stored}
    pairs: dict[tuple[str, str], Alias] = {}
    for pair in wanted:
        old = before.get(pair)
        if old is None or (old.origin == "removed" and not old.sources):
            pairs[pair] = Alias(*pair, (), "admin")
        else:
            pairs[pair] = Alias(*pair, old.sources, "admin" if old.origin == "admin" else "mined")
    for pair, entry in before.items():
        if pair not in pairs and entry.sources:  # an admin's own pair left out is simply gone
            pairs[pair] = Alias(*pair, entry.sources, "removed")
    return list(pairs.values())


@dataclass(frozen=True)
class Expansion:
    """A query term and what else names it, with where that was learnt (the query analysis shows it)."""

    term: str
    expansion: str
    source: str  # 「第3章: 世界卫生组织，简称世卫组织……」, or 「管理员添加」

    @property
    def text(self) -> str:
        return f"{self.term} → {self.expansion}, {self.source}"


def expansions(aliases: Sequence[Alias], query: str, access: DocumentAccess) -> list[Expansion]:
    """For each pair the caller may see whose one side the query names (and not the other), the other side.
    Letters match in any case (ecs asked, ECS defined). At most `MAX_PER_TERM` a term (an admin's, then
    the most attested first) and `MAX_EXPANSIONS` in all: no base's aliases can make a query too big."""
    asked = query.casefold()
    offered: list[tuple[Alias, str, str]] = []
    for entry in aliases:
        seen = entry.visible(access)
        if seen is not None:
            offered += [
                (seen, term, other)
                for term, other in ((seen.alias, seen.name), (seen.name, seen.alias))
                if term.casefold() in asked and other.casefold() not in asked
            ]
    offered.sort(key=lambda found: (found[0].origin != "admin", -len(found[0].sources)))  # stable
    found: dict[str, Expansion] = {}
    per_term: dict[str, int] = {}
    for seen, term, other in offered:
        if other in found or per_term.get(term, 0) >= MAX_PER_TERM or len(found) >= MAX_EXPANSIONS:
            continue
        per_term[term] = per_term.get(term, 0) + 1
        source = f"{seen.sources[0].label}: {seen.sources[0].sentence}" if seen.sources else "管理员添加"
        found[other] = Expansion(term, other, source)
    return list(found.values())
