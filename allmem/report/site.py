"""``allmem report site``: a static site of the results that opens from file:// (no server, no network).

It reads complete run directories only (``allmem.report.runs`` over ``allmem.run.files``' safe loaders) and writes
``index.html``, the assets in ``allmem/report/site_assets`` and ``data.js`` (the runs' data as one JSON value loaded
as a <script>). Every dataset and model text is put on the page with ``textContent`` by ``site.js``, never as
HTML, so a text holding ``<script>`` shows as text. The output folder is not committed (``results/site`` is
ignored)."""

from __future__ import annotations

import argparse
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from allmem.paths import results_dir
from allmem.report.items import item_frame
from allmem.report.runs import Run, find_runs
from allmem.report.stats import bootstrap_ci
from allmem.run import files

ASSETS = Path(__file__).with_name("site_assets")
DATA = "data.js"
CORRECT_F1 = 0.5  # offline proxy for "correct" when no judge verdict exists: token F1 at least this


def _num(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _hit(rec: dict[str, Any], k: int) -> bool | None:
    gold = set(rec.get("evidence") or [])
    if not gold or rec.get("ranked_source_ids") is None:
        return None
    return bool(gold & set(rec["ranked_source_ids"][:k]))


def _contexts(run: Run) -> dict[tuple[Any, Any, str], dict[str, Any]]:
    """``contexts.jsonl.gz`` by record key (dialogue, question, ask point); {} for a run that did not store them
    (records before version 5)."""
    return {
        (c.get("dialogue_id"), c.get("question_id"), c.get("ask") or "end"): c
        for c in files.read_jsonl(run.path / files.CONTEXTS)
    }


def _context_lines(rec: dict[str, Any], ctx: dict[str, Any] | None) -> list[list[Any]] | None:
    """The packed context as ``[line, evidence?]`` rows, one per packed unit (``allmem.budget.context_line``
    renders a unit as one line); a line is evidence when its unit's source ids hold an evidence id. None: not
    recorded."""
    if ctx is None:
        return None
    units = ctx.get("units") or []
    if not units:
        return []
    gold = set(rec.get("evidence") or ()) | set(rec.get("evidence_turns") or ())
    lines = str(ctx.get("text", "")).split("\n")
    return [[line, bool(gold & set(u.get("source_ids") or ()))] for line, u in zip(lines, units, strict=True)]


def _run_data(run: Run) -> dict[str, Any]:
    records = run.records()
    contexts = _contexts(run)
    frame = item_frame(run, use_cache=False)
    metrics = list(run.metrics.get("table_metrics") or ["f1"])
    k = int(run.metrics.get("table_k") or 5)
    fit = set(run.cfg.dataset.get("fit_dialogues") or [])
    questions = []
    for rec, (_, row) in zip(records, frame.iterrows(), strict=True):
        judge = _num(row.get("judge"))
        f1 = _num(row.get("f1"))
        correct = bool(judge) if judge is not None else (None if f1 is None else f1 >= CORRECT_F1)
        questions.append(
            {
                "id": rec.get("question_id"),
                "dialogue": rec.get("dialogue_id"),
                "group": row["group"],
                "split": "fit" if rec.get("dialogue_id") in fit else "held-out",
                "question": rec.get("question"),
                "gold": rec.get("gold"),
                "answer": rec.get("prediction"),
                "correct": correct,
                "hit": _hit(rec, k),
                "evidence": rec.get("evidence") or [],
                "ranked": rec.get("ranked_source_ids") or [],
                "latency_ms": rec.get("latency_ms") or {},
                "context": _context_lines(
                    rec,
                    contexts.get((rec.get("dialogue_id"), rec.get("question_id"), rec.get("ask") or "end")),
                ),
                "scores": {m: _num(row.get(m)) for m in metrics if m in row},
            }
        )
    table = {}
    for m in metrics:
        if m not in frame:
            continue
        ci = bootstrap_ci(frame[m].to_numpy(dtype=float))
        table[m] = None if ci is None else [100 * ci.mean, 100 * ci.low, 100 * ci.high]
    return {
        "label": run.label,
        "method": run.method,
        "dataset": run.dataset,
        "k": k,
        "correct_by": "judge"
        if any(_num(v) is not None for v in frame.get("judge", []))
        else f"f1>={CORRECT_F1}",
        "metrics": metrics,
        "table": table,
        "questions": questions,
    }


def build_site(root: Path, out: Path, figures: Path | None = None) -> Path:
    """Write the site for the complete runs under ``root`` into ``out``; returns ``out/index.html``."""
    return write_site(find_runs(root), out, figures)


def write_site(runs: list[Run], out: Path, figures: Path | None = None) -> Path:
    """Write the site for ``runs`` into ``out``; returns ``out/index.html``."""
    data = {"runs": [_run_data(r) for r in runs]}
    out.mkdir(parents=True, exist_ok=True)
    for asset in ASSETS.iterdir():
        shutil.copyfile(asset, out / asset.name)
    figs = []
    if figures is not None and figures.is_dir():
        (out / "figures").mkdir(exist_ok=True)
        for png in sorted(figures.glob("*.png")):
            shutil.copyfile(png, out / "figures" / png.name)
            figs.append(f"figures/{png.name}")
    data["figures"] = figs
    text = json.dumps(
        data, ensure_ascii=True, default=lambda o: o.item() if isinstance(o, np.generic) else str(o)
    )
    # inside a <script> file nothing is parsed as HTML, but "</" is escaped anyway should it ever be inlined
    (out / DATA).write_text("window.ALLMEM_DATA = " + text.replace("</", "<\\/") + ";\n", encoding="utf-8")
    return out / "index.html"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="allmem report site", description=__doc__)
    parser.add_argument("--runs", type=Path, default=results_dir() / "runs" / "paper", help="run root")
    parser.add_argument("--out", type=Path, default=results_dir() / "site", help="output folder")
    parser.add_argument(
        "--figures", type=Path, default=results_dir() / "figures", help="PNG figures to include"
    )
    args = parser.parse_args(argv)
    print(f"[allmem] site: {build_site(args.runs, args.out, args.figures)}")
    return 0
