"""Refit the offline Split's ``split_max_groups`` (``allmem/memory/atc/drift.py``): the largest number of standalone
sentence groups a unit may have and still be segmented (and its sentences embedded).

Every turn is a single-record unit, so every turn with two or more groups is a Split candidate at ATC time. For each
candidate of LoCoMo's fit conversations (``fit_dialogues`` of ``configs/dataset/locomo.yaml``; the held-out five are
never read) and of a generated LongMemEval-format file (``scripts/make_longmemeval.py``, the ``make bench-scale``
size), this segments the turn with no cap and the default embedder, and prints per group count: candidates, their
sentences, and how many reach Split's p at the default theta (``atc.theta`` of ``configs/method/allmem.yaml``) and
at lower thresholds. The fitted cap is the smallest group count that keeps every candidate reaching the default
theta on both; the printed share of sentences above it is the embedding it saves.

    .venv/bin/python scripts/fit_split_groups.py [--data PATH] [--questions 3] [--sessions 10] [--seed 0]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
THRESHOLDS = (0.6, 0.9)  # fig4_theta's lowest theta and the default, for the printed columns


def names_of(turns: list) -> frozenset[str]:
    """Speaker names as the consolidator collects them (``Consolidator.on_write``): full and first name."""
    return frozenset(x for t in turns if t.speaker for x in (t.speaker.lower(), t.speaker.split()[0].lower()))


def candidates(dialogues: Iterable) -> list[tuple[str, frozenset[str]]]:
    out = []
    for d in dialogues:
        turns = list(d.turns())
        names = names_of(turns)
        out += [(t.text, names) for t in turns]
    return out


def table(label: str, texts: list[tuple[str, frozenset[str]]], embed, theta: float) -> int:
    """Print the candidates by group count; return the smallest cap keeping every p >= theta."""
    from allmem.memory.atc.drift import (
        SEGMENT_MAX_SENTENCES,
        Calibration,
        UnitView,
        _segment_plan,
        split_confidence,
    )

    by: dict[int, list[float]] = defaultdict(list)
    sents: dict[int, int] = defaultdict(int)
    for text, names in texts:
        cal = Calibration(names=names, split_max_groups=SEGMENT_MAX_SENTENCES)
        plan_sents, groups = _segment_plan(text, cal)
        if not groups:
            continue
        p, _, _ = split_confidence(UnitView("u", text, "", 0, np.zeros(1)), embed, cal)
        by[len(groups)].append(p)
        sents[len(groups)] += len(plan_sents)
    total = sum(sents.values())
    print(f"\n## {label}: {sum(map(len, by.values()))} candidates, {total} sentences")
    print(
        f"{'groups':>6}{'units':>7}{'sentences':>11}" + "".join(f"{'p >= ' + str(t):>11}" for t in THRESHOLDS)
    )
    for g in sorted(by):
        print(
            f"{g:>6}{len(by[g]):>7}{sents[g]:>11}"
            + "".join(f"{sum(p >= t for p in by[g]):>11}" for t in THRESHOLDS)
        )
    cap = max((g for g in by if any(p >= theta for p in by[g])), default=2)
    above = sum(n for g, n in sents.items() if g > cap)
    print(
        f"smallest cap keeping every p >= {theta}: {cap} groups; sentences above it: {above} ({above / total:.0%})"
    )
    return cap


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="LoCoMo file (default: the usual search, allmem/paths.py)")
    ap.add_argument(
        "--questions", type=int, default=3, help="haystacks of the generated LongMemEval-format file"
    )
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    import yaml
    from hydra import compose, initialize_config_dir

    import allmem.paths  # noqa: F401 - registers the resolvers the configs use
    from allmem.build import build_embedder
    from allmem.paths import resolve_data_path
    from benchmarks import fit_split
    from benchmarks.locomo import load_locomo
    from benchmarks.longmemeval import load_longmemeval

    theta = float(yaml.safe_load((ROOT / "configs" / "method" / "allmem.yaml").read_text())["atc"]["theta"])
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        cfg = compose("config")
    embedder = build_embedder(cfg)

    def embed(texts: list[str]) -> np.ndarray:
        return np.asarray(embedder.encode(list(texts)), dtype=np.float32)

    fit = set(fit_split("locomo"))
    locomo = [d for d in load_locomo(resolve_data_path("locomo", a.data)) if d.id in fit]
    caps = [table(f"LoCoMo fit conversations {sorted(fit)}", candidates(locomo), embed, theta)]
    with tempfile.TemporaryDirectory() as tmp:
        lme = Path(tmp) / "lme.json"
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "make_longmemeval.py"), str(lme), "--questions",
             str(a.questions), "--sessions", str(a.sessions), "--seed", str(a.seed)],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        label = f"generated LongMemEval-format file ({a.questions} haystacks x {a.sessions} sessions, seed {a.seed})"
        caps.append(table(label, candidates(load_longmemeval(lme)), embed, theta))
    print(f"\nsplit_max_groups = {max(caps)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
