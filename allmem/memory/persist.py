"""Save and load a memory bank without pickle: JSON lines for units and links, one .npy for the embeddings.

Why this layout: every file is readable with standard tools, nothing executes code on load
(``np.load(..., allow_pickle=False)``), and evidence hashes are re-checked on load, so a tampered or corrupted
evidence record is refused with the file and unit named. A save is atomic: everything is written into a
temporary sibling folder (``meta.json`` last), which then replaces the target by rename, so a reader sees the
old bank or the new one, never half of one. (``allmem.files.write_folder``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from allmem import files
from allmem.files import write_folder
from allmem.memory.bank import BankError, EvidenceRecord, Link, MemoryBank, Unit, evidence_hash
from allmem.types import RecordError

FORMAT = "allmem-bank"
VERSION = 1
UNITS, LINKS, EMBEDDINGS, META = "units.jsonl", "links.jsonl", "embeddings.npy", "meta.json"


def _unit_json(u: Unit) -> str:
    return json.dumps(
        {
            "id": u.id,
            "evidence": u.evidence_dicts(),
            "evidence_hash": u.evidence_hash,
            "summary": u.summary,
            "keywords": list(u.keywords),
            "timestamp": u.timestamp.isoformat(),
            "order": u.order,
            "visible": u.visible,
        },
        ensure_ascii=False,
    )


def save_bank(bank: MemoryBank, path: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
    """Write ``bank`` to the folder ``path`` atomically; ``extra`` (JSON) rides along in meta.json."""

    def fill(tmp: Path) -> None:
        files.write_atomic(tmp / UNITS, "".join(_unit_json(u) + "\n" for u in bank.units()))
        links = (json.dumps([lk.type, lk.src, lk.dst, lk.weight, lk.seq]) + "\n" for lk in bank.links())
        files.write_atomic(tmp / LINKS, "".join(links))
        with open(tmp / EMBEDDINGS, "wb") as fh:
            np.save(fh, np.ascontiguousarray(bank.full_matrix_view()), allow_pickle=False)
            fh.flush()
            os.fsync(fh.fileno())
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "dim": bank.dim,
            "d_sigma": bank.d_sigma,
            "n_units": len(bank),
            "link_seq": bank.link_seq,
            "visible_order": bank.visible_ids(),
            "extra": dict(extra or {}),
        }
        files.write_atomic(tmp / META, json.dumps(meta, indent=1, ensure_ascii=False) + "\n")

    return write_folder(Path(path), fill)


def read_meta(path: str | Path) -> dict[str, Any]:
    file = Path(path) / META
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no saved bank here (meta.json is missing)")
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
    except ValueError as exc:  # torn or not JSON (UnicodeDecodeError is a ValueError too)
        raise BankError(f"{file}: not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise BankError(f"{file}: not a JSON object")
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise BankError(f"{file}: field 'format'/'version' is {meta.get('format')!r}/{meta.get('version')!r}")
    return meta


def _lines(file: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed JSON)`` of a bank's JSON-lines file through the run files' one reader; the file was
    written whole inside an atomic folder, so a torn or garbled line is damage: ``BankError`` naming file and line."""
    try:
        yield from files.iter_jsonl(file, whole=True)
    except RecordError as exc:
        raise BankError(str(exc)) from None


def load_bank(path: str | Path) -> tuple[MemoryBank, dict[str, Any]]:
    """Read a saved bank; returns it with the ``extra`` dict. Evidence hashes are verified.

    Any damage (a truncated file, a garbled line, a missing field, a non-finite embedding) raises ``BankError``
    naming the file (and line), so a caller can tell a corrupt bank from a bug and say which file to remove.
    """
    path = Path(path)
    meta = read_meta(path)
    try:
        return _load(path, meta)
    except BankError:
        raise
    except (KeyError, TypeError, ValueError) as exc:  # a field missing or of the wrong type
        raise BankError(f"{path}: saved bank is damaged ({type(exc).__name__}: {exc})") from None


def _load(path: Path, meta: dict[str, Any]) -> tuple[MemoryBank, dict[str, Any]]:
    try:
        matrix = np.load(path / EMBEDDINGS, allow_pickle=False)
    except (
        ValueError,
        EOFError,
    ) as exc:  # numpy: "Failed to read all data ... (file seems not fully written?)"
        raise BankError(f"{path / EMBEDDINGS}: not a complete .npy file ({exc})") from None
    if matrix.dtype != np.float32 or matrix.shape != (meta["n_units"], meta["dim"]):
        raise BankError(
            f"{path / EMBEDDINGS}: shape {matrix.shape} {matrix.dtype}, meta says {meta['n_units']}"
        )
    if not np.isfinite(matrix).all():
        raise BankError(f"{path / EMBEDDINGS}: holds NaN or infinite values")
    units = []
    for n, d in _lines(path / UNITS):
        records = tuple(EvidenceRecord.from_dict(r) for r in d["evidence"])
        if evidence_hash(records) != d["evidence_hash"]:
            raise BankError(
                f"{path / UNITS}: unit {d['id']}: field 'evidence' does not match its evidence_hash"
            )
        ts = datetime.fromisoformat(d["timestamp"])
        units.append(
            Unit(
                d["id"],
                n - 1,
                records,
                d["evidence_hash"],
                d["summary"],
                tuple(d["keywords"]),
                ts,
                d["order"],
                False,
            )
        )
    if len(units) != meta["n_units"]:
        raise BankError(f"{path / UNITS}: {len(units)} units, meta.json says {meta['n_units']}")
    links = []
    for _, (t, src, dst, w, seq) in _lines(path / LINKS):
        links.append(Link(t, src, dst, float(w), int(seq)))
    bank = MemoryBank(dim=meta["dim"], d_sigma=meta["d_sigma"])
    bank._restore(units, matrix, meta["visible_order"], links, meta["link_seq"])
    return bank, meta.get("extra", {})
