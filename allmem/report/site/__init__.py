"""``allmem report site``: a static site of the results that opens from file:// (no server, no network).

It reads complete run directories only (``allmem.report.runs`` over ``allmem.files``' safe loaders) and writes
``index.html``, the assets in ``allmem/report/site/site_assets``, ``index.js`` (what the first page needs: the main
table's cells, and per question of each run its shared row and verdicts, as one JSON value loaded as a <script>)
and ``chunks/`` (per run, its answers, the details of each dialogue's questions and each question's packed
context, which ``site.js`` loads by adding a <script> when the comparison lists two runs or a question is opened:
file:// blocks fetch). So the first page
stays small however many runs and contexts there are. Its figures are those drawn from the runs it shows: a PNG is
shown, captioned with its runs, only when the file beside it (``allmem.report.provenance.figure_runs``) names runs
all on the page (copied into ``chunks/figures``); a figure drawn from other runs, or naming none, is left out.
Every dataset and model text is put on the page with
``textContent`` by ``site.js``, never as HTML, so a text holding ``<script>`` shows as text. The output folder is
not committed (``results/site`` is ignored)."""

from __future__ import annotations

import argparse
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from allmem import files
from allmem.metrics.protocols import credited
from allmem.paths import results_dir
from allmem.report.items import item_frame
from allmem.report.provenance import drawn_from, figure_runs
from allmem.report.runs import Run, find_runs
from allmem.report.stats import bootstrap_ci
from allmem.types import record_key

ASSETS = Path(__file__).with_name("site_assets")
INDEX = "index.js"  # what the first page loads: the main table, the explorer list, the comparison
# Per run: details per dialogue and packed contexts per question, loaded on demand. Not "parts": that is a run
# directory's worker folder (allmem.files), and a run file's name has one home.
PARTS = "chunks"
MARK = ".allmem-site"
CORRECT_F1 = 0.5  # offline proxy for "correct" when no judge verdict exists: token F1 at least this


def _num(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _hit(rec: dict[str, Any], k: int) -> bool | None:
    """Whether a gold id is among the top k ranked ids at the gold's granularity (``protocols.credited``: a
    LongMemEval record ranks turns and its gold names sessions); None: no gold or no ranking recorded."""
    gold = set(rec.get("evidence") or [])
    if not gold or rec.get("ranked_source_ids") is None:
        return None
    return bool(gold & set(credited(rec)[:k]))


def _contexts(run: Run) -> dict[tuple[Any, Any, str], dict[str, Any]]:
    """``contexts.jsonl.gz`` by record key (``allmem.types.record_key``)."""
    return {record_key(c): c for c in files.read_jsonl(run.path / files.CONTEXTS)}


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


def _views(frame: Any, metrics: list[str], split: list[str], groups: list[str]) -> dict[str, list[Any]]:
    """The main table's cells of one run for every view (all, fit, held-out) and category ("" = all), keyed
    ``"<view>|<category>"``: ``[n, mean x 100 of each metric over the questions that have it (None: none)]``.
    Computed here, so the first page needs no per-question scores."""
    cells: dict[str, list[Any]] = {}
    split_arr, group_arr = np.asarray(split), np.asarray(groups)
    for view in ("all", "fit", "held-out"):
        for cat in ["", *sorted(set(groups))]:
            mask = np.ones(len(split), dtype=bool) if view == "all" else split_arr == view
            if cat:
                mask &= group_arr == cat
            means = []
            for m in metrics:
                vals = frame[m].to_numpy(dtype=float)[mask] if m in frame else np.array([])
                vals = vals[~np.isnan(vals)]
                means.append(100 * float(vals.mean()) if len(vals) else None)
            cells[f"{view}|{cat}"] = [int(mask.sum()), means]
    return cells


class _Writer:
    """Collects the site's shared question rows and writes its on-demand parts (``chunks/``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder  # where chunks/ is built (renamed to out/chunks once every run is written)
        self.rows: list[list[Any]] = []
        self._row_of: dict[str, int] = {}

    def row(self, dataset: str, q: list[Any]) -> int:
        """The index of a shared question row (id, dialogue, category, question, gold, evidence): the same row
        in several runs of one dataset is stored once."""
        key = json.dumps([dataset, q], default=_plain)
        if key not in self._row_of:
            self._row_of[key] = len(self.rows)
            self.rows.append(q)
        return self._row_of[key]

    def part(self, name: str, value: Any) -> str:
        """Write ``chunks/<name>`` as a script that hands ``value`` to ``site.js`` under its own path."""
        rel = f"{PARTS}/{name}"
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"allmemPart({json.dumps(rel)},{_js(value)});\n", encoding="utf-8")
        return rel


def _plain(o: Any) -> Any:
    return o.item() if isinstance(o, np.generic) else str(o)


def _js(value: Any) -> str:
    """``value`` as a JavaScript literal (JSON, ASCII only); inside a <script> file nothing is parsed as HTML,
    but "</" is escaped anyway should it ever be inlined."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), default=_plain)
    return text.replace("</", "<\\/")


def _run_data(run: Run, ri: int, w: _Writer) -> dict[str, Any]:
    """The run's entry of ``index.js`` (what the main table, the explorer list and the comparison's counts need),
    writing its answers (``chunks/<ri>/answers.js``), its details per dialogue (``chunks/<ri>/d<n>.js``) and its
    packed contexts per question (``chunks/<ri>/c<p>.js``) for ``site.js`` to load when the comparison lists the
    run's questions or a question is opened."""
    records = run.records()
    contexts = _contexts(run)
    frame = item_frame(run, use_cache=False)
    metrics = list(run.metrics.get("table_metrics") or ["f1"])
    k = int(run.metrics.get("table_k") or 5)
    fit = set(run.cfg.dataset.get("fit_dialogues") or [])
    rows, correct, hit, answers, split, groups, part_of = [], [], [], [], [], [], []
    details: dict[str, dict[str, Any]] = {}  # dialogue (as JSON) -> {position in the run: its details}
    part_index: dict[str, int] = {}
    for p, (rec, (_, row)) in enumerate(zip(records, frame.iterrows(), strict=True)):
        judge = _num(row.get("judge"))
        f1 = _num(row.get("f1"))
        group = str(row["group"])
        dialogue = rec.get("dialogue_id")
        rows.append(
            w.row(run.dataset, [rec.get("question_id"), dialogue, group, rec.get("question"), rec.get("gold"),
                                rec.get("evidence") or []])
        )  # fmt: skip
        right = bool(judge) if judge is not None else (None if f1 is None else f1 >= CORRECT_F1)
        correct.append(None if right is None else int(right))  # 1/0/None: a third of true/false's bytes
        found = _hit(rec, k)
        hit.append(None if found is None else int(found))
        answers.append(rec.get("prediction"))
        split.append("fit" if dialogue in fit else "held-out")
        groups.append(group)
        lines = _context_lines(rec, contexts.get(record_key(rec)))
        key = json.dumps(dialogue, default=_plain)
        if key not in details:
            details[key] = {}
            part_index[key] = len(part_index)
        part_of.append(part_index[key])
        details[key][str(p)] = {
            "ranked": rec.get("ranked_source_ids") or [],
            "latency_ms": rec.get("latency_ms") or {},
            "scores": {m: _num(row.get(m)) for m in metrics if m in row},
            # None: not recorded; []: nothing fit the budget; else the part holding the lines
            "context": lines if not lines else w.part(f"{ri}/c{p}.js", lines),
        }
    parts = [w.part(f"{ri}/d{n}.js", by_dialogue) for n, by_dialogue in enumerate(details.values())]
    answers_part = w.part(f"{ri}/answers.js", answers)  # the comparison's and an opened question's
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
        "views": _views(frame, metrics, split, groups),
        "chunks": parts,
        "answers": answers_part,
        # per question, in the run's order: shared row, correct, retrieval hit, part of its details
        "q": rows,
        "correct": correct,
        "hit": hit,
        "part": part_of,
    }


def _figures(folder: Path | None, runs: list[Run], building: Path) -> list[dict[str, Any]]:
    """The PNGs under ``folder`` drawn from runs all among ``runs``, copied into ``building/figures`` (the site's
    ``chunks/figures``): per figure its path on the site and the labels of the runs it was drawn from. A figure
    that names no runs, or a run not on the page, is left out: the page never shows a figure its runs did not
    make."""
    shown: list[dict[str, Any]] = []
    if folder is None or not folder.is_dir():
        return shown
    for png in sorted(folder.glob("*.png")):
        made = figure_runs(png)
        if not made or not drawn_from(made, runs):
            continue
        (building / "figures").mkdir(exist_ok=True)
        shutil.copyfile(png, building / "figures" / png.name)
        shown.append({"src": f"{PARTS}/figures/{png.name}", "runs": [str(m.get("label")) for m in made]})
    return shown


def build_site(root: Path, out: Path, figures: Path | None = None) -> Path:
    """Write the site for the complete runs under ``root`` into ``out``; returns ``out/index.html``."""
    return write_site(find_runs(root), out, figures)


def write_site(runs: list[Run], out: Path, figures: Path | None = None) -> Path:
    """Write the site for ``runs`` into ``out``; returns ``out/index.html``. ``out/chunks`` is replaced when it
    was written by this function (it holds ``.allmem-site``); any other ``chunks`` folder is an error. The new
    parts are built beside it and swapped in once every run is read, so a failed build leaves the old site
    whole."""
    parts, building = out / PARTS, out / f".{PARTS}-building"
    for folder in (parts, building):
        if folder.exists() and not (folder / MARK).is_file():
            raise FileExistsError(
                f"{folder}: exists and was not written by allmem report site; pick another --out"
            )
    if building.exists():  # left by a build that failed
        shutil.rmtree(building)
    building.mkdir(parents=True)
    (building / MARK).write_text("written by allmem report site; replaced on every build\n", encoding="utf-8")
    w = _Writer(building)
    data: dict[str, Any] = {"runs": []}
    for ri, run in enumerate(runs):
        print(f"[allmem] site: run {ri + 1}/{len(runs)} {run.label}", flush=True)
        data["runs"].append(_run_data(run, ri, w))
    data["questions"] = w.rows
    data["figures"] = _figures(figures, runs, building)
    if parts.exists():
        shutil.rmtree(parts)
    building.rename(parts)
    for asset in ASSETS.iterdir():
        shutil.copyfile(asset, out / asset.name)
    files.write_atomic(out / INDEX, "window.ALLMEM_DATA = " + _js(data) + ";\n")
    return out / "index.html"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="allmem report site", description=__doc__)
    parser.add_argument("--runs", type=Path, default=results_dir() / "runs" / "paper", help="run root")
    parser.add_argument("--out", type=Path, default=results_dir() / "site", help="output folder")
    parser.add_argument(
        "--figures", type=Path, default=results_dir() / "figures",
        help="where to look for PNG figures; only those drawn from the runs shown are included",
    )  # fmt: skip
    args = parser.parse_args(argv)
    print(f"[allmem] site: {build_site(args.runs, args.out, args.figures)}")
    return 0
