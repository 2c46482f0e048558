"""Each base calibrates itself: the extractive verdict's thresholds and the alias weight, chosen on its
own questions.

The questions: the base's own question set (answerable: each has its relevant chunks) and the knowledge
gaps an admin accepted from ratings (to refuse), when it has at least `MIN_EACH` of a side; the side it
lacks is made by the base about itself without a model (`self_made`, seeded):

- answerable: a sentence with its figure asked (「每日不超过6克」 → 「每日不超过多少克？」), or its subject
  asked (「X是Y」 → 「X是什么？」);
- to refuse: the sentence with its figure changed or its condition turned (以上↔以下, 高于↔低于), its
  subject with an attribute no document of the base mentions, or a term the base never holds in place
  of one of its words.

The alias weight is chosen by retrieval first (`choose_alias_weight`): aliases go off (0) on a base where
its answerable questions rank their chunks worse with them (MRR@10). Then every question runs through the
service's extractive steps at the default thresholds (`answer_locally`, the chosen alias weight), each
part's best similarity and coverage are kept, and `choose` re-judges the questions over a band of
thresholds around the defaults (what a threshold changes is only the verdict, never the quotes).
"""

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from itertools import product

from core.access import Scope
from core.chunking import split_sentences
from core.config import Settings
from core.kbs import Calibration
from core.reader import Reader
from core.schema import Mode
from core.text import ChineseTokenizer
from evaluation.drafts import sample_chunks
from evaluation.metrics import first_relevant
from evaluation.questions import QuestionSet, base_corpus, resolve
from retrieval.extractive import PartAnswer, Thresholds, answer_locally
from retrieval.retriever import RetrievalParams, Retriever

COUNT = 30  # self-made questions of each side by default
MAX_COUNT = 60  # of each side at most: a calibration runs within one request
MIN_EACH = 10  # fewer questions of a side than this: the defaults are kept
KEEP = 0.90  # answerable questions still answered at the chosen thresholds, at least (or as many as at the defaults)
# Balanced accuracy the chosen thresholds must gain over the defaults (dev: bench/results/calibration.md).
MIN_GAIN = 0.05
# Never laxer than the defaults (dev: on 三国 a laxer similarity admitted more false premises), at most this stricter.
SIMILARITY_BAND = (0.0, 0.04)
COVERAGES = tuple(round(0.05 * i, 2) for i in range(9))  # 0 … 0.4, those at least the default
SEED = 59
K = 8  # passages searched per part: the default `k` of POST /query

_FIGURE = re.compile(r"(?<![\d.:：A-Za-z第])(\d+(?:\.\d+)?)(?=\s*[^\d.\s年月日号时点:：/\-~～至])")
_TURNS = (
    ("以上", "以下"),
    ("高于", "低于"),
    ("超过", "不足"),
    ("之前", "之后"),
    ("大于", "小于"),
    ("增加", "减少"),
    ("升高", "降低"),
    ("提前", "推迟"),
    ("允许", "禁止"),
)
_TURNED = {a: b for pair in _TURNS for a, b in (pair, pair[::-1])}
# Not 不超过 (→ 不不足); 以上/以下 only after a figure or grade (二级以上), not 以上简称.
_TURN = re.compile(
    r"(?<!不)(?:"
    + "|".join(w for w in _TURNED if w[0] != "以")
    + r")|(?<=[\d%一二三四五六七八九十百千万级岁度])以[上下]"
)
# 「X是Y」: not 为 (以…为主), and no adverb before 是 (约是, 均是).
_SUBJECT = re.compile(
    r"^(?P<subject>[^，,。；;：:？?！!、\s（(以作成称视]{2,12}?)(?<![约均则即都也就不还仍并])(?:是指|是|为)(?P<rest>[^？?]{2,})"
)
_PRONOUN = re.compile(r"^(?:这|那|它|其|该|此|他|她|我|你|本)")
_ENDS = "。！？!?；;，,：: \t\u3000\n"
# Generic attributes and terms from elsewhere: used only where the base never holds them (`self_made`).
ATTRIBUTES = ("创始人", "邮政编码", "海拔", "人口", "英文名", "股票代码", "注册资本", "出生日期", "保质期", "颜色")
FOREIGN = ("潜水艇", "火山口", "芭蕾舞", "天文台", "冰川", "足球场", "歌剧院", "恐龙", "卫星轨道", "热带雨林")
ANSWERABLE_KINDS = ("figure", "subject")
NEGATIVE_KINDS = ("changed_figure", "turned_condition", "absent_attribute", "foreign_term")


@dataclass(frozen=True)
class Probe:
    """A calibration question: answerable (with the chunks that answer it) or to refuse, and its kind."""

    question: str
    answerable: bool
    kind: str
    relevant: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Figures:
    """A question part's verdict inputs: its best similarity and coverage, and `forced` when something
    other than those two decides it (a premise denied, an attribute no source mentions: False; a
    prohibition quoted: True)."""

    similarity: float
    coverage: float
    vouched: bool = False
    forced: bool | None = None


@dataclass(frozen=True)
class Observed:
    probe: Probe
    parts: tuple[Figures, ...]


def _figure_probes(chunk_id: str, sentence: str) -> list[Probe]:
    """The sentence's first figure asked (answerable), and the sentence with that figure doubled (or
    halved from 50 on) asked as a yes-no question (to refuse)."""
    found = _FIGURE.search(sentence)
    if found is None or float(found[1]) == 0:
        return []
    value = float(found[1])
    changed = value * 2 if value < 50 else value / 2
    shown = f"{changed:.{len(found[1].split('.')[1])}f}" if "." in found[1] else f"{changed:g}"
    asked = f"{sentence[: found.start()]}多少{sentence[found.end() :]}？"
    wrong = f"{sentence[: found.start()]}{shown}{sentence[found.end() :]}吗？"
    return [Probe(asked, True, "figure", frozenset({chunk_id})), Probe(wrong, False, "changed_figure")]


def _subject_probe(chunk_id: str, sentence: str, tokenizer: ChineseTokenizer) -> Probe | None:
    """「X是Y」 asked as 「X是什么？」, when X has a content word and is no pronoun."""
    found = _SUBJECT.match(sentence)
    if found is None or _PRONOUN.match(found["subject"]):
        return None
    if not any(len(word) > 1 for word in tokenizer.content_words(found["subject"])):
        return None
    return Probe(f"{found['subject']}是什么？", True, "subject", frozenset({chunk_id}))


def _turned_probe(sentence: str) -> Probe | None:
    """The sentence with its first condition turned (以上 → 以下), asked as a yes-no question."""
    found = _TURN.search(sentence)
    if found is None:
        return None
    return Probe(
        f"{sentence[: found.start()]}{_TURNED[found[0]]}{sentence[found.end() :]}吗？", False, "turned_condition"
    )


def _longest_word(text: str, tokenizer: ChineseTokenizer) -> str | None:
    words = [word for word in tokenizer.content_words(text) if len(word) > 1 and word in text]
    return max(words, key=len) if words else None


def _sentences(text: str) -> list[str]:
    """The chunk's sentences of 8 to 60 characters, their end marks stripped."""
    stripped = (sentence.strip(_ENDS) for sentence in split_sentences(text))
    return [sentence for sentence in stripped if 8 <= len(sentence) <= 60 and "\n" not in sentence]


@dataclass(frozen=True)
class Outside:
    """What the base never holds: generic attributes and terms from elsewhere (`self_made` keeps only those)."""

    attributes: tuple[str, ...]
    terms: tuple[str, ...]

    def negative(self, asked: Probe, word: str, number: int) -> Probe | None:
        """For the `number`-th answerable question, in turn: its word with an attribute the base lacks,
        or the question with a term from elsewhere in place of its word."""
        if number % 2 == 0 and self.attributes:
            attribute = self.attributes[(number // 2) % len(self.attributes)]
            return Probe(f"{word}的{attribute}是什么？", False, "absent_attribute")
        if self.terms:
            term = self.terms[(number // 2) % len(self.terms)]
            return Probe(asked.question.replace(word, term, 1), False, "foreign_term")
        return None


def _sentence_probes(
    chunk_id: str, sentence: str, tokenizer: ChineseTokenizer, outside: Outside, number: int
) -> list[Probe]:
    """Every question one sentence gives: its figure asked and changed, its subject asked, its condition
    turned, and from its first answerable one, a question about what the base never holds."""
    made = [*_figure_probes(chunk_id, sentence), _subject_probe(chunk_id, sentence, tokenizer), _turned_probe(sentence)]
    asked = next((probe for probe in made if probe is not None and probe.answerable), None)
    if asked is not None and (word := _longest_word(asked.question, tokenizer)):
        made.append(outside.negative(asked, word, number))
    return [probe for probe in made if probe is not None]


def _unheld(
    words: Sequence[str], tokenizer: ChineseTokenizer, held: Callable[[Sequence[str]], set[str]]
) -> tuple[str, ...]:
    """Those of `words` none of whose index terms the base holds."""
    terms = {word: [term for term in tokenizer.content_words(word) if term] or [word] for word in words}
    found = held(list(dict.fromkeys(term for each in terms.values() for term in each)))
    return tuple(word for word, each in terms.items() if not found & set(each))


def self_made(
    reader: Reader,
    tokenizer: ChineseTokenizer,
    held: Callable[[Sequence[str]], set[str]],
    count: int = COUNT,
    seed: int = SEED,
) -> list[Probe]:
    """`count` answerable questions and `count` to refuse, made from the base's own sentences (module
    docstring): chunks drawn by `seed`, their first sentences first, each kind taken in turn so that
    every kind is asked. The same base and seed give the same questions."""
    outside = Outside(_unheld(ATTRIBUTES, tokenizer, held), _unheld(FOREIGN, tokenizer, held))
    found: list[tuple[int, int, Probe]] = []  # (sentence of its chunk, chunk drawn, question)
    for drawn, (chunk_id, text) in enumerate(sample_chunks(reader, count * 4, seed)):
        for position, sentence in enumerate(_sentences(text)):
            made = _sentence_probes(chunk_id, sentence, tokenizer, outside, len(found))
            found += [(position, drawn, probe) for probe in made]
    by_kind: dict[str, list[Probe]] = {kind: [] for kind in (*ANSWERABLE_KINDS, *NEGATIVE_KINDS)}
    for _, _, probe in sorted(found, key=lambda each: each[:2]):
        by_kind[probe.kind].append(probe)
    answerable = _in_turn([by_kind[kind] for kind in ANSWERABLE_KINDS], count)
    return answerable + _in_turn([by_kind[kind] for kind in NEGATIVE_KINDS], count)


def _in_turn(kinds: list[list[Probe]], count: int) -> list[Probe]:
    """Up to `count` questions taken from each kind in turn, none asked twice."""
    taken: dict[str, Probe] = {}
    for row in range(max((len(kind) for kind in kinds), default=0)):
        for kind in kinds:
            if row < len(kind) and len(taken) < count:
                taken.setdefault(kind[row].question, kind[row])
    return list(taken.values())


def figures_of(part: PartAnswer, limits: Thresholds) -> Figures:
    """What of a part's verdict a threshold may change, and what it may not (`Figures.forced`)."""
    forced: bool | None = None
    if part.forbidden:
        forced = True
    elif (
        part.premise_denied
        or part.strangers
        or part.absent_attribute
        or part.unsourced_attribute
        or not part.wanted_found
        or len(part.unknown) > limits.max_unknown_terms
    ):
        forced = False
    return Figures(part.best_similarity, part.coverage, part.vouched, forced)


def observe(retriever: Retriever, scope: Scope, probes: Sequence[Probe], settings: Settings) -> list[Observed]:
    """Every probe answered by the service's extractive steps (web off) at the default thresholds."""
    limits = Thresholds.from_settings(settings)
    observed = []
    for probe in probes:
        result = answer_locally(
            retriever,
            scope,
            probe.question,
            mode=Mode.HYBRID,
            k=K,
            max_parts=settings.max_retrievals,
            passages=settings.extractive_passages,
            limits=limits,
        )
        parts = tuple(figures_of(part, limits) for part in result.parts if not part.wants_links)
        observed.append(Observed(probe, parts))
    return observed


def answered(observed: Observed, similarity: float, coverage: float) -> bool:
    """The question's verdict at these thresholds: every part answered (`retrieval.extractive.select`)."""
    return all(
        part.forced
        if part.forced is not None
        else (part.similarity >= similarity or part.vouched) and part.coverage >= coverage
        for part in observed.parts
    )


def score(observed: Sequence[Observed], similarity: float, coverage: float) -> dict[str, float]:
    """Answerable questions answered, questions to refuse refused, and their mean (balanced accuracy)."""
    kept = [answered(o, similarity, coverage) for o in observed if o.probe.answerable]
    refused = [not answered(o, similarity, coverage) for o in observed if not o.probe.answerable]
    shares = [sum(flags) / len(flags) if flags else 0.0 for flags in (kept, refused)]
    return {
        "answerable_answered": round(shares[0], 3),
        "refused": round(shares[1], 3),
        "balanced_accuracy": round(sum(shares) / 2, 3),
        "answerable": len(kept),
        "negative": len(refused),
    }


def choose(observed: Sequence[Observed], limits: Thresholds) -> tuple[float, float, str]:
    """The thresholds (similarity, coverage) and the rule's verdict in words: within the band above the
    defaults (never laxer), the best balanced accuracy among the points that keep at least `KEEP` of the answerable
    questions answered (or as many as the defaults do), nearest the defaults on a tie; the defaults unless
    that gains `MIN_GAIN`, or with fewer than `MIN_EACH` questions of a side."""
    base = (limits.min_similarity, limits.min_coverage)
    at_defaults = score(observed, *base)
    if min(at_defaults["answerable"], at_defaults["negative"]) < MIN_EACH:
        return (*base, f"defaults kept: fewer than {MIN_EACH} questions of a side")
    low, high = (round(base[0] + step, 3) for step in SIMILARITY_BAND)
    similarities = [round(low + 0.005 * i, 3) for i in range(round((high - low) / 0.005) + 1)]
    floor = min(KEEP, at_defaults["answerable_answered"])
    best: tuple[float, float, float, float] | None = None
    for similarity, coverage in product(similarities, [c for c in COVERAGES if c >= base[1]]):
        found = score(observed, similarity, coverage)
        if found["answerable_answered"] < floor:
            continue
        distance = abs(similarity - base[0]) / 0.01 + abs(coverage - base[1]) / 0.1
        if best is None or (found["balanced_accuracy"], -distance) > (best[0], -best[1]):
            best = (found["balanced_accuracy"], distance, similarity, coverage)
    if best is None or best[0] < at_defaults["balanced_accuracy"] + MIN_GAIN:
        return (*base, f"defaults kept: no point of the band gains {MIN_GAIN} balanced accuracy")
    return best[2], best[3], f"balanced accuracy {at_defaults['balanced_accuracy']} → {best[0]}"


def _mrr(retriever: Retriever, scope: Scope, probes: Sequence[Probe]) -> float:
    """MRR@10 of the probes' relevant chunks in the base's hybrid search (the reranker left out)."""
    ranks = [
        first_relevant(
            [hit.id for hit in retriever.search(scope, p.question, Mode.HYBRID, 10, rerank=False).hits], p.relevant
        )
        for p in probes
    ]
    return sum(1 / rank for rank in ranks if rank) / max(1, len(ranks))


def choose_alias_weight(retriever: Retriever, scope: Scope, probes: Sequence[Probe]) -> tuple[float | None, str]:
    """0 when the base's aliases lower the answerable questions' MRR@10, else None (ALIAS_WEIGHT stays)."""
    default = retriever.params.alias_weight
    asked = [p for p in probes if p.answerable and p.relevant]
    if default <= 0 or not any(retriever.expansions(scope, p.question) for p in asked):
        return None, "aliases: none met by the questions"
    with_aliases, without = (
        _mrr(retriever, scope, asked),
        _mrr(_with(retriever, replace(retriever.params, alias_weight=0.0)), scope, asked),
    )
    verdict = f"aliases: MRR@10 {with_aliases:.3f} with, {without:.3f} without"
    return (0.0, verdict + ": off") if without > with_aliases else (None, verdict + ": kept")


def own_questions(retriever: Retriever, scope: Scope, questions: QuestionSet) -> tuple[Probe, ...]:
    """The answerable questions of the base's question set whose evidence `scope` reads, with their chunks."""
    ready, _ = resolve(questions, base_corpus(Reader(retriever.es, scope)))
    return tuple(Probe(q.text, True, "own", q.relevant) for q in ready)


@dataclass(frozen=True)
class Sources:
    """The base's own questions: its question set's answerable ones, and rated gaps to refuse."""

    questions: tuple[Probe, ...] = ()
    gaps: tuple[str, ...] = ()


def _probes(retriever: Retriever, scope: Scope, own: Sources, count: int, seed: int) -> list[Probe]:
    """The base's own questions (at most `count` a side, seeded) where it has `MIN_EACH` of a side,
    the side it lacks self-made."""
    rng = random.Random(seed)
    answerable = list(own.questions) if len(own.questions) >= MIN_EACH else []
    negative = [Probe(q, False, "rated_gap") for q in own.gaps] if len(own.gaps) >= MIN_EACH else []
    answerable = rng.sample(answerable, min(count, len(answerable)))
    negative = rng.sample(negative, min(count, len(negative)))
    if len(answerable) < MIN_EACH or len(negative) < MIN_EACH:
        made = self_made(
            Reader(retriever.es, scope),
            retriever.index_tokenizer(scope),
            lambda terms: retriever.terms_held(scope, terms),
            count,
            seed,
        )
        answerable = answerable or [p for p in made if p.answerable]
        negative = negative or [p for p in made if not p.answerable]
    return answerable + negative


def _with(retriever: Retriever, params: RetrievalParams) -> Retriever:
    """The same retriever (client, embedder, tokenizer, reranker) with other parameters."""
    return Retriever(retriever.es, retriever.embedder, retriever.tokenizer, params, retriever.reranker)


def calibrate(
    retriever: Retriever,
    scope: Scope,
    settings: Settings,
    own: Sources | None = None,
    count: int = COUNT,
    seed: int = SEED,
) -> Calibration:
    """The base's calibration (module docstring), chosen with its stored one ignored; stores nothing."""
    count = max(1, min(count, MAX_COUNT))
    fresh = _with(retriever, replace(retriever.params, calibrated=False))
    probes = _probes(fresh, scope, own or Sources(), count, seed)
    alias_weight, alias_note = choose_alias_weight(fresh, scope, probes)
    if alias_weight is not None:
        fresh = _with(fresh, replace(fresh.params, alias_weight=alias_weight))
    observed = observe(fresh, scope, probes, settings)
    limits = Thresholds.from_settings(settings)
    similarity, coverage, note = choose(observed, limits)
    own_kinds = {"rated_gap"}
    return Calibration(
        min_similarity=similarity,
        min_coverage=coverage,
        alias_weight=alias_weight,
        source="questions" if any(p.kind == "own" for p in probes) else "self-made",
        questions=sum(p.kind == "own" for p in probes),
        ratings=sum(p.kind in own_kinds for p in probes),
        answerable=sum(p.answerable and p.kind != "own" for p in probes),
        negative=sum(not p.answerable and p.kind not in own_kinds for p in probes),
        defaults={
            "min_similarity": limits.min_similarity,
            "min_coverage": limits.min_coverage,
            "alias_weight": retriever.params.alias_weight,
        },
        at_defaults=score(observed, limits.min_similarity, limits.min_coverage),
        at_chosen=score(observed, similarity, coverage),
        chosen_at=datetime.now(UTC).isoformat(),
        note=f"{note}; {alias_note}",
    )
