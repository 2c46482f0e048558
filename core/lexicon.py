"""The corpus dictionary: a corpus's own terms, found without a hand-written word list.

A run of characters is a term when it is
- **frequent**: at least `min_count` occurrences;
- **cohesive**: its pointwise mutual information, taken at its weakest split point,
  log p(w) / (p(left part) * p(right part)), is at least `min_pmi` (夏侯惇 holds together,
  的人 does not);
- **free at both ends**: the entropy of the characters just before it and just after it is at
  least `min_entropy` each (夏侯惇 is followed by many different characters; 子昂说 is nearly
  always followed by `：`, so it is a fragment, not a term). Punctuation is a neighbour like any
  character; whitespace and the ends of a text count as a distinct neighbour each time.

Pure Python over character runs of CJK text; the indexing job builds it once per index
(indexing/dictionary.py) and stores it in the index's `_meta`, and the query side loads it.
"""

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from core.text import CJK_CHARS, stopwords

_CJK_RUN = re.compile(rf"[{CJK_CHARS}]+")
_BOUNDARY = ""  # no neighbour: whitespace or the start or end of a text

Run = tuple[str, str, str]  # a CJK run and the characters just before and after it


@dataclass(frozen=True)
class LexiconParams:
    min_len: int = 2
    max_len: int = 4
    min_count: int = 5
    min_pmi: float = 3.0
    min_entropy: float = 1.5
    max_terms: int = 5000


def _entropy(neighbours: Counter[str]) -> float:
    """Entropy (nats) of the neighbour characters; each boundary counts as its own symbol."""
    boundaries = neighbours.get(_BOUNDARY, 0)
    counts = [n for ch, n in neighbours.items() if ch != _BOUNDARY] + [1] * boundaries
    total = sum(counts)
    return -sum(n / total * math.log(n / total) for n in counts)


def _runs(text: str) -> list[Run]:
    def neighbour(i: int) -> str:
        return text[i] if 0 <= i < len(text) and not text[i].isspace() else _BOUNDARY

    return [(m.group(), neighbour(m.start() - 1), neighbour(m.end())) for m in _CJK_RUN.finditer(text)]


def _ngram_counts(runs: list[Run], max_len: int) -> Counter[str]:
    counts: Counter[str] = Counter()
    for run, _, _ in runs:
        for n in range(1, max_len + 1):
            counts.update(run[i : i + n] for i in range(len(run) - n + 1))
    return counts


def _pmi(term: str, counts: Counter[str], total: int) -> float:
    """log p(term) / (p(a) p(b)) at the weakest split of `term` into a + b."""
    p = counts[term] / total
    return min(math.log(p / ((counts[term[:i]] / total) * (counts[term[i:]] / total))) for i in range(1, len(term)))


def _neighbours(runs: list[Run], candidates: set[str], lengths: range) -> dict[str, tuple[Counter[str], Counter[str]]]:
    found: dict[str, tuple[Counter[str], Counter[str]]] = {term: (Counter(), Counter()) for term in candidates}
    for run, before, after in runs:
        for n in lengths:
            for i in range(len(run) - n + 1):
                term = run[i : i + n]
                if term in found:
                    left, right = found[term]
                    left[run[i - 1] if i else before] += 1
                    right[run[i + n] if i + n < len(run) else after] += 1
    return found


def discover_terms(
    texts: Iterable[str], params: LexiconParams = LexiconParams(), edge_stop: frozenset[str] = frozenset()
) -> list[str]:
    """The corpus's terms, most frequent first (at most `max_terms`).

    A run that starts or ends with a character of `edge_stop` (的, 了, 于, …) is a fragment
    glued to a particle, never a term.
    """
    runs = [run for text in texts for run in _runs(text)]
    counts = _ngram_counts(runs, params.max_len)
    total = sum(len(run) for run, _, _ in runs)
    lengths = range(params.min_len, params.max_len + 1)
    candidates = {
        term
        for term, n in counts.items()
        if len(term) in lengths
        and n >= params.min_count
        and term[0] not in edge_stop
        and term[-1] not in edge_stop
        and _pmi(term, counts, total) >= params.min_pmi
    }
    terms = [
        term
        for term, (left, right) in _neighbours(runs, candidates, lengths).items()
        if min(_entropy(left), _entropy(right)) >= params.min_entropy
    ]
    return sorted(terms, key=lambda term: (-counts[term], term))[: params.max_terms]


def corpus_terms(texts: Iterable[str]) -> list[str]:
    """A corpus dictionary as the indexing job learns it: `discover_terms` with the one-character stop
    words (的, 了, 于 …) as edge stops."""
    return discover_terms(texts, edge_stop=frozenset(word for word in stopwords() if len(word) == 1))
