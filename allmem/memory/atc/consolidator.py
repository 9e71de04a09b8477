"""The consolidator: trigger logic, parallel diagnosis, gating, serial execution, event logging.

It is built per dialogue by ``AllMemSystem`` (``build_consolidator``) and driven through four hooks. One run:
diagnose every buffered unit in its local context (top-k visible neighbours plus its temporal predecessor) on
a bounded thread pool, reading the bank only; gather results in buffer order; gate into three queues; execute
Split -> Merge -> Update serially. Given the model outputs the run is deterministic, whatever the pool size.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from allmem.defaults import from_node
from allmem.llm.client import pool_size
from allmem.memory.atc.config import OPS, ATCConfig
from allmem.memory.atc.drift import Calibration, UnitView, split_sentences_to_embed
from allmem.memory.atc.events import EventLog, edit_fields, unit_record
from allmem.memory.atc.executor import Executor, Outcome, unit_dict
from allmem.memory.atc.gate import gate
from allmem.memory.atc.meter import Meter
from allmem.memory.atc.offline_roles import OfflinePayload
from allmem.memory.bank import MemoryBank, Unit


class _LockedEmbed:
    """Serialises sentence embedding across diagnosis threads (the model is not made for concurrent calls)."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder
        self._lock = threading.Lock()

    def __call__(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            return np.asarray(self.embedder.encode(list(texts)), dtype=np.float32)


def _view(u: Unit, z: np.ndarray) -> UnitView:
    speakers = {r.speaker for r in u.evidence}
    return UnitView(
        id=u.id,
        text=" ".join(r.text for r in u.evidence),
        speaker=u.evidence[0].speaker if len(speakers) == 1 else "",
        order=u.order,
        z=z,
        summary=u.summary,
        keywords=u.keywords,
        visible=u.visible,
        n_records=len(u.evidence),
    )


class Consolidator:
    """ATC for one dialogue's bank. Hooks: on_write, on_turn_end, on_session_end, on_stream_end; stats()."""

    def __init__(
        self,
        bank: MemoryBank,
        llm: Any,
        embedder: Any,
        cfg: ATCConfig,
        run_dir: str | Path | None = None,
        dialogue_id: str = "",
        roles: Any = None,
        *,
        embed_format: str,
    ) -> None:
        self.bank, self.llm, self.embedder, self.cfg = bank, llm, embedder, cfg
        self.embed_format = embed_format
        self.dialogue_id = dialogue_id
        self.roles = roles
        self.log = EventLog(run_dir)
        self.buffer: list[str] = []
        self.names: set[str] = set()
        self.turns = 0
        self.turns_at_last_run = 0
        self.sessions = 0
        self.runs = 0
        self._embed = _LockedEmbed(embedder)

    # ------------------------------------------------------------------ hooks
    def on_write(self, unit_id: str) -> None:
        self.buffer.append(unit_id)
        for r in self.bank.get(unit_id).evidence:
            if r.speaker:
                self.names.add(r.speaker.lower())
                self.names.add(r.speaker.split()[0].lower())

    def on_turn_end(self) -> None:
        self.turns += 1
        if (
            self.cfg.enabled
            and self.cfg.every_turns
            and self.turns - self.turns_at_last_run >= self.cfg.every_turns
        ):
            self.run("turns")

    def on_session_end(self) -> None:
        self.sessions += 1
        if self.cfg.enabled and self.cfg.every_sessions and self.sessions % self.cfg.every_sessions == 0:
            self.run("sessions")

    def on_stream_end(self) -> None:
        if self.cfg.enabled and self.cfg.at_stream_end:
            self.run("stream")

    # ------------------------------------------------------------------ one run
    def context_ids(self, uid: str, ids: list[str], mat: np.ndarray, rows: np.ndarray) -> list[str]:
        """Top-k visible neighbours of ``uid`` (ties broken by bank order) plus its temporal predecessor."""
        sims = mat @ self.bank.embedding(uid)
        keep = np.array([i != uid for i in ids], dtype=bool)
        cand = np.flatnonzero(keep)
        order = cand[np.lexsort((rows[cand], -sims[cand]))][: self.cfg.top_k]
        out = [ids[i] for i in order]
        preds = [lk.src for lk in self.bank.in_links(uid, "temporal") if self.bank.is_visible(lk.src)]
        if preds:
            pred = max(preds, key=lambda p: (self.bank.get(p).order, self.bank.get(p).row))
            if pred not in out:
                out.append(pred)
        return out

    def _payload(self, involved: set[str]) -> OfflinePayload:
        cal = Calibration(names=frozenset(self.names), merge_phatic=self.cfg.merge_phatic)
        views = {u: _view(self.bank.get(u), np.asarray(self.bank.embedding(u))) for u in sorted(involved)}
        return OfflinePayload(views, self._embed, cal, self.cfg.ops, self.cfg.n_keywords)

    def _roles(self) -> Any:
        if self.roles is None:
            from allmem.memory.atc import roles

            self.roles = roles
        return self.roles

    def run(self, trigger: str) -> None:
        """One consolidation event over the buffered ids (nothing happens when the buffer is empty)."""
        buffered = [u for u in dict.fromkeys(self.buffer) if u in self.bank and self.bank.is_visible(u)]
        self.buffer = []
        if not buffered:
            return
        t0 = time.perf_counter()
        self.runs += 1
        base = {"dialogue": self.dialogue_id, "run": self.runs}
        visible_before = self.bank.n_visible
        ids, mat = self.bank.visible_matrix()
        rows = self.bank.rows_of(ids)
        contexts = [self.context_ids(u, ids, mat, rows) for u in buffered]
        involved = set(buffered).union(*contexts)
        payload = self._payload(involved)
        roles = self._roles()
        if getattr(self.llm, "offline", False) and payload.embed is not None:
            # The offline Split embeds each focal unit's sentences; one call for all of them fills fixed-shape
            # batches across units (a unit alone fills one pass with dummies). Same vectors: a text's vector
            # depends on the text alone (allmem/embed_batch.py), and the diagnoses below find them in the memo.
            sents = [
                s
                for u in buffered
                for s in split_sentences_to_embed(payload.views[u], payload.ops, payload.cal)
            ]
            if sents:
                payload.embed(list(dict.fromkeys(sents)))

        def diagnose(i: int) -> tuple[Any, dict[str, Any]]:
            meter = Meter(self.llm, payload)
            target = unit_dict(self.bank.get(buffered[i]))
            res = roles.diagnose(meter, target, [unit_dict(self.bank.get(c)) for c in contexts[i]])
            return res, meter.usage()

        with ThreadPoolExecutor(max_workers=pool_size(self.llm, self.cfg.workers)) as pool:
            results = list(pool.map(diagnose, range(len(buffered))))
        t1 = time.perf_counter()
        failures = Counter()
        proposals = []
        for uid, (res, _) in zip(buffered, results, strict=True):
            if not res:
                failures[getattr(res, "kind", "failed")] += 1
                continue
            raws = res.get("proposals") if isinstance(res, Mapping) else None
            proposals.append((uid, [r for r in raws or [] if isinstance(r, Mapping)]))
        queues, dropped = gate(proposals, self.bank, self.cfg)
        usage = self._sum([u for _, u in results])
        self.log.write(base | {
            "kind": "diagnose", "units": len(buffered), "proposals": sum(len(r) for _, r in proposals),
            "accepted": sum(len(q) for q in queues.values()), "dropped": dict(Counter(d.why.split(":")[0] for d in dropped)),
            "failed": dict(failures), "latency_ms": round(1000 * (t1 - t0), 3), **usage,
        })  # fmt: skip
        executor = Executor(
            self.bank, self.llm, self.embedder, self.cfg, payload, roles, embed_format=self.embed_format
        )
        totals = [usage]
        for op in OPS:
            for target in queues[op]:
                ts = time.perf_counter()
                sources = {u: list(self.bank.get(u).source_ids) for u in target.ids}
                before = [unit_record(self.bank.get(u)) for u in dict.fromkeys(target.ids) if u in self.bank]
                out: Outcome = executor.run(target)
                totals.append(out.usage)
                edit = edit_fields(self.bank, before, out.new_ids) if out.state == "executed" else {}
                self.log.write(base | {
                    "kind": "target", "op": op, "ids": list(target.ids), "source_ids": sources, "p": target.p,
                    "origin": target.origin, "why": target.reason, "state": out.state, "reason": out.reason, "new_ids": list(out.new_ids),
                    "latency_ms": round(1000 * (time.perf_counter() - ts), 3), **self._sum([out.usage]), **edit,
                })  # fmt: skip
        self.log.write(base | {
            "kind": "run", "trigger": trigger, "turn": self.turns, "turns_since_last": self.turns - self.turns_at_last_run,
            "buffered": len(buffered), "n_units": len(self.bank), "visible_before": visible_before,
            "n_visible": self.bank.n_visible, "latency_ms": round(1000 * (time.perf_counter() - t0), 3),
            **self._sum(totals),
        })  # fmt: skip
        self.turns_at_last_run = self.turns

    @staticmethod
    def _sum(usages: list[dict[str, Any]]) -> dict[str, Any]:
        keys = ("calls", "tokens_in", "tokens_out", "tokens", "llm_latency_ms", "cached")
        out = {k: sum(u.get(k, 0) for u in usages) for k in keys}
        out["llm_latency_ms"] = round(float(out["llm_latency_ms"]), 3)
        return out

    # ------------------------------------------------------------------ accounting
    def stats(self) -> dict[str, Any]:
        """Counters for metrics.json (JSON-safe): runs, per-operator outcomes, tokens and latency."""
        from allmem.memory.atc.summary import summarise_events

        return {"atc": summarise_events(self.log.events)}


def build_consolidator(
    bank: MemoryBank,
    llm: Any,
    embedder: Any,
    cfg: Mapping[str, Any] | ATCConfig,
    run_dir: str | Path | None = None,
    dialogue_id: str = "",
    roles: Any = None,
    *,
    embed_format: str,
) -> Consolidator:
    """The hook object ``AllMemSystem`` drives (docs/METHOD.md, ATC). ``cfg`` is the ``atc:`` node; ``embed_format`` is
    ``method.write.embed_format`` (re-embedded descriptors use the online write's layout)."""
    conf = cfg if isinstance(cfg, ATCConfig) else from_node(ATCConfig, cfg, ATCConfig.WHERE)
    if conf.enabled and llm is None:
        raise ValueError("atc.enabled=true needs an LLM client (resources.llm)")
    return Consolidator(bank, llm, embedder, conf, run_dir, dialogue_id, roles, embed_format=embed_format)
