"""A question that states a claim and asks only to have it confirmed (…对吗, …对吧, …是吗, …吧？), and
whether the documents state it, say its opposite, or say nothing of it (also 就…了吗, which presumes).

「试用期内也能休年假吧？」 takes an answer for granted. The quote that shares its words is no
confirmation: without a model the answer may say the claim holds only when a source says it.

- **Opposite polarity** (`contradicted`): the source clause that says most of the claim negates what
  the claim affirms (「试用期内不享受年假」), or affirms what it negates (「30分钟以内不扣钱」 against
  「30分钟以内，每次扣发50元」); a negation inside a modifier (「未开封的胰岛素」) is no denial.
- **Opposite change** (`contradicted`): the claim says a quantity grows (变长, 增加, 提高 …) and the
  source says it shrinks (缩短, 减少, 降低 …), or the other way round.
- **Not stated** (`unstated`): no source sentence says half of the claim's words with every figure of
  the claim: 「阿卡波糖是饭后一小时再吃的」 against 「阿卡波糖需要在吃第一口饭时嚼碎服用」.

Shapes only (negation, change, coverage of the claim): no word of any domain.
"""

import re
from collections.abc import Sequence

from core.chunking import split_sentences
from retrieval.conflicts import Quote, Units, figures_of
from retrieval.premises import Denial, is_amount

# A tag that turns a statement into a request for confirmation (a plain 吗 asks; these presume).
_TAG = re.compile(r"[，,、\s]*(?:对吗|对吧|对不对|是吗|是吧|是不是|是这样吗|是这样吧|没错吧|没错吗|吧)[？?！!。\s]*$")
# Words and characters that carry no content of a claim (modal, aspect, focus, copula): a bigram
# holding one need not be said (cut out of the text, a word would break: 功能, 地点).
_FUNCTION_WORDS = re.compile(r"应该|应当|一定|可以|能够|只能|的话|真的")
_FUNCTION = frozenset("的了吗吧呢啊呀也都就才还再又很最是能会要得地着过")
# A negation of a predicate (不享受, 禁止, 无需); a bound (不满, 不超过, 不要超过) or 不同/不少/无论 is none.
_NEGATION = re.compile(
    r"(?:不|没有|没|无|未|非|禁止|切勿|请勿|严禁|勿|别)"
    r"(?!(?:要|能|得|可|应|宜)?(?:满|足|到|超过|高于|低于|少于|多于|大于|小于)|同|少|论|限)"
)
_NEGATION_CHARS = frozenset("不没无未非禁止切勿请严别")
_CLAUSES = re.compile(r"[，,；;：:。！!？?\n|]+")
_GROWS = "变长|延长|增加|增多|变多|提高|升高|上升|变大|加快|变快|增强|变高|更长|更高|更多|加长|增长"
_SHRINKS = "缩短|变短|减少|变少|降低|下降|变小|减慢|变慢|减弱|变低|更短|更低|更少|减短|减小"
_CHANGE = {"grows": re.compile(_GROWS), "shrinks": re.compile(_SHRINKS)}
_WORD_CHAR = re.compile(r"[0-9A-Za-z\u4e00-\u9fff]")

MIN_SAID = 0.5  # share of the claim's bigrams a source text must say to state it (with its figures)
MIN_OPPOSED = 0.6  # to say it the other way: saying otherwise claims more, so more must be shared
MIN_IN_SENTENCE = 0.35  # of them, the share the sentence itself must say (the rest may be its section's)
_SECTION = 400  # characters of a source before a sentence that may name its subject (a heading)
_MIN_CLAUSE = 3  # bigrams a claim clause needs to be compared on its own
_REACH = 6  # characters after a negation that say what it negates


# 「电量低于50%时门锁就只能用钥匙开了吗」: 就 … 了吗 presumes what it asks, as a tag does.
_PRESUMED = re.compile(r"就[^，,。；;？?]*?(?P<tag>了吗)[？?！!。\s]*$")


def claim_of(part: str) -> str | None:
    """The claim a confirmation question states (试用期内也能休年假吧 → 试用期内也能休年假), or None."""
    if presumed := _PRESUMED.search(part):
        return part[: presumed.start("tag")].strip()
    found = _TAG.search(part)
    if found is None or found.start() == 0:
        return None
    return part[: found.start()].strip()


def _content_bigrams(text: str) -> set[str]:
    """The character bigrams of `text`'s content: none holding a function word or a negation."""
    kept = "".join(_WORD_CHAR.findall(_FUNCTION_WORDS.sub("的", text)))
    pairs = {kept[i : i + 2] for i in range(len(kept) - 1)}
    return {pair for pair in pairs if not (set(pair) & (_FUNCTION | _NEGATION_CHARS))}


def _share(claim: set[str], text: str) -> float:
    return len(claim & _content_bigrams(text)) / len(claim) if claim else 0.0


def _negated(clause: str, words: set[str]) -> bool:
    """Whether the clause negates something of the claim (`words`): a negation followed by the claim's
    words, not inside a modifier (未开封的胰岛素) nor of another thing in a list (病变未控制)."""
    return any(
        "的" not in clause[found.end() : found.end() + _REACH]
        and _content_bigrams(clause[found.end() : found.end() + _REACH]) & words
        for found in _NEGATION.finditer(clause)
    )


def _change(clause: str) -> str | None:
    found = [sense for sense, pattern in _CHANGE.items() if pattern.search(clause)]
    return found[0] if len(found) == 1 else None


def _about(claim: str, texts: Sequence[tuple[str, str]], least: float = MIN_SAID) -> list[tuple[str, str]]:
    """(source id, sentence) for every source sentence that, with the text of its source before it (its
    section's heading), says at least `least` of the claim's bigrams."""
    words = _content_bigrams(claim)
    found = []
    for source_id, text in texts:
        before = ""
        for sentence in split_sentences(text):
            before += sentence
            if _share(words, before[-_SECTION:]) >= least and _share(words, sentence) >= MIN_IN_SENTENCE:
                found.append((source_id, sentence.strip()))
    return found


def contradicted(part: str, texts: Sequence[tuple[str, str]]) -> Denial | None:
    """The first source sentence (best first) about the claim of `part` whose clause closest to a clause
    of the claim says it with the opposite polarity or the opposite change."""
    claim = claim_of(part)
    if claim is None:
        return None
    clauses = [(c, words) for c in _CLAUSES.split(claim) if len(words := _content_bigrams(c)) >= _MIN_CLAUSE]
    for source_id, sentence in _about(claim, texts, MIN_OPPOSED):
        for each, words in clauses:
            clause = max(_CLAUSES.split(sentence), key=lambda one: _share(words, one))
            if _share(words, clause) < MIN_IN_SENTENCE:
                continue
            change = _change(each)
            if change is not None and _change(clause) not in (None, change):
                return Denial(each, source_id, sentence)
            if change is None and _negated(clause, words) != _negated(each, words):
                return Denial(each, source_id, sentence)
    return None


def unstated(part: str, texts: Sequence[tuple[str, str]], units: Units = frozenset()) -> str | None:
    """The claim of `part` when no source sentence states it: says most of its words (with its section's
    heading) and every figure of it, the same value in the same unit; None when one does, or the part
    states no claim."""
    claim = claim_of(part)
    if claim is None:
        return None
    asked = {(f.unit, f.value) for f in figures_of(Quote(claim, "", "", claim), units) if is_amount(f, units)}
    for _, sentence in _about(claim, texts):
        if asked <= {(f.unit, f.value) for f in figures_of(Quote(sentence, "", "", sentence), units)}:
            return None
    return claim
