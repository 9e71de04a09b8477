"""What made a table or figure: backend, dataset and question count, date and git sha of the runs behind it.

Every Markdown file gets a footer and every figure a caption line from here, built from the runs' manifests
and configs, so a number never travels without the conditions it was measured under.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from allmem.metrics.judge import invalid_note
from allmem.paths import DATASETS
from allmem.report.runs import Run

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
        limits = {
            (r.value("dataset.limit_dialogues"), r.value("dataset.limit_questions"))
            for r in runs
            if r.dataset == ds
        }
        limited = any(a is not None or b is not None for a, b in limits)
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
