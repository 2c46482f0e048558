"""The classical-novel profile: a narrative's false premises, its weapons and mounts, its units.

A base turns it on by its text profile (`retrieval.profiles`, stored in the base's settings); on any
other base none of this runs. Measured on 三国 (bench/results/premises_general.md): kept only where it helps.

「关羽在麦城打败吕蒙之后去了哪里？」 presupposes a victory; the book has 关公…被潘璋部将马忠所获. Every
word of the premise is in that passage, so similarity and keyword coverage call it an answer. Without
a model this module reads the one form such a question takes: a premise clause ending in 之后/以后/后
that claims a success for its subject (打败, 大胜, 守住, 治好, 病好, 赦免, 脱险 …), then what is asked. The
premise is contradicted when a sentence of the part's sources names that subject (or another name
the caller's aliases give it) and, within the same clause run, a setback (被擒, 所获, 兵败, 死于, 首级,
归天, 放去 …), in a passage about the premise's scene (麦城, 吕蒙), or when the roles are reversed: the
loser overcomes the subject (「夏侯存…只一合，被云长砍死」 against 夏侯存打败关羽). A passive clause claims
the success for its agent: 「吕蒙在荆州被关羽斩杀后…」 takes 关羽's victory over 吕蒙 for granted, and
「云长父子遇害」 denies it. The part is then not answered: the answer quotes that sentence and says that
the documents say otherwise (`retrieval.extractive.compose`).

The weapon and mount kinds (「刘备用什么兵器」: a quote holding …剑, …马) and the classical units (里,
丈, 两, 钧 …) join the general ones (`retrieval.answer_kinds`, `retrieval.units`) on such a base, and
its chapter titles (第30回 战官渡本初败绩 劫乌巢孟德烧粮) may be quoted: they say what happens.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.chunking import split_sentences
from core.text import ChineseTokenizer, given_name
from retrieval.answer_kinds import AnswerKind, kind, kinds_with
from retrieval.premises import Denial
from retrieval.profiles import TextProfile
from retrieval.units import Unit

# The premise: a clause of 4 to 30 characters, then 之后/以后/后 and the question (not the 后 of
# 最后, 日后, 背后, 后来, 后主 …).
_PREMISE = re.compile(
    r"^(?P<premise>[^，,。？?]{4,30}?)(?:之后|以后|(?<![最日背然前午随此今其])后(?![来主面人代世宫妃患]))[，,]?(?P<asked>.+)$"
)
# Success claimed for the subject (the premise's first name: 关羽 in 关羽在麦城打败吕蒙).
_SUCCESS = re.compile(
    r"打败|击败|击退|战胜|打赢|大胜|获胜|取胜|得胜|大破|攻进|攻入|攻下|攻破|攻占|夺回|夺取|守住|保住|"
    r"治好|医好|治愈|病好|病愈|痊愈|康复|赦免|饶了|饶恕|救出|救活|救下|救回|脱险|逃脱|逃出|活了|生还|"
    r"斩了|斩杀|杀了|杀死|擒住|擒获|活捉|收服|降服"
)
# The subject ends where the clause before the claim turns to a place or a helper (关羽|在麦城).
_SUBJECT_END = re.compile(r"在|于|让|被|把|将|从|到|率|带|用|与|和|同|跟")
# With 被 the subject undergoes the claim: only these are a success for it (被曹操赦免); any other is
# the agent's (严颜被张飞擒住: 张飞's).
_SPARED = re.compile(r"赦免|饶了|饶恕|放了|救出|救活|救下|救回")
# A setback for whom the sentence names just before it (the same clause run: no 。！？ between).
_SETBACK = (
    r"被擒|被获|所获|被执|被捉|所擒|被杀|所杀|被斩|所斩|被害|遇害|身死|而死|死于|身亡|自刎|自杀|缢死|"
    r"首级|下狱|狱中|兵败|败走|败退|败回|大败而|败后|之败|退兵|不信|放去|放了|放过|不食|归天|而亡|而卒|病故|病亡"
)
_FIRST_CALENDAR_YEAR = 1000  # a figure in 年 from here on is a year, not a span
_GAP = 12  # characters at most between the subject's name and the setback
# A kinsman right after the name is whose setback it is (卓母亦被杀, 关羽子关平被擒); 父子 and 兄弟
# include the subject (关公父子皆遇害).
_KIN = re.compile(r"[母父妻子女兄弟妾侄](?![子弟])")
# Nor are those of the people under the subject (关羽部将…被擒, 孙越帐下之人…); its army's are its own.
_UNDERLINGS = re.compile(r"(?:的|之)?(?:部将|部下|帐下|手下|麾下|家人|家小|老小)")


@dataclass(frozen=True)
class Premise:
    """What a part takes for granted: the clause, its subject and the success it claims."""

    clause: str
    subject: str
    claim: str
    target: str = ""  # what follows the claim (丁原 in 吕布杀了丁原): a setback said of it is not the subject's
    # A passive clause (吕蒙被关羽斩杀): the subject is the agent, whose setbacks are many and mostly of
    # other days, so only one said in the same clause (no comma between) denies it.
    passive: bool = False
    loser: str = ""  # whom the claim is over, when a name (廖化 in 郑伦杀了廖化, 吕蒙 in 吕蒙被关羽斩杀)
    # The event's other words (麦城, 吕蒙 in 关羽在麦城打败吕蒙): a setback denies the claim only in a
    # passage about that event, not the subject's death in another (「后夏侯渊为黄忠所斩」 against
    # 夏侯渊杀了龚都).
    scene: tuple[str, ...] = ()


def premise_of(part: str, tokenizer: ChineseTokenizer | None = None) -> Premise | None:
    """The premise a part takes for granted, when it claims a success for a named subject. The
    subject ends at a place or a helper (关羽|在麦城); when nothing marks its end (曹丕亲征东吴大胜),
    it is the name the clause opens with, as the `tokenizer` reads it."""
    found = _PREMISE.match(part)
    if found is None:
        return None
    clause = found["premise"]
    claim = _SUCCESS.search(clause)
    if claim is None:
        return None
    before = clause[: claim.start()]
    end = _SUBJECT_END.search(before, 2)  # a name may start with one of them (于禁, 和洽)
    subject = before[: end.start()] if end else before
    if len(subject) > 4 and tokenizer is not None:
        subject = next((name for name in tokenizer.names(before)[:1] if before.startswith(name)), subject)
    if not 2 <= len(subject) <= 4:
        return None
    passive = before.rfind("被")
    if passive >= 0 and not _SPARED.fullmatch(claim.group()):
        # 吕蒙在荆州被关羽斩杀: the success is the agent's (关羽), over the one the clause opens with.
        agent = before[passive + 1 :]
        if not 2 <= len(agent) <= 4:
            return None
        scene = _scene(clause, agent, claim.group(), tokenizer)
        return Premise(clause, agent, claim.group(), subject, passive=True, loser=subject, scene=scene)
    target = clause[claim.end() :]
    loser = _leading_name(target, tokenizer)
    return Premise(
        clause, subject, claim.group(), target, loser=loser, scene=_scene(clause, subject, claim.group(), tokenizer)
    )


def _scene(clause: str, subject: str, claim: str, tokenizer: ChineseTokenizer | None) -> tuple[str, ...]:
    """The clause's words of two characters or more that are neither its subject nor its claim."""
    if tokenizer is None:
        return ()
    words = tokenizer.content_words(clause.replace(subject, " ").replace(claim, " "))
    return tuple(dict.fromkeys(word for word in words if len(word) > 1))


def _leading_name(text: str, tokenizer: ChineseTokenizer | None) -> str:
    """The name `text` opens with (廖化 in 廖化, 曹操 in 曹操的大军), or nothing."""
    if tokenizer is not None:
        return next((name for name in tokenizer.names(text)[:1] if text.startswith(name)), "")
    return text if 2 <= len(text) <= 4 else ""


def contradiction(
    premise: Premise, texts: Sequence[tuple[str, str]], names: Mapping[str, Sequence[str]]
) -> tuple[str, str] | None:
    """The first (source id, sentence) among `texts` ((id, text) pairs, best first) that names the
    premise's subject, by its name or another one the caller may see, with a setback right after it;
    failing that, by its one-character given name (曹操: 「操自赤壁败后」)."""
    given = given_name(premise.subject)
    for forms in ((premise.subject, *names.get(premise.subject, ())), (given,) if given else ()):
        if forms and (found := _first_setback(forms, premise, texts)):
            return found
    return _reversed(premise, texts, names) if premise.loser else None


# The loser's hand on the subject: a kill, a capture or a defeat (被甘宁一刀斩于马下, 斩郑伦, 为陆逊所败).
_OVERCOME = r"斩|杀|砍|刺|擒|捉|获|射|败|破"
_CLAUSE_MARKS = "，,；;：:"


def _reversed(
    premise: Premise, texts: Sequence[tuple[str, str]], names: Mapping[str, Sequence[str]]
) -> tuple[str, str] | None:
    """The first sentence where the premise's loser overcomes its subject: 「马延正欲交锋，早被甘宁一刀斩于马下」
    against 马延斩了甘宁, 「被廖化一刀，斩郑伦于马下」 against 郑伦杀了廖化, 「…为陆逊所败」 against a victory over
    陆逊 (the loser's other names count, as the subject's do)."""
    winner = "|".join(re.escape(form) for form in (premise.subject, *names.get(premise.subject, ())))
    loser = "|".join(re.escape(form) for form in (premise.loser, *names.get(premise.loser, ())))
    nearest = rf"(?:(?!{winner})[^。！？!?])"  # the clause after the subject's last mention before the 被
    passive = re.compile(
        rf"(?:{winner})(?P<before>{nearest}{{0,30}}?)被(?:{loser})[^。！？!?，,]{{0,6}}?(?:{_OVERCOME})"
    )
    active = re.compile(rf"(?:{loser})[^。！？!?]{{0,10}}?(?:{_OVERCOME})[了死杀于]?(?:{winner})")
    undergone = re.compile(rf"(?:{winner})[^。！？!?]{{0,12}}?为(?:{loser})所(?:{_OVERCOME}|害)")
    for source_id, text in texts:
        for sentence in split_sentences(text):
            undergoes = any(_nobody_else(found["before"]) for found in passive.finditer(sentence))
            if undergoes or active.search(sentence) or undergone.search(sentence):
                return source_id, sentence.strip()
    return None


def _nobody_else(before: str) -> bool:
    """Whether a 被 after the subject's name is said of the subject: at most two characters of its
    clause come before it (「马延正欲交锋，早被甘宁…」, 「只一合，被云长砍死」), and the name is not
    followed by a kinsman or someone under the subject (「马延部将周平正欲交锋，被甘宁…」)."""
    last = max(before.rfind(mark) for mark in _CLAUSE_MARKS)
    return len(before) - last - 1 <= 2 and not _someone_elses(before)


def _someone_elses(after_name: str) -> bool:
    """Whether what follows the subject's name makes it someone else's: a kinsman (卓母亦被杀) or
    people under the subject (关羽部将…, 孙越帐下之人…)."""
    return bool(_KIN.match(after_name) or _UNDERLINGS.match(after_name))


def _first_setback(forms: Sequence[str], premise: Premise, texts: Sequence[tuple[str, str]]) -> tuple[str, str] | None:
    """The first sentence, in a text about the premise's scene, where one of `forms` is followed, within
    the clause run (within the clause, for a passive premise), by a setback that is the subject's own:
    not the premise's target's (「布向前，一刀砍下丁原首级」: the head is 丁原's), a kinsman's (卓母亦被杀)
    or the subject's men's, not supposed, wished for or refused, and not said after whom another fought."""
    names = "|".join(re.escape(form) for form in forms)
    stops = "。！？!?，,；;：:" if premise.passive else "。！？!?"
    # A lookahead, so that every mention of the subject is read (「魏延与杨柏交战，不十合，杨柏败走」)
    setback = re.compile(rf"(?=(?P<name>{names})(?P<between>[^{stops}]{{0,{_GAP}}}?)(?P<setback>{_SETBACK}))")
    targets = [premise.target[i : i + 2] for i in range(len(premise.target) - 1)]
    for source_id, text in _about_the_scene(premise, texts):
        for sentence in split_sentences(text):
            found = setback.finditer(sentence)
            if any(
                _subjects_own(one["between"], one["setback"], targets) and _named_here(premise, sentence, one)
                for one in found
            ):
                return source_id, sentence.strip()
    return None


def _about_the_scene(premise: Premise, texts: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The texts naming one of the premise's scene words (all of them when it has none). A longer word
    counts by its first two characters too: a place's name without its kind (赤壁 of 赤壁之战, 落凤 of
    落凤坡: 「操自赤壁败后」)."""
    heads = {word[:2] for word in premise.scene}
    return [(i, text) for i, text in texts if not heads or any(head in text for head in heads)]


# Just before the name, what makes the setback not the named one's: a supposition (「倘布败回」), or a
# wish, a verb between (「愿斩张郃首级」: not 「备若知云长父子遇害」, where 刘备 learning of it is
# supposed); or the name is whom the clause's subject met or fought (「孟达…与张郃交锋，大败而回」,
# 「姜叙、杨卓如何抵得马超，大败而走」): the setback is the subject's.
_NOT_ITS_OWN = re.compile(r"(?:[倘若如假与和同跟及]|[愿欲誓必抵敌遇].)$")


def _named_here(premise: Premise, sentence: str, found: re.Match[str]) -> bool:
    """Whether the setback `found` after a name of the subject may be the subject's: the name is not a
    given name inside the full one (张|郃, read with the full name), nor after what makes the setback
    someone else's (`_NOT_ITS_OWN`)."""
    if sentence[: found.end("name")].endswith(premise.subject) and found["name"] != premise.subject:
        return False
    return _NOT_ITS_OWN.search(sentence[max(0, found.start() - 2) : found.start()]) is None


# Before a setback: it is wished, feared or refused, not undergone (「马超言：未成功，不可退兵」).
_NEGATED = re.compile(r"(?:不可|不肯|不敢|不能|不得|不要|勿|莫|休|未)$")
# 所杀, 所擒 …: undergone by the one named before the 为 or 被 that brings in its agent (龚都已被夏侯渊所杀).
# Right after the name, the name is the agent (「龚都已被夏侯渊所杀」 for 夏侯渊); with no agent, the one
# named last (「关公勇猛，颜良、文丑俱为所杀」: 颜良 and 文丑).
_AGENT_BROUGHT_IN = re.compile(r"[为被][^为被]+$")


def _subjects_own(between: str, setback: str, targets: Sequence[str]) -> bool:
    """Whether a setback after the subject's name, `between` characters on, is the subject's own."""
    if _someone_elses(between) or any(t in between for t in targets) or _NEGATED.search(between):
        return False
    return not setback.startswith("所") or _AGENT_BROUGHT_IN.search(between) is not None


_ARMS = "剑刀枪矛戟槊斧钺锤锏弓弩箭叉棍"
KINDS = (
    # A weapon or a mount is named by its class: 双股剑, 青龙偃月刀, 丈八点钢矛; 赤兔马, 的卢.
    # Not a soldier named by his arm (弓手, 弓箭手, 刀斧手).
    # A whip is a weapon when named as one (钢鞭, 铁鞭, 双鞭), not the rider's (扬鞭, 加鞭, 以鞭指).
    AnswerKind("兵器", re.compile(r"兵器|武器"), re.compile(rf"(?:[{_ARMS}]|(?<=[钢铁双节金])鞭)(?![{_ARMS}]*手)")),
    AnswerKind("坐骑", re.compile(r"坐骑|骑(?:的是)?(?:什么|哪匹|哪一匹)马?"), re.compile(r"马|驹|骑")),
    # The classical measures of a weight, a height, a length and an age (年二十四: the classical age).
    kind("重量", r"多重|有多沉|多少斤|几斤|重量", r"两|钧"),
    kind("年份或日期", r"哪一年|哪年|何年", r"年", "元年"),  # 章武元年: the first year of a reign
    kind("身高", r"身高|多高|个子|个头", r"尺|寸"),  # not 里 or 步: a height, not a distance
    kind("长度", r"多长|多高|多远|(?:多少|几)(?:里|尺|丈|寸|步)", r"尺|丈|寸|里|步"),
    kind("年龄", r"几岁|多少岁|多大年纪|享年|终年|年龄", r"岁", r"(?:年|寿|年方|时年)[一二三四五六七八九十]+"),
    kind("金额", r"多少钱|价格|价钱", r"两|金|贯|文"),
)
UNITS = frozenset(
    {
        **{
            name: Unit("长度", scale)
            for name, scale in {"里": 500, "丈": 3.3, "尺": 0.33, "寸": 0.033, "步": 1.6}.items()
        },
        **{name: Unit("质量", scale) for name, scale in {"两": 50, "钧": 15000}.items()},
        "石": Unit("石"),
        "骑": Unit("骑", count=True),
        "回": Unit("回", count=True),
    }.items()
)


def narrative_premise(
    part: str, texts: Sequence[tuple[str, str]], names: Mapping[str, Sequence[str]], tokenizer: ChineseTokenizer
) -> Denial | None:
    """The sentence denying the success `part` takes for granted (`premise_of`, `contradiction`)."""
    premise = premise_of(part, tokenizer)
    found = contradiction(premise, texts, names) if premise else None
    return Denial(premise.clause, *found) if premise and found else None


NAME = "classical-novel"
PROFILE = TextProfile(NAME, units=UNITS, kinds=kinds_with(KINDS), premises=(narrative_premise,), headings_quoted=True)
