"""Offline roles of the MemGPT baseline (``baselines/memgpt.py``): deterministic stand-ins for its three prompts.

- ``memgpt_pressure`` (at the alert, over the whole queue, and just before an eviction, over the evicted turns it
  was never shown): archive every offered turn not yet archived that carries a name (other than the speakers'),
  a date or a number, or (``archive_min_terms`` > 0) at least that many content words and is no bare question,
  verbatim, citing its turn; append first-person statements ("I ...", "my ...") to the
  ``human`` core block as ``Speaker: sentence``.
- ``memgpt_summarize``: extractive, at most ``word_limit`` words: the first sentence of each informative evicted
  turn (newest first, at most 15 words each), then the start of the previous summary if words remain.
- ``memgpt_search``: archival search with the question (pages 0 to ``search_pages`` - 1), then a recall (substring) search, page 0, for each of the question's
  ``search_terms`` longest content words other than the speakers' names (single words, since a substring
  search for a phrase or the whole question rarely matches).

The constants (``archive_min_terms``, ``search_pages``, ``search_terms``) are in ``configs/method/memgpt.yaml``,
fitted on the fit conversations by ``scripts/fit_baselines.py`` (its log: ``results/fits/fit_baselines.log``):
archiving plain statements raised R@5 there; the search constants did not move R@5 or N@5 (the first archival
page fills the top five), so they keep their earlier values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from allmem.errors import LLMError
from allmem.llm.base import ChatRequest

from ._common import content_terms, is_filler, keywords, names, phrases, sentences, unique

_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|my|My|me)\b")


def informative(text: str, speakers: Sequence[str]) -> bool:
    """Holds a name other than the speakers', a date or a number (what the offline agent saves)."""
    known = {s.lower() for s in speakers}
    if any(ch.isdigit() for ch in text):
        return True
    extra = set(keywords(text)) - set(phrases(text))
    return any(k.lower() not in known and not set(k.lower().split()) <= known for k in extra) or any(
        n.lower() not in known for n in names(text)
    )


def _words(text: str, n: int) -> list[str]:
    return text.split()[:n]


@dataclass(frozen=True)
class MemGPTResponder:
    """Offline answers to MemGPT's three prompts; the settings are ``MemGPT``'s (``configs/method/memgpt.yaml``)."""

    word_limit: int  # summary_words
    search_pages: int  # archival pages read with the question
    search_terms: int  # recall (substring) searches, one per longest content word
    archive_min_terms: int  # also archive plain statements with at least this many content words (0: never)

    def offline_reply(self, req: ChatRequest) -> str:
        v = req.variables
        if req.template == "memgpt_pressure":
            calls = pressure_calls(v["queue"], set(v["archived"]), v["speakers"], self.archive_min_terms)
            return json.dumps({"calls": calls})
        if req.template == "memgpt_summarize":
            return summary(v["queue"], v["speakers"], self.word_limit)
        if req.template == "memgpt_search":
            return json.dumps(
                {"calls": search_calls(v["question"], v["speakers"], self.search_pages, self.search_terms)},
                ensure_ascii=False,
            )
        raise LLMError(f"MemGPTResponder: no offline role for template {req.template!r}")


def pressure_calls(
    queue: Sequence[dict[str, Any]], archived: set[str], speakers: Sequence[str], archive_min_terms: int = 0
) -> list[dict]:
    calls: list[dict[str, Any]] = []
    for m in queue:
        if m["id"] in archived:
            continue
        line = f"{m['speaker']}: {m['text']}"
        plain = archive_min_terms > 0 and not is_filler(m["text"], min_terms=archive_min_terms)
        if plain or informative(m["text"], speakers):
            calls.append(
                {"name": "archival_memory_insert", "arguments": {"content": line, "sources": [m["id"]]}}
            )
        for s in sentences(m["text"]):
            if _FIRST_PERSON.search(s) and not is_filler(s, min_terms=3):
                content = f"{m['speaker']}: {s}"
                args = {"name": "human", "content": content, "sources": [m["id"]]}
                calls.append({"name": "core_memory_append", "arguments": args})
    return calls


def summary(queue: Sequence[dict[str, Any]], speakers: Sequence[str], word_limit: int) -> str:
    out: list[str] = []
    previous = [m for m in queue if m.get("summary")]
    for m in reversed([m for m in queue if not m.get("summary")]):
        first = (sentences(m["text"]) or [m["text"]])[0]
        if not informative(first, speakers):
            continue
        piece = _words(f"{m['speaker']}: {first}", 15)
        if len(out) + len(piece) > word_limit:
            break
        out += piece
    for m in previous:
        out += _words(m["text"], word_limit - len(out))
    return " ".join(out)


def search_calls(question: str, speakers: Sequence[str], pages: int, terms: int) -> list[dict[str, Any]]:
    """Archival search with the question, pages ``0 .. pages - 1``, then a recall search (page 0) for each of the
    question's ``terms`` longest content words other than the speakers' names."""
    known = {w for s in speakers for w in s.lower().split()}
    words = sorted(unique([w for w in content_terms(question) if w not in known]), key=len, reverse=True)
    calls = [
        {"name": "archival_memory_search", "arguments": {"query": question, "page": p}} for p in range(pages)
    ]
    calls += [{"name": "conversation_search", "arguments": {"query": w, "page": 0}} for w in words[:terms]]
    return calls
