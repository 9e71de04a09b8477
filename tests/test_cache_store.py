"""The one cache helper (``allmem.cache_store``): the code-key rule, damaged entries set aside, the lock."""

from __future__ import annotations

import fcntl
import json
import logging
from pathlib import Path

import pytest

from allmem import cache_store, files, fingerprint


def test_code_key_changes_with_the_sources_it_names_and_only_those(tmp_path, monkeypatch) -> None:
    (tmp_path / "scorer").mkdir()
    (tmp_path / "scorer" / "f1.py").write_text("K = 1\n")
    (tmp_path / "other.py").write_text("X = 1\n")
    monkeypatch.setattr(fingerprint, "REPO", tmp_path)

    def key() -> str:
        fingerprint.source_fingerprint.cache_clear()
        return cache_store.code_key(("scorer",), "locomo", [1, 5])

    before = key()
    (tmp_path / "other.py").write_text("X = 2\n")  # outside the named sources: still a hit
    assert key() == before
    (tmp_path / "scorer" / "f1.py").write_text("K = 2\n")  # the scorer changed: a miss
    assert key() != before
    assert cache_store.code_key(("scorer",), "locomo", [1, 10]) != key()
    fingerprint.source_fingerprint.cache_clear()


@pytest.mark.parametrize("damage", ["garbage", "folder"])
def test_a_damaged_entry_is_set_aside_with_one_warning(tmp_path, caplog, damage: str) -> None:
    entry = tmp_path / "k.json"
    if damage == "garbage":
        entry.write_text("{not json")
    else:
        entry.mkdir()
    with caplog.at_level(logging.WARNING):
        got = cache_store.read(
            entry, lambda p: json.loads(p.read_text()), cache="test cache", then="recomputing"
        )
    assert got is None and not entry.exists()
    (aside,) = tmp_path.glob("k.json.corrupt-*")
    assert aside.is_dir() == (damage == "folder")
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f"test cache {entry}: ") and "recomputing" in warning
    files.write_via(entry, lambda p: p.write_text('{"a": 1}'))
    assert cache_store.read(entry, lambda p: json.loads(p.read_text()), cache="c", then="t") == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["k.json", aside.name])  # no temporary left


def test_a_folder_entry_replaces_the_old_one_whole(tmp_path: Path) -> None:
    final = tmp_path / "key" / "conv-1"
    cache_store.write_folder(final, lambda d: (d / "a").write_text("old"))
    cache_store.write_folder(final, lambda d: (d / "b").write_text("new"))
    assert [p.name for p in final.iterdir()] == ["b"] and [p.name for p in final.parent.iterdir()] == [
        "conv-1"
    ]


def test_locked_excludes_a_second_holder(tmp_path: Path) -> None:
    path = tmp_path / "shared.json"
    with cache_store.locked(path), open(tmp_path / "shared.json.lock", "a") as other:
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(tmp_path / "shared.json.lock", "a") as other:  # released on exit
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
