"""Chinese analysis shared by indexing and querying, so both sides produce the same terms.

Elasticsearch only sees whitespace-separated, lower-cased terms (the `whitespace` analyzer
exists in every distribution, the minimal one included); all Chinese analysis lives here:

- `tokens`: jieba words. Indexing uses search mode (`cut_for_search`: whole words plus
  their dictionary sub-words, so 中华人民共和国 is also found by 共和国); queries use
  accurate mode (`cut`) so a question adds no spurious sub-word terms.
- `bigrams`: overlapping CJK character bigrams, which do not depend on a dictionary and so
  cope with semi-classical text (《三国演义》) that jieba's modern dictionary cuts badly.
"""

import logging
import re
import threading
import unicodedata
from functools import lru_cache
from pathlib import Path

import jieba

logger = logging.getLogger(__name__)

_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RUN_OR_WORD = re.compile(rf"[{_CJK}]+|[^\W_]+", re.UNICODE)
_IS_CJK = re.compile(rf"[{_CJK}]")


def _is_term(token: str) -> bool:
    """Drop whitespace and punctuation-only tokens (jieba returns them as words)."""
    return any(not unicodedata.category(ch).startswith(("P", "S", "Z", "C")) for ch in token)


class ChineseTokenizer:
    """jieba with an optional user dictionary, so domain terms (甲亢病人) stay whole."""

    def __init__(self, user_dict: str | None = None) -> None:
        self._jieba = jieba.Tokenizer()
        self._user_dict = user_dict
        self._ready = False
        self._lock = threading.Lock()

    def _ensure_ready(self) -> None:
        with self._lock:
            if self._ready:
                return
            jieba.setLogLevel(logging.WARNING)
            self._jieba.initialize()
            if self._user_dict:
                if not Path(self._user_dict).is_file():
                    raise FileNotFoundError(f"JIEBA_USER_DICT not found: {self._user_dict}")
                self._jieba.load_userdict(self._user_dict)
                logger.info("loaded jieba user dictionary %s", self._user_dict)
            self._ready = True

    def index_terms(self, text: str) -> list[str]:
        """Terms for the indexed `tokens` field (search mode)."""
        self._ensure_ready()
        return [t.lower() for t in self._jieba.cut_for_search(text) if _is_term(t)]

    def query_terms(self, text: str) -> list[str]:
        """Terms of a query for the `tokens` field (accurate mode)."""
        self._ensure_ready()
        return [t.lower() for t in self._jieba.cut(text) if _is_term(t)]


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
def get_tokenizer(user_dict: str | None = None) -> ChineseTokenizer:
    """One tokenizer per user dictionary per process (jieba's dictionary load takes ~1 s)."""
    return ChineseTokenizer(user_dict)
