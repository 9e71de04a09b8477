"""Sentence and span selection for the extractive generator: which few words of the context answer the question.

Gold answers are short (LoCoMo median: 4 words) and the QA metrics are precision-sensitive (set F1, BLEU-1 with
its brevity penalty): a 20-word sentence holding a 3-word answer scores about a third of the span itself. Two
linear models with cheap, explainable features do the work:

1. Sentence score (every sentence of the packed context): overlap with the question's content words (plain and
   idf-weighted within the context), whether the unit's speaker is named in the question, the unit's embedding
   similarity to the question, penalties for questions and image captions, and how much new content it adds.
   Measured on the fit conversations, lexical overlap and the speaker carry most of the signal; per-sentence
   embeddings added nothing over the unit's, so sentences are never embedded (cheap at any context size).
2. Span score (every window of 1..``MAX_WORDS`` words of the ``TOP_SENTENCES`` best sentences): predicted set-F1
   from the window's length, overlap with the question, stop words, capitalisation and numbers matched against
   the question's wh-form (who → a name, how many → a number), clause boundaries and its sentence's score.

``SENTENCE_WEIGHTS`` (coordinate search for the top sentence holding most of the gold's content words) and
``SPAN_WEIGHTS`` (least squares on window F1, within-question or pooled, whichever ranks better) were fitted on
the fit conversations only (``fit_dialogues`` of ``configs/dataset/locomo.yaml``), with BM25 contexts at the
2048-token budget; the held-out conversations were never used to fit anything. ``scripts/fit_extractive.py``
reproduces the fit.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from allmem.text import NEGATED_AUXILIARIES, NUMBER_WORDS, STOP_WORDS, words

MAX_WORDS = 8
TOP_SENTENCES = 5
# Chat fillers that never answer a question: stop words for the reader on top of the shared list.
CHAT_FILLERS = frozenset("yeah oh wow hey gonna got get really".split())
# The shared stop words, keeping negated auxiliaries (they change an answer), plus the chat fillers.
STOP = (STOP_WORDS - NEGATED_AUXILIARIES) | CHAT_FILLERS
# What answers a "how many / how often" question: the shared number words plus counts that are not numbers.
COUNT_WORDS = NUMBER_WORDS | frozenset("once twice several".split())
KINDS = ("who", "name", "where", "count", "what")
_EDGE = "\"'“”‘’()[]{}*,.;:!?…"
_PREPS = frozenset({"in", "at", "to", "from", "near", "around", "visited", "visit"})
# Words that never start or end an answer span (beyond stop words and the question's own words).
FILLER = frozenset(
    "called named like probably actually usually basically totally pretty super kinda lot lots thing things"
    " stuff something much many even still yet ago".split()
)

# fmt: off
SENTENCE_FEATURES = ("overlap", "idf_overlap", "question", "speaker", "unit_cos", "caption", "novel", "prev_overlap")
SPAN_FEATURES = (
    "bias", "sent_score", "sent_best", "sent_rank", "caption", "question_sentence", "len1", "len2", "len3",
    "len4", "len5_6", "len7_8", "q_frac", "stop_frac", "has_cap", "has_num",
    "type_match", "after_q", "after_boundary", "right_boundary", "q_dist", "whole", "no_q_in_sentence",
    "cap_frac", "quoted", "short_len1", "short_len2", "short_len3", "short_len4plus", "match_len12", "before_q",
    "sentence_end",
)
# Fitted on the fit conversations by scripts/fit_extractive.py (see module docstring).
SENTENCE_WEIGHTS = np.array([1, 0.1, -1, 0.3, 0.05, -0.2, 0.05, 0.05])
SPAN_WEIGHTS = np.array([
    -0.0000, 0.0996, 0.0141, -0.0178, 0.0081, 0.0000, -0.0372, -0.0201, 0.0009, 0.0092, 0.0195,
    0.0278, 0.0954, -0.0426, -0.0136, 0.0019, 0.0363, 0.0027, -0.0061, -0.0031, -0.0188, -0.0120,
    0.0016, 0.0352, 0.0210, 0.0178, 0.0056, -0.0061, -0.0174, 0.0536, 0.0066, 0.0095,
])
# fmt: on


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    from nltk.stem import PorterStemmer

    return PorterStemmer()


@lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    return _stemmer().stem(word)


@lru_cache(maxsize=1 << 16)
def content_terms(text: str) -> frozenset[str]:
    """Stemmed, lowercase content words: what "overlap with the question" counts."""
    return frozenset(stem(w) for w in words(text) if w not in STOP)


def question_kind(question: str) -> str:
    """Coarse expected-answer type from the wh-form: one of ``KINDS``."""
    q = question.lower()
    if re.search(r"^\s*who\b|\bwhose\b|\bwhich (person|friend|artist|author|band|singer)\b", q):
        return "who"
    if re.search(r"\bnames?\b|\bcalled\b|\btitle\b", q):
        return "name"
    if re.search(
        r"^\s*where\b|\bwhat (city|country|state|place|town|location)\b|\bwhich (city|country|state)\b", q
    ):
        return "where"
    if re.search(r"\bhow (many|much|old|long|often|far)\b|\bwhat age\b", q):
        return "count"
    return "what"


# -- sentences -------------------------------------------------------------------------------------------
def sentence_features(
    question: str, sents: Sequence[Any], units: Sequence[Any], unit_cos: np.ndarray
) -> np.ndarray:
    """One row per sentence, order = ``SENTENCE_FEATURES``. ``sents[i].unit`` indexes ``units``/``unit_cos``."""
    qterms = content_terms(question)
    qlow = question.lower()
    terms = [content_terms(s.text) for s in sents]
    df = Counter(t for ts in terms for t in ts)
    idf = {t: math.log((len(sents) + 1) / (df.get(t, 0) + 0.5)) for t in qterms}
    idf_total = sum(idf.values()) or 1.0
    unit_overlap = [len(qterms & content_terms(u.text)) / max(len(qterms), 1) for u in units]
    rows = np.zeros((len(sents), len(SENTENCE_FEATURES)))
    for k, (s, ts) in enumerate(zip(sents, terms, strict=True)):
        speaker = (getattr(units[s.unit], "speaker", None) or "").lower()
        prev = s.unit - 1
        same_session = prev >= 0 and units[prev].timestamp == units[s.unit].timestamp
        rows[k] = [
            len(qterms & ts) / max(len(qterms), 1),
            sum(idf[t] for t in qterms & ts) / idf_total,
            float(s.text.rstrip().endswith("?")),
            float(bool(speaker) and speaker in qlow),
            float(unit_cos[s.unit]),
            float(s.caption),
            min(len(ts - qterms), 20) / 20.0,
            unit_overlap[prev] if same_session else 0.0,
        ]
    return rows


def sentence_scores(
    question: str,
    sents: Sequence[Any],
    units: Sequence[Any],
    unit_cos: np.ndarray,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    if not sents:
        return np.zeros(0)
    return sentence_features(question, sents, units, unit_cos) @ (
        SENTENCE_WEIGHTS if weights is None else weights
    )


# -- spans -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Token:
    core: str  # the word without surrounding punctuation: what an answer prints
    low: str
    stem: str
    boundary_after: bool  # punctuation or a dash ends a clause here
    quoted: bool


def tokenize(text: str) -> list[Token]:
    """Words of a sentence with clause boundaries; punctuation-only pieces only mark a boundary."""
    raw = text.split()
    out: list[Token] = []
    for k, tok in enumerate(raw):
        core = tok.strip(_EDGE)
        nxt = raw[k + 1] if k + 1 < len(raw) else ""
        boundary = tok[-1] in ",.;:!?…)" or nxt in {"-", "–", "—"}
        if not any(ch.isalnum() for ch in core):
            if out:
                last = out[-1]
                out[-1] = Token(last.core, last.low, last.stem, True, last.quoted)
            continue
        low = core.lower()
        parts = words(low)  # "caroline's" matches the question term "caroline"
        quoted = tok[:1] in "\"'“‘" or tok.rstrip(",.;:!?")[-1:] in "\"'”’"
        out.append(Token(core, low, stem(parts[0]) if parts else low, boundary, quoted))
    return out


def _edge_ok(toks: list[Token], is_q: np.ndarray) -> np.ndarray:
    """Words a span may start or end with: not a stop word, filler or question word (trimming those only
    shortens the span; gold answers rarely begin or end with them)."""
    return np.array(
        [not (t.low in STOP or t.low in FILLER or is_q[k]) for k, t in enumerate(toks)], dtype=bool
    )


def _span_rows(kind: str, qterms: frozenset[str], sent: Any, score: float, rank: int, max_words: int):
    """Texts and feature rows (order = ``SPAN_FEATURES``) of every window of one sentence."""
    toks = tokenize(sent.text)
    n = len(toks)
    is_q = np.array([t.stem in qterms for t in toks], dtype=float)
    is_stop = np.array([t.low in STOP for t in toks], dtype=float)
    is_cap = np.array(
        [k > 0 and t.core[:1].isupper() and t.low != "i" and not is_q[k] for k, t in enumerate(toks)]
    )
    is_num = np.array([any(c.isdigit() for c in t.low) or t.low in COUNT_WORDS for t in toks])
    quoted = np.array([t.quoted for t in toks])
    after_prep = np.array([k > 0 and toks[k - 1].low in _PREPS for k in range(n)])
    q_pos = np.flatnonzero(is_q)
    edge = _edge_ok(toks, is_q)
    texts: list[str] = []
    rows: list[list[float]] = []
    base = [1.0, score, float(rank == 0), rank / TOP_SENTENCES, float(sent.caption),
            float(sent.text.rstrip().endswith("?"))]  # fmt: skip
    short = kind != "what"  # who / name / where / count answers are a few words
    for i in np.flatnonzero(edge):
        for j in range(i + 1, min(n, i + max_words) + 1):
            if not edge[j - 1]:
                continue
            length = j - i
            cap, num = bool(is_cap[i:j].any()), bool(is_num[i:j].any())
            match = {"who": cap, "name": cap or bool(quoted[i:j].any()), "count": num,
                     "where": cap or bool(after_prep[i])}.get(kind, False)  # fmt: skip
            outside = q_pos[(q_pos < i) | (q_pos >= j)]
            dist = (
                int(np.minimum(np.abs(outside - i), np.abs(outside - (j - 1))).min()) if len(outside) else 8
            )
            rows.append(base + [
                length == 1, length == 2, length == 3, length == 4, 5 <= length <= 6, length >= 7,
                is_q[i:j].mean(), is_stop[i:j].mean(), cap, num, match,
                i > 0 and is_q[i - 1] > 0, i == 0 or toks[i - 1].boundary_after, j == n or toks[j - 1].boundary_after,
                min(dist, 8) / 8.0, i == 0 and j == n, len(q_pos) == 0, is_cap[i:j].mean(), bool(quoted[i:j].any()),
                short and length == 1, short and length == 2, short and length == 3, short and length >= 4,
                match and length <= 2, j < n and is_q[j] > 0, j == n,
            ])  # fmt: skip
            texts.append(" ".join(t.core for t in toks[i:j]))
    return texts, rows


def span_table(
    question: str, sents: Sequence[Any], scores: np.ndarray, max_words: int = MAX_WORDS
) -> tuple[list[str], list[int], np.ndarray]:
    """Every window of the ``TOP_SENTENCES`` best sentences: texts, the unit each came from, features."""
    kind = question_kind(question)
    qterms = content_terms(question)
    order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")[:TOP_SENTENCES]
    texts: list[str] = []
    owners: list[int] = []
    rows: list[list[float]] = []
    for rank, idx in enumerate(order):
        t, r = _span_rows(kind, qterms, sents[int(idx)], float(scores[idx]), rank, max_words)
        texts += t
        rows += r
        owners += [sents[int(idx)].unit] * len(t)
    feats = np.array(rows, dtype=float) if rows else np.zeros((0, len(SPAN_FEATURES)))
    return texts, owners, feats


def best_spans(
    question: str, sents: Sequence[Any], scores: np.ndarray, n_spans: int = 1, max_words: int = MAX_WORDS,
    weights: np.ndarray | None = None,
) -> str:  # fmt: skip
    """The window with the highest predicted F1; with ``n_spans`` > 1, the best of further units, comma-joined."""
    texts, owners, feats = span_table(question, sents, scores, max_words)
    if not texts:
        return ""
    predicted = feats @ (SPAN_WEIGHTS if weights is None else weights)
    picked: list[str] = []
    used: set[int] = set()
    for k in np.argsort(-predicted, kind="stable"):
        if owners[k] not in used:
            picked.append(texts[k])
            used.add(owners[k])
            if len(picked) == n_spans:
                break
    return ", ".join(picked)
