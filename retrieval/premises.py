"""A question that takes for granted what the documents say did not happen, and the sentence that says so.

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

A part may also state a figure the documents give otherwise: 「陪产假延长到30天以后需要提交什么材料？」
when the handbook says 男员工享有陪产假15天, 「试用期六个月结束后怎么转正？」 when it says 试用期为三个月
(`figure_premise`), or take for granted what the documents forbid: 「AirFresh P5 放在浴室里用时应该开
哪个模式？」 when the manual says 请勿在浴室等潮湿环境中使用本机 (`forbidden_premise`). A premise of any
other form is left to the verdict.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.chunking import split_sentences
from core.text import ChineseTokenizer, given_name
from retrieval.conflicts import Figure, Quote, figures_of, said_alike

PREMISE_DENIED = "资料所述与问题的前提不符"  # said in the answer, with or without a model

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


def figure_premise(
    part: str, texts: Sequence[tuple[str, str]], tokenizer: ChineseTokenizer
) -> tuple[str, str, str] | None:
    """(the part's clause stating a figure, source id, sentence) when a sentence of `texts` ((id,
    text) pairs, best first) names a word the part puts before its figure (陪产假 in 陪产假延长到30天)
    and states a figure of the same unit, none of them the part's value (15天, not 30天), and no such
    sentence states the part's value (新加坡1974年… is not denied by 新加坡1965年独立 when another
    sentence says 新加坡于1974年…); of several, the one sharing most of the clause's words. An ordinal
    (第二次), an asked count (哪两个) and a year of the calendar (新加坡1974年…: a subject has many)
    state no amount."""
    asked_figures = figures_of(Quote(part, "", "", part))
    if not asked_figures:  # most parts state no figure: the sources are not read for one
        return None
    stated = [figure for source_id, text in texts for figure in figures_of(Quote(part, source_id, source_id, text))]
    found: list[tuple[int, str, str, str]] = []
    for asked in asked_figures:
        before = asked.context.split("，", 1)[0]
        if before.endswith(("第", "哪")) or _calendar(asked):
            continue  # 第二次, 哪两个公司: no amount stated; 1974年: a time, of which a subject has many
        leading = {word for word in tokenizer.content_words(before) if len(word) > 1}
        words = leading | {word for word in tokenizer.content_words(asked.context) if len(word) > 1}
        about = {
            key: values
            for key, values in _values_by_sentence(stated, asked).items()
            if any(word in key[1] for word in leading)
        }
        if any(asked.value in values for values in about.values()):
            continue  # the documents give the part's figure too: a premise they state
        for source_id, sentence in about:
            found.append((sum(word in sentence for word in words), asked.clause, source_id, sentence.strip()))
    if not found:
        return None
    best = max(found, key=lambda hit: hit[0])  # the first of the best: texts come best first
    return best[1], best[2], best[3]


def _calendar(figure: Figure) -> bool:
    """A date or a year of the calendar (1974年), not an amount (30天, 六个月)."""
    return figure.unit == "date" or (figure.unit == "年" and figure.value[0] >= _FIRST_CALENDAR_YEAR)


def _values_by_sentence(stated: Sequence[Figure], asked: Figure) -> dict[tuple[str, str], set[tuple[float, ...]]]:
    """The values each (source id, sentence) of `stated` gives in the unit (and era) of `asked`; of days
    of the week, those said to be what the part says of its day (每周二闭馆: the day 闭馆, not the
    days 开放 in the same sentence)."""
    values: dict[tuple[str, str], set[tuple[float, ...]]] = {}
    for figure in stated:
        if figure.unit == asked.unit and figure.era == asked.era and said_alike(figure, asked):
            values.setdefault((figure.quote.source_id, figure.sentence), set()).add(figure.value)
    return values


# A premise clause that sets a scene (放在浴室里用时, 过滤海水以后), and a prohibition in a document:
# what follows the marker, up to the clause's end, is forbidden (请勿在浴室等潮湿环境中使用本机).
_WHEN = re.compile(r"^(?P<premise>[^，,。？?]{2,30}?)(?:的时候|时(?!候)|之后|以后)")  # not 什么时候: it asks
_FORBIDDEN = re.compile(r"(?:请勿|切勿|严禁|禁止|不得(?!已)|不适用于|不宜)(?P<forbidden>[^，,。；;！!？?：:“”]+)")


def forbidden_premise(
    part: str, texts: Sequence[tuple[str, str]], tokenizer: ChineseTokenizer
) -> tuple[str, str, str] | None:
    """(the part's premise clause, source id, sentence) when the part sets its question in a scene
    (…时, …以后) one of whose words a sentence of `texts` forbids (浴室 in 放在浴室里用时, against
    请勿在浴室…使用本机); the first such sentence, `texts` coming best first. Names do not count: a
    narrative's 「若擒不得赵云」 forbids nothing to 赵云取桂阳时."""
    scene = _WHEN.match(part)
    if scene is None:
        return None
    names = set(tokenizer.names(scene["premise"]))
    words = [word for word in tokenizer.content_words(scene["premise"]) if len(word) > 1 and word not in names]
    for source_id, text in texts:
        for sentence in split_sentences(text):
            forbidden = " ".join(found["forbidden"] for found in _FORBIDDEN.finditer(sentence))
            if any(word in forbidden for word in words):
                return scene["premise"], source_id, sentence.strip()
    return None
