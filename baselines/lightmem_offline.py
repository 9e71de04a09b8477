"""Offline stand-ins of the LightMem baseline (``baselines/lightmem.py``): the compressor and the two prompt roles.

- ``IdfCompressor`` replaces LLMLingua-2 (whose weights no package here ships): it keeps the ⌈rate·n⌉ words with
  the highest inverse document frequency over the dialogue's messages so far, always keeping names, numbers and
  dates, in their original order.
- ``LightMemResponder``: extraction gives one fact per informative message, ``Speaker: compressed text``; the
  update deletes the stored fact when a later one carries a negation or change cue it lacks, otherwise appends
  the later facts' new words (``ignore`` when there are none).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from allmem.errors import LLMError
from allmem.llm.base import ChatRequest
from allmem.text import STOP_WORDS, words

from ._common import content_terms, has_change_cue, is_filler, names

_PROTECTED = re.compile(
    r"\d|^(?:january|february|march|april|may|june|july|august|september|october|november|december|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|yesterday|today|tomorrow|tonight|ago|"
    r"last|next|week|weekend|month|year)\W*$",
    re.I,
)


class IdfCompressor:
    """Keeps ⌈rate·n⌉ whitespace tokens of a message: protected ones (names, numbers, dates) first, then by IDF.

    Document frequencies grow with the dialogue (each message is counted before it is compressed), so the
    compressor only knows the past, as a streaming system would.
    """

    def __init__(self, rate: float) -> None:
        if not 0 < rate <= 1:
            raise ValueError(f"configs/method/lightmem.yaml: compress_rate must be in (0, 1], got {rate}")
        self.rate = rate
        self.df: Counter[str] = Counter()
        self.n_docs = 0

    def __call__(self, text: str) -> str:
        tokens = text.split()
        if not tokens:
            return ""
        self.n_docs += 1
        self.df.update(set(words(text)))
        keep = math.ceil(self.rate * len(tokens))
        named = {w for n in names(text) for w in n.split()}

        def priority(i: int) -> tuple[int, float, int]:
            tok = tokens[i]
            norm = words(tok)
            protected = bool(_PROTECTED.search(tok)) or tok.strip(".,!?;:'\"()") in named
            if not norm:
                return (0, -1.0, i)
            stop = all(w in STOP_WORDS for w in norm)
            idf = max(math.log((self.n_docs + 1) / (self.df[w] + 1)) + 1 for w in norm)
            return (2 if protected else (0 if stop else 1), idf, -i)

        ranked = sorted(range(len(tokens)), key=priority, reverse=True)
        chosen = set(ranked[:keep]) | {i for i in ranked if priority(i)[0] == 2}
        return " ".join(tokens[i] for i in sorted(chosen))


@dataclass(frozen=True)
class LightMemResponder:
    """Offline answers to ``lightmem_extract`` and ``lightmem_update`` (rules in the module docstring)."""

    def offline_reply(self, req: ChatRequest) -> str:
        v = req.variables
        if req.template == "lightmem_extract":
            data = [
                {"source_id": m["seq"], "fact": f"{m['speaker']}: {m['text']}"}
                for m in v["messages"]
                if not is_filler(m["text"])
            ]
            return json.dumps({"data": data}, ensure_ascii=False)
        if req.template == "lightmem_update":
            return json.dumps(offline_update(v["target"], v["candidate_list"]), ensure_ascii=False)
        raise LLMError(f"LightMemResponder: no offline role for template {req.template!r}")


def offline_update(target: str, candidates: list[str]) -> dict[str, Any]:
    if not has_change_cue(target) and any(has_change_cue(c) for c in candidates):
        return {"action": "delete"}
    have = set(content_terms(target))
    extra: list[str] = []
    for c in candidates:
        for w in content_terms(c):
            if w not in have:
                have.add(w)
                extra.append(w)
    if not extra:
        return {"action": "ignore"}
    return {"action": "update", "new_memory": f"{target} ({', '.join(extra)})"}
