"""Fig. 7: an Update case study: the old and the new unit (evidence, descriptor, dates), the version link, and one
question's top-k without and with consolidation.

The rule that picks the case (``pick``): among the executed Update edits of All-Mem with ATC (the ``atc_audit``
run), the one whose archived unit ranked highest (a turn of its evidence at the best rank) for some question of
the same dialogue in the same configuration without ATC (``allmem_noatc``'s ``ranked_source_ids``: "before
consolidation"), within the top k (``protocol.table_k``); ties go to the earlier dialogue, consolidation run,
unit ids and question. The rule is applied to the ``atc_audit`` runs on LoCoMo first; when no LoCoMo Update
qualifies (or no run is there), to those on the synthetic drift corpus (``configs/dataset/synthetic_drift.yaml``:
its questions ask each speaker's latest state, so an Update's archived unit can rank for one).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from allmem.report.audit import Edit
from allmem.report.provenance import DATASET_TITLES, footer


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    gold: str
    ranked: tuple[str, ...]  # source ids, without ATC


@dataclass
class Case:
    edit: Edit
    question: Question
    rank: int  # 1-based rank of the archived unit's best turn without ATC
    k: int
    top_with: tuple[str, ...] = ()
    texts: dict[str, str] = field(default_factory=dict)  # source id -> turn text
    where: str = ""  # LoCoMo run label, or the drift corpus

    @property
    def current(self) -> Mapping[str, Any]:
        return _unit(self.edit, "after", self.edit.event["ids"][0])

    @property
    def archived(self) -> Mapping[str, Any]:
        return _unit(self.edit, "after", self.edit.event["ids"][1])

    @property
    def archived_before(self) -> Mapping[str, Any]:
        return _unit(self.edit, "before", self.edit.event["ids"][1])

    @property
    def current_before(self) -> Mapping[str, Any]:
        return _unit(self.edit, "before", self.edit.event["ids"][0])


def _unit(edit: Edit, side: str, uid: str) -> Mapping[str, Any]:
    return next(u for u in edit.event[side] if u["id"] == uid)


def _sources(unit: Mapping[str, Any]) -> list[str]:
    return [s for r in unit["evidence"] for s in r["source_ids"]]


def pick(updates: Sequence[Edit], questions: Mapping[str, Sequence[Question]], k: int) -> Case | None:
    """The rule above: ``questions`` maps a dialogue to its questions with their rankings without ATC."""
    best: tuple[tuple[Any, ...], Case] | None = None
    for e in updates:
        if e.op != "update":
            continue
        archived = set(_sources(_unit(e, "before", e.event["ids"][1])))
        for qi, q in enumerate(questions.get(e.dialogue, ())):
            rank = next((i + 1 for i, sid in enumerate(q.ranked) if sid in archived), None)
            if rank is None or rank > k:
                continue
            order = (rank, *e.key[1:], qi)
            if best is None or order < best[0]:
                best = (order, Case(e, q, rank, k))
    return best[1] if best else None


# ------------------------------------------------------------------------------------------------ from runs
def run_case(with_atc: Any, without: Any) -> Case | None:
    """The case of two ``atc_audit`` runs on one dataset (``allmem.report.runs.Run``: with and without ATC), or
    None when no Update qualifies."""
    from allmem.report.audit import executed

    k = int(with_atc.value("protocol.table_k"))
    updates = [e for e in executed(with_atc.events("target"), with_atc.label) if e.op == "update"]
    questions: dict[str, list[Question]] = {}
    for r in without.end_records():
        questions.setdefault(r["dialogue_id"], []).append(
            Question(r["question_id"], r["question"], str(r.get("gold", "")), tuple(r["ranked_source_ids"]))
        )
    case = pick(updates, questions, k)
    if case is None:
        return None
    mine = next(r for r in with_atc.end_records() if r["question_id"] == case.question.id)
    case.top_with = tuple(mine["ranked_source_ids"])
    case.where = (
        f"{DATASET_TITLES.get(with_atc.dataset, with_atc.dataset)}, {with_atc.label} vs {without.label}"
    )
    from benchmarks import load_dataset

    dialogue = next(d for d in load_dataset(with_atc.cfg.dataset) if d.id == case.edit.dialogue)
    case.texts = {(t.source_id or t.id): t.text for s in dialogue.sessions for t in s.turns}
    return case


# ------------------------------------------------------------------------------------------------ output
def _unit_lines(u: Mapping[str, Any]) -> list[str]:
    state = "visible" if u["visible"] else "archived"
    ev = "; ".join(
        f"{r.get('speaker') or '?'} ({', '.join(r['source_ids'])}): {r['text']}" for r in u["evidence"]
    )
    return [f"**{u['id']}** ({u['date'][:10]}, {state}): {u['summary']}", f"  evidence: {ev}"]


def _top(case: Case, ranked: Sequence[str]) -> list[str]:
    old, new = set(_sources(case.archived)), set(_sources(case.current))
    out = []
    for i, sid in enumerate(ranked[: case.k], 1):
        mark = " (archived unit)" if sid in old else " (current unit)" if sid in new else ""
        out.append(f"{i}. `{sid}`{mark}: {case.texts.get(sid, '')}")
    return out


def markdown(case: Case) -> str:
    links = ", ".join(f"{t}: {s} -> {d}" for t, s, d in case.edit.event.get("links", []))
    return "\n".join([
        f"**Source**: {case.where}; dialogue {case.edit.dialogue}, consolidation run {case.edit.event.get('run')}.",
        "", "**Current unit, after the Update**:", *_unit_lines(case.current),
        "", "**Its descriptor before the Update**:", *_unit_lines(case.current_before),
        "", "**Superseded unit, archived**:", *_unit_lines(case.archived),
        "", f"**Version link**: {links or 'none'}",
        "", f"**Question** ({case.question.id}): {case.question.text} (gold: {case.question.gold})",
        "", f"**Top {case.k} without ATC** (the archived unit's turn at rank {case.rank}):",
        *_top(case, case.question.ranked),
        "", f"**Top {case.k} with ATC**:", *_top(case, case.top_with),
    ])  # fmt: skip


def draw(case: Case, out: Path, runs: Sequence[Any], note: str) -> list[Path]:
    from allmem.report.figures import pyplot
    from allmem.report.figures.paper import save

    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 6.2), gridspec_kw={"width_ratios": [1, 1.15]})
    for ax in (left, right):
        ax.set_axis_off()

    def box(ax: Any, y: float, title: str, unit: Mapping[str, Any], color: str) -> None:
        ev = " ".join(r["text"] for r in unit["evidence"])
        body = (f"{title}: {unit['id']}, {unit['date'][:10]}, {'visible' if unit['visible'] else 'archived'}\n"
                + textwrap.fill(f"descriptor: {unit['summary']}", 62) + "\n" + textwrap.fill(f"evidence: {ev}", 62))  # fmt: skip
        ax.text(0.02, y, body, fontsize=8, va="top", family="monospace",
                bbox={"boxstyle": "round", "facecolor": color, "edgecolor": "0.4"})  # fmt: skip

    box(left, 0.97, "current (kept)", case.current, "#dff0d8")
    box(left, 0.45, "superseded (archived)", case.archived, "#eeeeee")
    left.annotate("", xy=(0.5, 0.46), xytext=(0.5, 0.62), arrowprops={"arrowstyle": "->", "lw": 1.5})
    left.text(0.52, 0.54, "version link", fontsize=8)
    left.set_title("Update: the current statement stays visible, the old one is archived", fontsize=9)
    old, new = set(_sources(case.archived)), set(_sources(case.current))
    right.set_title(textwrap.fill(f"Q: {case.question.text} (gold: {case.question.gold})", 80), fontsize=9)
    for col, (title, ranked) in enumerate(
        (("without ATC", case.question.ranked), ("with ATC", case.top_with))
    ):
        x = 0.0 + 0.5 * col
        right.text(x, 0.95, f"top {case.k} {title}", fontsize=9, weight="bold")
        for i, sid in enumerate(ranked[: case.k]):
            color = "#c0392b" if sid in old else "#27ae60" if sid in new else "0.2"
            text = textwrap.fill(f"{i + 1}. {sid}: {case.texts.get(sid, '')}", 44)
            right.text(x, 0.88 - i * 0.17, text, fontsize=7.5, va="top", color=color)
    fig.suptitle(f"Fig. 7: an Update case study ({case.where})", fontsize=10)
    return save(fig, runs, out, note)


RULE = (
    "Rule: among the executed Update edits of All-Mem with ATC, the one whose archived unit ranked highest (within "
    "the top k) for some question of its dialogue in the same configuration without ATC (allmem_noatc's ranking: "
    "before consolidation); ties to the earlier dialogue, consolidation run, unit ids and question. Fallback when no "
    "LoCoMo Update qualifies: the same rule on the atc_audit runs on the synthetic drift corpus. Red: the "
    "archived unit's turns; green: the current unit's. With ATC, Stage 1 searches the visible units only; an "
    "archived unit can still come back in Stage 2 through the version link from its current unit, and Stage 3 "
    "ranks it by its similarity to the question."
)


DATASETS_IN_ORDER = ("locomo", "synthetic_drift")  # LoCoMo first; the drift corpus is the fallback


def render(
    found: Mapping[str, Any], tables: Path, figures: Path, lme: str | None, skipped: str
) -> list[Path]:
    from allmem import files
    from allmem.report.targets import AUDIT

    case, runs, notes = None, [], []
    for ds in DATASETS_IN_ORDER:
        title = DATASET_TITLES.get(ds, ds)
        pts = found.get(AUDIT, {}).get(ds, [])
        with_atc = next((p.run for p in pts if p.run is not None and p.run.consolidates), None)
        without = next((p.run for p in pts if p.run is not None and p.run.method == "allmem_noatc"), None)
        if with_atc is None or without is None:
            notes.append(
                f"{title}: no complete atc_audit runs (allmem and allmem_noatc); make fig7 runs them."
            )
            continue
        runs = [with_atc, without]
        try:
            case = run_case(with_atc, without)
        except ValueError as exc:  # a run of records version 1: its edit lines hold no units
            notes.append(f"{title}: {exc}.")
            continue
        if case is not None:
            break
        notes.append(f"{title}: no Update qualified under the rule.")
    sections = ["# Fig. 7: an Update case study"]
    written: list[Path] = []
    if case is None:
        sections.append("No Update qualified under the rule on any dataset: no figure.")
    else:
        written = draw(case, figures / "fig7", runs, "Fig. 7 " + RULE.split(";")[0])
        sections += [*[f"- `{p}`" for p in written if p.suffix == ".png"], markdown(case)]
    sections.append(footer(runs, "fig7", [RULE, *notes, "" if lme else skipped + "."]))
    tables.mkdir(parents=True, exist_ok=True)
    md = tables / "fig7.md"
    files.write_atomic(md, "\n\n".join(sections).rstrip() + "\n")
    return [*written, md]
