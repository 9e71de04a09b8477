"""The same questions counted other ways: without LoCoMo's adversarial category, and with the answer-key errata.

Table 1 shows every overall score four ways side by side (docs/PROTOCOL.md): as the key has it, without
category 5, with the errata (``allmem/metrics/errata.py``), and with the errata without category 5, with the
number of questions the errata changed. The frames are the run's item frame (``allmem.report.items``, cached)
with the errata applied to its rows: an excluded question's row is dropped, a corrected one is rescored against
the new answer (and evidence) and loses its judge verdict, which was given against the old answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from allmem.metrics import errata as errata_mod
from allmem.metrics.protocols import validate_record
from allmem.report.compare import Cells, compare, metric_title
from allmem.report.items import JUDGE, end_frame
from allmem.report.runs import Run
from allmem.report.tables import markdown

ADVERSARIAL = "5"  # LoCoMo's adversarial category, the group shown both ways
# subset name → (without category 5, with errata)
VIEWS = {
    "all": (False, False),
    "no-cat5": (True, False),
    "errata": (False, True),
    "errata-no-cat5": (True, True),
}
TITLES = {"all": "all", "no-cat5": "w/o cat. 5", "errata": "errata", "errata-no-cat5": "errata, w/o cat. 5"}


def errata_frame(run: Run, frame: pd.DataFrame | None = None) -> tuple[pd.DataFrame, int]:
    """The run's item frame with the errata of its dataset applied, and the number of questions they changed
    (the frame unchanged and 0 when the dataset has no errata)."""
    frame = end_frame(run) if frame is None else frame
    errata = errata_mod.load(run.dataset)
    if errata is None:
        return frame, 0
    records = [validate_record(r, f"{run.path}: record {i}") for i, r in enumerate(run.end_records())]
    fixed, changed = errata_mod.apply(errata, records)
    excluded = set(changed["excluded"])
    corrected = {r["question_id"]: r for r in fixed if r["question_id"] in set(changed["corrected"])}
    out = frame[~frame["question_id"].isin(excluded)].copy()
    proto = run.protocol
    for qid, rec in corrected.items():
        rows = out.index[(out["question_id"] == qid) & (out["dialogue_id"] == rec["dialogue_id"])]
        if not proto.includes(rec):
            continue
        scores = proto.score_item(rec)
        for name in proto.metric_names():
            value = scores.get(name)
            out.loc[rows, name] = np.nan if value is None else float(value)
        out.loc[rows, JUDGE] = np.nan
    return out.reset_index(drop=True), len(excluded) + len(corrected)


def view_frames(
    runs: Sequence[Run], names: Sequence[str], frames: Mapping[str, pd.DataFrame]
) -> tuple[dict[str, dict[str, pd.DataFrame]], dict[str, int]]:
    """subset → label → frame for the four views, and label → questions the errata changed."""
    fixed: dict[str, pd.DataFrame] = {}
    affected: dict[str, int] = {}
    for name, run in dict(zip(names, runs, strict=True)).items():  # one row per name, as ``frames`` has
        fixed[name], affected[name] = errata_frame(run, frames[name])
    out: dict[str, dict[str, pd.DataFrame]] = {}
    for subset, (drop5, use_errata) in VIEWS.items():
        source = fixed if use_errata else frames
        out[subset] = {k: f[f["group"].astype(str) != ADVERSARIAL] if drop5 else f for k, f in source.items()}
    return out, affected


def compute(
    runs: Sequence[Run], names: Sequence[str], frames: Mapping[str, pd.DataFrame], metrics: Sequence[str],
    reference: str | None,
) -> pd.DataFrame:  # fmt: skip
    """Overall rows (no groups) of the three views other than ``all``, in ``compare``'s long frame; the
    ``affected`` column holds the errata's question count for each label."""
    views, affected = view_frames(runs, names, frames)
    parts = [
        compare(views[subset], metrics, reference, subset=subset, by_group=False)
        for subset in VIEWS
        if subset != "all"
    ]
    out = pd.concat(parts, ignore_index=True)
    out["affected"] = out["label"].map(affected)
    return out


def markdown_section(table: pd.DataFrame, metrics: Sequence[str]) -> str:
    """One row per method: each metric all / w/o cat. 5 / errata / errata w/o cat. 5, then the errata's count."""
    labels = list(dict.fromkeys(table["label"]))
    shown = [m for m in metrics if m in ("judge", "f1") or m.startswith(("R@", "N@"))]
    header = ["Method", *[f"{metric_title(m)} ({TITLES[s]})" for m in shown for s in VIEWS], "errata n"]
    rows = []
    by_view = {s: Cells(table[table["subset"] == s]) for s in VIEWS}
    for label in labels:
        cells = [by_view[s](label, m, what="mean") for m in shown for s in VIEWS]
        n = table.loc[table["label"] == label, "affected"].dropna()
        rows.append([label, *cells, int(n.iloc[0]) if not n.empty else 0])
    return (
        "### Overall with and without category 5 (adversarial), with and without the answer-key errata\n\n"
        + markdown(header, rows)
        + "\n\nMeans only (intervals and paired tests: the tables above for *all*, the CSV for every view). "
        "*errata*: `allmem/metrics/errata/locomo.yaml` applied at scoring (docs/PROTOCOL.md); *errata n*: "
        "questions it changed in that run (corrected or excluded); a corrected question has no 4o-J verdict."
    )


def graded_section(runs: Sequence[Run], labels: Sequence[str]) -> str | None:
    """Strict and lenient accuracy of each run's graded judges (``allmem judge RUN --graded``) beside its 4o-J;
    None when no run has one."""
    import json

    from allmem import files

    rows = []
    for run, label in zip(runs, labels, strict=False):  # labels: one per distinct row name
        for folder in sorted((run.path / files.JUDGES).glob("*-graded-*")):
            if not files.is_complete(folder):
                continue
            graded = json.loads((folder / files.METRICS).read_text(encoding="utf-8")).get("graded") or {}
            block = graded.get("overall") or {}
            own = (run.metrics.get("overall") or {}).get("judge")
            rows.append([label, "n/a" if own is None else f"{own:.2f}",
                         *[_num(block.get(k)) for k in ("strict", "lenient", "abstain_rate")], f"`{folder.name}`"])  # fmt: skip
    if not rows:
        return None
    header = ["Method", "4o-J (run's judge)", "strict", "lenient", "abstain %", "graded judge"]
    return (
        "### Graded verdicts beside 4o-J\n\n"
        + markdown(header, rows)
        + "\n\nstrict: correct over decided verdicts; "
        "lenient: correct or partial; abstain: declined although the answer was available (docs/PROTOCOL.md)."
    )


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
