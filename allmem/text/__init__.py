"""Word-level text helpers shared by every lexical component (BM25 baselines, All-Mem's BM25 channel, the reader).

One stop-word list and one stemmer, so that every BM25 scorer tokenises text the same way and a difference
between two of them is a difference of method, not of preprocessing. ``index_terms`` is what BM25 indexes:
content words reduced by the Snowball English stemmer (PyStemmer), the stemmer Lucene's English analyser and
bm25s use, so "adopted", "adopting" and "adoption" meet one term.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

# English function words (the common NLTK-style list, with clitic fragments left by splitting on apostrophes).
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing don down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own s same she should so
    some such t than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your yours
    yourself yourselves ll re ve d m o y ain isn aren wasn weren hasn haven hadn doesn didn won wouldn shan
    shouldn couldn mustn needn mightn let us also""".split()
)
# Negated auxiliaries ("didn", "isn"): stop words for ranking, but they carry meaning for answer selection.
NEGATED_AUXILIARIES = frozenset(
    "ain isn aren wasn weren hasn haven hadn doesn didn won wouldn shan shouldn couldn mustn needn mightn".split()
)
WORD = re.compile(r"[a-z0-9]+")
_QUESTION = re.compile(r"\?[!?]*(?:$|[\s\"')\]])")


def words(text: str) -> list[str]:
    """Lowercased alphanumeric runs."""
    return WORD.findall(text.lower())


def content_words(text: str) -> list[str]:
    """Lowercased alphanumeric words minus stop words."""
    return [w for w in WORD.findall(text.lower()) if w not in STOP_WORDS]


def asks_question(text: str) -> bool:
    """Whether the text asks something: some sentence of it ends with a question mark."""
    return bool(_QUESTION.search(text))


_STEMMER = threading.local()  # PyStemmer objects are not thread-safe: one per thread


def _stemmer():  # noqa: ANN202 - PyStemmer ships no type stubs
    stemmer = getattr(_STEMMER, "obj", None)
    if stemmer is None:
        import Stemmer

        stemmer = _STEMMER.obj = Stemmer.Stemmer("english")
    return stemmer


@lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    return _stemmer().stemWord(word)


def index_terms(text: str) -> list[str]:
    """BM25 terms: content words (lowercased, stop words removed) stemmed with Snowball English."""
    return [_stem(w) for w in content_words(text)]
