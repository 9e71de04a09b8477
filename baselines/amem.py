"""A-Mem (Xu et al. 2025, arXiv 2502.12110), the paper's LoCoMo code: WujiangXu/AgenticMemory @7f716dc
(``memory_layer.py``, ``test_advanced.py``), not the later agiresearch/A-mem library.

Write path, one note per turn (``add_note``):
1. analysis call (``amem_analyze``) → keywords, a one-sentence context and tags;
2. evolution (``process_memory``): the 5 notes whose index documents are nearest to the new note's content are
   shown by their global index; the reply may *strengthen* (link the new note to listed indices and replace its
   tags) and/or *update_neighbor* (overwrite each neighbour's context and tags, in the order shown);
3. the note is stored and its index document ``context keywords: k1, k2`` is embedded (the content itself is not
   part of it); each note whose evolution call said ``should_evolve`` counts as an evolution, and every
   ``evo_threshold``-th (100) evolution rebuilds the whole index from ``content , context keywords tags``. Until
   that rebuild, rewritten contexts and tags are not searchable; after it, new notes are again indexed as
   ``context keywords: ...`` (both as upstream).
Retrieval (``find_related_memories_raw``): a query-rewrite call (``amem_query``, phase ``retrieve``) turns the
question into keywords; cosine top ``k`` (10) over the index; each hit is followed by its linked notes, capped
at about ``k`` links with upstream's leak (the counter only stops the inner loop, so every later hit still brings
its first link). Scores are ``-position`` (the native order is the list order, not a similarity).

LoCoMo protocol (``test_advanced.py``): every turn of both speakers is a note ``Speaker says : text`` with the
session date as its time, no image captions. Here the content is ``Speaker: text`` (``utterance_line``): the same
information, and the same string naive RAG embeds, so the shared embedding cache serves it.

Upstream defects not copied: links are ints used as indices and were stored unchecked (A-mem#11), a suggested
connection that is not an existing note index is dropped and counted (``skipped_invalid_link``); neighbours are
updated through the global indices that were shown, never through search rank (A-mem#32); a failed analysis is
counted, and the note keeps empty keywords (what upstream stored silently).

Simplified, and why: no evolution call is made for the very first note (there are no neighbours to show);
calls run per session (analyses first, all independent of the memory state, then the evolutions in stream
order), which leaves the memory as upstream would but lets a real endpoint answer the analyses concurrently.

Offline roles (``AMemResponder``, deterministic, labelled offline): keywords are the turn's YAKE keyphrases and
names other than the speaker (``allmem.text.keywords``), topped up with its content words to reach
``min_keywords``; tags are the keywords' head words. The context stands in for the model's one-sentence
summary of the whole turn, and it is what the index document embeds (with the keywords): the speaker's name, then
every sentence of the turn without its end mark, joined by semicolons into one sentence, cut at ``context_words``
words of the turn (at 40, 90% of LoCoMo turns fit whole). Evolution: neighbours whose index document has cosine ≥
``evolve_cos`` with the new note are linked (strengthen), and the new note's keywords that occur in a linked
neighbour are added to that neighbour's tags and to the new note's tags.
Query rewrite: the question's names and content words, comma-separated. The three constants are in
``configs/method/amem.yaml``, fitted on the fit conversations by ``scripts/fit_baselines.py``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np

from allmem.errors import LLMError
from allmem.llm.base import ChatRequest
from allmem.systems import Resources
from allmem.types import RetrievalResult, Retrieved, Turn, format_date, utterance_line

from ._common import (
    SessionWriter,
    Tally,
    VectorIndex,
    ask,
    ask_many,
    content_terms,
    embedder_of,
    llm_of,
    names,
    phrases,
    sentences,
    source_id,
    unique,
)


@dataclass
class Note:
    index: int
    turn: Turn
    content: str
    keywords: list[str]
    context: str
    tags: list[str]
    links: list[int] = field(default_factory=list)

    def doc(self) -> str:
        """The index document written when the note is stored."""
        return self.context + " keywords: " + ", ".join(self.keywords)

    def full_doc(self) -> str:
        """The index document a consolidation (every ``evo_threshold`` evolutions) writes."""
        return f"{self.content} , {self.context} {' '.join(self.keywords)} {' '.join(self.tags)}"

    def line(self) -> str:
        return (
            f"memory index:{self.index}\t talk start time:{format_date(self.turn.timestamp)}\t memory content: "
            f"{self.content}\t memory context: {self.context}\t memory keywords: {self.keywords}\t "
            f"memory tags: {self.tags}"
        )


# ---------------------------------------------------------------- offline roles


def one_sentence(text: str, max_words: int) -> str:
    """The whole utterance as one sentence: its sentences without their end marks, joined by "; ", ended by a
    full stop, and cut to the first ``max_words`` words (cut mid-sentence: no dangling separator)."""
    parts = [s.rstrip(".!?… ") for s in sentences(text)]
    body = " ".join("; ".join(p for p in parts if p).split()[:max_words]).rstrip(",;:")
    return body + "." if body else ""


def offline_analysis(speaker: str, text: str, *, context_words: int, min_keywords: int) -> dict[str, Any]:
    """Keywords (no speaker, no times), a context sentence and head-word tags for one utterance."""
    kws = [k for k in unique([*phrases(text), *names(text)]) if k.lower() != speaker.lower()]
    for w in sorted(unique(content_terms(text)), key=len, reverse=True):
        if len(kws) >= min_keywords:
            break
        if not any(w in k.lower().split() for k in kws):
            kws.append(w)
    tags = unique([k.lower().split()[-1] for k in kws])[:5]
    return {"keywords": kws, "context": f"{speaker} said: {one_sentence(text, context_words)}", "tags": tags}


@dataclass(frozen=True)
class AMemResponder:
    """Offline answers to the three A-Mem prompts. ``scores``: neighbour index → cosine with the new note (set per
    evolution call); the other fields are the offline constants of ``configs/method/amem.yaml``."""

    evolve_cos: float
    context_words: int
    min_keywords: int
    scores: dict[int, float] = field(default_factory=dict)

    def offline_reply(self, req: ChatRequest) -> str:
        v = req.variables
        if req.template == "amem_analyze":
            a = offline_analysis(
                v["speaker"], v["text"], context_words=self.context_words, min_keywords=self.min_keywords
            )
            return json.dumps(a, ensure_ascii=False)
        if req.template == "amem_evolve":
            return json.dumps(self.evolve(v["note"], v["neighbour_notes"]), ensure_ascii=False)
        if req.template == "amem_query":
            kws = unique([*names(v["question"]), *content_terms(v["question"])])
            return json.dumps({"keywords": ", ".join(kws) or v["question"]}, ensure_ascii=False)
        raise LLMError(f"AMemResponder: no offline role for template {req.template!r}")

    def evolve(self, note: dict[str, Any], neighbours: Sequence[dict[str, Any]]) -> dict[str, Any]:
        related = [n for n in neighbours if self.scores.get(n["index"], 0.0) >= self.evolve_cos]

        def shared(n: dict[str, Any]) -> list[str]:
            have = set(content_terms(n["content"])) | {w for k in n["keywords"] for w in k.lower().split()}
            return [k for k in note["keywords"] if set(k.lower().split()) & have]

        linked = {n["index"] for n in related}
        return {
            "should_evolve": bool(related),
            "actions": ["strengthen", "update_neighbor"] if related else [],
            "suggested_connections": [n["index"] for n in related],
            "tags_to_update": unique([*note["tags"], *(k for n in related for k in shared(n))]),
            "new_context_neighborhood": [n["context"] for n in neighbours],
            "new_tags_neighborhood": [
                unique([*n["tags"], *shared(n)]) if n["index"] in linked else list(n["tags"])
                for n in neighbours
            ],
        }


# ---------------------------------------------------------------- the system


class AMem(SessionWriter):
    name = "amem"
    search_kind = "dense"
    depth_attrs = ("k",)  # equal context: the k notes searched and the k links followed

    def __init__(
        self,
        k: int = 10,
        neighbours: int = 5,
        evo_threshold: int = 100,
        evolve_cos: float = 0.9,
        context_words: int = 40,
        min_keywords: int = 3,
        temperature: float | None = None,
        resources: Resources | None = None,
    ) -> None:
        super().__init__(resources)
        if min(k, neighbours, evo_threshold, context_words) < 1 or min_keywords < 0:
            raise ValueError(
                "configs/method/amem.yaml: k, neighbours, evo_threshold and context_words must be >= 1, "
                "min_keywords >= 0"
            )
        self.k, self.n_neighbours, self.evo_threshold = k, neighbours, evo_threshold
        self.responder = AMemResponder(
            evolve_cos=evolve_cos, context_words=context_words, min_keywords=min_keywords
        )
        self.embedder = embedder_of(self.resources, "amem")
        self.llm = llm_of(self.resources, temperature)
        self.reset("")

    def reset(self, dialogue_id: str) -> None:
        self.dialogue_id = dialogue_id
        self.notes: list[Note] = []
        self.index = VectorIndex(self.embedder.dim)
        self.pending: list[Turn] = []
        self.evo_cnt = 0
        self.tally = Tally()

    # ------------------------------------------------------------ write path
    def flush(self) -> None:
        turns, self.pending = self.pending, []
        if not turns:
            return
        contents = [utterance_line(t.speaker, t.text) for t in turns]
        calls = [({"content": c, "speaker": t.speaker, "text": t.text}, self.responder) for c, t in zip(contents, turns, strict=True)]  # fmt: skip
        analyses = ask_many(self.llm, "amem_analyze", calls, self.tally)
        fresh: list[Note] = []
        for i, (turn, content, a) in enumerate(zip(turns, contents, analyses, strict=True)):
            if a is None:
                a = {"keywords": [], "context": "General", "tags": []}  # upstream's fallback, now counted
            kws = unique([" ".join(str(k).split()) for k in a["keywords"]])
            tags = unique([" ".join(str(t).split()) for t in a["tags"]])
            context = " ".join(str(a["context"]).split()) or "General"
            fresh.append(Note(len(self.notes) + i, turn, content, kws, context, tags))
        texts = [n.content for n in fresh] + [n.doc() for n in fresh]
        vecs = self.embedder.encode(texts)
        for j, note in enumerate(fresh):
            self.add_note(note, vecs[j], vecs[len(fresh) + j])

    def add_note(self, note: Note, content_vec: np.ndarray, doc_vec: np.ndarray) -> None:
        evolved = self.evolve(note, content_vec)
        self.notes.append(note)
        self.index.add(str(note.index), doc_vec)
        if evolved:
            self.evo_cnt += 1
            self.tally["evolutions"] += 1
            if self.evo_cnt % self.evo_threshold == 0:
                self.consolidate()

    def evolve(self, note: Note, content_vec: np.ndarray) -> bool:
        hits = self.index.search(content_vec, self.n_neighbours)
        if not hits:
            return False
        shown = [self.notes[int(i)] for i, _ in hits]
        variables = {
            "context": note.context,
            "content": note.content,
            "keywords": json.dumps(note.keywords, ensure_ascii=False),
            "neighbours": "\n".join(n.line() for n in shown),
            "neighbour_number": str(len(shown)),
            "note": {"content": note.content, "keywords": note.keywords, "tags": note.tags},
            "neighbour_notes": [
                {
                    "index": n.index,
                    "content": n.content,
                    "context": n.context,
                    "keywords": n.keywords,
                    "tags": n.tags,
                }
                for n in shown
            ],
        }
        payload = replace(self.responder, scores={int(i): s for i, s in hits})
        reply = ask(self.llm, "amem_evolve", variables, payload, self.tally)
        if reply is None or not reply["should_evolve"]:
            return False
        for action in reply["actions"]:
            if action == "strengthen":
                for x in reply["suggested_connections"]:
                    idx = _as_index(x)
                    if idx is None or not 0 <= idx < len(self.notes):
                        self.tally["skipped_invalid_link"] += 1
                        continue
                    note.links.append(idx)
                    self.tally["links"] += 1
                note.tags = [str(t) for t in reply["tags_to_update"]]
                self.tally["action_strengthen"] += 1
            elif action == "update_neighbor":
                contexts, tag_lists = reply["new_context_neighborhood"], reply["new_tags_neighborhood"]
                for i in range(min(len(shown), len(tag_lists))):
                    shown[i].tags = [str(t) for t in tag_lists[i]]
                    if i < len(contexts):
                        shown[i].context = contexts[i]
                self.tally["action_update_neighbor"] += 1
            else:
                self.tally["skipped_unknown_action"] += 1
        return True

    def consolidate(self) -> None:
        """Rebuild the index from every note's full document (content, context, keywords, tags)."""
        vecs = self.embedder.encode([n.full_doc() for n in self.notes])
        self.index = VectorIndex(self.embedder.dim)
        for n, v in zip(self.notes, vecs, strict=True):
            self.index.add(str(n.index), v)
        self.tally["consolidations"] += 1

    # ------------------------------------------------------------ retrieval
    def retrieve(self, query: str, when: datetime | None = None) -> RetrievalResult:
        self.flush()
        t0 = time.perf_counter()
        reply = ask(self.llm, "amem_query", {"question": query}, self.responder, self.tally)
        rewritten = str(reply["keywords"]).strip() if reply is not None else ""
        if not rewritten:
            self.tally["query_fallback_to_question"] += 1
            rewritten = query
        t1 = time.perf_counter()
        hits = self.index.search(self.embedder.encode_one(rewritten), self.k)
        order: list[int] = []
        j = 0
        for hid, _ in hits:
            order.append(int(hid))
            for nb in self.notes[int(hid)].links:
                order.append(nb)
                if j >= self.k:
                    break
                j += 1
        units = []
        for pos, idx in enumerate(dict.fromkeys(order)):
            t = self.notes[idx].turn
            units.append(Retrieved.of_text(f"n{idx}", t.text, (source_id(t),), -pos, t.timestamp, t.speaker))
        t2 = time.perf_counter()
        return RetrievalResult(
            units=tuple(units), timings_ms={"rewrite": 1000 * (t1 - t0), "search": 1000 * (t2 - t1)}
        )

    def stats(self) -> dict[str, Any]:
        return {
            "notes": len(self.notes),
            "linked_notes": sum(1 for n in self.notes if n.links),
        } | self.tally.as_stats()


def _as_index(x: Any) -> int | None:
    """A suggested connection as an int, or None (models sometimes send "3" or 3.0)."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    try:
        f = float(str(x).strip())
    except ValueError:
        return None
    return int(f) if f.is_integer() else None
