"""Table 8's audit: sampling, the drift corpus's ground truth on a hand-built corpus, the human sheet round trip.

Every expected rate is worked out by hand from the planted facts below.
"""

from __future__ import annotations

import csv
import math
import random

import pytest

from allmem.report import audit
from allmem.report.audit import sheet as audit_sheet
from benchmarks.synthetic_drift import DriftCorpus

DLG = "syn-9-0"
KEYS = {
    "D1:1": frozenset({("Ana", "self", "city", "Boston")}),
    "D1:2": frozenset({("Ana", "self", "city", "Denver")}),  # supersedes D1:1
    "D1:3": frozenset({("Ana", "relative:sister", "city", "Miami")}),  # a look-alike: another holder
    "D1:4": frozenset({("Ben", "filler", "How was your week?", "")}),  # states no fact
    "D1:5": frozenset({("Ana", "self", "city", "Boston")}),  # restates D1:1
    "D1:6": frozenset({("Ana", "event", "hike", "Zion"), ("Ana", "relative:mother", "job", "nurse")}),
    "D1:7": frozenset({("Ana", "self", "story", "piano")}),  # one fact told in several sentences
}
TEXT = {sid: f"text of {sid}" for sid in KEYS}
CORPUS = DriftCorpus([], {DLG: KEYS})


def unit(uid: str, *sids: str) -> dict:
    return {"id": uid, "date": "2023-01-02T10:00:00", "order": 0, "summary": f"s {uid}", "keywords": [],
            "visible": True, "evidence": [{"speaker": "Ana", "text": TEXT[s], "caption": None,
                                           "date": "2023-01-02", "source_ids": [s]} for s in sids]}  # fmt: skip


def edit(op: str, run: int, *units: tuple[str, str]) -> audit.Edit:
    before = [unit(uid, sid) for uid, sid in units]
    ev = {"kind": "target", "state": "executed", "dialogue": DLG, "run": run, "op": op,
          "ids": [u["id"] for u in before], "before": before, "after": before, "links": []}  # fmt: skip
    return audit.Edit("drift seed 9", ev)


# (edit, valid, harmful pattern or None), each worked out from KEYS by the paper's definitions
CASES = [
    (edit("update", 1, ("u2", "D1:2"), ("u1", "D1:1")), True, None),  # Denver supersedes Boston
    (edit("update", 2, ("u2", "D1:2"), ("u3", "D1:3")), False, "archived another holder's state"),
    (edit("update", 3, ("u2", "D1:2"), ("u4", "D1:4")), False, None),  # archives a filler: nothing lost
    (edit("merge", 4, ("u1", "D1:1"), ("u5", "D1:5")), True, None),  # a restatement
    (edit("merge", 5, ("u1", "D1:1"), ("u3", "D1:3")), False, "merged different facts"),
    (edit("split", 6, ("u6", "D1:6")), True, None),  # a planted conflation of two facts
    (edit("split", 7, ("u7", "D1:7")), False, "split a coherent memory"),
]
EDITS = [c[0] for c in CASES]


def wilson_by_hand(k: int, n: int) -> tuple[float, float]:
    z = 1.959963984540054  # the 97.5% normal quantile
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def test_ground_truth_labels_each_planted_case() -> None:
    labels = audit.GroundTruth(1, 1, corpus=CORPUS).label(EDITS)
    assert [(lb.valid, lb.pattern or None) for lb in labels] == [(v, h) for _, v, h in CASES]
    assert [lb.harmful for lb in labels] == [h is not None for _, _, h in CASES]


def test_ground_truth_rates_and_intervals_by_hand() -> None:
    labels = audit.GroundTruth(1, 1, corpus=CORPUS).label(EDITS)
    t = audit.table(EDITS, labels, "truth", "tiny").set_index("operator")
    # update: 1 of 3 valid, 1 of 3 harmful; merge: 1/2 and 1/2; split: 1/2 and 1/2
    assert (t.loc["update", "valid"], t.loc["update", "valid_n"], t.loc["update", "harmful"]) == (1, 3, 1)
    assert t.loc["update", "valid_rate"] == pytest.approx(1 / 3)
    for op in ("merge", "split"):
        assert (t.loc[op, "sampled"], t.loc[op, "valid"], t.loc[op, "harmful"]) == (2, 1, 1)
        assert (t.loc[op, "valid_low"], t.loc[op, "valid_high"]) == pytest.approx(wilson_by_hand(1, 2))
    assert wilson_by_hand(1, 2) == pytest.approx((0.09453, 0.90547), abs=1e-5)
    assert t.loc["update", "patterns"] == "archived another holder's state (1)"
    md = audit.markdown(t.reset_index())
    assert "| tiny | update | 3 | 3 | 33.3 [" in md and "(1/3)" in md


def test_sampling_is_deterministic_and_covers_each_operator() -> None:
    pool = [edit(op, run, (f"u{run}", "D1:1"), (f"v{run}", "D1:5")) for op in audit.OPS for run in range(30)]
    a = audit.sample(pool, 10, seed=3)
    shuffled = pool[:]
    random.Random(1).shuffle(shuffled)
    assert [e.key for e in audit.sample(shuffled, 10, seed=3)] == [e.key for e in a]  # order of reading aside
    assert [e.op for e in a] == ["split"] * 10 + ["merge"] * 10 + ["update"] * 10
    assert [e.key for e in audit.sample(pool, 10, seed=4)] != [e.key for e in a]
    few = audit.sample(pool[:3] + pool[30:31], 10, seed=3)  # fewer than asked: all of them
    assert sorted(e.key for e in few) == sorted(e.key for e in pool[:3] + pool[30:31])


def test_executed_refuses_lines_of_records_version_1() -> None:
    with pytest.raises(ValueError, match="records version 1"):
        audit.executed([{"kind": "target", "state": "executed", "op": "merge", "ids": ["a", "b"]}], "run x")
    assert audit.executed([{"kind": "target", "state": "noop", "op": "merge"}], "run x") == []


def test_human_sheet_round_trips_to_the_same_table(tmp_path) -> None:
    truth = audit.GroundTruth(1, 1, corpus=CORPUS).label(EDITS)
    sheet = tmp_path / "audit" / "sheet.csv"
    audit_sheet.export(EDITS, sheet, sheet.with_suffix(".html"))
    assert not audit_sheet.filled(sheet)
    page = sheet.with_suffix(".html").read_text()
    assert "text of D1:6" in page and "Split in syn-9-0" in page
    with open(sheet, newline="") as fh:  # a person fills the sheet in: here, with the corpus's truth
        rows = list(csv.DictReader(fh))
    assert [r["before"].count("text of") for r in rows] == [2, 2, 2, 2, 2, 1, 1]
    for row, lb in zip(rows, truth, strict=True):
        row["valid"], row["harmful"] = ("yes" if lb.valid else "no"), ("Yes" if lb.harmful else "no")
        row["pattern"] = lb.pattern
    with open(sheet, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=audit_sheet.COLUMNS)
        w.writeheader()
        w.writerows(reversed(rows))  # any row order
    assert audit_sheet.filled(sheet)
    back = audit_sheet.read(sheet, EDITS)
    assert audit.table(EDITS, back, "x", "tiny").equals(audit.table(EDITS, truth, "x", "tiny"))


def test_sheet_errors_name_the_row(tmp_path) -> None:
    sheet = tmp_path / "sheet.csv"
    audit_sheet.export(EDITS[:1], sheet, tmp_path / "sheet.html")
    text = sheet.read_text().splitlines()
    sheet.write_text(sheet.read_text().replace(",,,,", ",maybe,,,", 1))
    with pytest.raises(ValueError, match=r"sheet.csv:\d+: valid must be yes, no or empty, got 'maybe'"):
        audit_sheet.read(sheet, EDITS[:1])
    assert len(text) >= 2
