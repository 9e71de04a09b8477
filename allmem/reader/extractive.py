"""The offline extractive answer generator: answers from the packed context without any LLM.

Why it exists: these machines reach no LLM, yet every method must be compared end to end (retrieve → pack →
answer → score). An extractive reader is deterministic, cheap and uses *only* the packed context, so differences
between methods come from what they retrieved under the same budget.

How it answers:

1. Every sentence of the packed context is scored (``allmem.reader.spans.sentence_scores``): content-word overlap with
   the question, the speaker named in the question, and the cosine similarity of its unit's MiniLM embedding.
   Unit texts are embedded once and cached across questions and methods; sentences are never embedded.
2. By question form (never by its gold):
   - "when"-questions ("when", "what year", "which week", "how long ago"): the date of the best sentence's
     unit, with relative expressions ("last Friday", "two weeks ago") resolved against it
     (``allmem.reader.dates``) and written like LoCoMo's gold answers ("The Friday before 15 July 2023");
   - two-option questions (``req.options``): the option the context states, else "Not mentioned in the
     conversation" (see ``_pick_option`` for why this rule is fixed, not fitted);
   - yes/no questions: a fixed reply;
   - everything else: the best short span of the top sentences (``allmem.reader.spans.best_spans``); F1 and BLEU-1
     reward short answers, so a span beats a sentence. LoCoMo multi-hop questions (category 1) join the best
     spans of ``multi_spans`` different units.

Every constant fitted on LoCoMo (the span/sentence weights in ``allmem.reader.spans``, ``when_bonus``, ``multi_spans``,
``yes_no_answer``) was fitted by ``scripts/fit_extractive.py`` on the fit conversations only (``fit_dialogues`` of
``configs/dataset/locomo.yaml``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from allmem.reader import dates, spans
from allmem.reader.framing import NOT_MENTIONED
from allmem.tokens import count_tokens
from allmem.types import Answer, AnswerRequest, Retrieved

_SENT = re.compile(r"(?<=[.!?])\s+")
_TEMPORAL_Q = re.compile(
    r"^\s*when\b|\b(?:what|which) (?:year|month|date|day|week|weekend)\b|\bhow long ago\b|\bwhat time\b", re.I
)
_YES_NO_Q = re.compile(r"^\s*(?:is|are|was|were|does|do|did|would|could|can|will|has|have|should)\b", re.I)


@dataclass(frozen=True)
class Sentence:
    """A candidate sentence: its text, the index of its unit in the context, whether it is an image caption."""

    text: str
    unit: int
    caption: bool = False


def unit_body(unit: Retrieved) -> tuple[str, str | None]:
    """The unit's words without speaker prefixes, and its image caption(s), read from the unit's parts."""
    body = " ".join(p.text.strip() for p in unit.parts if p.text.strip())
    captions = [p.caption.strip() for p in unit.parts if p.caption and p.caption.strip()]
    return body, " ".join(captions) or None


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENT.split(text) if s.strip()]


class ExtractiveGenerator:
    """Answer generator used by the ``offline`` backend; see the module docstring for the method.

    ``when_bonus``: score added to sentences holding a time expression when answering "when"-questions;
    ``yes_no_answer``: the reply to yes/no questions; ``multi_spans``: spans (from distinct units) joined for
    multi-hop questions; ``max_span_words``: the longest span considered.
    """

    def __init__(
        self,
        embedder: Any,
        when_bonus: float,
        yes_no_answer: str,
        multi_spans: int,
        max_span_words: int,
    ) -> None:
        if embedder is None:
            raise ValueError("ExtractiveGenerator needs an embedder (configs/embedder)")
        if multi_spans < 1 or max_span_words < 1:
            raise ValueError("configs/generator/extractive.yaml: multi_spans and max_span_words must be >= 1")
        self.embedder = embedder
        self.when_bonus = when_bonus
        self.yes_no_answer = yes_no_answer
        self.multi_spans = multi_spans
        self.max_span_words = max_span_words

    # -- scoring ---------------------------------------------------------------------------------------
    def candidates(self, req: AnswerRequest) -> tuple[list[Retrieved], list[Sentence], np.ndarray]:
        """Context units, every sentence of them (captions split off) and the sentences' scores.

        Units are embedded (one cached vector per unit text, shared by every question and method); sentences
        are scored lexically plus their unit's similarity (``allmem.reader.spans``), so nothing is embedded per
        sentence.
        """
        units = list(req.context)
        sents: list[Sentence] = []
        for j, unit in enumerate(units):
            body, caption = unit_body(unit)
            sents += [Sentence(s, j) for s in split_sentences(body)]
            if caption:
                sents.append(Sentence(caption, j, caption=True))
        if not sents:
            return units, sents, np.zeros(0)
        qvec = self.embedder.encode_one(req.question)
        unit_cos = self.embedder.encode([u.text for u in units]) @ qvec
        return units, sents, spans.sentence_scores(req.question, sents, units, unit_cos)

    # -- answering -------------------------------------------------------------------------------------
    def mode(self, req: AnswerRequest) -> str:
        """How the question will be answered: option | when | yes_no | span (by its form, never its gold)."""
        if req.options:
            return "option"
        if _TEMPORAL_Q.search(req.question):
            return "when"
        if _YES_NO_Q.match(req.question) and " or " not in req.question:
            return "yes_no"
        return "span"

    def answer(self, req: AnswerRequest) -> Answer:
        usage = {"tokens_in": count_tokens(req.context_text), "cached": False}
        units, sents, scores = self.candidates(req)
        if not sents:
            return self._done(NOT_MENTIONED, usage, {"mode": "empty"})
        best = int(np.argmax(scores))
        mode = self.mode(req)
        extra: dict[str, Any] = {
            "mode": mode,
            "unit": units[sents[best].unit].id,
            "sentence": sents[best].text,
        }
        if mode == "option":
            text = self._pick_option(req.options, sents)
        elif mode == "when":
            text = self._when(units, sents, scores)
        elif mode == "yes_no":
            text = self.yes_no_answer
        else:
            n_spans = self.multi_spans if req.category == 1 else 1
            text = spans.best_spans(
                req.question, sents, scores, n_spans=n_spans, max_words=self.max_span_words
            )
        return self._done(text or sents[best].text, usage, extra)

    def _when(self, units: list[Retrieved], sents: list[Sentence], scores: np.ndarray) -> str:
        """Date of the best sentence's unit, resolved with the relative expression the sentence (or unit) uses.

        Sentences that carry a time expression get ``when_bonus``: "I went to a pride parade last Friday" is a
        better witness for "When did X go to a pride parade?" than a reply that merely repeats "pride parade".
        """
        dated = [i for i, s in enumerate(sents) if units[s.unit].timestamp is not None]
        if not dated:
            return NOT_MENTIONED
        resolved = []
        for i in dated:
            ts = units[sents[i].unit].timestamp
            assert ts is not None
            resolved.append(dates.resolve(sents[i].text, ts))
        boosted = np.array(
            [scores[i] + self.when_bonus * found for i, (_, found) in zip(dated, resolved, strict=True)]
        )
        k = int(np.argmax(boosted))
        text, found = resolved[k]
        if not found:  # the expression may sit in another sentence of the same turn
            unit = units[sents[dated[k]].unit]
            text, _ = dates.resolve(unit_body(unit)[0], unit.timestamp)  # type: ignore[arg-type]
        return text

    def _pick_option(self, options: tuple[str, ...], sents: list[Sentence]) -> str:
        """The option whose content the context states, else "Not mentioned in the conversation".

        An option is supported when at least half of its content words occur together in one context sentence
        (a fixed rule, not fitted: under protocol ``allmem`` the gold of a two-option question is always the
        non-"not mentioned" option, so any threshold fitted on LoCoMo would learn to always pick it).
        """
        real = [o for o in options if o.strip().lower() != NOT_MENTIONED.lower()]
        declines = [o for o in options if o not in real]
        support = []
        for option in real:
            terms = spans.content_terms(option)
            if not terms:
                support.append(0.0)
                continue
            support.append(max(len(terms & spans.content_terms(s.text)) / len(terms) for s in sents))
        if real and max(support) >= 0.5:
            return real[int(np.argmax(support))]
        return declines[0] if declines else (real[int(np.argmax(support))] if real else NOT_MENTIONED)

    @staticmethod
    def _done(text: str, usage: dict[str, Any], extra: dict[str, Any]) -> Answer:
        return Answer(text=text, usage=usage | {"tokens_out": count_tokens(text)}, extra=extra)
