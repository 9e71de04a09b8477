"""Mem0 (Chhikara et al. 2025, arXiv 2504.19413), the 2025 algorithm of mem0ai/mem0 @393a4fd5a (April 2025).

Write path, per ``add`` of new messages to one store (``Memory._add_to_vector_store``):
1. extraction call (``mem0_extract``) → ``{"facts": [...]}``;
2. each fact is embedded and its ``neighbours`` (5, as in the OSS code; the paper says 10) nearest memories of
   the same store are fetched; the union is relabelled "0", "1", ... so the model never sees a real id;
3. one update call (``mem0_update``) over those memories and all the facts → ``{"memory": [{id, text, event}]}``;
   ADD creates a memory, UPDATE keeps the id and re-embeds the new text, DELETE removes, NONE does nothing.
Retrieval: cosine top ``top_k`` per store, no threshold, the two stores merged by score.

LoCoMo protocol of the Mem0 authors (``evaluation/src/memzero/add.py``): one store per speaker; every session is
streamed two messages per ``add`` into both stores; in a store its owner's messages are ``user`` and the other
speaker's ``assistant``; a message reads ``Name: text`` (no image captions); facts come from user messages only;
search takes the top 30 of each store.

Provenance: a memory keeps the source turn ids it came from. An ADD takes the batch's user turn most similar to
its text (cosine to the rendered turn); an UPDATE keeps the old ids and adds the new one, so the unit is credited
with every turn it merges.

Robustness (mem0#3931, hallucinated ids raised KeyError upstream): an UPDATE/DELETE naming an id that was not
shown, or whose memory is gone, is skipped and counted (``skipped_unknown_id``); an unknown event, an entry with
empty text (skipped upstream too) and an unparsable reply are counted likewise; none of them stops the run.

Simplified, and why:
- The embedder is all-MiniLM-L6-v2 (the project's one embedder), not text-embedding-3-small.
- No update call is made when the extraction found no facts (upstream still sends the prompt with an empty fact
  list, which can only return NONE entries).
- Extraction calls of a session are made before its update calls (they depend only on the messages, not on the
  store, so the final store is the same), which lets a real endpoint answer them concurrently.
- Memory ids are ``<store owner>:<n>`` instead of uuids, so reruns are identical.
- Not the installed ``mem0ai`` 2.x pipeline (additive extraction, BM25 + entity boost, score threshold): that
  later pipeline is not offered here (docs/BASELINES.md, "mem0_pkg"), since its ``add`` needs an LLM and it is
  not the paper's algorithm.

Offline roles (``Mem0Responder``, deterministic, labelled offline in every table):
- extraction: one fact per user message, its non-filler sentences with the first person rewritten to the
  speaker's name ("I adopted a dog" → "Ana adopted a dog");
- update, by cosine between the fact and each shown memory: ≥ ``same_cos`` → NONE; ≥ ``related_cos`` with a negation or change cue in the fact → DELETE the memory and ADD the fact; ≥ ``related_cos`` and the
  fact's words include all the memory's → UPDATE with the fact's text; otherwise ADD. Both thresholds are fitted
  on the fit conversations (``scripts/fit_baselines.py``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from allmem.errors import LLMError
from allmem.llm.base import ChatRequest
from allmem.systems import Resources
from allmem.types import RetrievalResult, Retrieved, Turn, format_date

from ._common import (
    SessionWriter,
    Tally,
    VectorIndex,
    ask,
    ask_many,
    content_terms,
    embedder_of,
    has_change_cue,
    is_filler,
    llm_of,
    sentences,
    source_id,
    third_person,
)

EVENTS = ("ADD", "UPDATE", "DELETE", "NONE")


@dataclass
class Memory:
    id: str
    text: str
    sources: tuple[str, ...]
    timestamp: datetime


@dataclass
class Store:
    """One speaker's memories (a Mem0 ``user_id`` scope)."""

    owner: str
    index: VectorIndex
    memories: dict[str, Memory] = field(default_factory=dict)
    next_id: int = 0


# ---------------------------------------------------------------- offline roles


@dataclass(frozen=True)
class Mem0Responder:
    """Offline answers to ``mem0_extract`` and ``mem0_update`` (see the module docstring for the rules).

    ``vectors`` maps each text the update prompt shows (facts and old memories) to its embedding.
    """

    same: float  # same_cos
    related: float  # related_cos
    vectors: dict[str, np.ndarray] = field(default_factory=dict)

    def offline_reply(self, req: ChatRequest) -> str:
        if req.template == "mem0_extract":
            return json.dumps({"facts": offline_facts(req.variables["records"])}, ensure_ascii=False)
        if req.template == "mem0_update":
            return json.dumps({"memory": self.decide(req.variables["old_memory"], req.variables["facts"])})
        raise LLMError(f"Mem0Responder: no offline role for template {req.template!r}")

    def decide(self, old: Sequence[dict[str, str]], facts: Sequence[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        touched: set[str] = set()
        old_vecs = np.stack([self.vectors[m["text"]] for m in old]) if old else np.zeros((0, 1))
        for fact in facts:
            best, cos = -1, -1.0
            if len(old):
                sims = old_vecs @ self.vectors[fact]
                best = int(np.argmax(sims))
                cos = float(sims[best])
            mem = old[best] if best >= 0 else None
            if mem is not None and mem["id"] not in touched and cos >= self.same:
                out.append({"id": mem["id"], "text": mem["text"], "event": "NONE"})
                touched.add(mem["id"])
            elif (
                mem is not None and mem["id"] not in touched and cos >= self.related and has_change_cue(fact)
            ):
                out.append({"id": mem["id"], "text": mem["text"], "event": "DELETE"})
                out.append({"id": "new", "text": fact, "event": "ADD"})
                touched.add(mem["id"])
            elif (
                mem is not None
                and mem["id"] not in touched
                and cos >= self.related
                and set(content_terms(mem["text"])) <= set(content_terms(fact))
            ):
                out.append({"id": mem["id"], "text": fact, "event": "UPDATE", "old_memory": mem["text"]})
                touched.add(mem["id"])
            else:
                out.append({"id": "new", "text": fact, "event": "ADD"})
        out += [{"id": m["id"], "text": m["text"], "event": "NONE"} for m in old if m["id"] not in touched]
        return out


def offline_facts(records: Sequence[dict[str, str]]) -> list[str]:
    """One fact per user message: its informative sentences, first person rewritten to the speaker's name."""
    facts = []
    for rec in records:
        if rec["role"] != "user":
            continue
        kept = [third_person(s, rec["speaker"]) for s in sentences(rec["text"]) if not is_filler(s)]
        if kept:
            facts.append(" ".join(kept))
    return facts


# ---------------------------------------------------------------- the system


class Mem0(SessionWriter):
    name = "mem0"
    search_kind = "dense"
    depth_attrs = ("top_k",)  # equal context: the top_k memories of each speaker store

    def __init__(
        self,
        batch_size: int = 2,
        neighbours: int = 5,
        top_k: int | None = 30,
        same_cos: float = 0.95,
        related_cos: float = 0.9,
        temperature: float | None = None,
        resources: Resources | None = None,
    ) -> None:
        super().__init__(resources)
        if batch_size < 1 or neighbours < 1 or (top_k is not None and top_k < 1):
            raise ValueError("configs/method/mem0.yaml: batch_size, neighbours and top_k must be >= 1")
        self.batch_size, self.neighbours, self.top_k = batch_size, neighbours, top_k
        if not 0 <= related_cos <= same_cos <= 1:
            raise ValueError(
                f"configs/method/mem0.yaml: need 0 <= related_cos <= same_cos <= 1, got {related_cos}, {same_cos}"
            )
        self.same_cos, self.related_cos = same_cos, related_cos
        self.embedder = embedder_of(self.resources, "mem0")
        self.llm = llm_of(self.resources, temperature)
        self.reset("")

    def reset(self, dialogue_id: str) -> None:
        self.dialogue_id = dialogue_id
        self.stores: dict[str, Store] = {}
        self.pending: list[Turn] = []
        self.tally = Tally()

    # ------------------------------------------------------------ write path
    def store(self, owner: str) -> Store:
        if owner not in self.stores:
            self.stores[owner] = Store(owner, VectorIndex(self.embedder.dim))
        return self.stores[owner]

    def flush(self) -> None:
        """Add the pending turns (one session) in batches of ``batch_size`` messages to every store."""
        turns, self.pending = self.pending, []
        if not turns:
            return
        for t in turns:
            self.store(t.speaker)
        batches = [turns[i : i + self.batch_size] for i in range(0, len(turns), self.batch_size)]
        jobs = [(b, s) for b in batches for s in self.stores.values()]
        extracted = ask_many(
            self.llm, "mem0_extract", [self.extract_call(b, s.owner) for b, s in jobs], self.tally
        )
        facts_of = [self.clean_facts(x) for x in extracted]
        texts = [f for fs in facts_of for f in fs] + [t.render() for t in turns]
        vecs = dict(zip(texts, self.embedder.encode(texts), strict=True)) if texts else {}
        for (batch, store), facts in zip(jobs, facts_of, strict=True):
            if facts:
                self.add(store, batch, facts, vecs)

    def extract_call(self, batch: Sequence[Turn], owner: str) -> tuple[dict[str, Any], Any]:
        records = [
            {"role": "user" if t.speaker == owner else "assistant", "speaker": t.speaker, "text": t.text}
            for t in batch
        ]
        lines = "\n".join(f"{r['role']}: {r['speaker']}: {r['text']}" for r in records)
        date = format_date(batch[0].timestamp)
        return {"user": owner, "date": date, "messages": lines, "records": records}, Mem0Responder(
            self.same_cos, self.related_cos
        )

    def clean_facts(self, reply: dict[str, Any] | None) -> list[str]:
        if reply is None:
            return []
        facts = [" ".join(str(f).split()) for f in reply["facts"]]
        self.tally["skipped_empty_fact"] += sum(1 for f in facts if not f)
        facts = [f for f in facts if f]
        self.tally["facts"] += len(facts)
        return facts

    def add(self, store: Store, batch: Sequence[Turn], facts: list[str], vecs: dict[str, np.ndarray]) -> None:
        """Steps 2-3 of the write path for one store: neighbours, update call, apply."""
        shown: dict[str, Memory] = {}
        for f in facts:
            for mid, _ in store.index.search(vecs[f], self.neighbours):
                shown.setdefault(mid, store.memories[mid])
        temp = {str(i): m.id for i, m in enumerate(shown.values())}
        old = [{"id": str(i), "text": m.text} for i, m in enumerate(shown.values())]
        known = {m.text: store.index.vector(m.id) for m in shown.values()}
        payload = Mem0Responder(self.same_cos, self.related_cos, {**known, **{f: vecs[f] for f in facts}})
        reply = ask(self.llm, "mem0_update", {"old_memory": old, "facts": facts}, payload, self.tally)
        if reply is not None:
            self.apply(store, batch, reply["memory"], temp, vecs)

    def apply(
        self, store: Store, batch: Sequence[Turn], items: list[dict[str, Any]], temp: dict[str, str],
        vecs: dict[str, np.ndarray],
    ) -> None:  # fmt: skip
        """Carry out the update call's events; anything that cannot be applied is skipped and counted."""
        texts = [" ".join(str(it.get("text") or "").split()) for it in items]
        fresh = [t for t in dict.fromkeys(texts) if t and t not in vecs]
        if fresh:
            vecs.update(zip(fresh, self.embedder.encode(fresh), strict=True))
        users = [t for t in batch if t.speaker == store.owner] or list(batch)
        turn_vecs = np.stack([vecs.get(t.render()) for t in users]) if len(users) > 1 else None
        when = batch[0].timestamp
        for item, text in zip(items, texts, strict=True):
            event = str(item.get("event", "")).upper()
            if event not in EVENTS:
                self.tally["skipped_invalid_event"] += 1
                continue
            if event == "NONE":
                self.tally["event_NONE"] += 1
                continue
            if not text:
                self.tally["skipped_empty_text"] += 1
                continue
            src = users[0] if turn_vecs is None else users[int(np.argmax(turn_vecs @ vecs[text]))]
            if event == "ADD":
                mid = f"{store.owner}:{store.next_id}"
                store.next_id += 1
                store.memories[mid] = Memory(mid, text, (source_id(src),), when)
                store.index.add(mid, vecs[text])
                self.tally["event_ADD"] += 1
                continue
            real = temp.get(str(item.get("id")))
            if real is None or real not in store.memories:
                self.tally["skipped_unknown_id"] += 1
                continue
            if event == "UPDATE":
                mem = store.memories[real]
                mem.text, mem.timestamp = text, when
                mem.sources = tuple(dict.fromkeys((*mem.sources, source_id(src))))
                store.index.replace(real, vecs[text])
            else:  # DELETE
                del store.memories[real]
                store.index.delete(real)
            self.tally[f"event_{event}"] += 1

    # ------------------------------------------------------------ retrieval
    def retrieve(self, query: str, when: datetime | None = None) -> RetrievalResult:
        self.flush()
        t0 = time.perf_counter()
        q = self.embedder.encode_one(query)
        t1 = time.perf_counter()
        hits = []
        for store in self.stores.values():
            hits += [(score, store.memories[mid]) for mid, score in store.index.search(q, self.top_k)]
        hits.sort(key=lambda h: -h[0])  # stable: ties keep store order
        units = tuple(Retrieved.of_text(m.id, m.text, m.sources, s, m.timestamp) for s, m in hits)
        t2 = time.perf_counter()
        return RetrievalResult(
            units=units, timings_ms={"embed": 1000 * (t1 - t0), "search": 1000 * (t2 - t1)}
        )

    def stats(self) -> dict[str, Any]:
        return {"memories": sum(len(s.memories) for s in self.stores.values())} | self.tally.as_stats()
