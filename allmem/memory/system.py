"""All-Mem as a ``MemorySystem``: online write, optional ATC consolidation, three-stage retrieval.

Built from ``configs/method/allmem*.yaml``; the runner passes ``resources=Resources(embedder, llm, run_dir)``.
Consolidation lives in ``allmem.memory.atc``: when ``atc.enabled`` the system builds
``build_consolidator(bank=, llm=, embedder=, cfg=<atc node>, run_dir=)`` for each dialogue and calls
``on_write(uid)`` after every online write, ``on_turn_end()`` after each turn, ``on_session_end()``,
``on_stream_end()``; the consolidator decides when to run. Its ``stats()`` are merged into ours under ``atc_``.
With ``bank_cache`` set, a dialogue's final bank is stored and re-used by runs whose ingestion is identical
(``allmem.memory.bank_cache``): the stream is matched event by event before anything is skipped.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from allmem.defaults import from_node, method_node
from allmem.files import plain
from allmem.memory.atc.config import ATCConfig
from allmem.memory.bank import MemoryBank
from allmem.memory.bank_cache import BankCache, Expectation, event_digest, ingest_key
from allmem.memory.persist import load_bank, save_bank
from allmem.memory.probe import ProbeConfig, stage1_probe
from allmem.memory.recover import recoverability
from allmem.memory.retrieve import RetrievalConfig, Retriever
from allmem.memory.write import OnlineWriter, WriteConfig
from allmem.systems import MemorySystem, Resources, check_depth_factor
from allmem.types import RetrievalResult, Retrieved, SessionInfo, Turn

log = logging.getLogger("allmem.memory")


@dataclass(frozen=True)
class LinkConfig:
    """``method.links``: ``d_sigma`` caps a unit's semantic out-degree (null: no cap)."""

    WHERE: ClassVar[str] = "method.links"
    d_sigma: int | None


def _atc_factory(enabled: bool) -> Any:
    """``build_consolidator`` when consolidation is on. Imported on use: the no-ATC path never loads the
    diagnoser's word lists and stemmer."""
    if not enabled:
        return None
    from allmem.memory.atc import build_consolidator

    return build_consolidator


class AllMemSystem(MemorySystem):
    """All-Mem: visible-surface anchoring, typed-link expansion, re-ranking; ATC through a hook."""

    name = "allmem"
    search_kind = (
        "dense+links"  # Stage 1 as ``retrieval.stage1`` says, then link expansion (Table 1's footer)
    )

    def __init__(
        self,
        resources: Resources | None,
        links: Mapping[str, Any],
        write: Mapping[str, Any],
        retrieval: Mapping[str, Any],
        vector: Mapping[str, Any],
        atc: Mapping[str, Any],
        recover_mode: str,
        save_banks: bool,
        probe: Mapping[str, Any],
        *,
        bank_cache: str | Path | None = None,
        probe_queries: int = 0,
    ) -> None:
        """The settings are the ``method`` node of ``configs/method/allmem*.yaml`` (library code without Hydra:
        ``AllMemSystem.from_config(resources, retrieval={"K": 8})``). ``bank_cache`` and ``probe_queries`` are
        ``run.bank_cache`` / ``run.probe_queries``, which the runner passes (off when not given)."""
        super().__init__(resources)
        self.d_sigma = from_node(LinkConfig, links, LinkConfig.WHERE).d_sigma
        self.write_cfg = from_node(WriteConfig, write, WriteConfig.WHERE)
        self.retrieval_cfg = from_node(RetrievalConfig, retrieval, RetrievalConfig.WHERE)
        self.vector_cfg = plain(vector)
        self.atc_cfg = from_node(ATCConfig, atc, ATCConfig.WHERE)
        self.atc_enabled = self.atc_cfg.enabled
        self.recover_mode = recover_mode
        self.save_banks = save_banks
        self.probe_cfg = from_node(ProbeConfig, {**plain(probe), "queries": probe_queries}, ProbeConfig.WHERE)
        if self.resources.embedder is None:
            raise ValueError("AllMemSystem needs resources.embedder (allmem.embed.Embedder)")
        self.dialogue_id = ""
        self.bank: MemoryBank | None = None
        self.consolidator: Any = None
        self._retriever: Retriever | None = None
        self._turns_since_flush = 0
        self.bank_cache = BankCache(bank_cache, self._ingest_key()) if bank_cache else None
        self._expect: Expectation | None = None
        self._stream: list[str] = []
        self._ingest_s = 0.0
        self._reused: dict[str, Any] | None = None

    @classmethod
    def from_config(
        cls,
        resources: Resources,
        name: str = "allmem",
        *,
        bank_cache: str | Path | None = None,
        probe_queries: int = 0,
        **changes: Any,
    ) -> AllMemSystem:
        """All-Mem with the values of ``configs/method/<name>.yaml``, read without Hydra; each of ``changes``
        replaces keys of one node (``atc={"theta": 0.5}``) or a value (``save_banks=True``)."""
        node = method_node(name)
        node.pop("_target_"), node.pop("name")
        for key, value in changes.items():
            node[key] = {**node[key], **value} if isinstance(value, Mapping) and key in node else value
        return cls(resources, **node, bank_cache=bank_cache, probe_queries=probe_queries)

    def _ingest_key(self) -> str:
        """Everything that shapes the bank a stream leaves behind (retrieval and vector settings do not)."""
        settings = {
            "d_sigma": self.d_sigma,
            "write": asdict(self.write_cfg),
            "atc": asdict(self.atc_cfg),
            "recover_mode": self.recover_mode,
            "probe": asdict(self.probe_cfg),
        }
        return ingest_key(settings, self.resources.llm, self.resources.embedder)

    # ------------------------------------------------------------------ lifecycle
    def reset(self, dialogue_id: str) -> None:
        self.dialogue_id = dialogue_id
        self._attach(MemoryBank(dim=int(self.resources.embedder.dim), d_sigma=self.d_sigma))
        self._stream, self._ingest_s, self._reused, self._probed = [], 0.0, None, 0
        self._expect = None
        if self.bank_cache is not None:
            self._expect = self.bank_cache.expect(dialogue_id)
            if self._ledger is not None:
                self._ledger.tap()  # this dialogue's ingestion calls, stored with its bank

    def _attach(self, bank: MemoryBank, last_id: str | None = None) -> None:
        self.bank = bank
        self.consolidator = self._make_consolidator(bank)
        self.writer = OnlineWriter(
            bank, self.resources.embedder, self.resources.llm, self.write_cfg, after_write=self._after_write
        )
        self.writer.last_id = last_id
        self._retriever = Retriever(bank, self.resources.embedder, self.retrieval_cfg, self.vector_cfg)

    def _make_consolidator(self, bank: MemoryBank) -> Any:
        factory = _atc_factory(self.atc_enabled)  # raises here, before any ingestion, if ATC is missing
        if factory is None:
            return None
        kwargs: dict[str, Any] = {
            "bank": bank,
            "llm": self.resources.llm,
            "embedder": self.resources.embedder,
            "cfg": self.atc_cfg,
            "run_dir": self.resources.run_dir,
            "embed_format": self.write_cfg.embed_format,
        }
        params = inspect.signature(factory).parameters
        if "dialogue_id" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            kwargs["dialogue_id"] = self.dialogue_id
        return factory(**kwargs)

    def _after_write(self, uid: str) -> None:
        """Per unit, in stream order: push the id into the ATC buffer, then close the turn."""
        if self.consolidator is not None:
            self.consolidator.on_write(uid)
            self.consolidator.on_turn_end()

    # ------------------------------------------------------------------ stream (with the optional bank cache)
    def _held(self, kind: str, payload: Any) -> bool:
        """Record the event; True when it matches the cached stream and is held back instead of processed."""
        if self.bank_cache is None:
            return False
        digest = event_digest(kind, payload)
        self._stream.append(digest)
        if self._expect is None:
            return False
        if self._expect.feed(kind, payload, digest):
            return True
        held, self._expect = self._expect.held, None
        log.info(
            "bank cache: %s differs from the cached stream at event %d; ingesting",
            self.dialogue_id,
            len(held),
        )
        for k, p in held:  # what was held back is written now, in order, then the stream goes on normally
            self._process(k, p)
        return False

    def _process(self, kind: str, payload: Any) -> None:
        t0 = time.perf_counter()
        if kind == "turn":
            self.writer.add(payload)
        elif kind == "end_session":
            self.writer.flush()
            if self.consolidator is not None:
                self.consolidator.on_session_end()
        self._ingest_s += time.perf_counter() - t0
        self._maybe_probe()

    def _maybe_probe(self) -> None:
        """After each consolidation run, when ``probe.queries`` > 0: Stage 1 timed on both surfaces (fig. 5c)."""
        c = self.consolidator
        if c is None or not self.probe_cfg.queries or c.runs == self._probed or self.bank is None:
            return
        self._probed = c.runs
        result = stage1_probe(self.bank, self.probe_cfg, self.vector_cfg)
        c.log.write({"kind": "probe", "dialogue": self.dialogue_id, "run": c.runs, "turn": c.turns} | result)

    def start_session(self, session: SessionInfo) -> None:
        self._held("start_session", session)

    def ingest(self, turn: Turn) -> None:
        if self.bank is None:
            self.reset(turn.session_id)
        if not self._held("turn", turn):
            self._process("turn", turn)

    def end_session(self, session: SessionInfo) -> None:
        if not self._held("end_session", session):
            self._process("end_session", session)

    def checkpoint(self) -> None:
        """A question comes mid-stream: write the turns the writer still buffers (``end_session`` already wrote
        them when the question follows a session) and bring the index up to date. ATC keeps its own schedule;
        the end-of-stream consolidation waits for ``end_stream``."""
        if self.bank_cache is not None:
            raise ValueError(
                "All-Mem: a mid-stream question needs run.bank_cache off (it holds whole streams)"
            )
        t0 = time.perf_counter()
        self.writer.flush()
        self._ingest_s += time.perf_counter() - t0
        if self.retriever is not None:
            self.retriever.sync()

    def end_stream(self) -> None:
        if self._expect is not None and self._expect.complete:
            self._load_cached(self._expect.path)
        else:
            if self._expect is not None:  # the stream ended early: write what was held back
                held, self._expect = self._expect.held, None
                for k, p in held:
                    self._process(k, p)
            t0 = time.perf_counter()
            self.writer.flush()
            if self.consolidator is not None:
                self.consolidator.on_stream_end()
            self._ingest_s += time.perf_counter() - t0
            self._maybe_probe()
            if self.bank_cache is not None and self.bank is not None:
                events = self.consolidator.log.events if self.consolidator is not None else []
                calls = self._ledger.untap() if self._ledger is not None else []
                self.bank_cache.store(
                    self.dialogue_id, self.save, self._stream, self.stats(), events, self._ingest_s, calls
                )
        if self.retriever is not None:
            self.retriever.sync()  # index upkeep now, not in the first query's latency
        if self.save_banks and self.resources.run_dir is not None and self.bank is not None:
            self.save(Path(self.resources.run_dir) / "banks" / self.dialogue_id)

    @property
    def _ledger(self) -> Any:
        return getattr(self.resources.llm, "ledger", None)

    def _load_cached(self, path: Path) -> None:
        """Use the cached bank; its ATC events are copied into this run's events file, marked as reused, and its
        ingestion calls are booked in this run's ledger as cached replies."""
        assert self.bank_cache is not None
        entry, events, calls = BankCache.read(path)
        self.load(path / "bank")
        self._expect = None
        self._reused = {
            "hit": True,
            "key": self.bank_cache.key,
            "ingest_s": entry.get("ingest_s"),
            "stats": entry.get("stats", {}),
        }
        if self.consolidator is not None:
            for ev in events:
                self.consolidator.log.write(ev | {"reused": True})
        if self._ledger is not None:
            self._ledger.untap()  # nothing was booked while the stream was matched
            for line in calls:
                self._ledger.rebook(line)
        log.info("bank cache: %s loaded from %s", self.dialogue_id, path)

    # ------------------------------------------------------------------ retrieval
    @property
    def retriever(self) -> Retriever | None:
        return self._retriever

    def retrieve(self, query: str, when: datetime | None = None) -> RetrievalResult:
        if self.bank is None or self._retriever is None:
            return RetrievalResult(units=())
        self.writer.flush()
        ranked = self._retriever.retrieve(query)
        units = []
        for uid, score in zip(ranked.ids, ranked.scores, strict=True):
            u = self.bank.get(uid)
            units.append(Retrieved(uid, u.utterances(), u.source_ids, float(score), u.timestamp))
        return RetrievalResult(units=tuple(units), timings_ms=ranked.timings_ms)

    # Equal context (budget.fill): Stage 1 anchors, Stage 2 candidates, Stage 3 units and the fused / RRF pool
    # depths, all scaled by the same factor, so a deeper ranking keeps the shape of the configured one.
    DEPTH_KEYS = ("k", "L", "K", "fuse_depth", "rrf_depth")

    def set_depth(self, factor: int) -> None:
        """Scale ``DEPTH_KEYS`` of the retrieval settings to ``factor`` times the configured values (1 restores)."""
        check_depth_factor(factor)
        base = self.__dict__.setdefault("_depth_base", self.retrieval_cfg)
        self.retrieval_cfg = replace(base, **{key: getattr(base, key) * factor for key in self.DEPTH_KEYS})
        if self._retriever is not None:
            self._retriever.cfg = self.retrieval_cfg

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Save this dialogue's bank (JSON + .npy, atomic); ``load`` restores it ready to retrieve or ingest."""
        assert self.bank is not None, "nothing to save: no dialogue ingested"
        self.writer.flush()
        return save_bank(
            self.bank, path, extra={"dialogue_id": self.dialogue_id, "last_id": self.writer.last_id}
        )

    def load(self, path: str | Path) -> None:
        bank, extra = load_bank(path)
        if bank.dim != int(self.resources.embedder.dim):
            raise ValueError(f"{path}: bank dim {bank.dim} != embedder dim {self.resources.embedder.dim}")
        self.dialogue_id = str(extra.get("dialogue_id", ""))
        self._attach(bank, extra.get("last_id"))

    # ------------------------------------------------------------------ accounting
    def stats(self) -> dict[str, Any]:
        if self.bank is None:
            return {}
        if self._reused is not None:  # the stats of the run that built this bank, marked as re-used
            cache = {k: v for k, v in self._reused.items() if k != "stats"}
            return dict(self._reused["stats"]) | {"bank_cache": cache}
        t0 = time.perf_counter()
        units = self.bank.units()
        n_links: dict[str, int] = {}
        for lk in self.bank.links():
            n_links[lk.type] = n_links.get(lk.type, 0) + 1
        out: dict[str, Any] = {
            "n_units": len(units),
            "n_visible": self.bank.n_visible,
            "n_archived": len(units) - self.bank.n_visible,
            **{f"links_{t}": n for t, n in sorted(n_links.items())},
            **{k: int(v) for k, v in self.writer.counters.items()},
            **{f"write_{k}_ms": round(v, 3) for k, v in self.writer.timers_ms.items()},
        }
        if self.writer.failures:
            out["descriptor_failure_examples"] = self.writer.failures[:5]
        rec = recoverability(self.bank, self.recover_mode)
        out["recoverability"] = {k: v for k, v in rec.items() if k != "curve"} | {"curve": rec["curve"]}
        if self.consolidator is not None:
            for k, v in dict(self.consolidator.stats()).items():
                out[k if k.startswith("atc") else f"atc_{k}"] = v
        if self.bank_cache is not None:
            out["bank_cache"] = {"hit": False, "key": self.bank_cache.key}
        out["stats_ms"] = round(1000 * (time.perf_counter() - t0), 3)
        return out
