"""Shards of one run on many machines (``run.shard=i/n``) and sealing them into one run directory
(``allmem merge RUN_DIR``).

Shard ``i`` of ``n`` answers the dialogues at positions ``i-1, i-1+n, i-1+2n, ...`` of the dataset (position
modulo ``n`` equals ``i-1``): deterministic, and balanced when dialogue sizes are. It runs exactly as a run does
(attempts, resume, lock, ``run.workers``) but in its own folder, ``<run_dir>/shards/<i>-of-<n>/``, under that
folder's lock, so shards on different nodes never wait for each other; only the run directory must be on a
shared file system. A shard that ends complete writes ``shard.json`` (its dialogues by position, the run's label,
hash, backend and input counts) and ``DONE``, then takes the run directory's lock (waiting for it) and seals the
run if every shard is done: whichever finishes last seals. ``allmem merge RUN_DIR`` seals by hand.

Sealing checks every dialogue is in exactly one shard, writes the run files with each dialogue's lines in the
dataset's order, the manifest with every shard's attempts (each naming its shard), scores the predictions and
writes ``metrics.json`` and ``DONE`` (``pipeline.seal``); the run directory then equals the one a single process
makes (``allmem.run.compare.same_result``) and the shard folders are removed. A failed shard leaves the run
unsealed; running that shard again completes it and seals.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

from allmem import files
from allmem.errors import ConfigError
from allmem.run import attempts

Shard = tuple[int, int]  # (i, n), 1 <= i <= n
_NAME = re.compile(r"(\d+)-of-(\d+)")
_COMBINED = (files.PREDICTIONS, files.SYSTEM_STATS, files.CALLS, files.EVENTS, files.CONTEXTS)
T = TypeVar("T")


def parse(value: Any) -> Shard | None:
    """``run.shard``: null, or ``"i/n"`` with 1 <= i <= n."""
    if value is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(value))
    if m is None or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise ConfigError(f"run.shard: must be i/n with 1 <= i <= n (e.g. run.shard=2/8), got {value!r}")
    return int(m.group(1)), int(m.group(2))


def folder(run_dir: Path, shard: Shard) -> Path:
    return run_dir / files.SHARDS / f"{shard[0]}-of-{shard[1]}"


def positions(count: int, shard: Shard) -> range:
    """The dataset positions shard ``i/n`` answers: those whose remainder modulo n is i-1."""
    return range(shard[0] - 1, count, shard[1])


def select(dialogues: Sequence[T], shard: Shard) -> Sequence[T]:
    """The shard's dialogues: a slice (for LongMemEval a view of byte spans, never the decoded file)."""
    return dialogues[shard[0] - 1 :: shard[1]]  # type: ignore[return-value]


def unsharded(cfg: DictConfig) -> DictConfig:
    """The config the run directory records: the same for every shard (``run.shard`` is placement)."""
    if cfg.run.get("shard") is None:
        return cfg
    return OmegaConf.merge(cfg, {"run": {"shard": None}})  # type: ignore[return-value]


def _shard_folders(run_dir: Path) -> dict[Shard, Path]:
    root = run_dir / files.SHARDS
    found: dict[Shard, Path] = {}
    for path in sorted(root.iterdir()) if root.is_dir() else ():
        m = _NAME.fullmatch(path.name)
        if m and path.is_dir():
            found[(int(m.group(1)), int(m.group(2)))] = path
    return found


def check_layout(run_dir: Path, shard: Shard) -> None:
    """Refuse a shard count other than the one the run's shards already use (their dialogues would overlap)."""
    other = sorted({n for _, n in _shard_folders(run_dir)} - {shard[1]})
    if other:
        raise ConfigError(
            f"{run_dir}: holds shards of n={other[0]} ({files.SHARDS}/1-of-{other[0]}, ...), not {shard[1]}: run "
            f"each shard with run.shard=i/{other[0]}, or delete {run_dir / files.SHARDS} to start the shards over"
        )


def finish(out_dir: Path, shard: Shard, dialogues: Sequence[Any], info: dict[str, Any]) -> None:
    """Mark a complete shard: ``shard.json`` (its dialogues by dataset position, what sealing needs), then
    ``DONE``."""
    mine = [[pos, dialogues[pos].id] for pos in positions(len(dialogues), shard)]
    record = {"shard": list(shard), "n_dialogues": len(dialogues), "dialogues": mine} | info
    files.write_json(out_dir / files.SHARD_INFO, record)
    files.write_atomic(out_dir / files.DONE, "complete\n")


def seal_if_complete(run_dir: Path, protocol: Any = None) -> bool:
    """Seal the run if every shard is done (under the run directory's lock, waiting for it); True when the run
    is sealed (now or before)."""
    with attempts.RunLock(run_dir, wait=True):
        if files.is_complete(run_dir):
            return True
        found = _shard_folders(run_dir)
        n = next(iter(found))[1] if found else 0
        if not n or any(not (folder(run_dir, (i, n)) / files.DONE).exists() for i in range(1, n + 1)):
            return False
        _seal(run_dir, protocol)
        return True


def _read_info(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / files.SHARD_INFO).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path / files.SHARD_INFO}: unreadable ({exc}); run that shard again") from None
    if not isinstance(data, dict) or not isinstance(data.get("dialogues"), list):
        raise ConfigError(f"{path / files.SHARD_INFO}: not a shard record; run that shard again")
    return data


def _seal(run_dir: Path, protocol: Any = None) -> None:
    """Check the shards cover every dialogue exactly once, combine them, score and seal (see the module doc)."""
    from allmem.run.pipeline import seal

    found = _shard_folders(run_dir)
    if not found:
        raise ConfigError(f"{run_dir}: no shards to merge (no {files.SHARDS}/<i>-of-<n>/ folder)")
    counts = sorted({n for _, n in found})
    if len(counts) > 1:
        raise ConfigError(f"{run_dir}: holds shards of different counts (n = {', '.join(map(str, counts))})")
    n = counts[0]
    for i in range(1, n + 1):
        if not (folder(run_dir, (i, n)) / files.DONE).exists():
            raise ConfigError(
                f"{run_dir}: shard {i}/{n} is not finished (no {files.SHARDS}/{i}-of-{n}/{files.DONE}): run it "
                f"(again) with run.shard={i}/{n}"
            )
    infos = {i: _read_info(folder(run_dir, (i, n))) for i in range(1, n + 1)}
    first = infos[1]
    for i, info in infos.items():
        if info.get("config_hash") != first.get("config_hash") or info.get("n_dialogues") != first.get(
            "n_dialogues"
        ):
            raise ConfigError(f"{run_dir}: shard {i}/{n} ran another config or data than shard 1/{n}")
    owner: dict[int, int] = {}
    ids: dict[int, str] = {}
    for i, info in infos.items():
        for pos, did in info["dialogues"]:
            if pos in owner:
                raise ConfigError(
                    f"{run_dir}: dialogue {did} (position {pos}) is in shard {owner[pos]}/{n} and shard {i}/{n}"
                )
            owner[pos], ids[pos] = i, str(did)
    total = int(first["n_dialogues"])
    missing = [pos for pos in range(total) if pos not in owner]
    if missing or len(owner) != total:
        raise ConfigError(
            f"{run_dir}: {len(missing)} of {total} dialogues are in no shard (first: position {missing[0]})"
            if missing
            else f"{run_dir}: the shards name positions outside the dataset's {total} dialogues"
        )
    _combine(run_dir, n, infos, [(ids[pos], owner[pos]) for pos in range(total)])
    _combine_manifest(run_dir, n)
    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    if protocol is None:
        from allmem.metrics import protocol_for

        protocol = protocol_for(run_dir, None, None, None)
    info = {k: first[k] for k in ("label", "config_hash", "backend", "inputs")}
    info["attempts"] = max(len(attempts.attempts(folder(run_dir, (i, n)))) for i in infos)
    info["wall_s_last_session"] = max(float(x.get("wall_s_last_session") or 0) for x in infos.values())
    seal(run_dir, records, protocol, info)
    shutil.rmtree(run_dir / files.SHARDS, ignore_errors=True)


def _dialogue_of(name: str, row: dict[str, Any]) -> str | None:
    value = row.get("dialogue") if name == files.EVENTS else row.get("dialogue_id")
    return None if value is None else str(value)


def _combine(run_dir: Path, n: int, infos: dict[int, dict[str, Any]], order: list[tuple[str, int]]) -> None:
    """Each run file: every dialogue's lines in the dataset's order, taken from the shard that owns it (lines
    naming no dialogue first). A line of a dialogue its shard does not own is refused, a question answered in
    two shards too."""
    owned = {i: {str(d) for _, d in info["dialogues"]} for i, info in infos.items()}
    seen: dict[str, int] = {}
    for name in _COMBINED:
        paths = {i: folder(run_dir, (i, n)) / name for i in infos}
        if not any(p.exists() for p in paths.values()):
            continue
        loose: list[str] = []
        by_dialogue: dict[tuple[int, str], list[str]] = {}
        for i, path in paths.items():
            for lineno, row in files.iter_jsonl(path) if path.exists() else ():
                did = _dialogue_of(name, row)
                if did is not None and did not in owned[i]:
                    raise ConfigError(f"{path}:{lineno}: dialogue {did} does not belong to shard {i}/{n}")
                if name == files.PREDICTIONS:
                    qid = str(row.get("question_id"))
                    if qid in seen and seen[qid] != i:
                        raise ConfigError(
                            f"{path}:{lineno}: question {qid} is also answered in shard {seen[qid]}/{n}"
                        )
                    seen[qid] = i
                line = files.dump_line(row)
                (loose if did is None else by_dialogue.setdefault((i, did), [])).append(line)
        lines = loose + [line for did, i in order for line in by_dialogue.get((i, did), ())]
        files.write_atomic(run_dir / name, files.encode_lines(name, lines))


def _combine_manifest(run_dir: Path, n: int) -> None:
    """The run's manifest: the provenance of the shard attempt that ended last at the top level, and every
    shard's attempts (each with its ``shard``), renumbered in the order they started."""
    entries: list[dict[str, Any]] = []
    for i in range(1, n + 1):
        for entry in attempts.attempts(folder(run_dir, (i, n))):
            entries.append(entry | {"shard": f"{i}/{n}", "shard_attempt": entry.get("attempt")})
    entries.sort(key=lambda e: (str(e.get("started_at") or ""), e["shard"]))
    latest = max(entries, key=lambda e: str(e.get("ended_at") or ""))
    top = {k: v for k, v in latest.items() if k in _PROVENANCE}
    files.write_json(run_dir / files.MANIFEST, top | {"attempts": entries})


# The top-level keys of a manifest (allmem.run.attempts.provenance).
_PROVENANCE = (
    "git",
    "data",
    "packages",
    "code",
    "records",
    "python",
    "platform",
    "backend",
    "argv",
    "written_at",
)


def main(argv: Sequence[str] | None = None) -> int:
    """``allmem merge RUN_DIR``: seal a sharded run whose shards are all done; one-line errors, exit 1."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="allmem merge",
        description="Seal a run made in shards (run.shard=i/n): check every dialogue is in exactly one finished "
        "shard, combine the shards into the run directory in the dataset's order, score it and write DONE.",
    )
    parser.add_argument("run_dir", type=Path)
    args = parser.parse_args(argv)
    run_dir: Path = args.run_dir
    if not run_dir.is_dir():
        print(f"allmem merge: error: {run_dir}: not a folder", file=sys.stderr)
        return 1
    from allmem.errors import expected_errors, one_line

    try:
        with attempts.RunLock(run_dir):
            if files.is_complete(run_dir):
                print(f"[allmem] already sealed: {run_dir}")
                return 0
            _seal(run_dir)
    except Exception as exc:
        if not isinstance(exc, expected_errors()):
            raise
        print(f"allmem merge: error: {one_line(exc)}", file=sys.stderr)
        return 1
    print(f"[allmem] done: {run_dir}")
    return 0
