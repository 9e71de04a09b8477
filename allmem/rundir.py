"""The run directory: the contract between running and reporting.

A run directory holds a fixed set of files (see docs/DESIGN.md). It is complete only when ``DONE`` exists, which
is written last; a rerun skips a complete run. An interrupted or failed run is resumed by question id: answered
predictions already on disk are kept, a torn last line (the process was killed mid-write) is cut off, failed
lines are dropped, and only the missing questions are answered, so the file ends with no duplicates and no
gaps. ``allmem/attempts.py`` keeps the other files true across attempts (lock, manifest, ledger, events).
This module holds the layout, the run's identity and name, and the file primitives.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from allmem.paths import resolve_data_path  # importing it also registers the ${allmem.repo:...} resolver

CONFIG = "config.yaml"
PREDICTIONS = "predictions.jsonl"
CALLS = "calls.jsonl"
SYSTEM_STATS = "system_stats.jsonl"
METRICS = "metrics.json"
MANIFEST = "manifest.json"
EVENTS = "atc_events.jsonl"  # written by All-Mem's consolidation (allmem.memory.atc.events)
LOCK = ".lock"
DONE = "DONE"

# Keys that place files or tune how a run executes but cannot change a result: left out of the identity hash
# and of the directory name (a key matches itself and everything below it). The data enter the hash by content
# (``data_digest``), so ``dataset.path`` is a placement key too. Every other key (``run.seed``, ``run.judge``,
# the protocol, the budget, ...) changes the identity. docs/DESIGN.md lists the rule.
NOT_IDENTITY: tuple[str, ...] = (
    "run.root", "run.name", "run.progress", "paths", "wandb", "hydra",
    "dataset.path", "dataset.fit_dialogues", "embedder.cache_dir",
    "llm.timeout_s", "llm.connect_timeout_s", "llm.max_retries", "llm.backoff_base_s", "llm.backoff_max_s",
    "llm.max_concurrency", "llm.rpm", "llm.tpm", "llm.breaker_after", "llm.try_timeout_s", "llm.call_timeout_s",
    "llm.cache", "llm.prices", "llm.api_key_env",
    "run.bank_cache", "method.bank_cache",  # where All-Mem keeps re-usable banks (a re-used bank answers the same)
)  # fmt: skip
# Override keys the path already shows (``<dataset>/<method>...``): not repeated in the name.
_IN_PATH = ("dataset", "method")
_MAX_NAME = 180  # bytes of a directory name before the hash; file systems allow 255


def _matches(key: str, prefixes: Iterable[str]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def _drop_keys(data: dict[str, Any], prefixes: Iterable[str], parent: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{parent}.{key}" if parent else str(key)
        if _matches(full, prefixes):
            continue
        out[key] = _drop_keys(value, prefixes, full) if isinstance(value, dict) else value
    return out


def identity(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config without the keys in ``NOT_IDENTITY``: what a run's results depend on, besides data."""
    data = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(data, dict)
    return _drop_keys(data, NOT_IDENTITY)


def data_digest(cfg: DictConfig) -> str:
    """sha256 of the dataset's bytes (every file, for a folder): where the data lie does not matter, what they
    hold does. Raises ``DataNotFoundError`` (naming the places looked in) when there is nothing to read."""
    path = resolve_data_path(str(cfg.dataset.name), cfg.dataset.get("path"))
    if path.is_file():
        return sha256_file(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(f"{f.relative_to(path).as_posix()}\0{sha256_file(f)}\n".encode())
    return h.hexdigest()


def config_hash(cfg: DictConfig, data: str | None = None) -> str:
    """Short stable hash of everything that can change a run's results: the identity config and the data."""
    blob = json.dumps({"config": identity(cfg), "data": data}, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:10]


def override_dirname(overrides: Iterable[str]) -> str:
    """Hydra's ``override_dirname`` (sorted ``key=value`` joined by commas), without the keys that do not
    change a result (``NOT_IDENTITY``) or that the path already shows (dataset, method). ``+``/``++`` prefixes
    are dropped (``+experiment=x`` reads ``experiment=x``) and path separators become ``_``."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = []
    for o in OverridesParser.create().parse_overrides(list(overrides)):
        key = o.key_or_group
        if _matches(key, NOT_IDENTITY) or key in _IN_PATH or key.startswith("hydra/"):  # hydra/launcher=...
            continue
        line = o.input_line or ""
        lines.append(line.lstrip("+").replace(os.sep, "_").replace("\0", ""))
    return ",".join(sorted(lines))


def run_label(cfg: DictConfig, overrides: Iterable[str] = ()) -> str:
    """How tables name a run: ``run.name`` if given, else ``<method>[,<overrides>]`` (the directory name
    without its hash), as HELM names runs by their arguments."""
    if cfg.run.get("name"):
        return str(cfg.run.name)
    extra = override_dirname(overrides)
    label = f"{cfg.method.name},{extra}" if extra else str(cfg.method.name)
    return _cap(label)


def _cap(name: str) -> str:
    raw = name.encode("utf-8")
    return raw[:_MAX_NAME].decode("utf-8", "ignore") if len(raw) > _MAX_NAME else name


def resolve(cfg: DictConfig, overrides: Iterable[str] = (), data: str | None = None) -> Path:
    """``<run.root>/<dataset>/<label>-<hash>``, or ``<run.root>/<run.name>`` when a name is given.

    ``overrides`` are the command line's (Hydra's task overrides); ``data`` the ``data_digest`` (computed here
    when not given).
    """
    root = Path(cfg.run.root)
    if cfg.run.get("name"):
        return root / str(cfg.run.name)
    digest = data if data is not None else data_digest(cfg)
    return root / str(cfg.dataset.name) / f"{run_label(cfg, overrides)}-{config_hash(cfg, digest)}"


def is_complete(run_dir: Path) -> bool:
    return (run_dir / DONE).exists()


def complete_twin(run_dir: Path) -> Path | None:
    """A complete run beside ``run_dir`` with the same hash: the same config and data reached through other
    overrides (a sweep value equal to the default, another experiment file naming the same point), so the run
    need not be made again. None for a ``run.name`` directory (it carries no hash)."""
    label, _, digest = run_dir.name.rpartition("-")
    if not label or len(digest) != 10 or any(c not in "0123456789abcdef" for c in digest):
        return None
    for done in sorted(run_dir.parent.glob(f"*-{digest}/{DONE}")):
        return done.parent
    return None


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file. The file gets the mode the
    umask gives any new file (``mkstemp`` would make it 0600, unreadable to a teammate sharing the results)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # a full disk names no file by itself; the one-line error must say which
        tmp.unlink(missing_ok=True)
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def prepare(run_dir: Path, cfg: DictConfig) -> None:
    """Create the directory and write the resolved config; refuse to resume a run made with another config
    (the data are compared per attempt, ``allmem.attempts.begin``)."""
    from allmem.errors import ConfigError

    run_dir.mkdir(parents=True, exist_ok=True)
    text = OmegaConf.to_yaml(cfg, resolve=True)
    path = run_dir / CONFIG
    if path.exists():
        old = OmegaConf.load(path)
        if config_hash(old) != config_hash(cfg):  # type: ignore[arg-type]
            raise ConfigError(
                f"{run_dir}: holds a run made with a different config; choose another run.name or delete it"
            )
    write_atomic(path, text)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read a JSONL file written by this module; a torn last line is ignored (see ``repair_jsonl``)."""
    if not path.exists():
        return []
    out = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.endswith("\n"):
                break  # torn tail from an interrupted write
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}: line {n}: not valid JSON ({exc.msg})") from exc
    return out


def repair_jsonl(path: Path) -> int:
    """Cut a torn last line (no trailing newline) left by a killed process, so appends stay line-aligned.
    Returns the number of bytes cut."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
        with path.open("r+b") as fh:
            fh.truncate(keep)
        return len(data) - keep
    return 0


def drop_lines(path: Path, drop: Callable[[dict[str, Any]], bool]) -> int:
    """Rewrite a JSONL file without the lines ``drop`` selects (atomically); returns how many were dropped."""
    if not path.exists():
        return 0
    kept, dropped = [], 0
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if line.strip() and drop(json.loads(line)):
            dropped += 1
        else:
            kept.append(line)
    if dropped:
        write_atomic(path, "".join(kept))
    return dropped


class JsonlWriter:
    """Append-only JSONL with a flush and fsync per line: what is on disk survives a kill."""

    def __init__(self, path: Path) -> None:
        repair_jsonl(path)
        self.path = path
        self._fh = path.open("a", encoding="utf-8")

    def write(self, obj: dict[str, Any]) -> None:
        try:
            self._fh.write(json.dumps(obj, sort_keys=True, default=str) + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:  # a full disk names no file by itself; the one-line error must say which
            if exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror, str(self.path)) from exc

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def completed_ids(run_dir: Path) -> set[str]:
    """Questions answered for good: a failed line (``error`` set) does not count, so it is asked again."""
    return {r["question_id"] for r in read_jsonl(run_dir / PREDICTIONS) if r.get("error") is None}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
