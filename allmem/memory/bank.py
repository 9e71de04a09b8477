"""The All-Mem memory bank: units with immutable evidence, typed directed links and the visible surface.

Public API (stable; later changes are additive only)::

    LINK_TYPES = ("temporal", "semantic", "version", "sibling")
    EvidenceRecord(speaker, text, caption, date, source_ids)   .as_dict()  EvidenceRecord.from_dict(d)
    evidence_hash(records) -> str                               sha256 of the canonical JSON of the records
    Unit (frozen snapshot): id, row, evidence, evidence_hash, summary, keywords, timestamp, order, visible
        .source_ids  .evidence_dicts()  .evidence_text()  .descriptor_text()
    Link (frozen): type, src, dst, weight, seq
    MemoryBank(dim=384, d_sigma=8, capacity=16)    d_sigma=None: no semantic out-degree cap (ref)
        create_unit(evidence, summary, keywords, embedding, timestamp, order=0, visible=True) -> "u000042"
        get(uid) / bank[uid] / uid in bank / len(bank) / ids() / units() / n_visible / is_visible(uid)
        archive(uid)                                visibility to 0 and nothing else
        set_descriptor(uid, summary, keywords, embedding)
        embedding(uid) -> read-only (dim,) vector; cosine(a, b)
        add_link(type, src, dst, weight=None) -> bool   False if the semantic cap dropped the new link
        remove_link(type, src, dst) -> bool; has_link(type, src, dst)
        out_links(uid, type=None) / in_links(uid, type=None) -> list[Link]; links() -> every link
        out_map(uid, type) / in_map(uid, type) -> {other_id: Link}  read-only views for hot paths
        link_semantic(a, b, weight=None) -> (a->b kept, b->a kept)
        rewire(source, targets, types=("semantic", "temporal"), keep_original=True) -> links added
        visible_ids() / visible_matrix() -> (ids, matrix)   the searchable surface, maintained incrementally
        visible_matrix_view() / full_matrix_view() / visible_ids_at(positions) / full_ids_at(rows) / rows_of(ids)   hot-path access
        full_ids() / full_matrix() -> (ids, matrix)         every unit, row i = unit u{i:06d}
        revision / changes_since(pos) -> [(kind, uid)]      kind in add | descriptor | archive
        check_invariants()                                  raises BankError when a contract is broken

Matrices returned by ``visible_matrix``/``full_matrix`` are read-only views: valid until the next mutation.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

import numpy as np

from allmem.memory.units import (
    LINK_TYPES,
    BankError,
    EvidenceRecord,
    Link,
    Unit,
    descriptor_text,
    evidence_hash,
)

__all__ = [
    "LINK_TYPES",
    "BankError",
    "EvidenceRecord",
    "Link",
    "MemoryBank",
    "Unit",
    "descriptor_text",
    "evidence_hash",
]


@dataclass
class _Matrix:
    """A growable float32 row store (amortised O(d) append): no full rebuild per insert."""

    dim: int
    capacity: int = 16
    data: np.ndarray = field(init=False)
    n: int = 0

    def __post_init__(self) -> None:
        self.data = np.zeros((max(1, self.capacity), self.dim), dtype=np.float32)

    def append(self, vec: np.ndarray) -> int:
        if self.n == len(self.data):
            grown = np.zeros((2 * len(self.data), self.dim), dtype=np.float32)
            grown[: self.n] = self.data[: self.n]
            self.data = grown
        self.data[self.n] = vec
        self.n += 1
        return self.n - 1

    def view(self) -> np.ndarray:
        v = self.data[: self.n]
        v.flags.writeable = False
        return v


_EMPTY: Mapping[str, Link] = MappingProxyType({})


class MemoryBank:
    """Units, typed links, and the incrementally maintained visible-surface matrix.

    Ids are sequential (``u000000``, ``u000001``, ...) so a run is reproducible given the same operations.
    """

    def __init__(self, dim: int = 384, d_sigma: int | None = 8, capacity: int = 16) -> None:
        if d_sigma is not None and d_sigma < 1:
            raise BankError(f"d_sigma must be >= 1 or None, got {d_sigma}")
        self.dim = int(dim)
        self.d_sigma = d_sigma
        self._units: list[Unit] = []
        self._index: dict[str, int] = {}
        self._emb = _Matrix(self.dim, capacity)  # capacity: rows preallocated (large synthetic banks)
        self._vis = _Matrix(self.dim, capacity)
        self._vis_ids: list[str] = []
        self._vis_pos: dict[str, int] = {}
        self._out: dict[str, dict[str, dict[str, Link]]] = {}
        self._in: dict[str, dict[str, dict[str, Link]]] = {}
        self._link_seq = 0
        self._log: list[tuple[str, str]] = []

    # ------------------------------------------------------------------ units
    def _vector(self, embedding: Any, uid: str) -> np.ndarray:
        vec = np.asarray(embedding, dtype=np.float32).reshape(-1)
        if vec.shape != (self.dim,):
            raise BankError(f"unit {uid}: field 'embedding' has shape {vec.shape}, expected ({self.dim},)")
        if not np.all(np.isfinite(vec)):
            raise BankError(f"unit {uid}: field 'embedding' has non-finite values")
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else vec

    def create_unit(
        self,
        evidence: Iterable[Mapping[str, Any] | EvidenceRecord],
        summary: str,
        keywords: Sequence[str],
        embedding: Any,
        timestamp: datetime,
        order: int = 0,
        visible: bool = True,
    ) -> str:
        """Add a unit; returns its new sequential id. The embedding is stored L2-normalised."""
        uid = f"u{len(self._units):06d}"
        records = tuple(EvidenceRecord.from_dict(r) for r in evidence)
        if not records:
            raise BankError(f"unit {uid}: field 'evidence' is empty")
        if not isinstance(timestamp, datetime):
            raise BankError(
                f"unit {uid}: field 'timestamp' must be a datetime, got {type(timestamp).__name__}"
            )
        vec = self._vector(embedding, uid)
        row = self._emb.append(vec)
        unit = Unit(
            uid,
            row,
            records,
            evidence_hash(records),
            str(summary),
            tuple(keywords),
            timestamp,
            int(order),
            False,
        )
        self._units.append(unit)
        self._index[uid] = row
        self._out[uid] = {}
        self._in[uid] = {}
        self._log.append(("add", uid))
        if visible:
            self._show(uid)
        return uid

    def _show(self, uid: str) -> None:
        row = self._index[uid]
        self._vis_pos[uid] = self._vis.append(self._emb.data[row])
        self._vis_ids.append(uid)
        self._units[row] = replace(self._units[row], visible=True)

    def get(self, uid: str) -> Unit:
        row = self._index.get(uid)
        if row is None:
            raise KeyError(f"no unit {uid!r} in the bank")
        return self._units[row]

    __getitem__ = get

    def __contains__(self, uid: object) -> bool:
        return uid in self._index

    def __len__(self) -> int:
        return len(self._units)

    def ids(self) -> list[str]:
        return [u.id for u in self._units]

    def units(self) -> list[Unit]:
        return list(self._units)

    @property
    def n_visible(self) -> int:
        return self._vis.n

    def is_visible(self, uid: str) -> bool:
        return self.get(uid).visible

    def archive(self, uid: str) -> None:
        """Set visibility to 0 and nothing else: evidence, descriptor and links stay (swap-remove, O(d))."""
        unit = self.get(uid)
        if not unit.visible:
            return
        pos = self._vis_pos.pop(uid)
        last = self._vis.n - 1
        if pos != last:
            moved = self._vis_ids[last]
            self._vis.data[pos] = self._vis.data[last]
            self._vis_ids[pos] = moved
            self._vis_pos[moved] = pos
        self._vis_ids.pop()
        self._vis.n -= 1
        self._units[unit.row] = replace(unit, visible=False)
        self._log.append(("archive", uid))

    def set_descriptor(self, uid: str, summary: str, keywords: Sequence[str], embedding: Any) -> None:
        """Replace the regenerable descriptor and its embedding; evidence is untouched."""
        unit = self.get(uid)
        vec = self._vector(embedding, uid)
        self._emb.data[unit.row] = vec
        if unit.visible:
            self._vis.data[self._vis_pos[uid]] = vec
        self._units[unit.row] = replace(unit, summary=str(summary), keywords=tuple(keywords))
        self._log.append(("descriptor", uid))

    def embedding(self, uid: str) -> np.ndarray:
        v = self._emb.data[self.get(uid).row].copy()
        v.flags.writeable = False
        return v

    def rows_of(self, ids: Sequence[str]) -> np.ndarray:
        return np.fromiter((self._index[i] for i in ids), dtype=np.int64, count=len(ids))

    def cosine(self, a: str, b: str) -> float:
        return float(self._emb.data[self.get(a).row] @ self._emb.data[self.get(b).row])

    # ------------------------------------------------------------------ surfaces
    def visible_ids(self) -> list[str]:
        return list(self._vis_ids)

    def visible_matrix(self) -> tuple[list[str], np.ndarray]:
        """The searchable surface: ids and their normalised embeddings, row-aligned."""
        return list(self._vis_ids), self._vis.view()

    def visible_matrix_view(self) -> np.ndarray:
        """The surface matrix alone (no id list copy): the per-query hot path."""
        return self._vis.view()

    def full_matrix_view(self) -> np.ndarray:
        """Every unit's embedding, row i = unit ``u{i:06d}`` (no id list copy)."""
        return self._emb.view()

    def visible_ids_at(self, positions: Iterable[int]) -> list[str]:
        return [self._vis_ids[int(p)] for p in positions]

    def full_ids_at(self, rows: Iterable[int]) -> list[str]:
        return [self._units[int(r)].id for r in rows]

    def full_ids(self) -> list[str]:
        return [u.id for u in self._units]

    def full_matrix(self) -> tuple[list[str], np.ndarray]:
        return self.full_ids(), self._emb.view()

    @property
    def revision(self) -> int:
        """Count of unit changes so far; consumers (indexes) compare it to know they are stale."""
        return len(self._log)

    def changes_since(self, pos: int) -> list[tuple[str, str]]:
        return self._log[pos:]

    # ------------------------------------------------------------------ links
    def _check_link(self, type_: str, src: str, dst: str) -> None:
        if type_ not in LINK_TYPES:
            raise BankError(f"link type {type_!r} is not one of {LINK_TYPES}")
        for end, uid in (("src", src), ("dst", dst)):
            if uid not in self._index:
                raise BankError(f"{type_} link {src}->{dst}: field '{end}' names no unit")
        if src == dst:
            raise BankError(f"{type_} link {src}->{dst}: self-links are not allowed")

    def add_link(self, type_: str, src: str, dst: str, weight: float | None = None) -> bool:
        """Add ``src -> dst``. Semantic links keep src's out-degree <= d_sigma by dropping the weakest.

        Returns whether the link is present afterwards (False when the new link itself was the weakest).
        A link that already exists is left as it is.
        """
        self._check_link(type_, src, dst)
        outs = self._out[src].setdefault(type_, {})
        if dst in outs:
            return True
        if weight is None:
            weight = self.cosine(src, dst) if type_ == "semantic" else 1.0
        link = Link(type_, src, dst, float(weight), self._link_seq)
        self._link_seq += 1
        outs[dst] = link
        self._in[dst].setdefault(type_, {})[src] = link
        if type_ == "semantic" and self.d_sigma is not None and len(outs) > self.d_sigma:
            weakest = min(outs.values(), key=lambda lk: (lk.weight, -lk.seq))
            self.remove_link("semantic", src, weakest.dst)
            return weakest is not link
        return True

    def remove_link(self, type_: str, src: str, dst: str) -> bool:
        outs = self._out.get(src, {}).get(type_, {})
        if dst not in outs:
            return False
        del outs[dst]
        del self._in[dst][type_][src]
        return True

    def has_link(self, type_: str, src: str, dst: str) -> bool:
        return dst in self._out.get(src, {}).get(type_, {})

    def out_links(self, uid: str, type_: str | None = None) -> list[Link]:
        """Out-links of ``uid`` (one type, or all in LINK_TYPES order), each type in creation order."""
        self.get(uid)
        types = (type_,) if type_ else LINK_TYPES
        return [lk for t in types for lk in self._out[uid].get(t, {}).values()]

    def out_map(self, uid: str, type_: str) -> Mapping[str, Link]:
        """``{dst: Link}`` of one type in creation order, without copying (hot path; do not mutate)."""
        return self._out[uid].get(type_, _EMPTY)

    def in_map(self, uid: str, type_: str) -> Mapping[str, Link]:
        """``{src: Link}`` of one type in creation order, without copying (hot path; do not mutate)."""
        return self._in[uid].get(type_, _EMPTY)

    def in_links(self, uid: str, type_: str | None = None) -> list[Link]:
        self.get(uid)
        types = (type_,) if type_ else LINK_TYPES
        return [lk for t in types for lk in self._in[uid].get(t, {}).values()]

    def links(self) -> list[Link]:
        """Every link, in creation order."""
        return sorted(
            (lk for u in self._out.values() for d in u.values() for lk in d.values()), key=lambda x: x.seq
        )

    def link_semantic(self, a: str, b: str, weight: float | None = None) -> tuple[bool, bool]:
        """Semantic links both ways (the online write and ref both link new <-> neighbour)."""
        w = self.cosine(a, b) if weight is None else weight
        return self.add_link("semantic", a, b, w), self.add_link("semantic", b, a, w)

    def rewire(
        self, source: str, targets: Sequence[str], types: Sequence[str] = ("semantic", "temporal"),
        keep_original: bool = True,
    ) -> int:  # fmt: skip
        """Copy ``source``'s external links of ``types`` onto each target, under the caps.

        Out-links ``source -> x`` become ``t -> x`` and in-links ``y -> source`` become ``y -> t`` (x, y outside
        ``targets``); semantic weights are recomputed from the embeddings, so the cap keeps the strongest.
        With ``keep_original=False`` the source's copied links are removed afterwards. Returns links added.
        """
        tset = set(targets)
        for t in targets:
            self.get(t)
        added = 0
        moved: list[Link] = []
        for type_ in types:
            for lk in list(self._out[source].get(type_, {}).values()):
                if lk.dst in tset:
                    continue
                moved.append(lk)
                for t in targets:
                    if not self.has_link(type_, t, lk.dst) and self.add_link(type_, t, lk.dst):
                        added += 1
            for lk in list(self._in[source].get(type_, {}).values()):
                if lk.src in tset:
                    continue
                moved.append(lk)
                for t in targets:
                    if not self.has_link(type_, lk.src, t) and self.add_link(type_, lk.src, t):
                        added += 1
        if not keep_original:
            for lk in moved:
                self.remove_link(lk.type, lk.src, lk.dst)
        return added

    # ------------------------------------------------------------------ persistence support
    def _restore(
        self,
        units: Sequence[Unit],
        matrix: np.ndarray,
        visible_order: Sequence[str],
        links: Sequence[Link],
        link_seq: int,
    ) -> None:
        """Rebuild an empty bank bit-for-bit from saved parts (``persist.load_bank`` only): no re-normalising,
        the visible matrix in its saved order, links with their saved creation numbers."""
        if self._units:
            raise BankError("_restore needs an empty bank")
        for i, unit in enumerate(units):
            if unit.id != f"u{i:06d}" or unit.row != i:
                raise BankError(f"unit {unit.id}: field 'id' breaks the sequential id order at row {i}")
            self._emb.append(matrix[i])
            self._units.append(replace(unit, visible=False))
            self._index[unit.id] = i
            self._out[unit.id] = {}
            self._in[unit.id] = {}
            self._log.append(("add", unit.id))
        for uid in visible_order:
            self._show(uid)
        for lk in sorted(links, key=lambda x: x.seq):
            self._check_link(lk.type, lk.src, lk.dst)
            self._out[lk.src].setdefault(lk.type, {})[lk.dst] = lk
            self._in[lk.dst].setdefault(lk.type, {})[lk.src] = lk
        self._link_seq = int(link_seq)
        self.check_invariants()

    @property
    def link_seq(self) -> int:
        return self._link_seq

    # ------------------------------------------------------------------ invariants
    def check_invariants(self) -> None:
        """Evidence hashes, link endpoints, in/out mirror, semantic cap, visible matrix: raise on the first breach."""
        for u in self._units:
            if evidence_hash(u.evidence) != u.evidence_hash:
                raise BankError(f"unit {u.id}: evidence hash mismatch (evidence was modified)")
        n_links = 0
        for src, by_type in self._out.items():
            for type_, outs in by_type.items():
                if type_ == "semantic" and self.d_sigma is not None and len(outs) > self.d_sigma:
                    raise BankError(
                        f"unit {src}: {len(outs)} semantic out-links exceed d_sigma={self.d_sigma}"
                    )
                for dst, lk in outs.items():
                    n_links += 1
                    if dst not in self._index or src not in self._index:
                        raise BankError(f"{type_} link {src}->{dst} points to a missing unit")
                    if self._in[dst].get(type_, {}).get(src) is not lk:
                        raise BankError(f"{type_} link {src}->{dst} has no mirror in-link")
        if n_links != sum(len(d) for u in self._in.values() for d in u.values()):
            raise BankError("in-link and out-link tables disagree")
        visible = [u.id for u in self._units if u.visible]
        if sorted(visible) != sorted(self._vis_ids) or len(self._vis_ids) != self._vis.n:
            raise BankError("visible surface ids disagree with unit visibility")
        for uid, pos in self._vis_pos.items():
            if self._vis_ids[pos] != uid or not np.array_equal(
                self._vis.data[pos], self._emb.data[self._index[uid]]
            ):
                raise BankError(f"unit {uid}: visible-surface row is stale")

    def __iter__(self) -> Iterator[Unit]:
        return iter(list(self._units))
