"""The run directory has one owner: its file names, the JSONL reader and appender, and the record version."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from allmem import files
from allmem.llm.ledger import Ledger
from allmem.memory.atc.events import EventLog, read_events
from allmem.run import attempts
from allmem.types import RECORD_VERSION, CallRecord, RecordError

REPO = Path(__file__).resolve().parents[1]
OWNER = REPO / "allmem" / "files.py"
NAMES = (
    "CONFIG", "PREDICTIONS", "CALLS", "SYSTEM_STATS", "METRICS", "MANIFEST", "EVENTS", "LOCK", "DONE", "PARTS",
    "MERGING", "SHARDS", "SHARD_INFO", "PACING", "JUDGES", "JUDGE_INFO", "VERDICTS",
)  # fmt: skip


def test_run_file_names_come_from_one_module() -> None:
    """No library module spells a run file's name: each imports it from the owner (a string literal equal to
    the name, or ending in ``/<name>``, anywhere else is a second home that can drift)."""
    names = {getattr(files, n) for n in NAMES}
    found = []
    for folder in ("allmem", "baselines", "benchmarks", "scripts"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path == OWNER:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if any(node.value == n or node.value.endswith("/" + n) for n in names):
                        found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    assert found == []


def test_jsonl_reader_cuts_a_torn_tail_and_names_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text(
        '{"a": 1}\n\n{"a": 2}\n{"a": 3}', encoding="utf-8"
    )  # the last line is whole, only unended
    assert files.read_jsonl(path) == [{"a": 1}, {"a": 2}, {"a": 3}]
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": ', encoding="utf-8")  # killed mid-write
    assert files.read_jsonl(path) == [{"a": 1}, {"a": 2}]
    path.write_text('{"a": 1}\n{"a": \n{"a": 3}\n', encoding="utf-8")
    with pytest.raises(RecordError, match=rf"^{path}:2: not valid JSON"):
        files.read_jsonl(path)
    assert files.read_jsonl(tmp_path / "absent.jsonl") == []


def test_atc_events_tolerate_a_torn_tail(tmp_path: Path) -> None:
    """Before, ``read_events`` failed on the torn line a killed consolidation leaves; the run reader skipped it."""
    log = EventLog(tmp_path)
    log.write({"kind": "run", "n": 1})
    with (tmp_path / files.EVENTS).open("a", encoding="utf-8") as fh:
        fh.write('{"kind": "ta')
    assert read_events(tmp_path) == [{"kind": "run", "n": 1}]


def test_every_appender_syncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger and the ATC events are appended through the one appender, flushed per line and synced (before,
    neither synced, so a power cut could lose lines the run had counted); with ``SYNC_EVERY_S`` 0, every line."""
    files.close_appenders()  # files other tests left open would be synced when closed to make room
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    monkeypatch.setattr(files, "SYNC_EVERY_S", 0.0)
    EventLog(tmp_path / "run").write({"kind": "run"})
    Ledger(tmp_path / "run" / files.CALLS).record(
        CallRecord("generate", "offline", "m", 1, 1, 0.0, False, "h")
    )
    assert len(synced) == 2
    assert files.read_jsonl(tmp_path / "run" / files.CALLS)[0]["phase"] == "generate"


def test_the_manifest_records_the_record_version(tmp_path: Path) -> None:
    assert attempts.provenance([], {"name": "offline"})["records"] == RECORD_VERSION


def test_append_jsonl_keeps_files_open_but_follows_a_replaced_file(tmp_path: Path, monkeypatch) -> None:
    """Lines are readable as soon as written; a file removed behind the kept handle is recreated, not written
    into the void; at most ``_MAX_OPEN`` files stay open; fsync runs at most every ``SYNC_EVERY_S`` per file."""
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(files.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    monkeypatch.setattr(files, "SYNC_EVERY_S", 3600.0)
    files.close_appenders()
    synced.clear()
    path = tmp_path / "run" / "calls.jsonl"
    for i in range(3):
        files.append_jsonl(path, {"i": i})
    assert (
        files.read_jsonl(path) == [{"i": 0}, {"i": 1}, {"i": 2}] and synced == []
    )  # flushed, not yet synced
    path.unlink()
    files.append_jsonl(path, {"i": 3})
    assert files.read_jsonl(path) == [{"i": 3}] and len(synced) == 1  # the stale handle was closed, synced
    others = [tmp_path / f"f{n}.jsonl" for n in range(files._MAX_OPEN + 2)]
    for p in others:
        files.append_jsonl(p, {"p": p.name})
    assert len(files._APPENDERS) == files._MAX_OPEN and len(synced) == 4  # the 3 oldest closed with a sync
    assert all(files.read_jsonl(p) == [{"p": p.name}] for p in others)
    files.close_appenders()
    assert not files._APPENDERS and len(synced) == 4 + files._MAX_OPEN
    monkeypatch.setattr(files, "SYNC_EVERY_S", 0.0)
    files.append_jsonl(path, {"i": 4})
    assert len(synced) == 5 + files._MAX_OPEN  # due at once: synced with the write
    files.close_appenders()
