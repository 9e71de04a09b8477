"""What a real model did in each run (``make table1-llm``): time per turn and per question, calls and tokens, and
for every role (prompt template) how many replies were invalid, repaired, unusable (the caller's fallback took
over: ATC skipped, a descriptor kept the evidence, a baseline dropped the reply) or failed, read from each run's
``metrics.json`` (``llm_roles``, ``allmem.llm.ledger.roles_of``); and the judge's sanity (``allmem judge
--sanity``): how often it accepts known-wrong and known-right answers to the same questions.

Nothing here is estimated: a run of the offline backend has no row (its roles are code), and a missing number is
``n/a``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from allmem import files
from allmem.metrics.judge_sanity import KINDS, SANITY
from allmem.report.runs import Run
from allmem.report.tables import markdown
from allmem.report.tables.cost import run_cost


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, fmt: str = ".2f") -> str:
    return "n/a" if x is None else format(x, fmt)


def sanity_of(run: Run) -> dict[str, Any] | None:
    """The newest ``allmem judge --sanity`` result in ``run``'s judges folder, or None."""
    found = sorted((run.path / files.JUDGES).glob(f"*-sanity/{SANITY}"), key=lambda p: p.stat().st_mtime)
    return json.loads(found[-1].read_text(encoding="utf-8")) if found else None


def method_row(run: Run) -> list[str]:
    cost = run.metrics.get("cost") or {}
    n_q = int(run.metrics.get("n_records") or 0)
    answer_ms = sum(float((cost.get(p) or {}).get("latency_ms", 0.0)) for p in ("generate", "judge"))
    row = run_cost(run)
    total = cost.get("all") or {}
    counts = (run.metrics.get("overall") or {}).get("judge_counts") or {}
    judged = sum(int(counts.get(v, 0)) for v in ("yes", "no", "invalid"))
    return [
        f"`{run.method}`", str(n_q), str(row.get("turns") or 0),
        _num(row["write_ms_per_turn"] / 1000 if row.get("write_ms_per_turn") is not None else None),
        _num(answer_ms / 1000 / n_q if n_q else None),
        str(total.get("calls", 0)), str(total.get("tokens_in", 0)), str(total.get("tokens_out", 0)),
        _pct(int(counts.get("invalid", 0)) / judged if judged else None),
    ]  # fmt: skip


def role_rows(runs: Sequence[Run]) -> list[list[str]]:
    """One row per (method, role) with any call."""
    rows = []
    for run in runs:
        for role, t in sorted((run.metrics.get("llm_roles") or {}).items()):
            rows.append([
                f"`{run.method}`", f"`{role}`", str(t["calls"]), f"{t['invalid']} ({_pct(t['invalid_rate'])})",
                str(t["repairs"]), f"{t['unusable']} ({_pct(t['unusable_rate'])})", str(t["failed"]),
            ])  # fmt: skip
    return rows


def render(runs: Sequence[Run]) -> str:
    """The Markdown page of ``make table1-llm``'s runs that a real model answered."""
    live = [r for r in runs if not (r.metrics.get("backend") or {}).get("offline", True)]
    if not live:
        return "# LLM roles\n\nNo run here was made by a real model (every run is offline).\n"
    models = sorted({str((r.metrics.get("backend") or {}).get("llm_model")) for r in live})
    judges = sorted({m for r in live if (m := r.judge_model)})
    out = [
        "# LLM roles: what the model did in each run",
        f"Model: {', '.join(models)}; judge: {', '.join(judges) or 'none'}. Every number is this model's, "
        "on this machine; none is GPT-4o's.",
        markdown(
            [
                "Method",
                "Questions",
                "Turns",
                "s / turn (write)",
                "s / question (answer + judge)",
                "LLM calls",
                "Tokens in",
                "Tokens out",
                "Judge invalid",
            ],
            [method_row(r) for r in live],
        ),  # fmt: skip
        "## Per role\n\nInvalid: first replies that did not parse or match their schema (or gave no verdict); "
        "repairs: follow-up turns asked after them (`llm.repair_retries`); unusable: still unparsed after the last "
        "repair, so the caller's fallback took over; failed: no reply after the transport retries, or a prompt "
        "over `llm.context_window` (never sent).",
        markdown(["Method", "Role", "Calls", "Invalid", "Repairs", "Unusable", "Failed"], role_rows(live)),
    ]
    sanity = [(r, s) for r in live if (s := sanity_of(r)) is not None]
    out.append("## Judge sanity (`allmem judge --sanity`)")
    if sanity:
        rows = [
            [f"`{r.method}`", *[f"{_num(s[k]['accept_rate'], '.1f')}% of {s[k]['n']}" for k in KINDS]]
            for r, s in sanity
        ]
        out.append(
            "How often the judge says yes to another question's gold answer (known wrong: a sound judge is near "
            "0%) and to the question's own gold answer (known right: near 100%).\n\n"
            + markdown(["Run", "Accepts known-wrong", "Accepts known-right"], rows)
        )
    else:
        out.append("Not measured for these runs.")
    return "\n\n".join(out) + "\n"


def write(runs: Sequence[Run], out_dir: Path) -> Path:
    path = Path(out_dir) / "tables" / "llm_roles.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_atomic(path, render(runs))
    return path
