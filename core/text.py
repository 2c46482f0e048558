"""Chinese analysis shared by indexing and querying, so both sides produce the same terms.

Elasticsearch only sees whitespace-separated, lower-cased terms (the `whitespace` analyzer
exists in every distribution, the minimal one included); all Chinese analysis lives here:

- `tokens`: jieba words (accurate mode) plus their **dictionary sub-words**: a word of three
  or more characters also yields every shorter run of two or more characters that the
  dictionary knows, so 甲亢病 also gives 甲亢 and 夏侯惇 gives 夏侯. Indexing and querying
  expand alike, so a glued query word (甲亢病人) meets the passage's 甲亢.
- the dictionary is jieba's, plus `JIEBA_USER_DICT`, plus the **corpus dictionary**: terms
  found in the indexed corpus itself (`core.lexicon`), stored with the index and loaded by
  the query side (`get_tokenizer(user_dict, corpus_terms)`), so both sides cut alike.
- **stop words** (core/data/stopwords.txt: question words, particles, pronouns) never reach a
  keyword query; the index keeps them (they only cost a little index space).
- `bigrams`: overlapping CJK character bigrams, which do not depend on a dictionary and so
  cope with semi-classical text (《三国演义》) that jieba's modern dictionary cuts badly.
"""

import logging
import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import jieba

logger = logging.getLogger(__name__)

STOPWORDS_PATH = Path(__file__).resolve().parent / "data" / "stopwords.txt"
CJK_CHARS = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # a regex character range: CJK ideographs
# A CJK run, or a run of other letters/digits (without CJK, so 1型 gives "1" then "型").
_CJK_RUN_OR_WORD = re.compile(rf"[{CJK_CHARS}]+|[^\W_{CJK_CHARS}]+", re.UNICODE)
_IS_CJK = re.compile(rf"[{CJK_CHARS}]")
NAME_TAGS = ("nr", "ns", "nt", "nz")  # jieba's parts of speech of proper nouns
_REFERRING_TAGS = frozenset({"r", "t"})  # pronouns (此人, 其), times (当时, 今日)
_NOUN_TAGS = ("n", "vn", "j", "eng")  # nouns and names (n, nr, ns …), verbal nouns (服务), abbreviations (j), Latin
# A dictionary word jieba tags as a person is taken for one only when it starts with a common
# surname and is not rare: jieba also tags 克扣, 和尚, 延寿 and glued words like 袁尚兵 as people.
_SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾萧肖田董袁潘于蒋蔡余杜叶程苏魏吕丁"
    "任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦方白邹孟熊秦邱江尹薛段雷侯龙史陶黎贺顾毛郝龚邵万钱严武戴莫孔向汤"
    "岳包成花项屈商"
)
_COMPOUND_SURNAMES = ("诸葛", "司马", "欧阳", "上官", "夏侯", "皇甫", "公孙", "长孙", "慕容", "令狐", "宇文", "东方")
_MIN_PERSON_FREQ = 50


@lru_cache(maxsize=1)
def stopwords() -> frozenset[str]:
    """The shipped stop-word list (one word per line, `#` comments)."""
    lines = STOPWORDS_PATH.read_text(encoding="utf-8").splitlines()
    return frozenset(word for line in lines if (word := line.split("#", 1)[0].strip()))


def _is_term(token: str) -> bool:
    """Drop whitespace and punctuation-only tokens (jieba returns them as words)."""
    return any(not unicodedata.category(ch).startswith(("P", "S", "Z", "C")) for ch in token)


class ChineseTokenizer:
    """jieba with the user and corpus dictionaries; one instance cuts both sides of an index.

    `subwords`, `drop_stopwords` and `learn_corpus_terms` exist for the ablation in
    bench/retrieval_eval.py; the service and the indexing job use all three.
    """

    def __init__(
        self,
        user_dict: str | None = None,
        corpus_terms: Sequence[str] = (),
        *,
        subwords: bool = True,
        drop_stopwords: bool = True,
        learn_corpus_terms: bool = True,
    ) -> None:
        self._jieba = jieba.Tokenizer()
        self.user_dict = user_dict
        self.corpus_terms = tuple(corpus_terms)
        self.subwords = subwords
        self.drop_stopwords = drop_stopwords
        self.learn_corpus_terms = learn_corpus_terms
        self._ready = False
        self._pos: jieba.posseg.POSTokenizer | None = None
        self._lock = threading.Lock()
        # A hybrid query is cut once for its three keyword lists, not once per list.
        self._cut = lru_cache(maxsize=256)(self._cut_uncached)

    def with_corpus_terms(self, terms: Sequence[str]) -> "ChineseTokenizer":
        """This tokenizer with the corpus dictionary `terms` (shared per process for the default options)."""
        terms = tuple(terms)
        if terms == self.corpus_terms:
            return self
        if self.subwords and self.drop_stopwords and self.learn_corpus_terms:
            return get_tokenizer(self.user_dict, terms)
        return ChineseTokenizer(
            self.user_dict,
            terms,
            subwords=self.subwords,
            drop_stopwords=self.drop_stopwords,
            learn_corpus_terms=self.learn_corpus_terms,
        )

    def _ensure_ready(self) -> None:
        with self._lock:
            if self._ready:
                return
            jieba.setLogLevel(logging.WARNING)
            self._jieba.initialize()
            if self.user_dict:
                if not Path(self.user_dict).is_file():
                    raise FileNotFoundError(f"JIEBA_USER_DICT not found: {self.user_dict}")
                self._jieba.load_userdict(self.user_dict)
                logger.info("loaded jieba user dictionary %s", self.user_dict)
            for term in self.corpus_terms:
                if not self._known(term):
                    # The frequency that makes jieba keep the term whole.
                    self._jieba.add_word(term, self._jieba.suggest_freq(term, tune=False))
            self._ready = True

    @property
    def _stopwords(self) -> frozenset[str]:
        """The words kept out of keyword queries: the shipped list, or none when `drop_stopwords` is off."""
        return stopwords() if self.drop_stopwords else frozenset()

    def _known(self, word: str) -> bool:
        return bool(self._jieba.FREQ.get(word))

    def expand(self, word: str) -> list[str]:
        """`word` and, when it has three or more characters, its dictionary sub-words."""
        if not self.subwords or len(word) < 3:
            return [word]
        subs = [word[i : i + n] for n in range(2, len(word)) for i in range(len(word) - n + 1)]
        return [word] + [sub for sub in subs if self._known(sub)]

    def words(self, text: str) -> list[str]:
        """jieba's accurate cut, punctuation dropped, lower-cased (no sub-words)."""
        return list(self._cut(text))

    def _cut_uncached(self, text: str) -> tuple[str, ...]:
        self._ensure_ready()
        return tuple(t.lower() for t in self._jieba.cut(text) if _is_term(t))

    def index_terms(self, text: str) -> list[str]:
        """Terms of the indexed `tokens` field: every word and its sub-words, stop words kept."""
        return [term for word in self.words(text) for term in self.expand(word)]

    def query_terms(self, text: str) -> list[str]:
        """Terms of a query for the `tokens` field: as `index_terms`, without stop words."""
        return [term for word in self.content_words(text) for term in self.expand(word)]

    def content_words(self, text: str) -> list[str]:
        """The query's words without stop words (stop words kept when `drop_stopwords` is off)."""
        return [word for word in self.words(text) if word not in self._stopwords]

    def names(self, text: str) -> list[str]:
        """The names `text` mentions, in order, each once: terms of the corpus dictionary and words
        jieba tags as proper nouns (people, places, organisations, other names), two characters or more."""
        self._ensure_ready()
        corpus = set(self.corpus_terms)
        found = [
            pair.word
            for pair in self._tagger().cut(text)
            if len(pair.word) > 1 and (pair.word in corpus or pair.flag.startswith(NAME_TAGS))
        ]
        return list(dict.fromkeys(found))

    def frequency(self, word: str) -> int:
        """How common jieba's dictionaries say `word` is (0: not one of their words)."""
        self._ensure_ready()
        return int(self._jieba.FREQ.get(word, 0))

    def word_tag(self, word: str) -> str | None:
        """jieba's part of speech of `word` in its dictionaries (None: not one of their words)."""
        self._ensure_ready()
        tag = self._tagger().word_tag_tab.get(word)
        return str(tag) if tag is not None else None

    def rarity(self, word: str) -> float:
        """How much a word tells, from how rare jieba's dictionaries say it is: log(total / (count + 1)),
        so a word they lack (a domain term, 滚刷) tells most and a common one (一次, 用) least."""
        self._ensure_ready()
        return math.log((self._jieba.total + 1) / (self.frequency(word) + 1))

    def trailing_name(self, text: str) -> str:
        """The longest end of `text` whose every word is tagged a noun or a name: 本合同由北京蓝鲸科技有限公司 →
        北京蓝鲸科技有限公司, 土豆 → 土豆, 可选 or 一线用药 → "" (a verb, a modifier at the end): what a
        definition names and what an equivalent put in brackets reads as (`core.aliases`)."""
        self._ensure_ready()
        words = [pair for pair in self._tagger().cut(text) if _is_term(pair.word)]
        kept = len(words)
        while kept and words[kept - 1].flag.startswith(_NOUN_TAGS):
            kept -= 1
        return "".join(pair.word for pair in words[kept:])

    def refers(self, text: str) -> bool:
        """Whether `text` opens with a word jieba tags a pronoun or a time (此人, 其人, 当时, 今日): it
        refers to someone, it does not name them (此人绰号赛仁贵; `core.aliases`). Rare names are not
        reliably tagged names (毕轨 is a verb to jieba), so this is checked instead."""
        self._ensure_ready()
        first = next((pair for pair in self._tagger().cut(text) if _is_term(pair.word)), None)
        return first is not None and first.flag in _REFERRING_TAGS

    def is_person(self, word: str) -> bool:
        """Whether the dictionary knows `word` as a person's name (李白, 武则天, 孙悟空): tagged `nr`, not
        rare, and starting with a common surname."""
        self._ensure_ready()
        if self._tagger().word_tag_tab.get(word) != "nr" or self.frequency(word) < _MIN_PERSON_FREQ:
            return False
        return len(word) > 1 and _surname(word) is not None

    def _tagger(self) -> "jieba.posseg.POSTokenizer":
        """jieba's part-of-speech tagger over this tokenizer's dictionaries (built on first use)."""
        import jieba.posseg  # its tables load on import: only callers of `names` pay for them

        with self._lock:
            if self._pos is None:
                self._pos = jieba.posseg.POSTokenizer(self._jieba)
            return self._pos

    def keyword_text(self, text: str) -> str:
        """The query for the character-based lists (bigram, standard): stop words become spaces.

        Runs of content words stay glued (甲亢病人 keeps its bigram 病人), but no bigram bridges
        a removed stop word.
        """
        runs: list[str] = [""]
        for word in self.words(text):
            if word in self._stopwords:
                runs.append("")
            else:
                runs[-1] += word
        return " ".join(run for run in runs if run)

    def keyword_chars(self, text: str) -> str:
        """The query for the single-character `standard` list: `keyword_text` without one-character stop words.

        That list matches character by character, so 有 inside jieba's 人有 would reach it otherwise.
        """
        return "".join(ch for ch in self.keyword_text(text) if ch not in self._stopwords)


def _surname(name: str) -> str | None:
    """The common surname `name` starts with (诸葛 of 欧阳瞻, 周 of 周平), or None."""
    if name[:2] in _COMPOUND_SURNAMES:
        return name[:2]
    return name[:1] if name[:1] in _SURNAMES else None


def full_name(given: str, text: str) -> str | None:
    """The full name `text` most often writes `given` with, a common surname before it (懿 → 司马懿, 权 →
    孙权 in the novel), or None when it never does."""
    counts: Counter[str] = Counter()
    for found in re.finditer(re.escape(given), text):
        before = text[max(0, found.start() - 2) : found.start()]
        # 司马懿 before 马懿: the longer name whose surname `_surname` reads is the one written.
        name = next(
            (name for name in (before + given, before[-1:] + given) if _surname(name) == name[: -len(given)]), None
        )
        if name:
            counts[name] += 1
    return counts.most_common(1)[0][0] if counts else None


def given_name(name: str) -> str | None:
    """The one-character given name a narrative calls a person by after naming him in full (周平 → 平,
    欧阳瞻 → 瞻: 「平自赤壁败后」), or None when `name` is not a surname and one character."""
    surname = _surname(name)
    return name[len(surname) :] if surname is not None and len(name) == len(surname) + 1 else None


def bigram_terms(text: str) -> list[str]:
    """CJK character bigrams (a lone CJK character stays a unigram); other words whole."""
    terms: list[str] = []
    for match in _CJK_RUN_OR_WORD.finditer(text):
        run = match.group()
        if not _IS_CJK.match(run):
            terms.append(run.lower())
        elif len(run) == 1:
            terms.append(run)
        else:
            terms.extend(run[i : i + 2] for i in range(len(run) - 1))
    return terms


def join_terms(terms: list[str]) -> str:
    """The whitespace-joined form Elasticsearch indexes and queries."""
    return " ".join(terms)


@lru_cache(maxsize=8)
def get_tokenizer(user_dict: str | None = None, corpus_terms: tuple[str, ...] = ()) -> ChineseTokenizer:
    """One tokenizer per dictionary set per process (jieba's dictionary load takes ~1 s)."""
    return ChineseTokenizer(user_dict, corpus_terms)
