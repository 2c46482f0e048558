"""The indexing job's hook for the corpus dictionary (core.lexicon), kept with the index.

A new index gets its dictionary from the documents before any chunk is tokenized, so every
chunk is cut with it; it is stored in the index's `_meta`, where the query side reads it.
Later runs into the same index (re-runs, incremental adds) reuse the stored dictionary, so
old and new chunks are cut alike; rebuild with `--recreate` to learn a new one.
"""

import logging
from collections.abc import Sequence

from elasticsearch import Elasticsearch

from core.documents import Document
from core.lexicon import corpus_terms
from core.store import read_index_meta, write_corpus_terms
from core.text import ChineseTokenizer

logger = logging.getLogger(__name__)


def corpus_tokenizer(
    es: Elasticsearch, index: str, documents: Sequence[Document], base: ChineseTokenizer, *, fresh: bool
) -> ChineseTokenizer:
    """The tokenizer that cuts `index`: `base` plus the index's corpus dictionary (built now if `fresh`)."""
    if not base.learn_corpus_terms:
        return base
    terms = read_index_meta(es, index).corpus_terms
    if terms is None and fresh:
        terms = tuple(corpus_terms(document.text for document in documents))
        write_corpus_terms(es, index, list(terms))
        logger.info("corpus dictionary of %s: %d terms", index, len(terms))
    return base.with_corpus_terms(terms or ())
