"""Table 8's human labeler: a sheet to fill in (CSV, and an HTML page that shows each edit's before and after),
and its import. The sheet holds the dataset's text (LoCoMo's), so it is written under ``results/audit/``, which
git ignores: it is never committed.

Fill ``valid`` and ``harmful`` with ``yes`` or ``no`` (a row left empty is not labelled), ``pattern`` with the
harmful pattern seen (free text, optional) and ``reason`` as you like; keep ``id``. The import checks every row
and names the file and row of anything it cannot read.
"""

from __future__ import annotations

import csv
import html
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from allmem import files
from allmem.report.audit import Edit, Label

COLUMNS = ("id", "source", "dialogue", "operator", "before", "after", "valid", "harmful", "pattern", "reason")
ANSWERS = {"yes": True, "no": False, "": None}


def unit_text(u: dict[str, Any]) -> str:
    """One unit as a reader sees it: id, date, visibility, descriptor, then its evidence lines."""
    state = "visible" if u.get("visible") else "archived"
    head = f"[{u['id']} | {u.get('date', '')[:10]} | {state}] {u.get('summary', '')}"
    keywords = f"  keywords: {', '.join(u.get('keywords') or [])}"
    lines = [f"  - {r.get('speaker') or '?'} ({', '.join(r.get('source_ids') or [])}): {r.get('text', '')}"
             for r in u.get("evidence", [])]  # fmt: skip
    return "\n".join([head, keywords, *lines])


def _units(edit: Edit, side: str) -> str:
    return "\n".join(unit_text(u) for u in edit.event.get(side, []))


def export(
    edits: Sequence[Edit], csv_path: Path, html_path: Path, labels: Sequence[Label] | None = None
) -> None:
    """Write the sheet (``labels`` pre-fill it, e.g. a judge's, for a person to check; default empty)."""

    def yn(v: bool | None) -> str:
        return "" if v is None else "yes" if v else "no"

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(COLUMNS)
    for i, e in enumerate(edits):
        lb = labels[i] if labels else Label(None, None)
        w.writerow([e.ident, e.source, e.dialogue, e.op, _units(e, "before"), _units(e, "after"), yn(lb.valid),
                    yn(lb.harmful), lb.pattern, lb.reason])  # fmt: skip
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    files.write_atomic(csv_path, buf.getvalue())
    files.write_atomic(html_path, page(edits))


def page(edits: Sequence[Edit]) -> str:
    """A readable page: per edit, its operator and why it was proposed, the units before and after, the links."""
    esc = html.escape
    parts = [
        "<!doctype html><meta charset='utf-8'><title>Table 8: ATC edits to label</title>",
        "<style>body{font-family:sans-serif;max-width:70em;margin:auto}pre{white-space:pre-wrap;background:#f6f6f6;"
        "padding:.5em}td{vertical-align:top;width:50%}</style>",
        "<h1>Accepted ATC edits to label</h1><p>Label each in the CSV beside this page (columns valid, harmful: "
        "yes/no). Valid: Split separates genuinely conflated evidence; Merge consolidates factually redundant "
        "units; Update archives a genuinely superseded state and keeps the current one. Harmful: likely to "
        "degrade future retrieval (over-splitting a coherent memory, merging units that share entities but "
        "hold different facts, treating complementary details as supersession).</p>",
    ]
    for e in edits:
        ev = e.event
        links = ", ".join(f"{t}: {s} &rarr; {d}" for t, s, d in ev.get("links", [])) or "none"
        parts.append(
            f"<h2 id='{esc(e.ident)}'>{esc(e.op.title())} in {esc(e.dialogue)} ({esc(e.source)})</h2>"
            f"<p><code>{esc(e.ident)}</code> &middot; confidence {ev.get('p')} &middot; {esc(str(ev.get('why', '')))}"
            f"</p><table><tr><th>before</th><th>after</th></tr><tr><td><pre>{esc(_units(e, 'before'))}</pre></td>"
            f"<td><pre>{esc(_units(e, 'after'))}</pre></td></tr></table><p>links: {links}</p>"
        )
    return "\n".join(parts) + "\n"


def read(csv_path: Path, edits: Sequence[Edit]) -> list[Label]:
    """The labels of ``edits`` from a filled sheet (in the edits' order); errors name the file and the row."""
    by_id: dict[str, Label] = {}
    with open(csv_path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in ("id", "valid", "harmful") if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{csv_path}: the sheet has no column {', '.join(missing)}")
        for row in reader:
            where = f"{csv_path}:{reader.line_num}"
            got = {}
            for col in ("valid", "harmful"):
                value = (row.get(col) or "").strip().lower()
                if value not in ANSWERS:
                    raise ValueError(f"{where}: {col} must be yes, no or empty, got {value!r}")
                got[col] = ANSWERS[value]
            ident = row.get("id") or ""
            if ident in by_id:
                raise ValueError(f"{where}: edit {ident!r} is labelled twice")
            by_id[ident] = Label(got["valid"], got["harmful"], (row.get("pattern") or "").strip(),
                                 (row.get("reason") or "").strip())  # fmt: skip
    known = {e.ident for e in edits}
    unknown = sorted(set(by_id) - known)
    if unknown:
        raise ValueError(
            f"{csv_path}: rows for edits not in this sample (another seed or run?): {unknown[0]!r}"
        )
    return [by_id.get(e.ident, Label(None, None)) for e in edits]


def filled(csv_path: Path) -> bool:
    """Whether the sheet exists and at least one row carries a label."""
    if not csv_path.is_file():
        return False
    with open(csv_path, newline="", encoding="utf-8") as fh:
        return any(
            (r.get("valid") or "").strip() or (r.get("harmful") or "").strip() for r in csv.DictReader(fh)
        )
