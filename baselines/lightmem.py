"""LightMem (Fang et al. 2025, arXiv 2510.18866), zjunlp/LightMem @8fc9a91: ``memory/lightmem.py``,
``factory/memory_buffer/{sensory,short_term}_memory.py`` and the LoCoMo scripts in ``experiments/locomo/``.

Write path, per turn (``add_memory``), as the LoCoMo script feeds it: the turn is a user message (its image
caption appended) followed by an empty assistant message; only user text counts (``messages_use: user_only``).
1. Pre-compression keeps a fraction ``compress_rate`` (0.6, the script's setting) of each message's tokens.
2. Sensory buffer (``sensory_tokens``, 512): messages collect until the next would overflow it; the buffer is
   then cut into topic segments: fine cuts fall between adjacent turns whose embeddings have cosine below a
   threshold that starts at 0.2 and rises by 0.05 up to 0.5 until some cut appears. The part after the last cut
   stays in the buffer; a message larger than the whole buffer is a segment of its own.
3. Short-term buffer (``short_term_tokens``, 512): segments collect until the next would overflow it; then one
   extraction call (``lightmem_extract``) gets the buffered segments under ``--- Topic n ---`` headers, each
   message as ``[time, weekday] k.Speaker: text``, and returns ``{"data": [{"source_id": k, "fact": ...}]}``.
   Facts are embedded and stored. The last turn of the stream forces segmentation and extraction.
4. Sleep-time update, once after ingestion (``construct_update_queue_all_entries`` then
   ``offline_update_all_entries``): each entry's queue holds its ``update_top_k`` (20) nearest entries that are
   not later than it, keeping ``update_keep`` (10); an entry listed by later entries with score ≥
   ``update_threshold`` (0.9) goes to one update call with those entries (``lightmem_update``); ``update``
   rewrites its text and keeps its vector, ``delete`` removes it. All calls read the entries as they were when
   the update began (upstream runs them concurrently over one snapshot).
Retrieval: cosine top ``top_k`` (60) over all entries of the dialogue (one store for both speakers).

Provenance: ``source_id`` k is the k-th user message of the extraction call, i.e. exactly one turn. Upstream
clamps an out-of-range id to the last message; here such a fact is skipped and counted
(``skipped_invalid_source_id``), since clamping would credit a turn the fact did not come from.

Missing or simplified, and why:
- Compression: LLMLingua-2 (a token classifier whose weights no package here ships) is replaced by keeping the
  ⌈rate·n⌉ words with the highest inverse document frequency over the dialogue's messages so far, always keeping
  names, numbers and dates, in their original order. Labelled offline; its errors differ from LLMLingua-2's.
- Topic segmentation: the coarse stage (attention peaks of LLMLingua-2's encoder, layers 8-11) needs the same
  model and is missing; the fine cosine stage is implemented exactly and its cuts are used as they are (upstream
  keeps fine cuts within 3 turns of a coarse cut, and all fine cuts when none is).
- Token counts of both buffers use the project's tokenizer (o200k_base), not LLMLingua-2's and gpt-4o-mini's.
- Embeddings: all-MiniLM-L6-v2, which is also what the LoCoMo script configured.
- The optional summaries (``text_summary`` retrieval) are not built; the main LoCoMo numbers do not use them.

Offline roles (``LightMemResponder`` in ``baselines/lightmem_offline.py``): extraction gives one fact per informative message, ``Speaker: compressed
text``; the update deletes the stored fact when a later one carries a negation or change cue it lacks,
otherwise appends the later facts' new words (``ignore`` when there are none).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from allmem.systems import Resources
from allmem.tokens import count_tokens
from allmem.types import RetrievalResult, Retrieved, Turn

from ._common import SessionWriter, Tally, VectorIndex, ask, ask_many, embedder_of, llm_of, source_id
from .lightmem_offline import IdfCompressor, LightMemResponder

__all__ = ["LightMem", "IdfCompressor", "LightMemResponder", "topic_cuts", "THRESHOLDS"]
THRESHOLDS = tuple(round(0.2 + 0.05 * i, 2) for i in range(7))  # 0.2, 0.25, ..., 0.5 (cut search schedule)


@dataclass
class Message:
    turn: Turn
    text: str  # the compressed user content
    tokens: int
    vec: np.ndarray


@dataclass
class Entry:
    id: str
    text: str
    turn: Turn
    queue: list[tuple[str, float]] = field(default_factory=list)


# ---------------------------------------------------------------- the system


class LightMem(SessionWriter):
    name = "lightmem"
    search_kind = "dense"
    depth_attrs = ("top_k",)  # equal context: the cosine top_k entries

    def __init__(
        self,
        compress_rate: float = 0.6,
        sensory_tokens: int = 512,
        short_term_tokens: int = 512,
        top_k: int | None = 60,
        update_top_k: int = 20,
        update_keep: int = 10,
        update_threshold: float = 0.9,
        resources: Resources | None = None,
    ) -> None:
        super().__init__(resources)
        if min(sensory_tokens, short_term_tokens, update_top_k, update_keep) < 1 or (
            top_k is not None and top_k < 1
        ):
            raise ValueError(
                "configs/method/lightmem.yaml: buffer sizes, top_k and update sizes must be >= 1"
            )
        self.compress_rate = compress_rate
        self.sensory_tokens, self.short_term_tokens = sensory_tokens, short_term_tokens
        self.top_k, self.update_top_k, self.update_keep = top_k, update_top_k, update_keep
        self.update_threshold = update_threshold
        self.embedder = embedder_of(self.resources, "lightmem")
        self.llm = llm_of(self.resources)
        self.reset("")

    def reset(self, dialogue_id: str) -> None:
        self.dialogue_id = dialogue_id
        self.compress = IdfCompressor(self.compress_rate)
        self.pending: list[Turn] = []
        self.sensory: list[Message] = []
        self.short: list[list[Message]] = []
        self.short_count = 0
        self.topic = 0
        self.entries: dict[str, Entry] = {}
        self.index = VectorIndex(self.embedder.dim)
        self.next_id = 0
        self.tally = Tally()

    def end_stream(self) -> None:
        self.flush()
        self.add_segments(self.cut(force=True), force_extract=True)
        self.sleep_update()

    def checkpoint(self) -> None:
        """A mid-stream question: both buffers are extracted (as at the stream's end) so every turn so far is
        searchable; the offline ``sleep_update`` waits for ``end_stream``."""
        self.flush()
        self.add_segments(self.cut(force=True), force_extract=True)

    # ------------------------------------------------------------ write path
    def flush(self) -> None:
        turns, self.pending = self.pending, []
        if not turns:
            return
        raw = [t.text + (f" (image description: {t.caption})" if t.caption else "") for t in turns]
        texts = [self.compress(r) for r in raw]
        self.tally["tokens_raw"] += sum(count_tokens(r) for r in raw)
        vecs = self.embedder.encode(texts)
        for turn, text, vec in zip(turns, texts, vecs, strict=True):
            msg = Message(turn, text, count_tokens(text), vec)
            self.tally["tokens_compressed"] += msg.tokens
            self.add_segments(self.sense(msg))

    def sensory_count(self) -> int:
        return sum(m.tokens for m in self.sensory)

    def sense(self, msg: Message) -> list[list[Message]]:
        """``SenMemBufferManager.add_messages`` for one turn: the segments it closes (possibly none)."""
        segments: list[list[Message]] = []
        while True:
            if self.sensory_count() + msg.tokens <= self.sensory_tokens:
                self.sensory.append(msg)
                return segments
            if not self.sensory:  # larger than the whole buffer: a segment of its own
                self.tally["oversize_messages"] += 1
                return [*segments, [msg]]
            segments += self.cut(force=False)

    def cut(self, force: bool) -> list[list[Message]]:
        """Cut the sensory buffer into topic segments; without ``force`` the part after the last cut stays."""
        buf = self.sensory
        if not buf:
            return []
        cuts = topic_cuts(np.stack([m.vec for m in buf]))
        if not cuts:
            self.sensory = []
            return [buf]
        bounds = [0, *cuts] + ([len(buf)] if force else [])
        segments = [buf[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
        self.sensory = [] if force else buf[cuts[-1] :]
        return segments

    def add_segments(self, segments: list[list[Message]], force_extract: bool = False) -> None:
        """``ShortMemBufferManager.add_segments``: extract when the next segment would overflow the buffer."""
        for seg in segments:
            self.tally["segments"] += 1
            need = count_tokens(" ".join(m.text for m in seg))
            if self.short_count + need > self.short_term_tokens and self.short:
                self.extract(self.short)
                self.short, self.short_count = [], 0
            self.short.append(seg)
            self.short_count += need
        if force_extract and self.short:
            self.extract(self.short)
            self.short, self.short_count = [], 0

    def extract(self, batch: list[list[Message]]) -> None:
        msgs = [m for seg in batch for m in seg]
        blocks, k = [], 0
        for seg in batch:
            self.topic += 1
            lines = []
            for m in seg:
                ts = m.turn.timestamp
                lines.append(f"[{ts:%Y-%m-%d %H:%M}, {ts:%A}] {k}.{m.turn.speaker}: {m.text}")
                k += 1
            blocks.append(f"--- Topic {self.topic} ---\n" + "\n".join(lines))
        records = [{"seq": i, "speaker": m.turn.speaker, "text": m.text} for i, m in enumerate(msgs)]
        variables = {"topics": "\n".join(blocks), "messages": records}
        reply = ask(self.llm, "lightmem_extract", variables, LightMemResponder(), self.tally)
        if reply is None:
            return
        self.tally["extractions"] += 1
        fresh: list[Entry] = []
        for item in reply["data"]:
            sid = _as_int(item.get("source_id"))
            fact = " ".join(str(item.get("fact") or "").split())
            if sid is None or not 0 <= sid < len(msgs):
                self.tally["skipped_invalid_source_id"] += 1
                continue
            if not fact:
                self.tally["skipped_empty_fact"] += 1
                continue
            fresh.append(Entry(f"e{self.next_id}", fact, msgs[sid].turn))
            self.next_id += 1
        if fresh:
            for e, v in zip(fresh, self.embedder.encode([e.text for e in fresh]), strict=True):
                self.entries[e.id] = e
                self.index.add(e.id, v)
        self.tally["facts"] += len(fresh)

    # ------------------------------------------------------------ sleep-time update
    def sleep_update(self) -> None:
        ids = self.index.ids
        if len(ids) < 2:
            return
        mat = self.index.matrix()
        order = np.array([self.entries[i].turn.order for i in ids])
        sims = mat @ mat.T
        for r, eid in enumerate(ids):
            allowed = np.flatnonzero(order <= order[r])
            ranked = allowed[np.lexsort((allowed, -sims[r, allowed]))][: self.update_top_k]
            self.entries[eid].queue = [(ids[c], float(sims[r, c])) for c in ranked if c != r][
                : self.update_keep
            ]
        snapshot = {i: self.entries[i].text for i in ids}
        listed_by: dict[str, list[str]] = {i: [] for i in ids}  # target -> the later entries that list it
        for e in ids:
            for q in dict.fromkeys(q for q, s in self.entries[e].queue if s >= self.update_threshold):
                listed_by[q].append(e)
        targets, calls = [], []
        for tid in ids:
            sources = listed_by[tid]
            if sources:
                cands = [snapshot[s] for s in sources]
                variables = {
                    "target": snapshot[tid],
                    "candidates": "\n".join(f"- {c}" for c in cands),
                    "candidate_list": cands,
                }
                targets.append(tid)
                calls.append((variables, LightMemResponder()))
        for tid, reply in zip(targets, ask_many(self.llm, "lightmem_update", calls, self.tally), strict=True):
            if reply is None:
                continue
            action = str(reply.get("action", "")).lower()
            if action == "delete":
                del self.entries[tid]
                self.index.delete(tid)
                self.tally["update_delete"] += 1
            elif action == "update":
                text = " ".join(str(reply.get("new_memory") or "").split())
                if not text:
                    self.tally["skipped_empty_update"] += 1
                    continue
                self.entries[tid].text = text  # the vector is kept, as upstream
                self.tally["update_update"] += 1
            elif action == "ignore":
                self.tally["update_ignore"] += 1
            else:
                self.tally["skipped_invalid_action"] += 1

    # ------------------------------------------------------------ retrieval
    def retrieve(self, query: str, when: datetime | None = None) -> RetrievalResult:
        self.flush()  # buffered messages stay unsearchable until an extraction, as upstream
        t0 = time.perf_counter()
        q = self.embedder.encode_one(query)
        t1 = time.perf_counter()
        units = tuple(
            Retrieved.of_text(eid, e.text, (source_id(e.turn),), s, e.turn.timestamp)
            for eid, s in self.index.search(q, self.top_k)
            for e in (self.entries[eid],)
        )
        t2 = time.perf_counter()
        return RetrievalResult(
            units=units, timings_ms={"embed": 1000 * (t1 - t0), "search": 1000 * (t2 - t1)}
        )

    def stats(self) -> dict[str, Any]:
        return {"entries": len(self.entries)} | self.tally.as_stats()


def topic_cuts(vecs: np.ndarray) -> list[int]:
    """Fine topic boundaries: positions i+1 where turns i and i+1 have cosine below the first threshold of
    0.2, 0.25, ..., 0.5 at which any such position exists (upstream's schedule); [] when none does."""
    if len(vecs) < 2:
        return []
    sims = np.einsum("ij,ij->i", vecs[:-1], vecs[1:])
    for t in THRESHOLDS:
        cuts = [i + 1 for i in np.flatnonzero(sims < t)]
        if cuts:
            return cuts
    return []


def _as_int(x: Any) -> int | None:
    if isinstance(x, bool):
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return int(f) if f.is_integer() else None
