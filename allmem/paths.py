"""Where datasets, results and caches live (docs/DESIGN.md, "Modules"): an explicit ``dataset.path`` wins, then
``data/`` in the repository (what ``allmem download`` fills), then ``../shared/data`` beside it. Results and caches
default to folders of the repository (the ``${allmem.repo:<sub>}`` resolver registered here) whatever the current
directory; a non-editable install ships ``configs/`` and the debug fixtures (``allmem/_configs``,
``allmem/_fixtures``) and uses the current directory. Nothing here creates folders or reads the network."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DatasetFiles:
    """Where one dataset lives under a data root: ``<root>/<folder>/<one of files>`` (first found wins)."""

    folder: str
    files: tuple[str, ...]
    title: str


# One table for the resolver and the downloader, so both agree on where a file goes.
DATASETS: dict[str, DatasetFiles] = {
    "locomo": DatasetFiles("locomo", ("locomo10.json", "locomo10.zip"), "LoCoMo"),
    "longmemeval_s": DatasetFiles(
        "longmemeval", ("longmemeval_s_cleaned.json", "longmemeval_s.json"), "LongMemEval-s"
    ),
    "longmemeval_m": DatasetFiles(
        "longmemeval", ("longmemeval_m_cleaned.json", "longmemeval_m.json"), "LongMemEval-M"
    ),
    "longmemeval_oracle": DatasetFiles("longmemeval", ("longmemeval_oracle.json",), "LongMemEval-oracle"),
    # generated: its data file (seeds and sizes) is benchmarks/synthetic_drift.json, named by its dataset config
    "synthetic_drift": DatasetFiles("synthetic_drift", ("synthetic_drift.json",), "Synthetic drift corpus"),
}


_PACKAGE = Path(__file__).resolve().parent


def _shipped(name: str, checkout: str) -> Path:
    """``allmem/<name>`` where an installed wheel carries it, else ``<checkout>`` of the repository."""
    inside = _PACKAGE / name
    return inside if inside.is_dir() else _PACKAGE.parent / checkout


def config_dir() -> Path:
    """The Hydra config folder: ``configs/`` of the checkout, or the copy a non-editable install ships."""
    return _shipped("_configs", "configs")


CONFIG_PATH_ENV = "ALLMEM_CONFIG_PATH"  # your own config folders (docs/LIBRARY.md, "Your own system")


def user_config_dirs() -> tuple[Path, ...]:
    """The folders named by ``ALLMEM_CONFIG_PATH`` (``os.pathsep``-separated), each laid out like ``configs/``
    (``method/<name>.yaml``, ...): Hydra searches them after the repository's configs, and every method config
    in them joins the experiments that compare methods. A folder that does not exist is an error, not a silent
    miss."""
    value = os.environ.get(CONFIG_PATH_ENV, "")
    out = []
    for part in filter(None, value.split(os.pathsep)):
        path = Path(part).expanduser().resolve()
        if not path.is_dir():
            raise FileNotFoundError(f"{CONFIG_PATH_ENV}: {part!r} is not a folder (resolved to {path})")
        out.append(path)
    return tuple(out)


def user_searchpath() -> list[str]:
    """``hydra.searchpath`` entries for ``user_config_dirs()`` (``configs/config.yaml`` reads this resolver)."""
    return [f"file://{p}" for p in user_config_dirs()]


def fixture(name: str) -> Path:
    """A tiny test dataset (``tests/fixtures/<name>``, or the shipped copy): what ``+debug=default`` runs on."""
    return _shipped("_fixtures", "tests/fixtures") / name


def _register_resolver() -> None:
    """``${allmem.repo:results}`` → ``<repository root>/results`` and ``${allmem.fixture:<file>}`` → the fixture's
    path, in configs (registered once, on import)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("allmem.repo"):
        OmegaConf.register_new_resolver("allmem.repo", lambda sub="": str(repo_root() / str(sub)))
    if not OmegaConf.has_resolver("allmem.searchpath"):
        OmegaConf.register_new_resolver("allmem.searchpath", user_searchpath)
    if not OmegaConf.has_resolver("allmem.fixture"):
        OmegaConf.register_new_resolver("allmem.fixture", lambda name: str(fixture(str(name))))


class DataNotFoundError(FileNotFoundError):
    """A dataset file could not be found; the message says where we looked and how to get it."""


def repo_root() -> Path:
    """The repository checkout allmem runs from.

    The package is installed editable, so the folder above ``allmem/`` is the checkout; for a non-editable
    install (no ``pyproject.toml`` there) the current directory is the best guess.
    """
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").exists() else Path.cwd()


def cache_dir() -> Path:
    """The cache folder: env ``ALLMEM_CACHE`` if set (relative to the current directory), else ``<repo>/.cache``.

    Not created here: the first writer creates it, so importing or asking has no side effect.
    """
    env = os.environ.get("ALLMEM_CACHE")
    return Path(env).expanduser().resolve() if env else repo_root() / ".cache"


def results_dir() -> Path:
    """The results folder: env ``ALLMEM_RESULTS`` if set, else ``<repo>/results`` (what ``paths.results`` says).

    One rule for every command: a default lives in the repository, a relative path the user gives (``--runs``,
    ``run.root=``, ``ALLMEM_RESULTS``) is relative to the current directory.
    """
    env = os.environ.get("ALLMEM_RESULTS")
    return Path(env).expanduser().resolve() if env else repo_root() / "results"


def dataset_files(dataset: str) -> DatasetFiles:
    """The folder and file names of a known dataset; a clear error for an unknown name."""
    try:
        return DATASETS[dataset]
    except KeyError:
        known = ", ".join(sorted(DATASETS))
        raise ValueError(f"unknown dataset {dataset!r}; known datasets: {known}") from None


def resolve_data_path(dataset: str, path: str | os.PathLike[str] | None, *, root: Path | None = None) -> Path:
    """The file (or folder) to load for ``dataset``.

    ``path``, when given, must exist (relative paths are taken from the current directory). Otherwise the first
    existing ``<repo>/data/<folder>/<file>``, then ``<repo>/../shared/data/<folder>/<file>``. ``root`` replaces the
    repository root (tests use it).
    """
    spec = dataset_files(dataset)
    if path is not None and str(path) != "":
        explicit = Path(path).expanduser()
        if not explicit.exists():
            if explicit.is_symlink():  # a loop or a dangling link; resolve() would raise on a loop
                raise DataNotFoundError(
                    f"{spec.title}: dataset.path {str(path)!r} is a symlink that leads to no file "
                    f"(a loop or a missing target: {os.readlink(explicit)!r}); fix the link or the path"
                )
            raise DataNotFoundError(
                f"{spec.title}: dataset.path {str(path)!r} does not exist "
                f"(resolved to {explicit.resolve()}); fix the path or run `allmem download {dataset}`"
            )
        return explicit
    base = root if root is not None else repo_root()
    candidates = [
        data_root / spec.folder / name
        for data_root in (base / "data", base.parent / "shared" / "data")
        for name in spec.files
    ]
    for cand in candidates:
        if cand.exists():
            return cand
    looked = ", ".join(str(c) for c in candidates)
    raise DataNotFoundError(
        f"{spec.title} not found (looked in {looked}): run `allmem download {dataset}` "
        f"(writes {base / 'data' / spec.folder / spec.files[0]}) or set dataset.path=/path/to/{spec.files[0]}"
    )


_register_resolver()
