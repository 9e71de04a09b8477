"""What made a table or figure: backend, dataset and question count, date and git sha of the runs behind it.

Every Markdown file gets a footer and every figure a caption line from here, built from the runs' manifests
and configs, so a number never travels without the conditions it was measured under. Every figure also gets a
file beside it naming the runs it was drawn from (``write_figure_runs``: ``fig3.png`` → ``fig3.runs.json``), so a
page that shows figures (``allmem report site``) can show only those its own runs made.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from allmem import files
from allmem.metrics.judge import invalid_note
from allmem.paths import DATASETS
from allmem.report.runs import Run
from allmem.run import identity
from benchmarks import LIMITS

DATASET_TITLES = {name: spec.title for name, spec in DATASETS.items()}  # the titles live with the data paths


def backend_text(runs: Sequence[Run]) -> str:
    """``offline`` (with what that means) or the model names of a real LLM backend."""
    offline = [r for r in runs if r.offline]
    parts = []
    if offline:
        embedders = ", ".join(sorted({str(r.backend.get("embedder") or "unknown") for r in offline}))
        parts.append(
            f"offline backend (extractive reader, {embedders} embeddings, rule-based LLM roles; no LLM judge)"
        )
    models = sorted(
        {
            f"{r.backend.get('llm')}:{r.backend.get('llm_model') or r.value('llm.model')}"
            for r in runs
            if not r.offline
        }
    )
    if models:
        judge = sorted({str(r.value("llm.judge.model")) for r in runs if not r.offline})
        parts.append(f"LLM backend {', '.join(models)} (judge {', '.join(judge)})")
    return "; ".join(parts) or "no runs"


def dataset_text(runs: Sequence[Run]) -> str:
    out = []
    for ds in sorted({r.dataset for r in runs}):
        counts = sorted({int(r.metrics.get("n_records", r.metrics.get("overall", {}).get("count", 0))) for r in runs
                         if r.dataset == ds})  # fmt: skip
        limited = any(
            r.value(f"dataset.{key}") is not None for r in runs if r.dataset == ds for key in LIMITS
        )
        n = "/".join(str(c) for c in counts)
        files = sorted({f"{Path(f).name} sha256:{h[:12]}" for r in runs if r.dataset == ds
                        for f, h in (r.manifest.get("data") or {}).items()})  # fmt: skip
        source = f", {', '.join(files)}" if files else ""
        out.append(
            f"{DATASET_TITLES.get(ds, ds)} ({n} questions{', LIMITED subset' if limited else ''}{source})"
        )
    return "; ".join(out)


def code_text(runs: Sequence[Run]) -> str:
    shas = sorted({(r.git_sha or "unknown")[:10] + ("+dirty" if r.git_dirty else "") for r in runs})
    dates = sorted({(r.written_at or "")[:10] for r in runs if r.written_at})
    when = dates[0] if len(dates) == 1 else f"{dates[0]}..{dates[-1]}" if dates else "unknown date"
    return f"runs of {when}, git {', '.join(shas)}"


def footer(runs: Sequence[Run], target: str, notes: Sequence[str] = ()) -> str:
    """One Markdown paragraph: backend, dataset, code and date, then any notes (one per line)."""
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"*Made by `allmem report {target}` on {now} from {len(runs)} run(s): {backend_text(runs)}; "
        f"{dataset_text(runs)}; {code_text(runs)}.*"
    ]
    lines += [f"*{n}*" for n in (*notes, invalid_note(runs)) if n]  # invalid verdicts: allmem.metrics.judge
    return "\n\n".join(lines)


def ask_note(runs: Sequence[Run]) -> str:
    """The footer line of a table that reads one record per question, when some run asked each question twice
    (``protocol.ask=both``): it reads their end-of-stream records; empty when no run did."""
    both = [r.label for r in runs if len(r.asks) > 1]
    if not both:
        return ""
    return (
        f"Asked at two points (protocol.ask=both): {', '.join(f'`{b}`' for b in both)}; this table reads their "
        "end-of-stream records (the paper's protocol: every question once, after the whole stream); the retention "
        "view (make retention) reads both."
    )


def caption(runs: Sequence[Run]) -> str:
    """A short one-line figure caption: backend, dataset with question count, date and sha."""
    backend = "offline backend" if runs and all(r.offline for r in runs) else backend_text(runs)
    return f"{backend} | {dataset_text(runs)} | {code_text(runs)}"


FIGURE_RUNS = ".runs.json"  # beside each figure: the runs it was drawn from


def run_key(run: Run) -> tuple[str, str | None] | None:
    """What tells a run from any other: the config hash it recorded and the time its files were written (another
    run of the same config differs in the time); None for a folder that records no hash."""
    recorded = identity.recorded_hash(run.path)
    return (recorded, run.written_at) if recorded else None


def run_id(run: Run) -> dict[str, Any]:
    """How a figure names a run it was drawn from: label and dataset (for the reader), and ``run_key``."""
    recorded, written_at = run_key(run) or (None, run.written_at)
    return {"label": run.label, "dataset": run.dataset, "config_hash": recorded, "written_at": written_at}


def drawn_from(named: Sequence[dict[str, Any]], runs: Iterable[Run]) -> bool:
    """Whether every run ``named`` (``run_id``s, a figure's ``figure_runs``) is one of ``runs``."""
    keys = {key for run in runs if (key := run_key(run)) is not None}
    return all((n.get("config_hash"), n.get("written_at")) in keys for n in named)


def figure_runs_file(figure: Path) -> Path:
    """The file naming a figure's runs: ``fig3.png`` (or ``fig3``, ``fig3.pdf``) → ``fig3.runs.json``."""
    base = figure.with_suffix("") if figure.suffix in (".png", ".pdf") else figure
    return base.with_name(base.name + FIGURE_RUNS)


def write_figure_runs(figure: Path, runs: Iterable[Run]) -> Path:
    """Write the runs ``figure`` was drawn from beside it (each once, in their order)."""
    named: dict[str, dict[str, Any]] = {}
    for run in runs:
        named.setdefault(str(run.path), run_id(run))
    path = figure_runs_file(figure)
    files.write_json(path, {"runs": list(named.values())})
    return path


def figure_runs(figure: Path) -> list[dict[str, Any]] | None:
    """The runs ``figure`` was drawn from; None when it names none (drawn before figures named their runs, or
    not by allmem)."""
    path = figure_runs_file(figure)
    if not path.is_file():
        return None
    runs = files.read_json(path, None)
    return list(runs["runs"]) if isinstance(runs, dict) and isinstance(runs.get("runs"), list) else None
