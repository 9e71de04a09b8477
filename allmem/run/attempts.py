"""The attempts of one run: its lock (``RunLock``), the manifest's list of attempts, and the records kept true
across resumes (docs/DESIGN.md, "Failure rules of a run")."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Any

from allmem import files
from allmem.errors import ConfigError, RunCorrupt, RunLocked, expected_errors, is_environment_error
from allmem.fingerprint import source_fingerprint
from allmem.llm.ledger import roles_of, totals_of
from allmem.paths import repo_root
from allmem.run import asking
from allmem.run.identity import refuse_other_code
from allmem.types import RECORD_VERSION, Dialogue, record_key

log = logging.getLogger("allmem.run")


# The installed packages whose version can change a number (the embedder's kernels and model code, the vector
# index, the arrays, the LLM client): every manifest records them, declared or not (transformers comes with
# sentence-transformers, onnxruntime with the onnx extra), and ``allmem compare`` names a difference of these
# first when two runs disagree.
NUMERIC_PACKAGES: tuple[str, ...] = (
    "torch", "transformers", "sentence-transformers", "onnxruntime", "faiss-cpu", "numpy", "openai",
)  # fmt: skip


def _declared_packages() -> list[str]:
    """allmem, ``NUMERIC_PACKAGES`` and every runtime dependency the project declares (``pyproject.toml`` of this
    checkout, else the installed metadata): any of them can change a result, so the manifest lists their versions
    and the list is never kept by hand. Extras (dev, slurm) are left out."""
    import re
    import tomllib

    pyproject = repo_root() / "pyproject.toml"
    try:
        reqs = list(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"])
    except (OSError, KeyError, ValueError):
        reqs = [r for r in metadata.requires("allmem") or () if "extra ==" not in r]
    names = [m.group(0) for r in reqs if (m := re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r))]
    return sorted(dict.fromkeys(["allmem", *NUMERIC_PACKAGES, *names]), key=str.lower)


class RunLock:
    """An exclusive ``flock`` on ``<run_dir>/.lock``, holding the owner's PID; creates the directory. ``wait``:
    block until the holder releases it (a shard sealing the run) instead of failing at once."""

    def __init__(self, run_dir: Path, wait: bool = False) -> None:
        self.run_dir = run_dir
        self.wait = wait
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.run_dir / files.LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if self.wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "unknown"
            os.close(fd)
            raise RunLocked(
                f"{self.run_dir} is in use by another allmem run (PID {holder}); wait for it to end or stop it"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} on {socket.gethostname()}\n".encode())
        self._fd = fd
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _git() -> dict[str, Any]:
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=here, capture_output=True, text=True,
            timeout=10,
        )  # fmt: skip
        return {"sha": sha.stdout.strip() or None, "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"sha": None, "dirty": None}


@lru_cache(maxsize=4)
def _installed(names: tuple[str, ...]) -> tuple[tuple[str, str | None], ...]:
    """Each package's installed version, read once per process (a multirun seals many runs; reading the
    metadata of some thirty packages takes tens of milliseconds)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return tuple(out.items())


def provenance(data_files: Iterable[Path], backend: dict[str, Any]) -> dict[str, Any]:
    """Code version, data checksums, package versions and which backend produced the numbers."""
    return {
        "git": _git(),
        "data": {str(p): files.sha256_file(p) for p in data_files if Path(p).is_file()},
        "packages": dict(_installed(tuple(_declared_packages()))),
        "code": source_fingerprint(),  # the sources that can change a result (allmem.fingerprint)
        "records": RECORD_VERSION,  # which fields the run's files hold (allmem.types)
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "backend": backend,
        "argv": sys.argv,
        "written_at": _now(),
    }


def _read_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / files.MANIFEST
    # written atomically by allmem, so a bad manifest was changed by something else: refuse, name it
    manifest = files.read_json(path, None) if path.exists() else {}
    if not isinstance(manifest, dict):
        raise RunCorrupt(
            f"{path}: not a JSON object; allmem writes it whole, so something else changed it: restore it, or "
            f"move {run_dir} away to start over (the attempts it listed are then forgotten)"
        )
    return manifest


def begin(run_dir: Path, data_files: Iterable[Path], backend: dict[str, Any], digest: str) -> int:
    """Add this attempt to the manifest (every earlier one kept) and return its number. Refuses to continue a
    run whose data changed since its first attempt (a ``run.name`` directory may outlive its data file), or
    that other code began (``identity.refuse_other_code``)."""
    refuse_other_code(run_dir)
    manifest = _read_manifest(run_dir)
    attempts = list(manifest.get("attempts") or ())
    first = next((a.get("data_digest") for a in attempts if a.get("data_digest")), None)
    if first is not None and first != digest:
        raise ConfigError(
            f"{run_dir}: its data changed since the run began (sha256 {first[:12]}…, now {digest[:12]}…); "
            "choose another run.name or delete the directory"
        )
    for a in attempts:  # an attempt still "running" while we hold the lock was killed
        if a.get("status") == "running":
            a["status"] = "interrupted"
    number = max((int(a.get("attempt", 0)) for a in attempts), default=0) + 1
    prov = provenance(data_files, backend)
    entry = {
        "attempt": number,
        "started_at": _now(),
        "status": "running",
        "pid": os.getpid(),
        "data_digest": digest,
    }
    files.write_json(run_dir / files.MANIFEST, prov | {"attempts": [*attempts, entry | prov]})
    return number


def end(run_dir: Path, attempt: int, status: str, **summary: Any) -> None:
    """Record how the attempt ended: complete | failed | stopped | interrupted | crashed, with its counts and
    last error."""
    manifest = _read_manifest(run_dir)
    for entry in manifest.get("attempts", ()):
        if entry.get("attempt") == attempt:
            entry.update(status=status, ended_at=_now(), **summary)
    files.write_json(run_dir / files.MANIFEST, manifest)


def attempts(run_dir: Path) -> list[dict[str, Any]]:
    return list(_read_manifest(run_dir).get("attempts") or ())


def resume(
    run_dir: Path, dialogues: Sequence[Dialogue], ask: str = "end"
) -> tuple[set[tuple[str, str]], list[str]]:
    """Make the directory's records true before an attempt; return the answered (question id, ask point) keys
    and the ids of the dialogues to ingest (again) under ``protocol.ask`` = ``ask``. What is cut and dropped, and
    why: docs/DESIGN.md, "Failure rules of a run"."""
    for path in sorted(run_dir.glob("*.jsonl")):
        cut = files.repair_jsonl(path)
        if cut:
            log.warning("%s: cut a torn last line (%d bytes) left by an interrupted attempt", path.name, cut)
        check_lines(path)
    if files.repair_jsonl(run_dir / files.CONTEXTS):
        log.warning("%s: cut a torn last member left by an interrupted attempt", files.CONTEXTS)
    failed = files.drop_lines(run_dir / files.PREDICTIONS, lambda r: r.get("error") is not None)
    if failed:
        log.info("%d failed questions of an earlier attempt will be asked again", failed)
    done = files.completed_ids(run_dir)
    # a context whose record is not kept (failed, or cut before its prediction line) is written again with it;
    # those of a redone dialogue's answered questions stay, as their records do
    files.drop_lines(run_dir / files.CONTEXTS, lambda r: record_key(r)[1:] not in done)
    redo = [d.id for d in dialogues if asking.todo(d.questions, ask, done)]
    again = set(redo)
    files.drop_lines(run_dir / files.SYSTEM_STATS, lambda r: r.get("dialogue_id") in again)
    files.drop_lines(run_dir / files.EVENTS, lambda r: r.get("dialogue") in again)
    return done, redo


def check_lines(path: Path) -> None:
    """Raise ``RunCorrupt`` naming ``path`` and the line when a complete line is not a JSON object: allmem never
    writes one, so the rerun refuses rather than set it aside (docs/DESIGN.md, "Failure rules of a run")."""
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.endswith(b"\n") or not raw.strip():
                continue
            try:
                ok = isinstance(json.loads(raw), dict)
                why = "not a JSON object"
            except (ValueError, RecursionError) as exc:  # bad JSON or UTF-8, huge numbers, deep nesting
                ok, why = False, f"not valid JSON: {getattr(exc, 'msg', None) or type(exc).__name__}"
            if not ok:
                raise RunCorrupt(
                    f"{path}: line {n}: {why}; allmem never writes such a line, so something else changed the "
                    f"file: look at it, then delete that line to redo what it recorded (sed -i '{n}d' {path}) "
                    f"or move {path.parent} away to start over"
                )


def readable_records(run_dir: Path) -> list[dict[str, Any]]:
    """The predictions for the attempt's closing counts; none when the file is corrupt (``check_lines`` named the
    line), so that recording how the attempt ended never fails on it."""
    try:
        return files.read_jsonl(run_dir / files.PREDICTIONS)
    except (ValueError, RecursionError):
        return []


def ended_by(exc: BaseException) -> str:
    """The status of an attempt that an exception ended: ``failed`` for an expected error (the user's to fix: a
    corrupt file, a full disk, a refused config, ...), ``crashed`` for anything else (a bug)."""
    return "failed" if isinstance(exc, expected_errors()) or is_environment_error(exc) else "crashed"


def kept_call(run_dir: Path) -> Callable[[dict[str, Any]], bool]:
    """Whether a ``calls.jsonl`` line is behind the kept results: each question's answer and judge calls from
    the attempt that wrote its prediction, each dialogue's write and consolidation calls from the attempt whose
    ingestion produced its memory; a line of work an interrupted attempt left unfinished is not."""
    # (dialogue, question) -> attempts of its records (protocol.ask=both: two records, maybe two attempts)
    answered: dict[tuple[Any, str], set[int]] = {}
    for r in files.read_jsonl(run_dir / files.PREDICTIONS):
        answered.setdefault((r.get("dialogue_id"), r["question_id"]), set()).add(int(r.get("attempt", 1)))
    ingested = {
        r["dialogue_id"]: int(r.get("attempt", 1)) for r in files.read_jsonl(run_dir / files.SYSTEM_STATS)
    }

    def kept(call: dict[str, Any]) -> bool:
        attempt = int(call.get("attempt") or 1)
        if call.get("question_id") is not None:
            return attempt in answered.get((call.get("dialogue_id"), call["question_id"]), ())
        if call.get("dialogue_id") is not None:
            return ingested.get(call["dialogue_id"]) == attempt
        return True

    return kept


def run_cost(run_dir: Path) -> dict[str, Any]:
    """``cost``: LLM totals of the calls behind the kept results (``kept_call``), so a resumed run costs what an
    uninterrupted one does. ``cost_all_attempts``: every call booked, abandoned work included (what was spent).
    ``llm_roles``: per role, how many replies were invalid, repaired, unusable, failed (``ledger.roles_of``)."""
    calls = files.read_jsonl(run_dir / files.CALLS)
    kept = kept_call(run_dir)
    mine = [c for c in calls if kept(c)]
    return {"cost": totals_of(mine), "cost_all_attempts": totals_of(calls), "llm_roles": roles_of(mine)}
