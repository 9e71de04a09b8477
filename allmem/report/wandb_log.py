"""Weights & Biases logging of a finished run: its config, metrics and figures (``wandb.enabled=true``).

Off by default. ``wandb.mode=offline`` (the default mode) needs no account or key: the run is written under
``<run_dir>/wandb/`` and can be uploaded later with ``wandb sync``. What is logged: the resolved config; the
overall and per-group scores, the judge and the cost totals as the run summary; the per-run figures (F1 per
category or question type and, for All-Mem with consolidation, the visible surface at each checkpoint and the
recoverability curve); and the per-question scores as a table.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("allmem.wandb")


def flat_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """``overall/f1``, ``groups/2/R@5``, ``judge``, ``cost/<phase>/tokens_in`` ...: numbers only."""
    out: dict[str, float] = {}
    overall = metrics.get("overall") or {}
    for name, value in (overall.get("scores") or {}).items():
        if isinstance(value, int | float):
            out[f"overall/{name}"] = float(value)
    if isinstance(overall.get("judge"), int | float):
        out["overall/judge"] = float(overall["judge"])
    for group, block in (metrics.get("groups") or {}).items():
        for name, value in (block.get("scores") or {}).items():
            if isinstance(value, int | float):
                out[f"groups/{group}/{name}"] = float(value)
    for phase, totals in (metrics.get("cost") or {}).items():
        for key in ("calls", "tokens_in", "tokens_out", "latency_ms"):
            if isinstance((totals or {}).get(key), int | float):
                out[f"cost/{phase}/{key}"] = float(totals[key])
    return out


def run_figures(run_dir: Path) -> list[Path]:
    """The per-run figures, drawn into ``<run_dir>/figures/`` from the run's own files."""
    from allmem.report.figures import f1_by_group, recoverability, surface
    from allmem.report.runs import load_run

    run = load_run(run_dir)
    folder = run_dir / "figures"
    folder.mkdir(exist_ok=True)
    paths = [f1_by_group([run], folder / "f1_by_group.png")]
    if run.consolidates:
        paths += [
            surface([run], folder / "surface.png"),
            recoverability([run], folder / "recoverability.png"),
        ]
    return paths


def log_run(cfg: DictConfig, run_dir: Path) -> bool:
    """Log one sealed run (``DONE``) from its own files when ``cfg.wandb.enabled`` and it has no ``wandb/``
    folder yet (``allmem run`` calls this after sealing, so a W&B failure never costs the run, and a rerun of a
    complete run logs it if it was not). Returns whether it logged."""
    node = cfg.get("wandb")
    run_dir = Path(run_dir)
    if node is None or not node.get("enabled", False) or (run_dir / "wandb").exists():
        return False
    import wandb

    from allmem.files import DONE, METRICS, read_json
    from allmem.report.items import item_frame
    from allmem.report.runs import load_run

    if not (run_dir / DONE).exists():
        raise ValueError(f"{run_dir}: not sealed (no {DONE}); only a complete run is logged")
    metrics = read_json(run_dir / METRICS)
    config = OmegaConf.to_container(cfg, resolve=True)
    run = wandb.init(
        project=str(node.get("project", "allmem")), mode=str(node.get("mode", "offline")), name=run_dir.name,
        dir=str(run_dir), config=config, group=str(cfg.dataset.name), job_type=str(cfg.method.name), reinit=True,
    )  # fmt: skip
    try:
        flat = flat_metrics(metrics)
        run.log(flat)
        run.summary.update(flat | {"backend": metrics.get("backend", {}), "run_dir": str(run_dir)})
        for path in run_figures(run_dir):
            run.log({f"figures/{path.stem}": wandb.Image(str(path))})
        items = item_frame(load_run(run_dir), use_cache=False)
        run.log({"per_question": wandb.Table(dataframe=items.astype({"included": bool}))})
    finally:
        run.finish()
        wandb.teardown()  # waits until the run is on disk (offline) or synced
    log.info("wandb: logged %s (%s mode)", run_dir.name, node.get("mode"))
    return True
