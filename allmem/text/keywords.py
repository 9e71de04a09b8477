"""Keyword extraction for the offline descriptor: YAKE keyphrases plus names, numbers and dates.

Why both: YAKE ranks statistically salient n-grams, which captures topics ("support group", "pottery class")
but drops short tokens that questions hinge on (a year, "3 kids", a weekday, a person mentioned once). The
rule-based pass adds those back so the descriptor embedding carries them.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable

from allmem.text import NUMBER_WORDS

_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december|"
    "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_DATE_PATTERNS = [
    rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})\b\.?(?:,?\s+\d{{4}})?",
    rf"\b(?:{_MONTHS})\b\.?\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?",
    rf"\b(?:{_MONTHS})\b\.?\s+\d{{4}}",
    r"\b\d{4}[/-]\d{1,2}[/-]\d{1,2}\b",
    r"\b\d{1,2}/\d{1,2}(?:/\d{2,4})?\b",
    rf"\b(?:last|next|this|every)\s+(?:week|weekend|month|year|summer|winter|spring|fall|autumn|night|{_WEEKDAYS})\b",
    r"\b(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a few|several|couple of)\s+"
    r"(?:days?|weeks?|months?|years?)\s+(?:ago|later|before|earlier)\b",
    rf"\b(?:{_WEEKDAYS})\b",
    r"\b(?:yesterday|today|tomorrow|tonight)\b",
    r"\b(?:19|20)\d{2}s?\b",
]
_DATE_RE = re.compile("|".join(f"(?:{p})" for p in _DATE_PATTERNS), re.I)
# Number words that open a keyword phrase ("three kids", "a dozen eggs"): the shared ones plus two counting nouns.
_NUMBER_WORDS = "|".join(sorted(NUMBER_WORDS | {"dozen", "half"}, key=lambda w: (-len(w), w)))
_NUMBER_RE = re.compile(
    rf"\$?\b\d+(?:[.,:]\d+)*(?:st|nd|rd|th|s|k|%)?\b(?:\s+(?!(?:and|or|the|a|an|to|of|in)\b)(?-i:[a-z]+))?"
    rf"|\b(?:{_NUMBER_WORDS})\s+(?!(?:and|or|the|a|an|to|of|in)\b)(?-i:[a-z]+)",
    re.I,
)
_NAME_RE = re.compile(r"\b[A-Z][a-zA-Z'’-]+(?:\s+[A-Z][a-zA-Z'’-]+)*\b")
_SENTENCE_END = ".!?:;"
# Chat fillers and bare evaluations: frequent in dialogue turns, statistically "salient" to YAKE, useless to a query.
FILLERS = frozenset(
    """wow hey hi hello yeah yep yes no oh ok okay cool awesome great good nice thanks thank lol haha omg sure
    gonna wanna gotta kinda sorta really totally amazing glad happy love lovely fun true right bye congrats
    absolutely definitely exactly hmm um uh ah aw aww yay whoa sounds sound thing things stuff lot""".split()
)


YAKE_MAX_CHARS = 50_000


class _YakeFailures(logging.Handler):
    """Counts YAKE's failures: ``extract_keywords`` catches any exception, logs a warning that starts with
    ``FAILURE`` (yake 0.7, ``yake/core/yake.py``) and returns no keyphrases, so only its log tells a failure from a
    text without any."""

    FAILURE = "Exception during keyword extraction"

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith(self.FAILURE):
            self.count += 1


_YAKE_FAILURES = _YakeFailures()


class KeywordExtractor:
    """Thread-safe wrapper; the YAKE object is built on first use (no work at import)."""

    def __init__(self, max_ngram: int = 3, top_phrases: int = 6, max_keywords: int = 12) -> None:
        self.max_ngram = max_ngram
        self.top_phrases = top_phrases
        self.max_keywords = max_keywords
        self._yake = None
        self._stop: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    def _extractor(self):  # noqa: ANN202 - yake has no public type
        if self._yake is None:
            import yake

            self._yake = yake.KeywordExtractor(
                lan="en", n=self.max_ngram, top=self.top_phrases * 3, dedup_lim=0.8
            )
            self._stop = frozenset(w.lower() for w in self._yake.stopword_set)
            yake_log = logging.getLogger("yake")
            if _YAKE_FAILURES not in yake_log.handlers:
                yake_log.addHandler(_YAKE_FAILURES)
        return self._yake

    def phrases(self, text: str) -> list[str]:
        """YAKE keyphrases (best first), dropping ones contained in a better phrase.

        YAKE reads at most ``YAKE_MAX_CHARS`` characters: its cost is linear but large (about 20 s per MB), its
        statistics settle long before that, and no conversational turn comes near (names, dates and numbers are
        still taken from the whole text).

        A YAKE failure (it returns nothing) is tried once more: one that passed (memory) must not decide a text's
        keywords, which the offline reply store keeps (``allmem.llm.offline``); one that repeats is the text's answer.
        """
        if not text.strip():
            return []
        with self._lock:
            yake, failed = self._extractor(), _YAKE_FAILURES.count
            ranked = yake.extract_keywords(text[:YAKE_MAX_CHARS])
            if _YAKE_FAILURES.count != failed:
                ranked = yake.extract_keywords(text[:YAKE_MAX_CHARS])
        out: list[str] = []
        kept_tokens: list[set[str]] = []
        for raw, _score in ranked:
            words = raw.split()
            while words and words[0].lower() in FILLERS:
                words.pop(0)
            while words and words[-1].lower() in FILLERS:
                words.pop()
            phrase = " ".join(words)
            tokens = phrase.lower().split()
            if (
                not tokens
                or any(t in self._stop for t in tokens)
                or (len(phrase) < 3 and not phrase.isdigit())
            ):
                continue  # "stories were inspiring": phrases spanning stopwords read badly and embed noise
            if any(2 * len(set(tokens) & kept) >= len(tokens) for kept in kept_tokens):
                continue  # overlaps a better phrase ("support group yesterday" vs "LGBTQ support group")
            out.append(phrase)
            kept_tokens.append(set(tokens))
            if len(out) >= self.top_phrases:
                break
        return out

    def names(self, text: str) -> list[str]:
        """Capitalised word runs, without capitalised stopwords or fillers ("I", "Wow", "Hey Mel" -> "Mel").

        A single word capitalised only because it starts a sentence ("Painting is fun") is not a name unless
        it is also capitalised somewhere mid-sentence.
        """
        self._extractor()
        matches = [(m.group(0), _sentence_start(text, m.start())) for m in _NAME_RE.finditer(text)]
        mid_words = {w for run, start in matches if not start for w in run.split()}
        out: list[str] = []
        for run, start in matches:
            words = [
                w for w in run.split() if w.lower().strip("'’") not in self._stop and w.lower() not in FILLERS
            ]
            if not words or _DATE_RE.fullmatch(" ".join(words)):
                continue
            at_start = start and words[0] == run.split()[0]
            if len(words) == 1 and at_start and words[0] not in mid_words:
                continue
            out.append(" ".join(words))
        return out

    def __call__(self, text: str, speakers: Iterable[str] = ()) -> tuple[str, ...]:
        """Keywords for ``text``: speakers, YAKE phrases, names, dates, numbers; deduped, capped."""
        candidates: list[str] = [s for s in speakers if s]
        candidates += self.phrases(text)
        candidates += self.names(text)
        candidates += [m.group(0) for m in _DATE_RE.finditer(text)]
        for m in _NUMBER_RE.finditer(text):
            words = m.group(0).split()
            if (
                len(words) > 1 and words[-1].lower() in self._stop
            ):  # "one with", "2 of": keep a bare digit only
                words = words[:1] if any(ch.isdigit() for ch in words[0]) else []
            if words:
                candidates.append(" ".join(words))
        speaker_keys = {s.lower() for s in speakers}
        seen: set[str] = set()
        clean_list: list[str] = []
        for cand in candidates:
            clean = re.sub(r"\s+", " ", cand).strip(" .,;:!?\"'()[]")
            key = clean.lower()
            if clean and key not in seen and key not in self._stop:
                seen.add(key)
                clean_list.append(clean)
        return tuple(_drop_contained(clean_list, speaker_keys, self.max_keywords))


def _sentence_start(text: str, i: int) -> bool:
    """Whether position ``i`` starts a sentence: only whitespace before it back to the text's start, a newline,
    or sentence punctuation followed by whitespace. Looks back over whitespace only, so scanning every name in
    a text stays linear in its length (a regex over ``text[:i]`` per name was quadratic: minutes for 1 MB)."""
    j = i
    while j > 0 and text[j - 1].isspace():
        j -= 1
    gap = text[j:i]
    if j == 0:
        return i == 0 or "\n" in gap
    return "\n" in gap or (bool(gap) and text[j - 1] in _SENTENCE_END)


def _drop_contained(cands: list[str], keep: set[str], limit: int) -> list[str]:
    """The first ``limit`` candidates whose words are not a strict subset of another candidate's ("support" when
    "support group" is there); names in ``keep`` always stay. An index from word to candidates makes each test
    look only at candidates sharing the candidate's rarest word, instead of at all of them."""
    token_sets = [frozenset(c.lower().split()) for c in cands]
    holders: dict[str, list[int]] = {}
    for n, toks in enumerate(token_sets):
        for t in toks:
            holders.setdefault(t, []).append(n)
    out: list[str] = []
    for c, toks in zip(cands, token_sets, strict=True):
        if len(out) >= limit:
            break
        if c.lower() not in keep and toks:
            rarest = min(toks, key=lambda t: len(holders[t]))
            if any(toks < token_sets[m] for m in holders[rarest]):
                continue
        out.append(c)
    return out
