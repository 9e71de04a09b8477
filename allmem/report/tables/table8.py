"""``allmem report table8``: Table 8 from the drift corpus (ground truth) and the ``atc_audit`` runs.

Offline it reports the drift corpus (its own ``atc_audit`` run, ``configs/dataset/synthetic_drift.yaml``) and exports the LoCoMo sheet (``results/audit/``, not committed); a filled
sheet is imported into its own rows; a run made with a real LLM (``llm=openai``) is also judged by the LLM labeler
(``allmem/report/audit/judge.py``). Definitions and labelers: ``allmem/report/audit/``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from allmem import files
from allmem.paths import DATASETS
from allmem.report import audit
from allmem.report.audit import sheet as audit_sheet
from allmem.report.provenance import footer
from allmem.report.runs import Run
from allmem.report.targets import AUDIT, Point

Found = dict[str, dict[str, list[Point]]]
DRIFT = "synthetic_drift"
HARMFUL_SHOWN = 12  # harmful drift edits listed under the table


def audit_runs(found: Found, dataset: str) -> list[Run]:
    """The consolidating run(s) of the ``atc_audit`` experiment on ``dataset``."""
    return [p.run for p in found.get(AUDIT, {}).get(dataset, []) if p.run is not None and p.run.consolidates]


def _brief(edit: audit.Edit) -> str:
    def texts(side: str) -> str:
        return " | ".join(
            f"{u['id']}{'' if u.get('visible') else ' (archived)'}: "
            + " / ".join(r["text"] for r in u["evidence"])
            for u in edit.event.get(side, [])
        )

    return f"{edit.op} in {edit.dialogue} ({edit.source}): before {texts('before')}"


def render(found: Found, tables: Path, figures: Path, lme: str | None, skipped: str) -> list[Path]:
    conf = audit.settings()
    frames: list[pd.DataFrame] = []
    sections = ["# Table 8: validity and harm of accepted ATC edits"]
    notes: list[str] = []
    runs: list[Run] = []
    # the drift corpus, ground truth
    harmful: list[tuple[audit.Edit, audit.Label]] = []
    seeds = ""
    for run in audit_runs(found, DRIFT):
        from benchmarks.synthetic_drift import read_spec

        runs.append(run)
        truth = audit.drift_truth(run)
        pool = audit.executed(run.events("target"), run.label)
        edits = audit.sample(pool, conf.per_operator, conf.seed)
        labels = truth.label(edits)
        seeds = ", ".join(map(str, read_spec(str(run.value("dataset.path")))["seeds"]))
        frames.append(audit.table(edits, labels, truth.name, f"drift corpus (seeds {seeds}, pooled)", pool))
        harmful += [(e, lb) for e, lb in zip(edits, labels, strict=True) if lb.harmful]
    if not seeds:
        notes.append("No complete atc_audit run on the synthetic drift corpus: no ground-truth rows (make table8 "
                     "runs it).")  # fmt: skip
    # LoCoMo (and LongMemEval-s): the sheet, its import, the judge
    written: list[Path] = []
    for ds in ("locomo", "longmemeval_s"):
        if ds in found.get(AUDIT, {}) and not audit_runs(found, ds):
            notes.append(f"{DATASETS[ds].title}: no complete atc_audit run with ATC; make table8 runs it.")
        for run in audit_runs(found, ds):
            runs.append(run)
            title = DATASETS[ds].title
            try:
                run_edits = audit.executed(run.events("target"), run.label)
            except ValueError as exc:
                notes.append(f"{title}: {exc}")
                continue
            sampled = audit.sample(run_edits, conf.per_operator, conf.seed)
            sheet = tables.parent / "audit" / f"table8_sheet_{ds}.csv"
            if audit_sheet.filled(sheet):
                frames.append(
                    audit.table(sampled, audit_sheet.read(sheet, sampled), "human sheet", title, run_edits)
                )
                notes.append(f"{title}: human labels imported from {sheet}.")
            else:
                unlabelled = [audit.Label(None, None)] * len(sampled)
                frames.append(
                    audit.table(sampled, unlabelled, "not labelled yet (sheet exported)", title, run_edits)
                )
                audit_sheet.export(sampled, sheet, sheet.with_suffix(".html"))
                written += [sheet, sheet.with_suffix(".html")]
                notes.append(f"{title}: {len(sampled)} sampled edits exported for labelling to {sheet} (and .html); "
                             "fill valid/harmful and run the target again to add them (not committed: LoCoMo text).")  # fmt: skip
            if not run.offline or run.value("llm.dry_run"):
                from allmem.report.audit import judge as audit_judge

                ledger = tables.parent / "audit" / f"judge_{ds}"
                judge = audit_judge.Judge.for_run(run, ledger)
                labels_j = judge.label(sampled)
                est = judge.estimate()
                cost = (f"{est.get('calls', 0)} judge calls, {est.get('tokens_in', 0)} tokens in and "
                        f"{est.get('tokens_out', 0)} out (ledger {ledger}/calls.jsonl; llm.prices turn it into "
                        "dollars)")  # fmt: skip
                if run.value("llm.dry_run"):
                    notes.append(f"{title}: LLM judge dry run (no model called): estimated {cost}.")
                else:
                    frames.append(audit.table(sampled, labels_j, judge.name, title, run_edits))
                    notes.append(f"{title}: {judge.name}: {cost}.")
            else:
                notes.append(f"{title}: offline run: no LLM judge (make table8 SET=llm=openai judges the edits; "
                             "SET='llm=openai llm.dry_run=true' estimates its cost).")  # fmt: skip
    if not frames:
        from allmem.errors import ConfigError

        raise ConfigError(
            "table8: no complete atc_audit run (LoCoMo or the drift corpus); run make table8 first"
        )
    frame = pd.concat(frames, ignore_index=True)
    sections.append(audit.markdown(frame))
    if harmful:
        sections.append("## Harmful edits on the drift corpus (ground truth)")
        sections.append("\n".join(f"- {lb.pattern}: {_brief(e)}" for e, lb in harmful[:HARMFUL_SHOWN]))
    notes += [
        skipped + "." if not lme else "",
        f"Edits: executed ATC edits (atc_events.jsonl) of the atc_audit experiment's All-Mem run, up to "
        f"{conf.per_operator} per operator drawn with seed {conf.seed} (configs/audit.yaml). Drift corpus: "
        f"configs/dataset/synthetic_drift.yaml, seeds {seeds or '-'} pooled (its data file); seed 0 (the offline "
        "diagnoser's calibration) is not used.",
        "Valid: Split separates genuinely conflated evidence, Merge joins factually redundant units, Update "
        "archives a genuinely superseded state and keeps the current one. Harmful: likely to degrade future "
        "retrieval; on the drift corpus decided from its facts (benchmarks.synthetic_drift.harm_of: a merge across "
        "different facts, an update that archives a fact the current unit neither restates nor supersedes, a split "
        "of a unit holding one fact; an invalid edit over fact-free units is not harmful).",
        "Rates with 95% Wilson score intervals (scipy.stats.binomtest). Offline LoCoMo executes few Updates "
        "(Table 3), so its intervals are wide.",
    ]
    sections.append(footer(runs, "table8", notes))
    tables.mkdir(parents=True, exist_ok=True)
    md, csv = tables / "table8.md", tables / "table8.csv"
    files.write_atomic(md, "\n\n".join(sections).rstrip() + "\n")
    files.write_atomic(csv, frame.to_csv(index=False))
    return [md, csv, *written]
