"""Word-level text: the one stop-word list, number-word list and word tokenisers of every lexical component.

Why one home: the BM25 baseline, All-Mem's BM25 scorer, the reader, the keyword extractor and ATC's diagnoser
all decide which words carry meaning. With a list each, a difference between two methods could be a difference
of preprocessing rather than of method, and the lists drifted apart. A component that needs another set states
it beside its code as these lists plus (or minus) a named, documented extension, never as a second copy.

Two tokenisers, for two kinds of reader: :func:`words` (lowercase alphanumeric runs) for bag-of-words matching
and ranking; :func:`tokens` (casing kept, contractions and decimals whole) for rules that read capitals,
negations and values.

``index_terms`` is what BM25 indexes: content words reduced by the Snowball English stemmer (PyStemmer), the
stemmer Lucene's English analyser and bm25s use, so "adopted", "adopting" and "adoption" meet one term.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

WORD = re.compile(r"[a-z0-9]+")
TOKEN = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?|\d+(?:[.,:]\d+)*")

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
# What :func:`words` leaves of a contraction ("didn't" -> "didn", "t"; "I'll" -> "i", "ll"). Stop words only as
# such pieces: standing alone in a :func:`tokens` token they are other words ("won" the verb, "Don" the name).
CLITIC_FRAGMENTS = NEGATED_AUXILIARIES | frozenset("don d ll m o re s t ve y".split())

# Cardinal number words and their values.
CARDINALS: dict[str, int] = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40,
    "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000,
    "million": 1_000_000,
}  # fmt: skip
ORDINALS = frozenset("first second third fourth fifth".split())
# Words that name a number: a value in a statement ("two kids", "the third time").
NUMBER_WORDS = frozenset(CARDINALS) | ORDINALS
_QUESTION = re.compile(r"\?[!?]*(?:$|[\s\"')\]])")


def words(text: str) -> list[str]:
    """Lowercased alphanumeric runs."""
    return WORD.findall(text.lower())


def content_words(text: str) -> list[str]:
    """Lowercased alphanumeric words minus stop words."""
    return [w for w in WORD.findall(text.lower()) if w not in STOP_WORDS]


def tokens(text: str) -> list[str]:
    """Word and number tokens with their original casing; contractions ("didn't") and decimals ("3.5") whole."""
    return TOKEN.findall(text)


def is_stop_token(token: str) -> bool:
    """A :func:`tokens` token that is a stop word: a listed word standing alone (not a clitic fragment), or a
    contraction whose parts all are ("it'll", "didn't")."""
    low = token.lower()
    if "'" in low:
        return all(part in STOP_WORDS for part in low.split("'"))
    return low in STOP_WORDS and low not in CLITIC_FRAGMENTS


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
