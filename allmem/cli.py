"""The ``allmem`` command.

    allmem run [-m] [OVERRIDES...]        run (or sweep) a config: dataset=locomo method=bm25 budget.tokens=1024
    allmem score RUN_DIR [--protocol NAME] rescore a run's predictions and print the metrics as JSON
    allmem report DIR [--out FILE]        Markdown tables from the complete run directories under DIR
    allmem report site [--runs DIR] [--out DIR]  Static results site (opens from file://) from complete runs
    allmem paper run|list TARGET...       run (or list) the experiments of paper tables and figures: table1 fig3
    allmem download locomo|longmemeval_s|_m|_oracle  fetch a public dataset into data/ and verify it
    allmem compare A B                    whether two run directories (or run roots) hold the same results
    allmem judge RUN_DIR [llm=...] [--graded|--sanity]  judge a finished run's answers again, into RUN_DIR/judges/<key>/
    allmem llm install|start|stop|status  the local model's server (llama.cpp on 127.0.0.1) that llm=local uses
    allmem merge RUN_DIR                  seal a run made in shards (run.shard=i/n) once every shard is done

``allmem run --help`` shows Hydra's help with every config group and its options. Expected errors (bad config
or input, missing data or key, a held lock, failed questions, a full disk or read-only folder) print one line
and exit 1; a sweep (``-m``) runs every point and exits 1 naming the failed ones; Ctrl-C and SIGTERM print one
line and exit 128 + the signal (130, 143). HYDRA_FULL_ERROR=1 shows the traceback.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from allmem import files
from allmem.errors import ConfigError, Interrupted, expected_errors, is_environment_error, one_line

USAGE = __doc__ or ""


def _offline_defaults() -> None:
    """The model hub is never reachable here; fail fast instead of hanging on a hub lookup."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("WANDB_MODE", "disabled")


def _run(argv: list[str]) -> int:
    import hydra
    from omegaconf import DictConfig

    from allmem.defaults import PRIMARY
    from allmem.paths import config_dir  # also registers the resolvers the configs use
    from allmem.run.identity import credential_override
    from allmem.run.runner import run

    if not config_dir().is_dir():
        print(f"allmem: config folder not found: {config_dir()}", file=sys.stderr)
        return 2

    expected = expected_errors()
    # before Hydra starts: it writes the overrides into its folder
    if refused := credential_override(argv):
        print(f"allmem run: error: {refused}", file=sys.stderr)
        return 1

    def main(cfg: DictConfig) -> None:
        point = _sweep_point()
        try:
            run_dir = run(cfg)
            _log_sealed(cfg, run_dir)
        except Exception as exc:
            if not isinstance(exc, expected) and not is_environment_error(exc):
                raise
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            print(f"allmem run: error: {one_line(exc)}", file=sys.stderr)
            if point is None:
                sys.exit(1)
            point["error"] = one_line(exc)  # one bad point does not stop the sweep; it ends exit 1
        if point is not None:
            _note_point(point)

    # SIGTERM (kill, a scheduler's stop) ends a run as Ctrl-C does: attempt recorded, lock released, one line
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _raise_interrupted)
    sys.argv = ["allmem run", *argv]
    fd, ledger = tempfile.mkstemp(prefix="allmem-sweep-", suffix=".jsonl")
    os.close(fd)
    os.environ[_POINTS_ENV] = ledger  # the launcher's worker processes (joblib) inherit it
    try:
        hydra.main(version_base="1.3", config_path=str(config_dir()), config_name=PRIMARY)(main)()
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the runner recorded the attempt as interrupted
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        print(f"allmem run: error: interrupted by {signal.Signals(signum).name}; nothing was sealed, "
              "rerun the same command to resume", file=sys.stderr)  # fmt: skip
        return 128 + signum
    finally:
        points = sorted(files.read_jsonl(Path(ledger)), key=lambda p: p["num"])
        Path(ledger).unlink(missing_ok=True)
    labels = _point_labels([p["overrides"] for p in points])
    failed = [f"#{p['num']} {label}" for p, label in zip(points, labels, strict=True) if p["error"]]
    if failed:
        print(f"allmem run: error: {len(failed)} of {len(points)} sweep points failed: {'; '.join(failed)}",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def _log_sealed(cfg: Any, run_dir: Path) -> None:
    """Weights & Biases, when ``wandb.enabled``: after the run is sealed, so its failure (one line, exit 1) leaves
    a complete run behind. The runner never imports the report package."""
    if not cfg.get("wandb", {}).get("enabled", False):
        return
    from allmem.report.wandb_log import log_run

    try:
        log_run(cfg, run_dir)
    except Exception as exc:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        raise ConfigError(f"wandb: {one_line(exc)} (the run itself is complete: {run_dir})") from exc


# A file each point of a sweep appends its outcome to, whichever process the launcher runs it in.
_POINTS_ENV = "ALLMEM_SWEEP_POINTS"


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted(signum)


def _sweep_point() -> dict[str, Any] | None:
    """This job's number and overrides when it is a point of a sweep (``-m``), else None."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    hc = HydraConfig.get()
    return {"num": int(hc.job.num), "overrides": list(hc.overrides.task), "error": None}


def _note_point(point: dict[str, Any]) -> None:
    """Append the point's outcome to the sweep's file: one short line in one append (whole lines even when
    parallel workers write at once)."""
    if path := os.environ.get(_POINTS_ENV):
        files.append_jsonl(Path(path), point)


def _point_labels(points: list[list[str]]) -> list[str]:
    """Each point by the overrides that tell it from the others (all of them for a one-point sweep)."""
    shared = set.intersection(*(set(p) for p in points)) if len(points) > 1 else set()
    return [",".join(o for o in p if o not in shared) or ",".join(p) for p in points]


# Each command's module, whose ``main(argv)`` it runs (``run`` is Hydra's, above).
_COMMANDS = {"score": "allmem.metrics", "report": "allmem.report", "paper": "allmem.experiments",
             "compare": "allmem.run.compare", "merge": "allmem.run.shards", "judge": "allmem.run.rejudge",
             "download": "benchmarks.download", "llm": "allmem.llm.local_server"}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _offline_defaults()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "run":
        return _run(rest)
    if command in _COMMANDS:  # imported only when asked for
        return int(importlib.import_module(_COMMANDS[command]).main(rest) or 0)
    print(f"allmem: unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
