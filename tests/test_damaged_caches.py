"""Damaged caches and bank-cache folders (permissions, orphans), through the real CLI where that is how a user meets
them: a damaged cache costs time (it is rebuilt, with a warning naming the file), never a run,
and is never used silently. The LLM response cache has its own (tests/test_llm_failures.py)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from allmem import files
from tests.faultkit import FIXTURES, allmem_run, done_dir, env

TINY = FIXTURES / "locomo_tiny.json"


def _allmem(tmp: Path, banks: Path, *extra: str):
    return allmem_run(tmp, "method=allmem", f"dataset.path={TINY}", f"run.bank_cache={banks}", *extra)


def _hits(run_dir: Path) -> dict[str, bool]:
    return {s["dialogue_id"]: s["bank_cache"]["hit"] for s in files.read_jsonl(run_dir / files.SYSTEM_STATS)}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bank cache holding both tiny dialogues, built once by a real run."""
    tmp = tmp_path_factory.mktemp("built")
    res = _allmem(tmp, tmp / "banks")
    assert res.rc == 0, res.err[-2000:]
    return tmp / "banks"


def _entry(banks: Path, dialogue: str = "conv-1") -> Path:
    (entry,) = [p for p in banks.glob(f"*/{dialogue}") if p.is_dir()]
    return entry


def _tear(path: Path) -> None:
    """Cut a file in the middle, as a full disk or a killed copy leaves it."""
    data = path.read_bytes()
    cut = len(data) // 2
    cut -= 3 if data[cut - 1 : cut] == b"\n" else 0  # inside a line, not between two
    path.write_bytes(data[:cut])


# ------------------------------------------------------------------ 7. a damaged bank-cache entry


@pytest.mark.slow  # the CLI in a subprocess
@pytest.mark.parametrize(
    "damaged",
    ["bank/embeddings.npy", "bank/units.jsonl", "bank/links.jsonl", "bank/meta.json", "entry.json",
     "atc_events.jsonl"],
)  # fmt: skip
def test_damaged_bank_cache_entry_is_set_aside_and_ingested_again(built: Path, tmp_path: Path, damaged: str):
    banks = tmp_path / "banks"
    shutil.copytree(built, banks)
    target = _entry(banks) / damaged
    _tear(target)
    torn = target.read_bytes()
    res = _allmem(tmp_path, banks, "method.retrieval.K=4")  # another run over the same banks
    assert res.rc == 0, res.err[-3000:]
    assert "Traceback" not in res.err
    warned = [line for line in res.err.splitlines() if "bank cache " in line and "WARNING" in line]
    assert len(warned) == 1 and str(target) in warned[0] and "ingesting this dialogue again" in warned[0], (
        res.err
    )
    assert _hits(done_dir(res)) == {"conv-1": False, "conv-2": True}  # only the damaged dialogue is rebuilt
    (aside,) = _entry(banks).parent.glob("conv-1.corrupt-*")
    assert (aside / damaged).read_bytes() == torn  # kept for a look; the entry in its place is a new one
    # the rebuilt entry is whole: a third run re-uses both dialogues
    again = _allmem(tmp_path, banks, "method.retrieval.K=5")
    assert again.rc == 0 and "WARNING" not in again.err.split("unmatched evidence")[-1], again.err[-2000:]
    assert _hits(done_dir(again)) == {"conv-1": True, "conv-2": True}


# ------------------------------------------------------------------ 10. umask and orphaned temporary banks


def _dead_pid() -> int:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(proc.stdout)


@pytest.mark.slow  # the CLI in a subprocess
def test_bank_cache_follows_the_umask_and_removes_orphans(built: Path, tmp_path: Path) -> None:
    banks = tmp_path / "banks"
    shutil.copytree(built, banks)
    shutil.rmtree(_entry(banks, "conv-2"))  # so this run stores conv-2 again
    keydir = _entry(banks).parent
    host = socket.gethostname().split(".")[0]
    dead = keydir / f".conv-2.{host}.{_dead_pid()}.0123abcd.tmp"  # a killed writer on this host
    old = keydir / ".conv-2.k3j9x_q1.tmp"  # tempfile.mkdtemp's name, from before; a day old
    live = keydir / f".conv-2.{host}.{os.getpid()}.4567cdef.tmp"  # a writer still at work (this test)
    other = keydir / f".conv-2.otherhost.{_dead_pid()}.89abcdef.tmp"  # another host's, fresh: cannot tell
    for d in (dead, old, live, other):
        (d / "bank").mkdir(parents=True)
    day_ago = time.time() - 86_400
    os.utime(old, (day_ago, day_ago))
    umask = os.umask(0o022)
    try:
        res = _allmem(tmp_path, banks, "method.retrieval.K=4")
    finally:
        os.umask(umask)
    assert res.rc == 0, res.err[-2000:]
    assert not dead.exists() and not old.exists()
    assert live.exists() and other.exists()
    stored = _entry(banks, "conv-2")
    assert _hits(done_dir(res)) == {"conv-1": True, "conv-2": False}
    for path in (stored, stored / "bank"):
        assert path.stat().st_mode & 0o777 == 0o755, oct(path.stat().st_mode)  # mkdtemp made 0700
    assert json.loads((stored / "entry.json").read_text())["dialogue_id"] == "conv-2"


# ------------------------------------------------------------------ 7. a damaged embedding cache (real MiniLM)


def _naive(tmp: Path, cache: Path, root: str):
    return allmem_run(tmp, "method=naive_rag", f"dataset.path={TINY}", f"run.root={tmp / root}", hashed=False,
                      cache=cache)  # fmt: skip


def _answers(run_dir: Path) -> list[dict]:
    """Each question's record less what may differ between equal runs (latencies, cache flags, attempt)."""
    drop = ("latency_ms", "answer", "attempt")
    return [
        {k: v for k, v in r.items() if k not in drop} for r in files.read_jsonl(run_dir / files.PREDICTIONS)
    ]


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """A cache folder whose embedding cache holds every tiny turn and question, and the answers it gave."""
    tmp = tmp_path_factory.mktemp("embedded")
    res = _naive(tmp, tmp / "cache", "runs")
    assert res.rc == 0, res.err[-2000:]
    db = tmp / "cache" / "embeddings" / "embeddings.sqlite"
    with sqlite3.connect(db) as conn:  # everything into the main file, so damage to it is damage to the data
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return tmp / "cache", _answers(done_dir(res))


def _vectors(db: Path) -> list[np.ndarray]:
    with sqlite3.connect(db) as conn:
        return [np.frombuffer(blob, dtype=np.float32) for (blob,) in conn.execute("SELECT vec FROM vectors")]


def _garbage(db: Path) -> None:
    db.write_bytes(b"not a database, just bytes\n" * 300)


def _truncated(db: Path) -> None:
    _tear(db)


def _other_layout(db: Path) -> None:
    db.unlink()
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE vectors (text TEXT, embedding BLOB)")


@pytest.mark.slow
@pytest.mark.parametrize("damage", [_garbage, _truncated, _other_layout], ids=lambda f: f.__name__.strip("_"))
def test_damaged_embedding_cache_is_set_aside_and_rebuilt(embedded, tmp_path: Path, damage) -> None:
    built, answers = embedded
    cache = tmp_path / "cache"
    shutil.copytree(built, cache)
    db = cache / "embeddings" / "embeddings.sqlite"
    damage(db)
    res = _naive(tmp_path, cache, "runs")
    assert res.rc == 0 and "Traceback" not in res.err, res.err[-3000:]  # was: sqlite3.DatabaseError, no path
    warned = [line for line in res.err.splitlines() if "WARNING" in line and "embedding cache" in line]
    assert len(warned) == 1 and f"embedding cache {db}:" in warned[0] and "moved it aside" in warned[0], (
        res.err
    )
    aside = [
        p for p in db.parent.glob("embeddings.sqlite.corrupt-*") if not p.name.endswith(("-wal", "-shm"))
    ]
    assert len(aside) == 1  # with its WAL side files, if any
    assert _answers(done_dir(res)) == answers
    assert all(np.isfinite(v).all() for v in _vectors(db))  # the new file is a whole cache


@pytest.mark.slow
def test_nan_and_non_unit_vectors_in_the_embedding_cache_are_computed_again(embedded, tmp_path: Path) -> None:
    built, answers = embedded
    cache = tmp_path / "cache"
    shutil.copytree(built, cache)
    db = cache / "embeddings" / "embeddings.sqlite"
    with sqlite3.connect(db) as conn:  # every other vector NaN, the rest scaled: both were used silently
        rows = conn.execute("SELECT model, key, vec FROM vectors").fetchall()
        for i, (model, key, blob) in enumerate(rows):
            vec = np.frombuffer(blob, dtype=np.float32)
            bad = np.full_like(vec, np.nan) if i % 2 else vec * np.float32(3.0)
            conn.execute(
                "UPDATE vectors SET vec = ? WHERE model = ? AND key = ?", (bad.tobytes(), model, key)
            )
    res = _naive(tmp_path, cache, "runs")
    assert res.rc == 0, res.err[-3000:]
    warned = [line for line in res.err.splitlines() if "WARNING" in line and "embedding cache" in line]
    assert len(warned) == 1 and str(db) in warned[0] and "computing them again" in warned[0], res.err
    assert _answers(done_dir(res)) == answers
    vecs = _vectors(db)
    assert len(vecs) == len(rows)  # repaired in place
    assert all(np.isfinite(v).all() and abs(float(np.linalg.norm(v)) - 1) < 1e-5 for v in vecs)


# ------------------------------------------------------------------ 7. tiktoken seed files


@pytest.mark.slow  # the CLI in a subprocess
@pytest.mark.parametrize("damage", ["truncated", "folder"])
def test_damaged_tiktoken_seed_file_is_written_again(tmp_path: Path, damage: str) -> None:
    from allmem.tokens import seed_tiktoken_cache

    folder = seed_tiktoken_cache(tmp_path / "tiktoken")
    (seed,) = [p for p in folder.iterdir() if p.is_file()]
    whole = seed.read_bytes()
    if damage == "truncated":
        seed.write_bytes(whole[:1000])
    else:  # was: IsADirectoryError from every run
        seed.unlink()
        seed.mkdir()
    res = allmem_run(tmp_path, "method=bm25", f"dataset.path={TINY}",
                     environ=env(TIKTOKEN_CACHE_DIR=str(folder)))  # fmt: skip
    assert res.rc == 0 and "Traceback" not in res.err, res.err[-2000:]
    assert any("WARNING" in line and str(seed) in line for line in res.err.splitlines()), res.err
    assert seed.read_bytes() == whole


# ------------------------------------------------------------------ 7. item-score and point-hash caches (reports)


def _items_cache(run_dir: Path) -> Path:
    import hashlib

    from allmem.paths import cache_dir

    digest = hashlib.sha256((run_dir / files.PREDICTIONS).read_bytes()).hexdigest()[:24]
    (path,) = (cache_dir() / "report" / "items").glob(f"{digest}-*.parquet")
    return path


@pytest.mark.parametrize("damage", ["garbage", "other_frame", "folder"])
def test_damaged_item_score_cache_is_rescored(tmp_path, monkeypatch, caplog, damage: str) -> None:
    import pandas as pd

    from allmem.report import items
    from allmem.report.runs import find_runs
    from tests.report_fixture import write_run

    monkeypatch.setenv("ALLMEM_CACHE", str(tmp_path / "cache"))
    write_run(
        tmp_path / "runs", ["+experiment=table1", "dataset=locomo", "method=bm25"], lambda i: i % 3 == 0
    )
    run = find_runs(tmp_path / "runs")[0]
    truth = items.item_frame(run, use_cache=False)
    items.item_frame(run)  # fills the cache
    cached = _items_cache(run.path)
    if damage == "garbage":
        cached.write_bytes(b"PAR1" + b"\x00" * 64 + b"PAR1")
    elif damage == "other_frame":  # a whole Parquet file, but not this run's scores: was used silently
        truth.head(3).to_parquet(cached, index=False)
    else:  # a folder in the file's place: was read as an empty dataset, or crashed the write
        cached.unlink()
        cached.mkdir()
    with caplog.at_level("WARNING", logger="allmem.report"):
        got = items.item_frame(run)
    pd.testing.assert_frame_equal(got, truth)
    assert any(str(cached) in r.getMessage() and "rescoring" in r.getMessage() for r in caplog.records)
    assert cached.is_file()
    pd.testing.assert_frame_equal(items.item_frame(run), truth)  # the rewritten cache is whole


@pytest.mark.parametrize("damage", ["not_a_mapping", "entry_without_path"])
def test_damaged_point_hash_cache_is_composed_again(tmp_path, monkeypatch, damage: str) -> None:
    import pandas as pd

    from allmem.paths import cache_dir
    from allmem.report.paper import summarise
    from allmem.report.targets import sweep_points
    from tests.report_fixture import write_run

    monkeypatch.setenv("ALLMEM_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "runs"
    write_run(root, ["+experiment=table1", "dataset=locomo", "method=bm25"], lambda i: i < 2)
    sweep_points.cache_clear()  # each report is a new process: nothing held in memory between them
    summarise(["table1"], root, tmp_path / "first")
    path = cache_dir() / "report" / "point_hashes.json"
    data = json.loads(path.read_text())
    if damage == "not_a_mapping":  # was: AttributeError: 'list' object has no attribute 'get'
        path.write_text(json.dumps(list(data.values())))
    else:  # was: KeyError: 'path'
        path.write_text(
            json.dumps({k: {kk: vv for kk, vv in e.items() if kk != "path"} for k, e in data.items()})
        )
    sweep_points.cache_clear()
    summarise(["table1"], root, tmp_path / "second")
    first, second = (pd.read_csv(tmp_path / d / "tables" / "table1.csv") for d in ("first", "second"))
    pd.testing.assert_frame_equal(first, second)
    assert json.loads(path.read_text()) == data  # rebuilt as it was
