"""The paper targets: which experiment files each table or figure needs, and which of their points have a run.
Read only: the one registry of the launcher (``allmem paper run``, ``allmem/experiments.py``) and the summariser
(``allmem report TARGET``); a point's run is found by config hash, whatever its folder is called (docs/DESIGN.md)."""

from __future__ import annotations

import configparser
import copy
import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from allmem import cache_store, files
from allmem.defaults import PRIMARY
from allmem.paths import cache_dir, config_dir, resolve_data_path, user_config_dirs
from allmem.report.runs import Run, by_hash, find_runs
from allmem.run import identity

CONFIGS = config_dir()  # the checkout's configs/, or the copy an install ships
log = logging.getLogger("allmem.report")
LOCOMO = "locomo"
LME = "longmemeval_s"
LME_SKIPPED = (
    "LongMemEval-s: skipped (no LME=path/to/longmemeval_s_cleaned.json given; the file is not on this machine, "
    "`allmem download longmemeval_s` fetches it where the Hugging Face hub is reachable)"
)


# All-Mem (no consolidation) with Stage 1 scored by BM25 or BM25 + dense: single-point experiments whose rows
# Table 1 shows beside the methods of configs/experiment/table1.yaml.
STAGE1_VARIANTS = ("stage1_bm25", "stage1_hybrid")
# All-Mem with and without consolidation (the same points as in table1, so the same runs): the executed edits
# Table 8 audits and Fig. 7 draws, and the rankings before consolidation.
AUDIT = "atc_audit"


# The experiment that compares methods (Table 1, and Tables 2-3 from its runs): every method config in the folders
# of ALLMEM_CONFIG_PATH joins its method list, in the launcher, the summarise step and `allmem paper list`
# (docs/LIBRARY.md, "Your own system in every target").
COMPARED = "table1"
# Experiments that sweep the compared methods too: their files name no method list, the compared experiment's
# (with the user's methods) is used, so the list has one home.
SAME_METHODS = ("equal_context",)


def _compares(experiment: str) -> bool:
    return experiment == COMPARED or experiment in SAME_METHODS


# MemGPT's context-window sweep (issue 22, item 5): LongMemEval-length haystacks, where a window of 32k or more
# still evicts (a LoCoMo conversation, 11-21k tokens, hardly ever is).
MEMGPT_WINDOW = "memgpt_window"


def user_methods() -> tuple[str, ...]:
    """The method configs (``method/<name>.yaml``) of ``ALLMEM_CONFIG_PATH``'s folders, by name; a name that is
    also a repository method is refused (Hydra would quietly take the repository's)."""
    names: dict[str, Path] = {}
    for folder in user_config_dirs():
        for path in sorted((folder / "method").glob("*.yaml")):
            if (CONFIGS / "method" / path.name).exists():
                raise SystemExit(f"{path}: a repository method has this name too; rename your config")
            names.setdefault(path.stem, path)
    return tuple(names)


def _user_digest() -> str:
    """What the user's config folders hold (names and bytes): part of the point-hash cache key."""
    h = hashlib.sha256()
    for folder in user_config_dirs():
        for path in sorted(folder.rglob("*.yaml")):
            h.update(f"{path.relative_to(folder)}\0".encode() + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def launch_overrides(experiment: str) -> list[str]:
    """Overrides the launcher adds to an experiment's multirun: the compared methods with the user's (the
    command line's ``method=`` replaces the experiment file's sweep list)."""
    extra = user_methods() if _compares(experiment) else ()
    if not extra and experiment not in SAME_METHODS:
        return []
    listed = list(dict.fromkeys(p[0].split("=", 1)[1] for p in sweep_points(experiment)))
    return [f"method={','.join(listed)}"]


REGISTRY = Path(__file__).with_name("targets.ini")  # the one registration of every paper target


@dataclass(frozen=True)
class Target:
    name: str
    experiments: tuple[str, ...]
    title: str
    help: str = ""  # `make help`'s line
    runs: str = ""  # docs/REPRODUCE.md's table: the runs (experiment files), and what the target writes
    writes: str = ""
    groups: tuple[str, ...] = ()


def _read_registry(
    path: Path = REGISTRY,
) -> tuple[dict[str, Target], dict[str, tuple[str, ...]], dict[str, str]]:
    """``allmem/report/targets.ini``: the targets in order, the aliases (name -> its target) and the groups
    (name -> help), the groups' members in registry order."""
    ini = configparser.ConfigParser(interpolation=None, default_section="\0")
    ini.read_string(path.read_text(encoding="utf-8"), source=str(path))
    targets: dict[str, Target] = {}
    aliases: dict[str, tuple[str, ...]] = {}
    groups: dict[str, str] = {}
    for name in ini.sections():
        sec = ini[name]
        kind = sec.get("kind", "target")
        if kind == "alias":
            aliases[name] = (sec["of"],)
        elif kind == "group":
            groups[name] = sec.get("help", "")
        elif kind == "target":
            targets[name] = Target(
                name, tuple(sec["experiments"].split()), sec["title"], sec.get("help", ""), sec.get("runs", ""),
                sec.get("writes", ""), tuple(sec.get("in", "").split()),
            )  # fmt: skip
        else:
            raise ValueError(f"{path}: [{name}]: unknown kind {kind!r} (target, alias or group)")
    return targets, aliases, groups


TARGETS, ALIASES, _GROUP_HELP = _read_registry()
GROUPS: dict[str, tuple[str, ...]] = {
    g: tuple(t for t in TARGETS if g in TARGETS[t].groups) for g in _GROUP_HELP
}
DOCS = "docs/REPRODUCE.md"  # its table of the targets, between these two lines, is written from the registry
DOCS_BEGIN = "<!-- paper targets: written from allmem/report/targets.ini by `python -m allmem.report.targets --docs` -->"
DOCS_END = "<!-- end of paper targets -->"


def docs_table() -> str:
    """docs/REPRODUCE.md's table of the targets: one row per target (its aliases beside it), then the groups."""
    lines = ["| target | runs (experiment files) | writes |", "|---|---|---|"]
    for t in TARGETS.values():
        also = [a for a, of in ALIASES.items() if of == (t.name,)]
        name = f"`{t.name}`" + "".join(f" (`{a}`)" for a in also)
        lines.append(f"| {name} | {t.runs} | {t.writes} |")
    groups = ", ".join(f"`{g}`" for g in GROUPS)
    lines.append(f"| {groups} | the union (the groups: `allmem/report/targets.ini`) | all of the above, and "
                 "`per_question.parquet` |")  # fmt: skip
    return "\n".join(lines)


def docs_with_table(text: str) -> str:
    """``text`` (docs/REPRODUCE.md) with the block between ``DOCS_BEGIN`` and ``DOCS_END`` written anew."""
    head, rest = text.split(DOCS_BEGIN + "\n", 1)
    _, tail = rest.split(DOCS_END, 1)
    return f"{head}{DOCS_BEGIN}\n{docs_table()}\n{DOCS_END}{tail}"


# Experiments run in this order: table1 first, so the sweeps find its ingested banks; cheap ones before fig3. An
# experiment not named here (a new target's) runs after these, in name order.
ORDER = ("table1", AUDIT, *STAGE1_VARIANTS, "ablations", "ablations_hybrid", "fig4_theta", "fig4_dsigma", "fig3",
         "fig3_anchors", "fig5", "retention", "equal_context", MEMGPT_WINDOW)  # fmt: skip


def expand(names: Sequence[str]) -> list[str]:
    """Target names with groups and aliases expanded, in registry order, without repeats."""
    out: list[str] = []
    for name in names:
        parts = GROUPS.get(name) or ALIASES.get(name) or (name,)
        for part in parts:
            if part not in TARGETS:
                known = ", ".join([*TARGETS, *ALIASES, *GROUPS])
                raise SystemExit(f"unknown target {part!r}; known: {known}")
            if part not in out:
                out.append(part)
    return [t for t in TARGETS if t in out]


def experiments_of(targets: Sequence[str]) -> list[str]:
    wanted = {e for t in expand(targets) for e in TARGETS[t].experiments}
    return [e for e in ORDER if e in wanted] + sorted(wanted - set(ORDER))


# Experiments that also run on a dataset of their own, the synthetic drift corpus, where every edit's truth is known
# and supersessions are planted: the ATC audit (Table 8's ground truth, Fig. 7's fallback) and the retention view
# (each question asks a speaker's latest state, after the session that states it and at the stream's end).
ALSO_ON: dict[str, tuple[str, ...]] = {AUDIT: ("synthetic_drift",), "retention": ("synthetic_drift",)}
# Experiments that run only on the data their experiment file names (dataset and path), under this label: the
# MemGPT window sweep on the generated LongMemEval-s-shaped file that `make memgpt_window` writes first.
ONLY_ON: dict[str, str] = {MEMGPT_WINDOW: "lme_synth"}


def dataset_overrides(lme: str | None, experiment: str | None = None) -> dict[str, list[str]]:
    """The datasets a target's experiment runs on: LoCoMo always, LongMemEval-s when its file is given, and the
    experiment's own (``ALSO_ON``); only the experiment file's own data for those in ``ONLY_ON``."""
    if experiment in ONLY_ON:
        return {ONLY_ON[experiment]: []}
    out = {LOCOMO: [f"dataset={LOCOMO}"]}
    if lme:
        out[LME] = [f"dataset={LME}", f"dataset.path={Path(lme).expanduser().resolve()}"]
    for ds in ALSO_ON.get(experiment or "", ()):
        out[ds] = [f"dataset={ds}"]
    return out


def _compose(overrides: Sequence[str], hydra_config: bool = False) -> DictConfig:
    """The composed config of ``overrides`` (a copy, the caller's to change). Composed once per process and
    config fingerprint (``_fingerprint``: the config files, the user's folders, the cache folder they
    interpolate): Hydra takes a fifth of a second per compose, and the targets of one report share points."""
    return copy.deepcopy(_compose_once(tuple(overrides), hydra_config, _fingerprint()))


@lru_cache(maxsize=512)
def _compose_once(overrides: tuple[str, ...], hydra_config: bool, fingerprint: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(config_name=PRIMARY, overrides=list(overrides), return_hydra_config=hydra_config)


def sweep_points(experiment: str, use_cache: bool = True) -> tuple[tuple[str, ...], ...]:
    """The override list of every point of an experiment's ``hydra.sweeper.params`` (Hydra's own expansion),
    with the user's methods in the compared experiment's list (``user_methods``)."""
    return _sweep_points(experiment, use_cache, user_methods() if _compares(experiment) else ())


@lru_cache(maxsize=64)
def _sweep_points(experiment: str, use_cache: bool, mine: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    cache = _HashCache() if use_cache else None
    params = _params(experiment, cache)
    if experiment in SAME_METHODS:  # the compared methods, then this experiment's own sweep
        params = {"method": _params(COMPARED, cache)["method"], **params}
    if mine:  # the user's methods join the compared ones
        params = {**params, "method": ",".join([str(params["method"]), *mine])}
    if not params:
        return ((),)
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    batches = BasicSweeper.split_arguments(parsed, None)
    return tuple(tuple(point) for batch in batches for point in batch)


def _params(experiment: str, cache: _HashCache | None) -> dict[str, Any]:
    """An experiment file's ``hydra.sweeper.params`` (key -> the value text), cached by the configs' fingerprint."""
    path = CONFIGS / "experiment" / f"{experiment}.yaml"
    if not path.exists():
        raise SystemExit(f"{path}: no such experiment file")
    key = f"sweep:{_fingerprint()}:{experiment}"
    params = cache.data.get(key) if cache is not None else None
    if params is None:
        cfg = _compose([f"+experiment={experiment}"], hydra_config=True)
        node = cfg.hydra.sweeper.params
        params = {} if node is None else OmegaConf.to_container(node, resolve=False)  # none: a single point
        if cache is not None:
            cache.data[key], cache.dirty = params, True
            cache.save()
    assert isinstance(params, dict)
    return params


sweep_points.cache_clear = _sweep_points.cache_clear  # type: ignore[attr-defined]  # as when it was cached


@dataclass(frozen=True)
class Point:
    """One configuration of an experiment on one dataset, and its complete run if there is one."""

    experiment: str
    dataset: str
    overrides: tuple[str, ...]
    config_hash: str
    run: Run | None

    @property
    def label(self) -> str:
        return " ".join(self.overrides) or "(defaults)"


def _fingerprint() -> str:
    """What a composed config's hash depends on besides the overrides: every config file (the user's folders'
    too), the identity rules (``allmem/run/identity.py``, ``allmem/files.py``) and the cache folder the
    configs interpolate."""
    return _fingerprint_of(os.environ.get("ALLMEM_CACHE", ""), _user_digest())


@lru_cache(maxsize=4)
def _fingerprint_of(cache: str, user: str) -> str:
    return cache_store.code_key(
        ("configs", "allmem/run/identity.py", "allmem/files.py"), cache, user, length=16
    )


@lru_cache(maxsize=16)
def _digest(dataset: str, path: str | None, stamp: tuple[int, int]) -> str:
    cfg = OmegaConf.create({"dataset": {"name": dataset, "path": path}})
    return identity.data_digest(cfg)


def _data_digest(dataset: str, path: str | None) -> str:
    """The runner's data digest, computed once per file version (size and modification time)."""
    st = resolve_data_path(dataset, path).stat()
    return _digest(dataset, path, (st.st_size, st.st_mtime_ns))


def _entry_ok(key: str, entry: object) -> bool:
    """An entry ``sweep_points`` writes (``sweep:...``: an experiment's sweeper params, key -> scalar) or one
    ``_HashCache.config_hash`` writes: dataset name, path or None, and digest -> hash strings."""
    if key.startswith("sweep:"):
        return isinstance(entry, dict) and all(
            isinstance(k, str) and isinstance(v, str | int | float | bool) for k, v in entry.items()
        )
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("dataset"), str)
        and "path" in entry
        and (entry["path"] is None or isinstance(entry["path"], str))
        and isinstance(entry.get("hashes"), dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in entry["hashes"].items())
    )


class _HashCache:
    """Config hashes of composed points, on disk: composing one point takes Hydra most of a second, and a
    re-summarise of every paper target composes about fifty. Keyed by the overrides, the fingerprint of the
    configs and identity rules, and the data digest; a miss composes."""

    def __init__(self) -> None:
        self.path = cache_dir() / "report" / "point_hashes.json"
        self.data: dict[str, dict] = self._read()
        self.dirty = False

    def _read(self, quiet: bool = False) -> dict[str, dict]:
        """The file's well-formed entries; a torn, garbled or malformed file (or entry) is left out with a warning
        and rebuilt by composing, never trusted."""
        if not self.path.exists():
            return {}
        data = files.read_json(self.path, None)  # None: torn or not JSON
        good = {k: e for k, e in data.items() if _entry_ok(k, e)} if isinstance(data, dict) else {}
        if not quiet and (not isinstance(data, dict) or len(good) != len(data)):
            log.warning("%s: unreadable or malformed entries left out; composing them again", self.path)
        return good

    def config_hash(self, overrides: Sequence[str]) -> str:
        key = hashlib.sha256(json.dumps([_fingerprint(), list(overrides)]).encode()).hexdigest()[:24]
        entry = self.data.get(key)
        if entry is not None:
            try:
                digest = _data_digest(entry["dataset"], entry["path"])
            except (OSError, ValueError):  # a stale or tampered entry (data moved, unknown dataset): compose
                digest = ""
            if digest in entry["hashes"]:
                return entry["hashes"][digest]
        cfg = _compose(overrides)
        name, path = str(cfg.dataset.name), cfg.dataset.get("path")
        path = None if path is None else str(path)
        digest = _data_digest(name, path)
        h = identity.config_hash(cfg, digest)
        self.data[key], self.dirty = {"dataset": name, "path": path, "hashes": {digest: h}}, True
        return h

    def save(self) -> None:
        """Write this cache's entries over what the file holds now (another instance, such as the one
        ``sweep_points`` keeps, or another process may have saved entries since this one was read)."""
        if not self.dirty:
            return
        with cache_store.locked(self.path):  # two reports saving at once keep both sets of entries
            merged = self._read(quiet=True)  # warned when read at the start
            merged.update(self.data)
            files.write_atomic(self.path, json.dumps(merged))


def points(
    experiment: str,
    dataset: str,
    ds_overrides: Sequence[str],
    extra: Sequence[str],
    runs: dict[str, Run],
    hashes: _HashCache,
) -> list[Point]:
    out = []
    for point in sweep_points(experiment):
        h = hashes.config_hash([f"+experiment={experiment}", *ds_overrides, *extra, *point])
        out.append(Point(experiment, dataset, tuple(point), h, runs.get(h)))
    return out


def collect(
    experiments: Sequence[str],
    root: Path,
    lme: str | None,
    extra: Sequence[str] = (),
    runs: dict[str, Run] | None = None,
) -> dict[str, dict[str, list[Point]]]:
    """``{experiment: {dataset: [Point]}}`` against the complete runs under ``root`` (or ``runs``, by hash)."""
    runs = by_hash(find_runs(root)) if runs is None else runs
    hashes = _HashCache()
    found = {
        exp: {ds: points(exp, ds, ov, extra, runs, hashes) for ds, ov in dataset_overrides(lme, exp).items()}
        for exp in experiments
    }
    hashes.save()
    return found


if __name__ == "__main__":  # python -m allmem.report.targets --docs: rewrite docs/REPRODUCE.md's table
    import sys

    if sys.argv[1:] != ["--docs"]:
        raise SystemExit("usage: python -m allmem.report.targets --docs  (run in the checkout)")
    doc = Path(DOCS)
    doc.write_text(docs_with_table(doc.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"[allmem] {doc}: the table of paper targets written from {REGISTRY.name}")
