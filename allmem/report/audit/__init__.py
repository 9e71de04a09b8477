"""Table 8: how often accepted ATC edits are valid, and how often harmful, per operator (Split, Merge, Update).

An edit is an executed ``target`` line of ``atc_events.jsonl`` (records version 2: the line holds its units
before and after, ``allmem/memory/atc/events.py``). Edits are sampled per operator with a fixed seed
(``sample``) and labelled by one of three labelers behind one interface (``label(edits) -> [Label]``):

- ``GroundTruth``: the synthetic drift corpus (``benchmarks/synthetic_drift.py``), where every planted drift and
  look-alike is known: valid from ``edit_is_valid``, harmful from ``harm_of`` (the corpus's fact keys);
- the human sheet (``allmem/report/audit/sheet.py``): an export to fill in, and its import;
- the LLM judge (``allmem/report/audit/judge.py``): a versioned template per operator.

The paper's definitions: Split is valid when it separates genuinely conflated evidence, Merge when its units are
factually redundant, Update when it archives a genuinely superseded state and keeps the current one; an edit is
harmful when it is likely to degrade future retrieval (over-splitting a coherent memory, merging units that share
entities but hold different facts, treating complementary details as supersession). Rates carry 95% Wilson
score intervals (``scipy.stats.binomtest``), which stay inside [0, 1] and are not degenerate at 0 or n.
"""

from __future__ import annotations

import logging
import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from allmem.paths import config_dir

log = logging.getLogger("allmem.report")
OPS = ("split", "merge", "update")
CONFIDENCE = 0.95
SETTINGS = "audit.yaml"  # configs/audit.yaml: the sampling
DRIFT_ID = re.compile(r"^syn-(\d+)-\d+$")  # benchmarks.synthetic_drift.make_corpus names dialogues so


@dataclass(frozen=True)
class AuditSettings:
    seed: int
    per_operator: int


def settings(path: Path | None = None) -> AuditSettings:
    """``configs/audit.yaml`` (every key required; an unknown one is an error naming the file)."""
    path = path or config_dir() / SETTINGS
    node = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    if not isinstance(node, dict) or sorted(node) != ["per_operator", "seed"]:
        raise ValueError(f"{path}: must hold exactly the keys seed and per_operator")
    return AuditSettings(int(node["seed"]), int(node["per_operator"]))


def drift_truth(run: Any) -> GroundTruth:
    """The ground-truth labeler of a run on the drift corpus: the sizes from the run's own data file."""
    from benchmarks.synthetic_drift import read_spec

    spec = read_spec(str(run.value("dataset.path")))
    if 0 in spec["seeds"]:
        raise ValueError(
            f"{run.value('dataset.path')}: seed 0 is the offline diagnoser's calibration seed; audit others"
        )
    return GroundTruth(spec["n_dialogues"], spec["n_sessions"])


# ------------------------------------------------------------------------------------------------ edits
@dataclass(frozen=True)
class Edit:
    """One executed edit: where it comes from (a run's label or ``drift seed N``) and its event line."""

    source: str
    event: Mapping[str, Any] = field(hash=False, compare=False)

    @property
    def op(self) -> str:
        return str(self.event["op"])

    @property
    def dialogue(self) -> str:
        return str(self.event.get("dialogue", ""))

    @property
    def key(self) -> tuple[str, str, int, str, tuple[str, ...]]:
        ev = self.event
        return (self.source, self.dialogue, int(ev.get("run", 0)), self.op, tuple(ev.get("ids", ())))

    @property
    def ident(self) -> str:
        """A stable id for the sheet: source, dialogue, consolidation run, operator and unit ids."""
        source, dlg, run, op, ids = self.key
        return f"{source}|{dlg}|{run}|{op}|{'+'.join(ids)}"


def executed(events: Iterable[Mapping[str, Any]], source: str) -> list[Edit]:
    """The executed edits of an events file; a line of records version 1 (no ``before``) is refused."""
    out = []
    for ev in events:
        if ev.get("kind") == "target" and ev.get("state") == "executed":
            if "before" not in ev:
                raise ValueError(
                    f"{source}: an executed edit without 'before'/'after' (records version 1); run it again "
                    "with this code (docs/DESIGN.md, records version 2)"
                )
            out.append(Edit(source, ev))
    return out


def sample(edits: Sequence[Edit], per_operator: int, seed: int) -> list[Edit]:
    """Up to ``per_operator`` edits of each operator, drawn with ``random.Random(seed)`` from the edits in a
    fixed order (so the sample depends on the seed and the edits, not on the order they were read in)."""
    rng = random.Random(seed)
    out: list[Edit] = []
    for op in OPS:
        pool = sorted((e for e in edits if e.op == op), key=lambda e: e.key)
        out += (
            pool if len(pool) <= per_operator else sorted(rng.sample(pool, per_operator), key=lambda e: e.key)
        )
    return out


# ------------------------------------------------------------------------------------------------ labels
@dataclass(frozen=True)
class Label:
    valid: bool | None  # None: not labelled (a sheet row left empty, a judge that failed)
    harmful: bool | None
    pattern: str = ""  # the harmful pattern, when one is named
    reason: str = ""


class GroundTruth:
    """Labels from the drift corpus's facts: an edit's units' fact keys come from their evidence records."""

    name = "ground truth (synthetic drift corpus)"

    def __init__(self, n_dialogues: int, n_sessions: int, corpus: Any = None) -> None:
        """The corpus of a dialogue is made again from the seed in its id; ``corpus`` (a ``DriftCorpus``) is used
        for every dialogue instead (a hand-built one in tests)."""
        self.n_dialogues, self.n_sessions, self.corpus = n_dialogues, n_sessions, corpus

    @cache  # noqa: B019 - a handful of seeds per labeler
    def _corpus(self, seed: int) -> Any:
        from benchmarks.synthetic_drift import make_corpus

        return self.corpus or make_corpus(seed, self.n_dialogues, self.n_sessions)

    def members(self, edit: Edit) -> list[frozenset]:
        m = DRIFT_ID.match(edit.dialogue)
        if m is None:
            raise ValueError(
                f"{edit.source}: dialogue {edit.dialogue!r} is not of the synthetic drift corpus"
            )
        corpus = self._corpus(int(m.group(1)))
        before = {u["id"]: u for u in edit.event["before"]}
        return [
            corpus.unit_keys(edit.dialogue, [(sid, r["text"]) for r in before[uid]["evidence"] for sid in r["source_ids"]])
            for uid in edit.event["ids"]
        ]  # fmt: skip

    def label(self, edits: Sequence[Edit]) -> list[Label]:
        from benchmarks.synthetic_drift import edit_is_valid, harm_of

        out = []
        for e in edits:
            members = self.members(e)
            pattern = harm_of(e.op, members)
            out.append(Label(edit_is_valid(e.op, members), pattern is not None, pattern or ""))
        return out


# ------------------------------------------------------------------------------------------------ the table
def wilson(k: int, n: int) -> tuple[float | None, float | None]:
    if n == 0:
        return None, None
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return float(ci.low), float(ci.high)


def table(
    edits: Sequence[Edit], labels: Sequence[Label], labeler: str, corpus: str, pool: Sequence[Edit] = ()
) -> pd.DataFrame:
    """Per operator: edits executed (in ``pool``, the edits sampled from), sampled, valid and harmful rates with
    95% intervals, patterns counted."""
    rows = []
    executed_n = Counter(e.op for e in pool or edits)
    for op in OPS:
        mine = [lb for e, lb in zip(edits, labels, strict=True) if e.op == op]
        row: dict[str, Any] = {"corpus": corpus, "labeler": labeler, "operator": op, "executed": executed_n[op],
                               "sampled": len(mine)}  # fmt: skip
        for what in ("valid", "harmful"):
            got = [getattr(lb, what) for lb in mine if getattr(lb, what) is not None]
            k, n = sum(got), len(got)
            low, high = wilson(k, n)
            row |= {f"{what}_n": n, what: k, f"{what}_rate": k / n if n else None, f"{what}_low": low,
                    f"{what}_high": high}  # fmt: skip
        patterns = Counter(lb.pattern for lb in mine if lb.harmful and lb.pattern)
        row["patterns"] = "; ".join(
            f"{p} ({c})" for p, c in sorted(patterns.items(), key=lambda x: (-x[1], x[0]))
        )
        rows.append(row)
    return pd.DataFrame(rows)


def _pct(rate: float | None, low: float | None, high: float | None, k: int, n: int) -> str:
    if rate is None:
        return "n/a (0 labelled)"
    return f"{100 * rate:.1f} [{100 * low:.1f}, {100 * high:.1f}] ({k}/{n})"


def markdown(frame: pd.DataFrame) -> str:
    lines = ["| corpus | operator | executed | sampled | valid % [95% CI] | harmful % [95% CI] | harmful patterns | "
             "labeler |", "|---|---|---:|---:|---|---|---|---|"]  # fmt: skip
    for r in frame.itertuples(index=False):
        lines.append(
            f"| {r.corpus} | {r.operator} | {r.executed} | {r.sampled} | "
            f"{_pct(r.valid_rate, r.valid_low, r.valid_high, r.valid, r.valid_n)} | "
            f"{_pct(r.harmful_rate, r.harmful_low, r.harmful_high, r.harmful, r.harmful_n)} | "
            f"{r.patterns or '-'} | {r.labeler} |"
        )
    return "\n".join(lines)
