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
from typing import Literal

import jieba

logger = logging.getLogger(__name__)

_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# A CJK run, or a run of other letters/digits (without CJK, so 1型 gives "1" then "型").
_CJK_RUN_OR_WORD = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+", re.UNICODE)
_IS_CJK = re.compile(rf"[{_CJK}]")


def _is_term(token: str) -> bool:
    """Drop whitespace and punctuation-only tokens (jieba returns them as words)."""
    return any(not unicodedata.category(ch).startswith(("P", "S", "Z", "C")) for ch in token)


JiebaMode = Literal["search", "accurate"]


class ChineseTokenizer:
    """jieba with an optional user dictionary, so domain terms (甲亢病人) stay whole.

    `index_mode` / `query_mode` choose jieba's search mode (`cut_for_search`) or accurate
    mode (`cut`) for each side; the defaults are the ones the retrieval evaluation chose.
    """

    def __init__(
        self, user_dict: str | None = None, index_mode: JiebaMode = "search", query_mode: JiebaMode = "accurate"
    ) -> None:
        for side, mode in (("index_mode", index_mode), ("query_mode", query_mode)):
            if mode not in ("search", "accurate"):
                raise ValueError(f"{side} must be 'search' or 'accurate', got {mode!r}")
        self._jieba = jieba.Tokenizer()
        self._user_dict = user_dict
        self.index_mode = index_mode
        self.query_mode = query_mode
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

    def _cut(self, text: str, mode: JiebaMode) -> list[str]:
        self._ensure_ready()
        words = self._jieba.cut_for_search(text) if mode == "search" else self._jieba.cut(text)
        return [t.lower() for t in words if _is_term(t)]

    def index_terms(self, text: str) -> list[str]:
        """Terms for the indexed `tokens` field (`index_mode`)."""
        return self._cut(text, self.index_mode)

    def query_terms(self, text: str) -> list[str]:
        """Terms of a query for the `tokens` field (`query_mode`)."""
        return self._cut(text, self.query_mode)


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
