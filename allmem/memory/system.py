"""All-Mem as a ``MemorySystem``: online write, optional ATC consolidation, three-stage retrieval.

Built from ``configs/method/allmem*.yaml``; the runner passes ``resources=Resources(embedder, llm, run_dir)``.
Consolidation lives in ``allmem.memory.atc``: when ``atc.enabled`` the system builds
``build_consolidator(bank=, llm=, embedder=, cfg=<atc node>, run_dir=)`` for each dialogue and calls
``on_write(uid)`` after every online write, ``on_turn_end()`` after each turn, ``on_session_end()``,
``on_stream_end()``; the consolidator decides when to run. Its ``stats()`` are merged into ours under ``atc_``.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from allmem.memory.bank import MemoryBank
from allmem.memory.persist import load_bank, save_bank
from allmem.memory.recover import recoverability
from allmem.memory.retrieve import RetrievalConfig, Retriever
from allmem.memory.write import OnlineWriter, WriteConfig
from allmem.systems import MemorySystem, Resources
from allmem.types import RetrievalResult, Retrieved, SessionInfo, Turn

log = logging.getLogger("allmem.memory")


def _plain(node: Any) -> dict[str, Any]:
    """Hydra hands nested config either as DictConfig or (via the runner) as a plain dict: accept both."""
    if node is None:
        return {}
    if isinstance(node, Mapping):
        return {k: _plain(v) if isinstance(v, Mapping) else v for k, v in node.items()}
    from omegaconf import OmegaConf

    out = OmegaConf.to_container(node, resolve=True)
    assert isinstance(out, dict)
    return out


def _atc_factory(enabled: bool) -> Any:
    """``build_consolidator`` when consolidation is on. Imported on use: the no-ATC path never loads the
    diagnoser's word lists and stemmer."""
    if not enabled:
        return None
    from allmem.memory.atc import build_consolidator

    return build_consolidator


class AllMem(MemorySystem):
    """All-Mem: visible-surface anchoring, typed-link expansion, re-ranking; ATC through a hook."""

    name = "allmem"

    def __init__(
        self,
        resources: Resources | None = None,
        links: Mapping[str, Any] | None = None,
        write: Mapping[str, Any] | None = None,
        retrieval: Mapping[str, Any] | None = None,
        vector: Mapping[str, Any] | None = None,
        atc: Mapping[str, Any] | None = None,
        recover_mode: str = "directed",
        save_banks: bool = False,
    ) -> None:
        super().__init__(resources)
        links_cfg = _plain(links)
        self.d_sigma: int | None = links_cfg.pop("d_sigma", 8)
        unknown = sorted(links_cfg)
        if unknown:
            raise ValueError(f"method.links: unknown keys {unknown}; known: ['d_sigma']")
        self.write_cfg = WriteConfig.from_dict(_plain(write))
        self.retrieval_cfg = RetrievalConfig.from_dict(_plain(retrieval))
        self.vector_cfg = _plain(vector)
        self.atc_cfg = _plain(atc)
        self.atc_enabled = bool(self.atc_cfg.get("enabled", False))
        self.recover_mode = recover_mode
        self.save_banks = save_banks
        if self.resources.embedder is None:
            raise ValueError("AllMem needs resources.embedder (allmem.embed.Embedder)")
        self.dialogue_id = ""
        self.bank: MemoryBank | None = None
        self.consolidator: Any = None
        self._retriever: Retriever | None = None
        self._turns_since_flush = 0

    # ------------------------------------------------------------------ lifecycle
    def reset(self, dialogue_id: str) -> None:
        self.dialogue_id = dialogue_id
        self._attach(MemoryBank(dim=int(self.resources.embedder.dim), d_sigma=self.d_sigma))

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

    def ingest(self, turn: Turn) -> None:
        if self.bank is None:
            self.reset(turn.session_id)
        self.writer.add(turn)

    def end_session(self, session: SessionInfo) -> None:
        self.writer.flush()
        if self.consolidator is not None:
            self.consolidator.on_session_end()

    def end_stream(self) -> None:
        self.writer.flush()
        if self.consolidator is not None:
            self.consolidator.on_stream_end()
        if self.retriever is not None:
            self.retriever.sync()  # index upkeep now, not in the first query's latency
        if self.save_banks and self.resources.run_dir is not None and self.bank is not None:
            self.save(Path(self.resources.run_dir) / "banks" / self.dialogue_id)

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
        out["stats_ms"] = round(1000 * (time.perf_counter() - t0), 3)
        return out
