"""Refit the offline Split's ``split_max_groups`` (``allmem/memory/atc/drift.py``): the largest number of standalone
sentence groups a unit may have and still be segmented (and its sentences embedded).

Every turn is a single-record unit, so every turn with two or more groups is a Split candidate at ATC time. For each
candidate of LoCoMo's fit conversations (``fit_dialogues`` of ``configs/dataset/locomo.yaml``; the held-out five are
never read) and of a generated LongMemEval-format file (``scripts/make_longmemeval.py``: template text, not
LongMemEval-s itself, which cannot be downloaded here), this segments the turn with no cap and the default
embedder, and prints per group count: candidates, their sentences, and how many reach Split's p at the lowest theta
that Fig. 4 sweeps (``configs/experiment/fig4_theta.yaml``) and at the default (``atc.theta`` / ``atc.theta_split``
of ``configs/method/allmem.yaml``). The fitted cap is the smallest group count that keeps every candidate reaching
the default theta on both; the cap each threshold would need and the share of sentences above the fitted cap (the
embedding it saves) are printed too. Its committed output is ``results/fits/fit_split_groups.log``:

    .venv/bin/python scripts/fit_split_groups.py | tee results/fits/fit_split_groups.log
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


def thresholds() -> tuple[float, float]:
    """(the lowest theta Fig. 4 sweeps, the default Split threshold), from their config files."""
    import yaml

    from allmem.defaults import paper
    from allmem.memory.atc.config import ATCConfig

    sweep = yaml.safe_load((ROOT / "configs" / "experiment" / "fig4_theta.yaml").read_text())
    lowest = min(float(t) for t in str(sweep["hydra"]["sweeper"]["params"]["atc.theta"]).split(","))
    return lowest, paper(ATCConfig).threshold("split")


def needed_cap(ps_by_groups: dict[int, list[float]], theta: float) -> int | None:
    """The smallest group count keeping every candidate with p >= theta; None when no candidate reaches it."""
    return max((g for g, ps in ps_by_groups.items() if any(p >= theta for p in ps)), default=None)


def table(label: str, texts: list[tuple[str, frozenset[str]]], embed, ths: tuple[float, float]) -> int | None:
    """Print the candidates by group count; return the cap the default theta (``ths[-1]``) needs."""
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
    if not by:
        print("no Split candidates")
        return None
    print(f"{'groups':>6}{'units':>7}{'sentences':>11}" + "".join(f"{'p >= ' + str(t):>11}" for t in ths))
    for g in sorted(by):
        print(
            f"{g:>6}{len(by[g]):>7}{sents[g]:>11}" + "".join(f"{sum(p >= t for p in by[g]):>11}" for t in ths)
        )
    for t in ths:
        cap = needed_cap(by, t)
        print(
            f"theta {t}: "
            + ("no candidate reaches it" if cap is None else f"every p >= {t} kept by a cap of {cap}")
        )
    cap = needed_cap(by, ths[-1])
    if cap is not None:
        above = sum(n for g, n in sents.items() if g > cap)
        print(f"sentences above a cap of {cap}: {above} ({above / total:.0%})")
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

    from hydra import compose, initialize_config_dir

    import allmem.paths  # noqa: F401 - registers the resolvers the configs use
    from allmem.build import build_embedder
    from allmem.paths import resolve_data_path
    from benchmarks import fit_split
    from benchmarks.locomo import load_locomo
    from benchmarks.longmemeval import load_longmemeval

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        cfg = compose("config")
    embedder = build_embedder(cfg)

    def embed(texts: list[str]) -> np.ndarray:
        return np.asarray(embedder.encode(list(texts)), dtype=np.float32)

    ths = thresholds()
    fit_ids = set(fit_split("locomo"))
    locomo = [d for d in load_locomo(resolve_data_path("locomo", a.data)) if d.id in fit_ids]
    caps = [table(f"LoCoMo fit conversations {sorted(fit_ids)}", candidates(locomo), embed, ths)]
    with tempfile.TemporaryDirectory() as tmp:
        lme = Path(tmp) / "lme.json"
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "make_longmemeval.py"), str(lme), "--questions",
             str(a.questions), "--sessions", str(a.sessions), "--seed", str(a.seed)],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        label = f"generated LongMemEval-format file ({a.questions} haystacks x {a.sessions} sessions, seed {a.seed})"
        caps.append(table(label, candidates(load_longmemeval(lme)), embed, ths))
    found = [c for c in caps if c is not None]
    print(
        f"\nsplit_max_groups = {max(found)}" if found else "\nno candidate reaches the default theta: no cap"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
