"""The serial, deterministic executor: Applicable re-check, planning, validation, then the graph edit.

Why everything is validated before anything is written: a target must end Executed, Skipped or Noop with the
bank unchanged unless Executed (fail-closed, no retries). So each operator first gathers every model output it
needs (plan, sibling descriptors), validates them, embeds, and only then mutates the bank in one block of
rule-based steps: new units, archiving, version/sibling links, rewiring under the degree caps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from allmem.memory.atc import cues as tx
from allmem.memory.atc.config import ATCConfig
from allmem.memory.atc.gate import Target
from allmem.memory.atc.meter import Meter
from allmem.memory.bank import EvidenceRecord, MemoryBank, Unit
from allmem.memory.units import descriptor_text
from allmem.memory.write import default_describe

EXECUTED, SKIPPED, NOOP = "executed", "skipped", "noop"


@dataclass
class Outcome:
    """How one target ended. ``new_ids``: units the edit created (siblings, the canonical unit)."""

    state: str
    reason: str
    new_ids: tuple[str, ...] = ()
    usage: dict[str, Any] = field(default_factory=dict)


def unit_dict(u: Unit) -> dict[str, Any]:
    """A unit as the ATC roles take it (id, date, summary, keywords, evidence records)."""
    return {
        "id": u.id,
        "date": u.timestamp.isoformat(),
        "summary": u.summary,
        "keywords": list(u.keywords),
        "evidence": u.evidence_dicts(),
    }


def _clean_keywords(raw: Any) -> tuple[str, ...] | None:
    if not isinstance(raw, list):
        return None
    out: list[str] = []
    for k in raw:
        k = " ".join(str(k).split())
        if k and k.lower() not in {x.lower() for x in out}:
            out.append(k)
    return tuple(out)


def _unrender(segment: str, record: EvidenceRecord) -> str:
    """A segment copied with the prompt's line prefix ("[date] Speaker: ") is the text after that prefix.

    The prompt shows evidence as rendered lines, so a model may copy the prefix; only the prefix is dropped,
    the rest must still be a verbatim span of the record's text.
    """
    out = segment
    if out.startswith("[") and "] " in out:
        out = out.split("] ", 1)[1]
    if record.speaker and out.startswith(f"{record.speaker}: "):
        out = out[len(record.speaker) + 2 :]
    return out


def support(summary: str, sources: Sequence[Unit]) -> float:
    """Share of the summary's content words found in the sources (evidence, speakers, descriptors)."""
    words = tx.content_stems(summary)
    if not words:
        return 1.0
    pool: set[str] = set()
    for u in sources:
        for r in u.evidence:
            pool |= tx.content_stems(" ".join(x for x in (r.speaker, r.text, r.caption or "") if x))
        pool |= tx.content_stems(" ".join((u.summary, *u.keywords)))
    return len(words & pool) / len(words)


class Executor:
    """Applies queued targets to the bank in order; remembers every unit touched in this run."""

    def __init__(
        self,
        bank: MemoryBank,
        llm: Any,
        embedder: Any,
        cfg: ATCConfig,
        payload: Any = None,
        roles: Any = None,
        describe: Callable[..., Any] | None = None,
        *,
        embed_format: str,
    ) -> None:
        if roles is None:
            from allmem.memory.atc import roles as roles_mod

            roles = roles_mod
        self.bank, self.llm, self.embedder, self.cfg, self.payload = bank, llm, embedder, cfg, payload
        self.roles = roles
        self.embed_format = embed_format  # method.write.embed_format: re-embedded units match the write path
        self.describe = describe or default_describe()
        self.modified: set[str] = set()

    # ------------------------------------------------------------------ shared steps
    def applicable(self, t: Target) -> str | None:
        """None when the target can still be edited; else why it is stale (never retargeted)."""
        for uid in t.ids:
            if uid not in self.bank:
                return f"stale: {uid} no longer exists"
            if uid in self.modified:
                return f"stale: {uid} already modified in this run"
            if not self.bank.is_visible(uid):
                return f"stale: {uid} is archived"
        n = len(set(t.ids))
        if (t.op == "split" and n != 1) or (t.op == "update" and n != 2) or (t.op == "merge" and n < 2):
            return f"stale: wrong arity {n} for {t.op}"
        return None

    def _embed(self, descriptors: Sequence[tuple[str, Sequence[str]]]) -> np.ndarray:
        texts = [descriptor_text(s, list(k), self.embed_format) for s, k in descriptors]
        return np.asarray(self.embedder.encode(texts), dtype=np.float32)

    def _rewire(self, sources: Sequence[str], targets: Sequence[str]) -> None:
        """Copy the sources' external semantic and temporal links onto every target (caps enforced by the bank).

        The sources keep their own links: archiving changes visibility and nothing else.
        """
        inside = set(sources) | set(targets)
        for type_ in ("semantic", "temporal"):
            for s in sources:
                for lk in self.bank.out_links(s, type_):
                    if lk.dst not in inside:
                        for t in targets:
                            if not self.bank.has_link(type_, t, lk.dst):
                                self.bank.add_link(type_, t, lk.dst)
                for lk in self.bank.in_links(s, type_):
                    if lk.src not in inside:
                        for t in targets:
                            if not self.bank.has_link(type_, lk.src, t):
                                self.bank.add_link(type_, lk.src, t)

    def run(self, t: Target) -> Outcome:
        stale = self.applicable(t)
        if stale is not None:
            return Outcome(SKIPPED, stale)
        meter = Meter(self.llm, self.payload)
        try:
            out = {"split": self._split, "merge": self._merge, "update": self._update}[t.op](t, meter)
        finally:
            usage = meter.usage()
        out.usage = usage
        if out.state == EXECUTED:
            self.modified.update(t.ids)
            self.modified.update(out.new_ids)
        return out

    # ------------------------------------------------------------------ operators
    def _split(self, t: Target, meter: Meter) -> Outcome:
        src = self.bank.get(t.ids[0])
        plan = self.roles.plan_split(meter, unit_dict(src))
        if not plan:
            return Outcome(SKIPPED, f"plan failed: {plan.kind}: {plan.message}")
        raw = plan.get("segments")
        if not isinstance(raw, list):
            return Outcome(SKIPPED, "plan has no segment list")
        segs: list[str] = []
        for s in raw:
            s = tx.normalise_ws(str(s))
            if s and s not in segs:
                segs.append(s)
        if len(segs) < 2:
            return Outcome(NOOP, f"planner returned {len(segs)} segment(s)")
        records: list[EvidenceRecord] = []
        captioned: set[int] = set()
        for s in segs:
            home = next(
                (i for i, r in enumerate(src.evidence) if tx.is_grounded(_unrender(s, r), r.text)), None
            )
            if home is None:
                return Outcome(SKIPPED, f"ungrounded segment: {s[:80]!r}")
            r = src.evidence[home]
            s = _unrender(s, r)
            caption = r.caption if home not in captioned else None  # the image goes with the first segment
            captioned.add(home)
            records.append(EvidenceRecord(r.speaker, s, caption, r.date, r.source_ids))
        descs: list[tuple[str, tuple[str, ...]]] = []
        for rec in records:
            d = self.describe(meter, [rec.as_dict()], n_keywords=self.cfg.n_keywords)
            summary = getattr(d, "summary", "")
            if not d or not str(summary).strip():
                return Outcome(SKIPPED, f"sibling descriptor failed: {getattr(d, 'message', 'empty')}")
            descs.append((str(summary), tuple(d.keywords)))
        vecs = self._embed(descs)
        new = [
            self.bank.create_unit([rec], s, k, v, src.timestamp, order=src.order, visible=True)
            for rec, (s, k), v in zip(records, descs, vecs, strict=True)
        ]
        for a in new:
            for b in new:
                if a != b:
                    self.bank.add_link("sibling", a, b)
            self.bank.add_link("sibling", a, src.id)
        self._rewire([src.id], new)
        self.bank.archive(src.id)
        return Outcome(EXECUTED, f"{len(new)} siblings", tuple(new))

    def _merge(self, t: Target, meter: Meter) -> Outcome:
        units = [self.bank.get(u) for u in t.ids]
        if self.cfg.coherence_guard:
            z = np.stack([self.bank.embedding(u.id) for u in units]).astype(np.float64)
            c = z.mean(axis=0)
            c /= np.linalg.norm(c) or 1.0
            coherence = float((z @ c).mean())
            if coherence < self.cfg.coherence_min:
                return Outcome(
                    SKIPPED, f"incoherent: centroid coherence {coherence:.3f} < {self.cfg.coherence_min}"
                )
        plan = self.roles.plan_merge(meter, [unit_dict(u) for u in units])
        checked = self._descriptor_plan(plan, units)
        if isinstance(checked, Outcome):
            return checked
        summary, keywords = checked
        (vec,) = self._embed([(summary, keywords)])
        ordered = sorted(units, key=lambda u: (u.timestamp, u.order, u.row))
        records = [r for u in ordered for r in u.evidence]
        last = ordered[-1]
        canon = self.bank.create_unit(records, summary, keywords, vec, last.timestamp, order=last.order)
        for u in ordered:
            self.bank.add_link("version", canon, u.id)
        self._rewire([u.id for u in ordered], [canon])
        for u in ordered:
            self.bank.archive(u.id)
        return Outcome(EXECUTED, f"merged {len(units)} units", (canon,))

    def _update(self, t: Target, meter: Meter) -> Outcome:
        cur, old = self.bank.get(t.ids[0]), self.bank.get(t.ids[1])
        plan = self.roles.plan_update(meter, unit_dict(cur), unit_dict(old))
        checked = self._descriptor_plan(plan, [cur, old])
        if isinstance(checked, Outcome):
            return checked
        summary, keywords = checked
        (vec,) = self._embed([(summary, keywords)])
        self.bank.set_descriptor(cur.id, summary, keywords, vec)
        self.bank.add_link("version", cur.id, old.id)
        self.bank.archive(old.id)
        return Outcome(EXECUTED, "superseded archived")

    def _descriptor_plan(self, plan: Any, sources: Sequence[Unit]) -> tuple[str, tuple[str, ...]] | Outcome:
        """Validate a Merge/Update plan: decline -> Noop; missing/empty/unsupported -> Skipped."""
        if not plan:
            return Outcome(
                SKIPPED, f"plan failed: {getattr(plan, 'kind', '?')}: {getattr(plan, 'message', '')}"
            )
        if not isinstance(plan, Mapping):
            return Outcome(SKIPPED, "plan is not a JSON object")
        if plan.get("decline") is True:
            return Outcome(NOOP, f"planner declined: {str(plan.get('reason', ''))[:120]}")
        summary = plan.get("summary")
        keywords = _clean_keywords(plan.get("keywords"))
        if not isinstance(summary, str) or keywords is None:
            return Outcome(SKIPPED, "plan misses summary or keywords")
        summary = tx.normalise_ws(summary)
        if not summary:
            return Outcome(SKIPPED, "empty descriptor")
        sup = support(summary, sources)
        if sup < self.cfg.support_min:
            return Outcome(SKIPPED, f"unsupported descriptor: {sup:.2f} of its words in the sources")
        return summary, keywords
