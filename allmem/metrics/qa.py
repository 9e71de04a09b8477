"""Per-item answer metrics, one function per published definition (see docs PROTOCOL.md).

Three families live here because the papers we compare with score answers differently and the differences
move the numbers by several points:

- ``allmem`` (default, the All-Mem tables): simple tokenizer, F1 over token *sets*, NLTK BLEU-1 with
  smoothing method1 (brevity penalty included), ``rouge_score`` ROUGE-L F-measure with stemming.
- ``mem0``: the same set F1, but BLEU-1 over NLTK word tokens (Mem0 / A-Mem evaluation code).
- ``locomo``: the official LoCoMo scorer: normalised, Porter-stemmed *multiset* F1 with per-category rules.

Every function takes plain strings and returns a float in [0, 1]; nothing here reads records or files.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from functools import lru_cache
from typing import Any

# The allmem / mem0 / A-Mem tokenizer: lowercase, these four marks become spaces, split on whitespace.
_SIMPLE_PUNCT = str.maketrans({".": " ", ",": " ", "!": " ", "?": " "})

# LoCoMo's official normaliser drops these words after punctuation removal (note: "and" too).
_LOCOMO_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_LOCOMO_PUNCT = str.maketrans("", "", string.punctuation)
# Category 5 (adversarial) is correct when the answer declines; these are the official phrases.
LOCOMO_ABSTAIN_PHRASES = ("no information available", "not mentioned")


def simple_tokenize(text: Any) -> list[str]:
    """The allmem tokenizer; ``str()`` first because six LoCoMo golds are integers."""
    return str(text).lower().translate(_SIMPLE_PUNCT).split()


def set_f1(prediction: Any, gold: Any) -> float:
    """F1 over unique tokens (allmem and mem0): repeated words neither help nor hurt."""
    pred = set(simple_tokenize(prediction))
    ref = set(simple_tokenize(gold))
    common = len(pred & ref)
    if not pred or not ref or common == 0:
        return 0.0
    precision = common / len(pred)
    recall = common / len(ref)
    return 2 * precision * recall / (precision + recall)


def _bleu1(gold_tokens: list[str], pred_tokens: list[str]) -> float:
    """NLTK sentence BLEU with unigram weights only; 0 when either side has no tokens."""
    if not gold_tokens or not pred_tokens:
        return 0.0
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    return float(
        sentence_bleu(
            [gold_tokens],
            pred_tokens,
            weights=(1, 0, 0, 0),
            smoothing_function=SmoothingFunction().method1,
        )
    )


def bleu1(prediction: Any, gold: Any) -> float:
    """allmem BLEU-1: the simple tokenizer, so the brevity penalty counts the same tokens F1 sees."""
    return _bleu1(simple_tokenize(gold), simple_tokenize(prediction))


def nltk_tokenize(text: Any) -> list[str]:
    """Mem0's BLEU tokenisation, ``word_tokenize(text.lower())``, without the punkt sentence splitter.

    ``preserve_line=True`` treats the whole answer as one sentence: punkt data is not installed and must
    never be downloaded. The only difference from Mem0's call is that a full stop inside a multi-sentence
    answer stays attached to its word (the final one is still split off); short answers are unaffected.
    """
    from nltk.tokenize import word_tokenize

    return word_tokenize(str(text).lower(), preserve_line=True)


def mem0_bleu1(prediction: Any, gold: Any) -> float:
    """Mem0 BLEU-1: 0 for an empty prediction or gold, else BLEU-1 over NLTK word tokens."""
    if not str(prediction) or not str(gold):
        return 0.0
    return _bleu1(nltk_tokenize(gold), nltk_tokenize(prediction))


@lru_cache(maxsize=1)
def _rouge_scorer() -> Any:
    """One scorer per process, built on first use (no import-time work)."""
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def rouge_l(prediction: Any, gold: Any) -> float:
    """ROUGE-L F-measure; ``score(reference, prediction)`` order as the authors call it."""
    return float(_rouge_scorer().score(str(gold), str(prediction))["rougeL"].fmeasure)


# ---------------------------------------------------------------------------------------------------------
# Official LoCoMo scorer
# ---------------------------------------------------------------------------------------------------------


def locomo_normalize(text: Any) -> str:
    """Drop commas, lowercase, strip punctuation, drop a/an/the/and, collapse spaces (official order)."""
    s = str(text).replace(",", "").lower().translate(_LOCOMO_PUNCT)
    return " ".join(_LOCOMO_ARTICLES.sub(" ", s).split())


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    from nltk.stem import PorterStemmer

    return PorterStemmer()


def _locomo_tokens(text: Any) -> list[str]:
    stem = _stemmer().stem
    return [stem(w) for w in locomo_normalize(text).split()]


def locomo_f1(prediction: Any, gold: Any) -> float:
    """Porter-stemmed multiset F1 (repeated tokens count as often as they occur on both sides)."""
    pred = _locomo_tokens(prediction)
    ref = _locomo_tokens(gold)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred)
    recall = same / len(ref)
    return 2 * precision * recall / (precision + recall)


def locomo_multi_f1(prediction: Any, gold: Any) -> float:
    """Category 1 (multi-hop): both sides split on commas; mean over gold parts of the best-matching part."""
    preds = [p.strip() for p in str(prediction).split(",")]
    golds = [g.strip() for g in str(gold).split(",")]
    return sum(max(locomo_f1(p, g) for p in preds) for g in golds) / len(golds)


def locomo_score(prediction: Any, gold: Any, category: int) -> float:
    """The official per-category LoCoMo answer score.

    Category 1: comma-split best-match average; 2 and 4: stemmed F1; 3: gold cut at its first ``;``;
    5: 1 if the prediction declines with an official phrase, else 0 (the gold is not used).
    """
    if category == 1:
        return locomo_multi_f1(prediction, gold)
    if category in (2, 4):
        return locomo_f1(prediction, gold)
    if category == 3:
        return locomo_f1(prediction, str(gold).split(";")[0].strip())
    if category == 5:
        low = str(prediction).lower()
        return 1.0 if any(phrase in low for phrase in LOCOMO_ABSTAIN_PHRASES) else 0.0
    raise ValueError(f"LoCoMo category must be 1..5, got {category!r}")
