"""The run directory: the contract between running and reporting.

A run directory holds a fixed set of files (see docs/DESIGN.md). It is complete only when ``DONE`` exists, which
is written last; a rerun skips a complete run. An interrupted or failed run is resumed by question id: answered
predictions already on disk are kept, a torn last line (the process was killed mid-write) is cut off, failed
lines are dropped, and only the missing questions are answered, so the file ends with no duplicates and no
gaps. ``allmem/run/attempts.py`` keeps the other files true across attempts (lock, manifest, ledger, events).
This module holds the layout, the run's identity and name, and the file primitives.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn

from omegaconf import DictConfig, OmegaConf

from allmem.paths import resolve_data_path  # importing it also registers the ${allmem.repo:...} resolver
from allmem.types import RecordError

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
    "dataset.path", "dataset.fit_dialogues", "embedder.cache_dir", "embedder.batch_size",
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


def plain(cfg: Any) -> dict[str, Any]:
    """A config node as plain data, interpolations resolved: what Hydra hands over (a ``DictConfig``) or what a
    caller passes (a mapping, possibly holding ``DictConfig`` nodes); ``None`` is ``{}``. The one config-to-dict
    conversion; a stored config is read with ``read_config_data`` instead (never resolved)."""
    if cfg is None:
        return {}
    if isinstance(cfg, DictConfig):
        data = OmegaConf.to_container(cfg, resolve=True)
        assert isinstance(data, dict)
        return data
    if isinstance(cfg, Mapping):
        return {k: plain(v) if isinstance(v, Mapping) else v for k, v in cfg.items()}
    raise TypeError(f"expected a config mapping, got {type(cfg).__name__}")


def identity(cfg: DictConfig | dict[str, Any]) -> dict[str, Any]:
    """The resolved config without the keys in ``NOT_IDENTITY``: what a run's results depend on, besides data.
    A plain dict (a stored config, ``read_config_data``) is taken as it is, never resolved."""
    return identity_of(cfg if isinstance(cfg, dict) else plain(cfg))


def identity_of(data: dict[str, Any]) -> dict[str, Any]:
    return _drop_keys(data, NOT_IDENTITY)


def read_config_data(run_dir: Path) -> dict[str, Any]:
    """A run directory's ``config.yaml`` as plain data, the one way a stored config is read. A run folder is
    data, never code: ``yaml.safe_load`` builds no objects, and nothing here resolves an interpolation
    (``${oc.env:KEY}`` stays that text) or instantiates a ``_target_``. A file that is not a YAML mapping is a
    ``ConfigError`` naming it."""
    import yaml

    from allmem.errors import ConfigError

    path = Path(run_dir) / CONFIG
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(
            f"{where}: not a plain YAML config ({getattr(exc, 'problem', None) or exc})"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a YAML mapping")
    return data


def _literal(obj: Any) -> Any:
    """Escape interpolations (``${...}`` → ``\\${...}``) so OmegaConf shows them as text, never resolves them."""
    if isinstance(obj, dict):
        return {k: _literal(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_literal(v) for v in obj]
    return obj.replace("${", "\\${") if isinstance(obj, str) else obj


def read_config(run_dir: Path) -> DictConfig:
    """``read_config_data`` as a ``DictConfig`` (dotted access, ``OmegaConf.select``) whose interpolations are
    literal text: resolving it (``to_container(resolve=True)``) yields the stored strings, never an
    environment variable or a resolver's output."""
    cfg = OmegaConf.create(_literal(read_config_data(run_dir)))
    assert isinstance(cfg, DictConfig)
    return cfg


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


def config_hash(cfg: DictConfig | dict[str, Any], data: str | None = None) -> str:
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
    refuse_credentials(plain(cfg))
    root = Path(cfg.run.root)
    if cfg.run.get("name"):
        return root / checked_name(str(cfg.run.name))
    digest = data if data is not None else data_digest(cfg)
    return root / str(cfg.dataset.name) / f"{run_label(cfg, overrides)}-{config_hash(cfg, digest)}"


def checked_name(name: str) -> str:
    """``run.name`` as a folder under ``run.root``: relative, and no part ``..``, ``.`` or empty (a name that
    escapes the root, or is the root itself, could write into or mistake another folder for a run)."""
    from allmem.errors import ConfigError

    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in name:
        raise ConfigError(
            f"run.name: {name!r} must be a relative folder name under run.root (no '..', '.', empty part or "
            "leading '/')"
        )
    return name


def credential_url(value: object) -> bool:
    """Whether ``value`` is a URL carrying a user name or password (``http://user:pw@host``)."""
    if not isinstance(value, str) or "://" not in value or "@" not in value:
        return False
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return "@" in value.split("://", 1)[1].split("/", 1)[0]
    return parts.username is not None or parts.password is not None


_CREDENTIALS = "holds credentials (user:password@host); put the key in the variable llm.api_key_env names"


def refuse_credentials(data: Any, where: str = "") -> None:
    """Refuse a config holding a URL with credentials (``llm.base_url``) before anything is written: the URL
    would reach the run directory's name, config.yaml, the manifest and metrics. The message never repeats it."""
    from allmem.errors import ConfigError

    if isinstance(data, dict):
        for key, value in data.items():
            refuse_credentials(value, f"{where}.{key}" if where else str(key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            refuse_credentials(value, f"{where}[{i}]")
    elif credential_url(data):
        raise ConfigError(f"{where}: {_CREDENTIALS}")


def credential_override(argv: Iterable[str]) -> str | None:
    """The one-line refusal for a command-line override whose value is a URL with credentials, else None:
    checked before Hydra starts, since Hydra writes the overrides into its own folder at once."""
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and any(credential_url(v) for v in (value, *value.split(","))):
            return f"{key.lstrip('+~')}: {_CREDENTIALS}"
    return None


def is_complete(run_dir: Path) -> bool:
    return (run_dir / DONE).exists()


def recorded_hash(run_dir: Path) -> str | None:
    """The identity hash a complete run recorded (``metrics.json`` ``run.config_hash``), else computed from its
    stored config and the data digest of its first attempt."""
    try:
        metrics = json.loads((run_dir / METRICS).read_text(encoding="utf-8"))
        if (metrics.get("run") or {}).get("config_hash"):
            return str(metrics["run"]["config_hash"])
    except (OSError, ValueError):
        pass
    if not (run_dir / CONFIG).exists():
        return None
    try:
        manifest = json.loads((run_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = {}
    digest = next(
        (a.get("data_digest") for a in manifest.get("attempts") or () if a.get("data_digest")), None
    )
    return config_hash(read_config_data(run_dir), digest)


def reusable(run_dir: Path, cfg: DictConfig, digest: str) -> bool:
    """Whether ``run_dir`` holds a complete run of ``cfg`` on the data with ``digest``, so it need not run
    again. A complete run of another config or data there (a ``run.name`` reused) is a ``ConfigError``, never
    a silent skip."""
    if not is_complete(run_dir):
        return False
    want, have = config_hash(cfg, digest), recorded_hash(run_dir)
    if have != want:
        from allmem.errors import ConfigError

        raise ConfigError(
            f"{run_dir}: holds a complete run of another config or data (hash {have}, this one {want}); "
            "choose another run.name or delete the folder"
        )
    from allmem.fingerprint import source_fingerprint

    try:
        made_by = json.loads((run_dir / MANIFEST).read_text(encoding="utf-8")).get("code")
    except (OSError, ValueError):
        made_by = None
    if made_by != source_fingerprint():  # reused as asked, but never silently (the paper targets refuse it)
        logging.getLogger("allmem.run").warning(
            "%s was made by other code (source fingerprint %s, this code %s); delete it to run it again",
            run_dir, made_by or "none", source_fingerprint(),
        )  # fmt: skip
    return True


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


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write text (UTF-8) or bytes via a temporary file and rename, so a reader never sees half a file. The file
    gets the mode the umask gives any new file (``mkstemp`` would make it 0600, unreadable to a teammate sharing
    the results)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data if isinstance(data, bytes) else data.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        _named(exc, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_via(path: Path, write: Callable[[Path], None]) -> Path:
    """``write`` a file (a figure, a Parquet table) to a temporary name beside ``path``, then rename: a reader
    never sees half a file, and a failed write leaves the old one. The temporary name keeps the suffix, so a
    writer that picks the format by it (``savefig``) picks the right one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp{path.suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


# Temporary folders follow the umask (``tempfile.mkdtemp`` would make them 0700, and the rename keeps that mode, so
# a teammate sharing a cache could not read it) and carry their writer's host and pid in the name, so one left by a
# killed process is recognised and removed by the next write beside it (``remove_stale``).
STALE_AFTER_S = 6 * 3600  # a temporary folder this old is an orphan whoever made it (a save takes seconds)
_TEMP_NAME = re.compile(r"^\..+\.(?P<host>[A-Za-z0-9-]*)\.(?P<pid>\d+)\.[0-9a-f]{8}\.(?:tmp|old)$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0])


def temp_dir(parent: Path, name: str, kind: str = "tmp") -> Path:
    """A new hidden folder beside ``parent / name``, mode from the umask, named after this host and process."""
    path = parent / f".{name}.{_host()}.{os.getpid()}.{secrets.token_hex(4)}.{kind}"
    os.mkdir(path, 0o777)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale(parent: Path, now: float | None = None) -> list[Path]:
    """Remove the temporary folders under ``parent`` that no live writer owns; returns them.

    Only hidden folders named like ``temp_dir``'s (or older ``*.tmp`` ones) are considered, never a symlink: one
    is removed when its writer was on this host and is dead, or when it is older than ``STALE_AFTER_S`` (a writer
    on another host sharing the folder cannot be asked, and a reused pid only delays removal).
    """
    now = time.time() if now is None else now
    removed: list[Path] = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    host = _host()
    for entry in entries:
        if not (entry.name.startswith(".") and entry.name.endswith((".tmp", ".old"))):
            continue
        try:
            st = entry.lstat()
        except OSError:
            continue
        if not entry.is_dir() or entry.is_symlink():
            continue
        m = _TEMP_NAME.match(entry.name)
        dead = (
            m is not None and m["host"] == host and int(m["pid"]) != os.getpid() and not _alive(int(m["pid"]))
        )
        if dead or now - st.st_mtime > STALE_AFTER_S:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def write_folder(path: Path, fill: Callable[[Path], None]) -> Path:
    """Write a folder atomically: ``fill`` writes into a new temporary sibling, which then replaces ``path`` by
    rename (an old folder is moved aside first, then removed), so a reader sees the old folder or the new one,
    never half of one. Orphans of dead writers beside it are removed first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path.parent)
    tmp = temp_dir(path.parent, path.name)
    try:
        fill(tmp)
        old = None
        if path.exists():
            old = path.parent / f".{path.name}.{_host()}.{os.getpid()}.{secrets.token_hex(4)}.old"
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def write_json(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def prepare(run_dir: Path, cfg: DictConfig) -> None:
    """Create the directory and write the resolved config; refuse to resume a run made with another config
    (the data are compared per attempt, ``allmem.run.attempts.begin``)."""
    from allmem.errors import ConfigError

    run_dir.mkdir(parents=True, exist_ok=True)
    text = OmegaConf.to_yaml(cfg, resolve=True)
    path = run_dir / CONFIG
    if path.exists():
        if config_hash(read_config_data(run_dir)) != config_hash(cfg):
            raise ConfigError(
                f"{run_dir}: holds a run made with a different config; choose another run.name or delete it"
            )
    write_atomic(path, text)


def iter_jsonl(path: Path, whole: bool = False) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each line of a JSONL file; blank lines are skipped. A last line with no
    newline that does not parse is a torn tail (a process killed mid-write) and is left out; any other bad line
    is a ``RecordError`` naming the file and the line. ``whole``: the file was written at once (inside an atomic
    folder), so a torn tail is damage too. The one JSONL reader: run files, ledgers, events, cache entries."""
    with Path(path).open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as exc:
                if not whole and not line.endswith("\n"):
                    return  # torn tail from an interrupted write
                raise RecordError(f"{path}:{n}: not valid JSON ({exc.msg} at column {exc.colno})") from None


def read_jsonl(path: Path, whole: bool = False) -> list[Any]:
    """Every value of a JSONL file (``iter_jsonl``); an empty list when the file does not exist."""
    return [value for _, value in iter_jsonl(path, whole)] if Path(path).exists() else []


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


def dump_line(obj: Any) -> str:
    """One JSONL line: keys sorted (files diff and compare stably), non-ASCII escaped (any string can be
    written, even a lone surrogate from a decoded reply)."""
    return json.dumps(obj, sort_keys=True, default=str) + "\n"


def _named(exc: OSError, path: Path) -> NoReturn:
    """Raise ``exc`` naming ``path``: a full disk names no file by itself; the one-line error must say which."""
    if exc.filename is not None:
        raise exc
    raise OSError(exc.errno, exc.strerror, str(path)) from exc


def append_jsonl(path: Path, obj: Any) -> None:
    """Append one line (folder made on the first write), flushed and synced: what is on disk survives a kill.
    For a file written now and then (the ledger, ATC events); ``JsonlWriter`` keeps the file open."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with path.open("a", encoding="utf-8") as fh:
            fh.write(dump_line(obj))
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        _named(exc, path)


class JsonlWriter:
    """Append-only JSONL with a flush and fsync per line: what is on disk survives a kill."""

    def __init__(self, path: Path) -> None:
        repair_jsonl(path)
        self.path = path
        self._fh = path.open("a", encoding="utf-8")

    def write(self, obj: dict[str, Any]) -> None:
        try:
            self._fh.write(dump_line(obj))
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            _named(exc, self.path)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def completed_ids(run_dir: Path) -> set[str]:
    """Questions answered for good: a failed line (``error`` set) does not count, so it is asked again."""
    return {r["question_id"] for r in read_jsonl(run_dir / PREDICTIONS) if r.get("error") is None}


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------------------------
# The comparison rule: when two run directories hold the same result.

# Fields that may differ between two runs of the same config on the same data and code, and only those: timings
# (latencies, wall clocks, per-event means of them), whether an LLM reply came from the cache and the counts
# derived from that flag, attempt and retry numbers, timestamps, and the process that ran it (pid, argv). A key
# matching one of these glob patterns is left out wherever it occurs, in every file. docs/DESIGN.md states it.
SAME_RESULT_IGNORES: tuple[str, ...] = (
    "*latency*", "*_ms", "*_ms_*", "*_s", "*_s_*",  # timings: latency_ms, write_describe_ms, wall_s, ingest_s
    "cached", "spent_tokens_*",  # a cached reply and what it spared (the cache state on this machine)
    "attempt", "attempts", "retries",  # how many tries it took
    "*_at", "pid", "argv",  # when and by which process
)  # fmt: skip
# The files compared, each read as a multiset of records (order is the schedule's, not the result's).
_COMPARED = (PREDICTIONS, CALLS, SYSTEM_STATS, EVENTS)


def _ignored(key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, pat) for pat in SAME_RESULT_IGNORES)


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if not _ignored(str(k))}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _diff(a: Any, b: Any, where: str, out: list[str], limit: int) -> None:
    if len(out) >= limit or a == b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{where}.{k}: only in {'B' if k not in a else 'A'}")
            else:
                _diff(a[k], b[k], f"{where}.{k}", out, limit)
            if len(out) >= limit:
                return
        return
    out.append(f"{where}: {json.dumps(a, default=str)[:80]} != {json.dumps(b, default=str)[:80]}")


def _records(path: Path) -> dict[str, Any]:
    """A JSONL file's records without ignored fields, keyed by question (predictions) or by content."""
    out: dict[str, Any] = {}
    for rec in read_jsonl(path):
        rec = _strip(rec)
        key = json.dumps(rec, sort_keys=True, default=str)
        if path.name == PREDICTIONS:
            key = f"{rec.get('dialogue_id')}/{rec.get('question_id')}"
        while key in out:  # the same line twice is kept twice
            key += "+"
        out[key] = rec
    return out


def _manifest_view(path: Path) -> dict[str, Any]:
    """The manifest without ignored fields; ``data`` by content only (where the data lay is placement)."""
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    if isinstance(data.get("data"), dict):
        data["data"] = sorted(data["data"].values())
    return _strip(data)


def same_result(a: Path, b: Path, limit: int = 5) -> list[str]:
    """Whether run directories ``a`` and ``b`` hold the same result: [] if so, else the first ``limit``
    differences, one line each. Compares the identity of ``config.yaml`` (``identity``: placement keys left
    out), ``metrics.json``, the manifest and every JSON-lines file (predictions by question, the others as a
    multiset of lines), each without the fields in ``SAME_RESULT_IGNORES``."""
    out: list[str] = []
    a, b = Path(a), Path(b)
    for name in (CONFIG, METRICS, MANIFEST, *_COMPARED, DONE):
        if (a / name).exists() != (b / name).exists():
            out.append(f"{name}: only in {'A' if (a / name).exists() else 'B'}")
    _diff(identity_of(read_config_data(a)), identity_of(read_config_data(b)), CONFIG, out, limit)
    for name in (METRICS,):
        pa, pb = a / name, b / name
        ja = _strip(json.loads(pa.read_text(encoding="utf-8"))) if pa.exists() else {}
        jb = _strip(json.loads(pb.read_text(encoding="utf-8"))) if pb.exists() else {}
        _diff(ja, jb, name, out, limit)
    _diff(_manifest_view(a / MANIFEST), _manifest_view(b / MANIFEST), MANIFEST, out, limit)
    for name in _COMPARED:
        ra, rb = _records(a / name), _records(b / name)
        if name == PREDICTIONS:
            _diff(ra, rb, name, out, limit)
        else:
            only_a, only_b = sorted(set(ra) - set(rb)), sorted(set(rb) - set(ra))
            if only_a or only_b:
                out.append(f"{name}: {len(only_a)} lines only in A, {len(only_b)} only in B")
    return out[:limit]
