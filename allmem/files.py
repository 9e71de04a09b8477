"""The run directory's files (docs/DESIGN.md, "Run directory"): their names (no other module spells one), the
one JSONL reader and appender, atomic writes of a file or a folder, sha256, and reading a stored config as data."""

from __future__ import annotations

import atexit
import gzip
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn

from omegaconf import DictConfig, OmegaConf

from allmem.errors import ConfigError
from allmem.types import RecordError, record_key

CONFIG = "config.yaml"
PREDICTIONS = "predictions.jsonl"
CALLS = "calls.jsonl"
SYSTEM_STATS = "system_stats.jsonl"
# The packed context of each record (the text the reader got, the ids of its units), keyed like predictions. Gzip,
# one member per line (``GZ_SUFFIX``: every reader and writer below handles it), so appending is concatenating.
CONTEXTS = "contexts.jsonl.gz"
GZ_SUFFIX = ".gz"
METRICS = "metrics.json"
MANIFEST = "manifest.json"
EVENTS = "atc_events.jsonl"  # written by All-Mem's consolidation (allmem.memory.atc.events)
LOCK = ".lock"
DONE = "DONE"
# Scale-out (allmem/run/parallel.py, allmem/run/shards.py): a worker's per-dialogue folder of the run files
# above, the merge-in-progress record inside one, a shard's folder and what a finished shard states.
PARTS = "parts"
MERGING = ".merging"
SHARDS = "shards"
SHARD_INFO = "shard.json"
PACING = ".llm_pacing.sqlite"  # the run's llm.rpm / llm.tpm windows, shared by its processes (llm/limiter.py)
JUDGES = "judges"  # <run>/judges/<key>/: another judge's verdicts (allmem judge, allmem/run/rejudge.py)
JUDGE_INFO = "judge.json"  # in a judge folder: the judge's identity
VERDICTS = "verdicts.jsonl"  # in a judge folder: one line per judged question


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


def read_config_data(run_dir: Path) -> dict[str, Any]:
    """A run directory's ``config.yaml`` as plain data, the one way a stored config is read. A run folder is
    data, never code: ``yaml.safe_load`` builds no objects, and nothing here resolves an interpolation
    (``${oc.env:KEY}`` stays that text) or instantiates a ``_target_``. A file that is not a YAML mapping is a
    ``ConfigError`` naming it."""
    import yaml

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


def is_complete(run_dir: Path) -> bool:
    return (run_dir / DONE).exists()


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write text (UTF-8) or bytes via a temporary file and rename, so a reader never sees half a file. The file
    gets the mode the umask gives any new file (``mkstemp`` would make it 0600, unreadable to a teammate sharing
    the results)."""

    def write(tmp: Path) -> None:
        with open(tmp, "xb") as fh:  # created 0666 less the umask
            fh.write(data if isinstance(data, bytes) else data.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())

    try:
        write_via(path, write)
    except OSError as exc:
        _named(exc, path)


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


_RAISE: Any = object()


def read_json(path: Path, default: Any = _RAISE) -> Any:
    """A whole JSON file (metrics, a manifest, a cache index). ``default`` when it is missing or unreadable, if
    given; else a ``RecordError`` naming the file. The one JSON-file reader."""
    try:
        return json.loads(Path(path).read_bytes())
    except (OSError, ValueError, RecursionError) as exc:
        if default is not _RAISE:
            return default
        raise RecordError(f"{path}: not readable as JSON ({str(exc)[:80]})") from None


def iter_jsonl(path: Path, whole: bool = False) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each line of a JSONL file; blank lines are skipped. A last line with no
    newline that does not parse is a torn tail (a process killed mid-write) and is left out; any other bad line
    is a ``RecordError`` naming the file and the line. ``whole``: the file was written at once (inside an atomic
    folder), so a torn tail is damage too. The one JSONL reader: run files, ledgers, events, cache entries. A
    ``.gz`` file (``CONTEXTS``) is read member by member; a torn last member is its torn tail."""
    if _is_gz(path):
        yield from _iter_gz(Path(path), whole)
        return
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
            except (ValueError, RecursionError) as exc:  # a 5,000-digit integer, nesting past the stack
                raise RecordError(f"{path}:{n}: unreadable JSON ({str(exc)[:80]})") from None


def _is_gz(path: Path | str) -> bool:
    return str(path).endswith(GZ_SUFFIX)


_GZ_CHUNK = 1 << 16


def _gz_scan(path: Path) -> tuple[list[bytes], int, int]:
    """The decompressed members of a gzip file written a member per line, the byte length of the complete ones
    and the file's size (more: a torn last member). Fed in chunks, so a long file costs linear time. A member
    that is not gzip is a ``RecordError`` naming the file and its byte offset."""
    data = memoryview(path.read_bytes())
    members: list[bytes] = []
    pos, n = 0, len(data)
    while pos < n:
        d, out, p = zlib.decompressobj(wbits=31), [], pos
        while not d.eof and p < n:
            chunk = data[p : p + _GZ_CHUNK]
            p += len(chunk)
            try:
                out.append(d.decompress(chunk))
            except zlib.error as exc:
                raise RecordError(f"{path}: byte {pos}: not gzip ({exc})") from None
        if not d.eof:
            break  # the file ends inside this member: a torn tail
        members.append(b"".join(out))
        pos = p - len(d.unused_data)
    return members, pos, n


def _iter_gz(path: Path, whole: bool) -> Iterator[tuple[int, Any]]:
    members, end, size = _gz_scan(path)
    if whole and end < size:
        raise RecordError(f"{path}: torn at byte {end} (a member cut short)")
    n = 0
    for member in members:
        for line in member.decode("utf-8").splitlines():
            n += 1
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except (ValueError, RecursionError) as exc:
                raise RecordError(f"{path}:{n}: not valid JSON ({str(exc)[:80]})") from None


def encode_lines(path: Path | str, lines: Iterable[str]) -> bytes:
    """JSONL lines as ``path``'s bytes: UTF-8, or for a ``.gz`` file one gzip member per line (``mtime`` 0, so
    the same lines are the same bytes)."""
    if _is_gz(path):
        return b"".join(gzip.compress(line.encode("utf-8"), mtime=0) for line in lines)
    return "".join(lines).encode("utf-8")


def read_jsonl(path: Path, whole: bool = False) -> list[Any]:
    """Every value of a JSONL file (``iter_jsonl``); an empty list when the file does not exist."""
    return [value for _, value in iter_jsonl(path, whole)] if Path(path).exists() else []


def repair_jsonl(path: Path) -> int:
    """Cut a torn last line (no trailing newline) left by a killed process, so appends stay line-aligned.
    Returns the number of bytes cut."""
    if not path.exists():
        return 0
    if _is_gz(path):  # cut a member the file ends inside
        _, keep, size = _gz_scan(path)
        if keep < size:
            with path.open("r+b") as fh:
                fh.truncate(keep)
        return size - keep
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
    if _is_gz(path):
        rows = [row for _, row in iter_jsonl(path)]
        kept_rows = [row for row in rows if not drop(row)]
        if len(kept_rows) < len(rows):
            write_atomic(path, encode_lines(path, map(dump_line, kept_rows)))
        return len(rows) - len(kept_rows)
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
    """Append one line (folder made on the first write), flushed: what is written survives a kill of the process.
    For a file written line by line from anywhere in a run (the LLM ledger, ATC events); ``JsonlWriter`` is the
    writer of files one owner writes.

    Why it keeps the file open (``_APPENDERS``): the ledger writes a line per LLM call, offline too (a descriptor
    per turn, a diagnosis per unit), and opening plus fsyncing per line cost about as much as embedding the turn.
    Each line is flushed to the OS at once (a killed process loses nothing); the file is fsynced at most every
    ``SYNC_EVERY_S`` seconds and when it is closed (at exit, or when more than ``_MAX_OPEN`` files are open), so a
    power cut may lose the last second of lines, never a line that was synced. A file replaced or removed behind
    the open handle (another inode at ``path``) is reopened.
    """
    with _APPENDERS_LOCK:
        key = os.path.abspath(path)
        entry = _APPENDERS.pop(key, None)
        try:
            if entry is not None and not _same_file(entry[0], path):
                _close_appender(entry)
                entry = None
            if entry is None:
                path.parent.mkdir(parents=True, exist_ok=True)
                entry = [path.open("a", encoding="utf-8"), time.monotonic()]
            fh = entry[0]
            fh.write(dump_line(obj))
            fh.flush()
            if time.monotonic() - entry[1] >= SYNC_EVERY_S:
                os.fsync(fh.fileno())
                entry[1] = time.monotonic()
        except OSError as exc:
            if entry is not None:
                _close_appender(entry, sync=False)
            _named(exc, path)
        _APPENDERS[key] = entry  # most recently used last
        while len(_APPENDERS) > _MAX_OPEN:
            _close_appender(_APPENDERS.pop(next(iter(_APPENDERS))))


SYNC_EVERY_S = 1.0  # append_jsonl: the longest a flushed line waits for its fsync
_MAX_OPEN = 8  # append_jsonl: files kept open at once (a test session writes hundreds of run folders)
_APPENDERS: dict[str, list[Any]] = {}  # absolute path -> [open file, time of its last fsync]
_APPENDERS_LOCK = threading.Lock()


def _same_file(fh: Any, path: Path) -> bool:
    try:
        a, b = os.fstat(fh.fileno()), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _close_appender(entry: list[Any], sync: bool = True) -> None:
    fh = entry[0]
    try:
        if sync:
            fh.flush()
            os.fsync(fh.fileno())
    except OSError:
        pass  # every line was flushed when written; a failed final sync loses nothing a kill would keep
    finally:
        try:
            fh.close()
        except OSError:
            pass


def close_appenders() -> None:
    """fsync and close the files ``append_jsonl`` keeps open (at exit; tests call it to start clean)."""
    with _APPENDERS_LOCK:
        while _APPENDERS:
            _close_appender(_APPENDERS.pop(next(iter(_APPENDERS))))


def _forget_appenders_in_child() -> None:
    """A forked worker starts with no open appenders and a fresh lock (the parent's may be held by a thread)."""
    global _APPENDERS_LOCK
    _APPENDERS_LOCK = threading.Lock()
    _APPENDERS.clear()  # the parent's handles: flushed per line, so nothing of theirs is buffered here


atexit.register(close_appenders)
os.register_at_fork(after_in_child=_forget_appenders_in_child)


def append_bytes(path: Path, data: bytes) -> None:
    """Append whole lines already encoded (a worker's part of a run file), flushed and synced."""
    try:
        with path.open("ab") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        _named(exc, path)


class JsonlWriter:
    """Append-only JSONL with a flush and fsync per line: what is on disk survives a kill. A ``.gz`` path gets a
    gzip member per line (``encode_lines``)."""

    def __init__(self, path: Path) -> None:
        repair_jsonl(path)
        self.path = path
        self._fh = path.open("ab")

    def write(self, obj: dict[str, Any]) -> None:
        try:
            self._fh.write(encode_lines(self.path, [dump_line(obj)]))
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


def completed_ids(run_dir: Path) -> set[tuple[str, str]]:
    """(question id, ask point) of the records answered for good (a record without ``ask``: "end"): a failed
    line (``error`` set) does not count, so it is asked again."""
    return {record_key(r)[1:] for r in read_jsonl(run_dir / PREDICTIONS) if r.get("error") is None}


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
