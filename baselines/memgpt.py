"""MemGPT (Packer et al. 2023, arXiv 2310.08560), letta-ai/letta tag 0.2.11 (``memgpt/agent.py``,
``memgpt/memory.py``, ``memgpt/functions/function_sets/base.py``, ``memgpt/constants.py``).

Memory hierarchy:
- main context = system prompt and function schemas (``system_tokens``) + core memory (``persona`` and
  ``human`` blocks, ``core_char_limit`` = 2,000 characters each) + a FIFO queue of messages whose head, once
  anything was evicted, is the recursive summary;
- recall storage: every message, searched by ``conversation_search`` (case-insensitive substring, as in 0.2) or
  ``conversation_search_date``, results in chronological order;
- archival storage: a vector store the agent writes with ``archival_memory_insert`` and searches with
  ``archival_memory_search``; every search returns one page of ``page_size`` (5) results, and a function's
  return is cut at ``function_return_chars`` (3,000).
Write path, per turn (each turn is a user message to the agent): it joins the queue and recall storage. When
the main context passes ``warning_frac`` (0.75) of ``context_window`` the agent gets one memory-pressure alert
(``memgpt_pressure``, the whole queue) and may call ``archival_memory_insert``, ``core_memory_append``,
``core_memory_replace``. When it passes the window, the oldest messages holding ``trunc_frac`` (0.75) of the
queue's tokens, never the last ``keep_last`` (3), are to be replaced by a summary of them (``memgpt_summarize``,
at most 100 words; the previous summary is among them, hence recursive), and the alert is re-armed. Just before
the summary, the turns among them that no pressure step has shown the agent (they arrived after the last alert,
or no alert fired in between) are offered in one more ``memgpt_pressure`` step over those turns alone, so every
turn is offered before it leaves the main context.
Query (``memgpt_search``, phase ``retrieve``): the agent plans its searches; their results, in call order, are
the ranked units, followed by the rest of the queue (newest first), then the summary and the core memory.
Scores are ``-rank``.

Provenance: archival rows carry the turn ids the agent cited (``sources``; unknown ids are dropped and counted),
recall and queue messages are turns; core memory blocks credit the turns cited when their lines were written;
the summary credits none (it goes last either way).

Stats (``system_stats.jsonl``): ``evicted_messages`` (turns summarised away), ``evictions``, ``pressure_alerts``
(steps at the alert), ``eviction_offers`` (steps just before an eviction), ``archival_rows``, and
``evicted_never_offered``, the evicted turns no pressure step ever showed the agent: 0 since the eviction offer
(a step whose reply fails still counts as offered, in ``failed_memgpt_pressure_*``), kept as a check and for
``make memgpt_window``'s column.

LoCoMo protocol: none upstream (letta#3115); Letta disputes the MemGPT numbers others published and reached its
own LoCoMo score with file tools. Here the two speakers' turns are the agent's user messages, each shown as
``[date] Speaker: text [image: caption]``.

Simplified, and why:
- The agent is consulted only where MemGPT's design makes memory decisions (the pressure steps, the summary, the
  question); upstream it also takes a step on every message, mostly to reply. Those replies and function-result
  messages are not put in the queue, so the queue holds the conversation itself. Since a per-message step could
  archive any message before it is evicted, each turn is offered at least once: at an alert, or else in one step
  just before its eviction (a turn evicted unseen would be a handicap of this simplification, not of MemGPT).
- One planning call per question issues all searches at once; upstream the agent chains calls with
  ``request_heartbeat`` and can read each page before asking the next.
- ``system_tokens`` (2,000) estimates 0.2's system prompt (``memgpt_chat.txt``, 5,491 characters, about 1,200
  tokens) plus its function schemas; ``context_window`` 8,192 is 0.2's default (gpt-4).
- Upstream shifts the summary cut past a user message so an assistant message follows it; every queued message
  is a user message here, so the cut is where the token fraction puts it.
- The 75% alert follows the 0.2 code (the paper says 70%); the 75% truncation follows the code (paper: 50%).

Offline roles: ``baselines/memgpt_offline.py``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from allmem.llm.prompts import build_request
from allmem.llm.roles import failure_of
from allmem.systems import MemorySystem, Resources, check_depth_factor
from allmem.tokens import count_tokens
from allmem.types import RetrievalResult, Retrieved, SessionInfo, Turn, format_date

from ._common import Tally, VectorIndex, ask, embedder_of, llm_of, source_id
from ._turns import turn_unit
from .memgpt_offline import MemGPTResponder

BLOCKS = ("persona", "human")


@dataclass
class QueueItem:
    """A message in the main context: a turn, or the recursive summary (``turn`` is None)."""

    text: str
    tokens: int
    turn: Turn | None = None


@dataclass
class ArchivalRow:
    id: str
    content: str
    sources: tuple[str, ...]
    timestamp: datetime | None


@dataclass
class Block:
    text: str = ""
    sources: list[str] = field(default_factory=list)


class MemGPT(MemorySystem):
    name = "memgpt"
    search_kind = "dense+lexical"

    def __init__(
        self,
        context_window: int = 8192,
        system_tokens: int = 2000,
        warning_frac: float = 0.75,
        trunc_frac: float = 0.75,
        keep_last: int = 3,
        core_char_limit: int = 2000,
        page_size: int = 5,
        function_return_chars: int = 3000,
        summary_words: int = 100,
        search_pages: int = 2,
        search_terms: int = 3,
        archive_min_terms: int = 5,
        resources: Resources | None = None,
    ) -> None:
        super().__init__(resources)
        if not 0 < warning_frac <= 1 or not 0 < trunc_frac < 1 or system_tokens >= context_window:
            raise ValueError(
                "configs/method/memgpt.yaml: need 0 < warning_frac <= 1, 0 < trunc_frac < 1, system_tokens < context_window"
            )
        if min(keep_last, page_size, core_char_limit, function_return_chars, summary_words) < 1:
            raise ValueError("configs/method/memgpt.yaml: keep_last, page_size and limits must be >= 1")
        if min(search_pages, search_terms, archive_min_terms) < 0:
            raise ValueError(
                "configs/method/memgpt.yaml: search_pages, search_terms and archive_min_terms must be >= 0"
            )
        self.window, self.system_tokens = context_window, system_tokens
        self.warning_frac, self.trunc_frac, self.keep_last = warning_frac, trunc_frac, keep_last
        self.core_char_limit, self.page_size = core_char_limit, page_size
        self.return_chars, self.summary_words = function_return_chars, summary_words
        self.responder = MemGPTResponder(
            word_limit=summary_words,
            search_pages=search_pages,
            search_terms=search_terms,
            archive_min_terms=archive_min_terms,
        )
        self.extra_pages = 0  # equal context (set_depth): archival pages read after the plan's
        self.embedder = embedder_of(self.resources, "memgpt")
        self.llm = llm_of(self.resources)
        self.reset("")

    def reset(self, dialogue_id: str) -> None:
        self.dialogue_id = dialogue_id
        self.queue: list[QueueItem] = []
        self.recall: list[Turn] = []
        self.by_id: dict[str, Turn] = {}
        self.archival: dict[str, ArchivalRow] = {}
        self.index = VectorIndex(self.embedder.dim)
        self.core = {b: Block() for b in BLOCKS}
        self.speakers: list[str] = []
        self.alerted = False
        # turns shown to the agent in a memory-pressure step (offer): an evicted turn not among them is offered first
        self.offered: set[str] = set()
        self.tally = Tally()

    # ------------------------------------------------------------ main context
    def core_text(self) -> str:
        return "\n".join(f"<{b}>{self.core[b].text}</{b}>" for b in BLOCKS)

    def context_tokens(self) -> int:
        return self.system_tokens + count_tokens(self.core_text()) + sum(m.tokens for m in self.queue)

    @property
    def summary(self) -> QueueItem | None:
        return self.queue[0] if self.queue and self.queue[0].turn is None else None

    def ingest(self, turn: Turn) -> None:
        line = f"[{format_date(turn.timestamp)}] {turn.render()}"
        self.queue.append(QueueItem(line, count_tokens(line), turn))
        self.recall.append(turn)
        self.by_id[source_id(turn)] = turn
        if turn.speaker not in self.speakers:
            self.speakers.append(turn.speaker)
        total = self.context_tokens()
        if total > self.window:
            while self.context_tokens() > self.window and self.evict():
                pass
        elif total > self.warning_frac * self.window and not self.alerted:
            self.alerted = True
            self.tally["pressure_alerts"] += 1
            self.offer(self.queue)

    def end_session(self, session: SessionInfo) -> None:
        """Nothing to do: MemGPT has no session boundary."""

    def queue_records(self, items: list[QueueItem]) -> list[dict[str, Any]]:
        return [
            {"id": source_id(m.turn), "speaker": m.turn.speaker, "text": m.turn.text, "summary": False}
            if m.turn is not None
            else {"id": "", "speaker": "", "text": m.text, "summary": True}
            for m in items
        ]

    def offer(self, items: list[QueueItem]) -> None:
        """A memory-pressure step (``memgpt_pressure``) over ``items``: the agent may save what matters in them
        before they leave the main context. At the alert ``items`` is the whole queue; just before an eviction, the
        evicted turns no step has shown it yet (``evict``)."""
        lines = [f"({source_id(m.turn)}) {m.text}" if m.turn is not None else m.text for m in items]
        variables = {
            "core_memory": self.core_text(),
            "messages": "\n".join(lines),
            "char_limit": str(self.core_char_limit),
            "queue": [r for r in self.queue_records(items) if not r["summary"]],
            "archived": sorted({s for row in self.archival.values() for s in row.sources}),
            "speakers": list(self.speakers),
        }
        self.offered.update(r["id"] for r in variables["queue"])
        reply = ask(self.llm, "memgpt_pressure", variables, self.responder, self.tally)
        if reply is not None:
            self.run_write_calls(reply["calls"])

    def run_write_calls(self, calls: list[dict[str, Any]]) -> None:
        inserts: list[ArchivalRow] = []
        for call in calls:
            name, args = call.get("name"), call.get("arguments") or {}
            if not isinstance(args, dict):
                self.tally["skipped_bad_arguments"] += 1
                continue
            if name == "archival_memory_insert":
                content = " ".join(str(args.get("content") or "").split())
                if not content:
                    self.tally["skipped_empty_content"] += 1
                    continue
                sources = self.known_sources(args.get("sources"))
                when = max((self.by_id[s].timestamp for s in sources), default=self.recall[-1].timestamp)
                inserts.append(ArchivalRow(f"a{len(self.archival) + len(inserts)}", content, sources, when))
            elif name in ("core_memory_append", "core_memory_replace"):
                self.edit_core(name, args)
            else:
                self.tally["skipped_unknown_function"] += 1
        if inserts:
            for row, vec in zip(inserts, self.embedder.encode([r.content for r in inserts]), strict=True):
                self.archival[row.id] = row
                self.index.add(row.id, vec)
            self.tally["archival_inserts"] += len(inserts)

    def known_sources(self, raw: Any) -> tuple[str, ...]:
        ids = [str(x) for x in raw] if isinstance(raw, list) else []
        known = tuple(dict.fromkeys(i for i in ids if i in self.by_id))
        self.tally["skipped_unknown_source"] += len(ids) - len(known)
        return known

    def edit_core(self, name: str, args: dict[str, Any]) -> None:
        block = self.core.get(str(args.get("name")))
        if block is None:
            self.tally["skipped_unknown_block"] += 1
            return
        if name == "core_memory_append":
            content = " ".join(str(args.get("content") or "").split())
            new = f"{block.text}\n{content}" if block.text else content
        else:
            old, content = str(args.get("old_content") or ""), str(args.get("new_content") or "")
            if not old or old not in block.text:
                self.tally["skipped_core_replace_missing"] += 1
                return
            new = block.text.replace(old, content)
        if not content:
            self.tally["skipped_empty_content"] += 1
        elif len(new) > self.core_char_limit:
            self.tally["skipped_core_full"] += 1  # upstream returns an error to the agent
        else:
            block.text = new
            block.sources = list(dict.fromkeys([*block.sources, *self.known_sources(args.get("sources"))]))
            self.tally[f"{name}"] += 1

    def evict(self) -> bool:
        """``summarize_messages_inplace``: replace the oldest ``trunc_frac`` of the queue's tokens by a summary."""
        candidates = self.queue[: -self.keep_last]
        desired = int(sum(m.tokens for m in self.queue) * self.trunc_frac)
        cutoff, so_far = 0, 0
        for i, m in enumerate(candidates):
            cutoff = i + 1
            so_far += m.tokens
            if so_far > desired:
                break
        if cutoff < 2:
            self.tally["evict_refused"] += 1  # upstream raises: too few messages to summarise
            return False
        old = self.queue[:cutoff]
        # upstream the agent steps on every message, so it could archive any of them before it leaves the main
        # context: the turns no alert showed it are offered now, in one step, before the summary
        unseen = [m for m in old if m.turn is not None and source_id(m.turn) not in self.offered]
        if unseen:
            self.tally["eviction_offers"] += 1
            self.offer(unseen)
        lines = "\n".join(m.text for m in old)
        variables = {"messages": lines, "word_limit": str(self.summary_words), "queue": self.queue_records(old), "speakers": list(self.speakers)}  # fmt: skip
        res = self.llm.chat(build_request("memgpt_summarize", variables, payload=self.responder))
        self.tally["calls_memgpt_summarize"] += 1
        fail = failure_of("memgpt_summarize", res)
        text = " ".join(res.text.split()) if fail is None else ""
        if not text:
            self.tally["failed_memgpt_summarize"] += 1
        line = f"Summary of the earlier conversation: {text or '(unavailable)'}"
        self.queue = [QueueItem(line, count_tokens(line)), *self.queue[cutoff:]]
        self.tally["evictions"] += 1
        self.tally["evicted_messages"] += sum(1 for m in old if m.turn is not None)
        # evicted without ever being offered to the agent (0 since the eviction offer above; kept as a check)
        self.tally["evicted_never_offered"] += sum(
            1 for m in old if m.turn is not None and source_id(m.turn) not in self.offered
        )
        self.alerted = False
        return True

    # ------------------------------------------------------------ retrieval
    def retrieve(self, query: str, when: datetime | None = None) -> RetrievalResult:
        t0 = time.perf_counter()
        summary = self.summary.text if self.summary is not None else "(none)"
        variables = {
            "question": query,
            "core_memory": self.core_text(),
            "summary": summary,
            "speakers": self.speakers,
        }
        reply = ask(self.llm, "memgpt_search", variables, self.responder, self.tally)
        t1 = time.perf_counter()
        found: list[Retrieved] = []
        calls = reply["calls"] if reply is not None else []
        for call in calls:
            found += self.run_search(call)
        deeper = self.next_pages(calls, query) if self.extra_pages else []
        for m in reversed(self.queue):
            if m.turn is not None:
                found.append(turn_unit(m.turn, 0.0))
        if self.summary is not None:
            found.append(Retrieved.of_text("summary", self.summary.text, (), 0.0))
        for b in BLOCKS:
            if self.core[b].text:
                found.append(
                    Retrieved.of_text(f"core:{b}", self.core[b].text, tuple(self.core[b].sources), 0.0)
                )
        units, seen = [], set()
        for u in [*found, *deeper]:
            if u.id not in seen:
                seen.add(u.id)
                units.append(Retrieved(u.id, u.parts, u.source_ids, -len(units), u.timestamp))
        t2 = time.perf_counter()
        return RetrievalResult(
            units=tuple(units), timings_ms={"plan": 1000 * (t1 - t0), "search": 1000 * (t2 - t1)}
        )

    def run_search(self, call: dict[str, Any]) -> list[Retrieved]:
        name, args = call.get("name"), call.get("arguments") or {}
        page = coerce_page(args.get("page")) if isinstance(args, dict) else None
        if page is None:
            self.tally["skipped_bad_arguments"] += 1
            return []
        if name == "archival_memory_search":
            hits = self.index.search(self.embedder.encode_one(str(args.get("query", ""))), None)
            rows = [self.archival[i] for i, _ in hits]
            units = [
                Retrieved.of_text(r.id, r.content, r.sources, 0.0, r.timestamp) for r in self.page(rows, page)
            ]
        elif name == "conversation_search":
            needle = str(args.get("query", "")).lower()
            if not needle:
                self.tally["skipped_bad_arguments"] += 1
                return []
            units = [
                turn_unit(t, 0.0)
                for t in self.page([t for t in self.recall if needle in t.render().lower()], page)
            ]
        elif name == "conversation_search_date":
            try:
                lo, hi = (
                    date.fromisoformat(str(args["start_date"])),
                    date.fromisoformat(str(args["end_date"])),
                )
            except (KeyError, ValueError):
                self.tally["skipped_bad_arguments"] += 1
                return []
            units = [
                turn_unit(t, 0.0)
                for t in self.page([t for t in self.recall if lo <= t.timestamp.date() <= hi], page)
            ]
        else:
            self.tally["skipped_unknown_function"] += 1
            return []
        self.tally[f"search_{name}"] += 1
        return self.cap(units)

    def set_depth(self, factor: int) -> None:
        """Equal context: ``factor - 1`` more archival pages, as if the agent kept paging (``next_pages``)."""
        check_depth_factor(factor)
        self.extra_pages = factor - 1

    def next_pages(self, calls: list[Any], question: str) -> list[Retrieved]:
        """The next ``extra_pages`` pages of every search the plan made (the same function and arguments, pages
        after the last one it read), and of an archival search with the question when the plan made none:
        breadth first (each search's next page, then the page after), ranked after the main context, since the
        agent would read them only after everything else it holds."""
        searches: dict[str, tuple[dict[str, Any], int]] = {}  # search -> (call without page, last page read)
        for call in calls:
            args = call.get("arguments") if isinstance(call, dict) else None
            if not isinstance(args, dict) or (page := coerce_page(args.get("page"))) is None:
                continue
            rest = {k: v for k, v in args.items() if k != "page"}
            key = json.dumps([call.get("name"), rest], sort_keys=True, default=str)
            last = searches.get(key, (None, -1))[1]
            searches[key] = ({"name": call.get("name"), "arguments": rest}, max(last, page))
        if not any(c["name"] == "archival_memory_search" for c, _ in searches.values()):
            searches["question"] = ({"name": "archival_memory_search", "arguments": {"query": question}}, -1)
        out: list[Retrieved] = []
        for step in range(1, self.extra_pages + 1):
            for call, last in searches.values():
                out += self.run_search({**call, "arguments": {**call["arguments"], "page": last + step}})
        return out

    def page(self, items: list[Any], page: int) -> list[Any]:
        return items[page * self.page_size : (page + 1) * self.page_size]

    def cap(self, units: list[Retrieved]) -> list[Retrieved]:
        """A function's return is cut at ``function_return_chars``: results past the cut are not seen."""
        kept, used = [], 0
        for u in units:
            used += len(u.text) + 1
            if used > self.return_chars:
                self.tally["truncated_returns"] += 1
                break
            kept.append(u)
        return kept

    def stats(self) -> dict[str, Any]:
        return {
            "queue_messages": sum(1 for m in self.queue if m.turn is not None),
            "context_tokens": self.context_tokens(),
            "archival_rows": len(self.archival),
            "core_chars": sum(len(b.text) for b in self.core.values()),
            "recall_messages": len(self.recall),
        } | self.tally.as_stats()


def coerce_page(value: Any) -> int | None:
    """A search's ``page`` as upstream reads it (letta ``archival_memory_search``): missing, null or "none" is page 0, an integer-valued string or float is that
    integer (``"0"`` → 0, ``1.0`` → 1); a negative, fractional or non-numeric value (or a bool) is ``None``."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip()
        if not value or value.lower() in ("none", "null"):
            return 0
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, float):
        if not value.is_integer():
            return None
        value = int(value)
    if isinstance(value, int) and value >= 0:
        return value
    return None
