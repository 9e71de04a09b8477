"""The ``allmem`` command.

    allmem run [-m] [OVERRIDES...]        run (or sweep) a config: dataset=locomo method=bm25 budget.tokens=1024
    allmem score RUN_DIR [--protocol NAME] rescore a run's predictions and print the metrics as JSON
    allmem report DIR [--out FILE]        Markdown tables from the complete run directories under DIR
    allmem download locomo|longmemeval_s  fetch a public dataset into data/ and verify it
    allmem compare A B                    whether two run directories (or run roots) hold the same results

``allmem run --help`` shows Hydra's help with every config group and its options. Expected errors (bad config
or input, missing data or key, a held lock, failed questions) print one line and exit 1; HYDRA_FULL_ERROR=1
shows the traceback.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"

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

    import allmem.paths  # noqa: F401 - registers the ${allmem.repo:...} resolver the configs use
    from allmem.runner import run

    if not CONFIG_DIR.is_dir():
        print(f"allmem: config folder not found: {CONFIG_DIR}", file=sys.stderr)
        return 2

    from allmem.errors import expected_errors, one_line

    expected = expected_errors()
    from allmem.rundir import credential_override

    if refused := credential_override(argv):  # before Hydra writes the overrides into its folder
        print(f"allmem run: error: {refused}", file=sys.stderr)
        return 1

    def main(cfg: DictConfig) -> None:
        try:
            run(cfg)
        except expected as exc:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            print(f"allmem run: error: {one_line(exc)}", file=sys.stderr)
            sys.exit(1)

    sys.argv = ["allmem run", *argv]
    hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")(main)()
    return 0


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
    if command == "score":
        from allmem.metrics import main as score_main

        return int(score_main(rest) or 0)
    if command == "report":
        from allmem.report import main as report_main

        return int(report_main(rest) or 0)
    if command == "compare":
        from allmem.compare import main as compare_main

        return int(compare_main(rest) or 0)
    if command == "download":
        from benchmarks.download import main as download_main

        return int(download_main(rest) or 0)
    print(f"allmem: unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
