"""The one way a test composes the repository's config and runs it in this process.

``compose``: ``configs/config.yaml`` with overrides, as ``allmem run`` composes it (``hydra=True``: with Hydra's
own node, for launcher and sweeper checks). ``compose_and_run``: compose, keep the run and its caches inside a
temporary folder, and run it through ``allmem.run.runner.run`` (ingest, retrieve, pack, answer, score, seal);
``debug`` (the default) adds ``+debug=default``: the dataset's tiny fixture and the model-free hash embedder.
A run through the real CLI, in a subprocess, is ``tests.faultkit.allmem_run``.
"""

from __future__ import annotations

from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import DictConfig

import allmem.paths  # noqa: F401 - registers allmem's resolvers (${allmem.searchpath:} ...), as the CLI does

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"


def compose(*overrides: str, hydra: bool = False) -> DictConfig:
    """The composed config (``hydra``: with the ``hydra`` node) for these overrides."""
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides), return_hydra_config=hydra)


def in_folder(root: Path, cache: Path | None = None) -> list[str]:
    """Overrides that put the run under ``root`` and its caches in ``cache`` (default ``root/cache``)."""
    return [f"run.root={root}", f"paths.cache_dir={cache or root / 'cache'}"]


def compose_and_run(
    root: Path, *overrides: str, debug: bool = True, cache: Path | None = None, name: list[str] | None = None
) -> Path:
    """Compose ``overrides`` (after ``+debug=default`` when ``debug``), run it under ``root`` with its caches in
    ``cache`` (default ``root/cache``), and return the run directory. ``name``: the overrides that name the
    directory, as the command line's would (default: none, so the directory is named by the method alone)."""
    from allmem.run.runner import run

    cfg = compose(*(["+debug=default"] if debug else []), *overrides, *in_folder(root, cache))
    return run(cfg, overrides=name)
