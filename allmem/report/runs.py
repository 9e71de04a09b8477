"""Reading run directories: the one module of the report that knows their file names and fields (docs/DESIGN.md,
"Run directory"). A run counts only when complete (``DONE`` exists); when the run-directory contract changes,
this is the file to adapt."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from allmem import files
from allmem.errors import ConfigError
from allmem.metrics.protocols import Protocol, as_protocol
from allmem.run import identity
from allmem.types import record_key


@dataclass(frozen=True, eq=False)
class Run:
    """One complete run directory, read lazily."""

    path: Path
    cfg: DictConfig = field(repr=False)
    metrics: dict[str, Any] = field(repr=False)
    judge: str | None = (
        None  # a judge folder under <run>/judges/ (``allmem judge``) whose verdicts tables use
    )

    @property
    def method(self) -> str:
        return str(self.cfg.method.name)

    @property
    def judge_model(self) -> str | None:
        """The model that judged this run's answers (``llm.judge.model``, else ``llm.model``), None offline."""
        llm = self.cfg.get("llm") or {}
        if str(llm.get("backend", "offline")) == "offline" or self.metrics.get("backend", {}).get("offline"):
            return None
        return str((llm.get("judge") or {}).get("model") or llm.get("model") or "") or None

    @property
    def dataset(self) -> str:
        return str(self.cfg.dataset.name)

    @property
    def label(self) -> str:
        """How the runner names the run (``metrics.json`` ``run.label``: method and overrides), else the method."""
        return str((self.metrics.get("run") or {}).get("label") or self.method)

    @cached_property
    def protocol(self) -> Protocol:
        """The run's scoring protocol, built by name from its own config (its ks and table k), never by the
        stored ``_target_`` (a run folder is data)."""
        try:
            return as_protocol(self.cfg.protocol)
        except (ValueError, TypeError, KeyError) as exc:
            raise ConfigError(f"{self.path / files.CONFIG}: protocol: {exc}") from None

    @property
    def backend(self) -> dict[str, Any]:
        return dict(self.metrics.get("backend") or self.manifest.get("backend") or {})

    @property
    def offline(self) -> bool:
        return bool(self.backend.get("offline", False))

    @cached_property
    def config_hash(self) -> str:
        """The run's identity as the runner recorded it (config and data)."""
        return str(identity.recorded_hash(self.path))

    def value(self, key: str, default: Any = None) -> Any:
        """A config value by dotted key (``method.retrieval.K``), or ``default`` when absent."""
        found = OmegaConf.select(self.cfg, key, default=default)
        return files.plain(found) if isinstance(found, DictConfig) else found

    @cached_property
    def manifest(self) -> dict[str, Any]:
        return files.read_json(self.path / files.MANIFEST) if (self.path / files.MANIFEST).exists() else {}

    @property
    def code(self) -> str | None:
        """The source fingerprint every attempt of the run was made with (``identity.made_by``)."""
        return identity.made_by(self.manifest)

    @property
    def git_sha(self) -> str | None:
        return (self.manifest.get("git") or {}).get("sha")

    @property
    def git_dirty(self) -> bool:
        return bool((self.manifest.get("git") or {}).get("dirty"))

    @property
    def written_at(self) -> str | None:
        return self.manifest.get("written_at")

    # A complete run never changes, so each file is read once per Run object.
    @cached_property
    def _records(self) -> list[dict[str, Any]]:
        return files.read_jsonl(self.path / files.PREDICTIONS)

    @cached_property
    def _stats(self) -> dict[str, dict[str, Any]]:
        return {r["dialogue_id"]: r for r in files.read_jsonl(self.path / files.SYSTEM_STATS)}

    @cached_property
    def _events(self) -> list[dict[str, Any]]:
        return files.read_jsonl(self.path / files.EVENTS)

    def records(self) -> list[dict[str, Any]]:
        return self._records

    @cached_property
    def asks(self) -> tuple[str, ...]:
        """The ask points the run's records hold (``end``, ``after_evidence``; a record without one: end)."""
        return tuple(sorted({record_key(r)[2] for r in self._records}))

    def end_records(self) -> list[dict[str, Any]]:
        """One record per question, the paper's protocol: with two ask points (``protocol.ask=both``) the records
        asked at the stream's end, else every record (``allmem.report.items.at_end`` for score frames)."""
        if len(self.asks) > 1 and "end" in self.asks:
            return [r for r in self._records if record_key(r)[2] == "end"]
        return self._records

    def stats(self) -> dict[str, dict[str, Any]]:
        """``system_stats.jsonl`` by dialogue; the last line wins (a resumed dialogue was ingested again)."""
        return self._stats

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """``atc_events.jsonl`` lines (all, or one ``kind``: diagnose, target, run, probe); [] without ATC."""
        return [r for r in self._events if kind is None or r.get("kind") == kind]

    def calls(self) -> list[dict[str, Any]]:
        return files.read_jsonl(self.path / files.CALLS)

    @property
    def reused_bank(self) -> bool:
        """Whether this run loaded banks ingested by an earlier run (its write timings are that run's)."""
        return any((s.get("bank_cache") or {}).get("hit") for s in self.stats().values())

    @property
    def consolidates(self) -> bool:
        return any("atc" in s for s in self.stats().values())


def with_judge(run: Run, key: str | None) -> Run:
    """``run`` with its 4o-J verdicts taken from ``<run>/judges/<key>/`` (``allmem judge``); refused in one line
    when that judge has not finished there. ``None``: the run's own verdicts."""
    if key is None:
        return replace(run, judge=None)
    folder = run.path / files.JUDGES / key
    if not files.is_complete(folder):
        raise ConfigError(f"{folder}: no finished judge {key!r} for this run (allmem judge {run.path} ...)")
    return replace(run, judge=key)


def judge_verdicts(run: Run) -> dict[tuple[str, str, str], str | None] | None:
    """(dialogue_id, question_id, ask point) → verdict of the judge ``run.judge`` picks; None for the run's own."""
    if run.judge is None:
        return None
    from allmem.run.rejudge import verdicts_of

    return {k: v.get("verdict") for k, v in verdicts_of(run.path / files.JUDGES / run.judge).items()}


def load_run(path: Path) -> Run:
    cfg = files.read_config(path)  # safe: no objects built, interpolations kept as text
    return Run(path=path, cfg=cfg, metrics=files.read_json(path / files.METRICS))


def find_runs(root: Path) -> list[Run]:
    """Every complete run directory under ``root`` (a run is complete only when DONE exists), sorted by path."""
    root = Path(root)
    if not root.exists():
        return []
    return [
        load_run(done.parent) for done in sorted(root.rglob(files.DONE)) if not _judge_folder(done.parent)
    ]


def _judge_folder(path: Path) -> bool:
    """A judge's folder inside a run (``<run>/judges/<key>/``, ``allmem judge``): it has a DONE but is no run."""
    return path.parent.name == files.JUDGES and (path.parent.parent / files.CONFIG).is_file()


def by_hash(runs: Iterable[Run]) -> dict[str, Run]:
    """Runs keyed by config hash; when two directories hold the same config, the newer one wins."""
    return {run.config_hash: run for run in sorted(runs, key=lambda r: (r.written_at or "", str(r.path)))}


def check_same_code(runs: Sequence[Run], code: str | None = None) -> None:
    """Refuse (``ConfigError``, one line) to build from runs made by different code: their fingerprints differ,
    one records none (counts as different), or, given ``code``, one differs from it. The rule is in
    docs/DESIGN.md."""
    codes = [r.code for r in runs]
    other = [r for r in runs if r.code is None or r.code != (code or codes[0])]
    if not other or (code is None and len(runs) < 2):
        return
    seen = sorted({c or "none" for c in codes})
    raise ConfigError(
        f"{len(other)} of {len(runs)} runs were made by other code than {'this code' if code else 'the rest'} "
        f"(source fingerprints {', '.join(seen[:4])}{', ...' if len(seen) > 4 else ''}; e.g. {other[0].path}): "
        "delete them and run them again with this code"
    )
