"""The retention view on the synthetic drift corpus (supersessions planted): `make retention` runs its experiment
there too, every question has evidence so ``after_evidence`` asks it mid-stream, and the report writes a table
section and a figure per dataset. Expected distances and bin counts by hand from the tiny corpus's turn ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from allmem import files
from allmem.report import paper, targets
from allmem.report.runs import load_run
from allmem.report.tables.retention import compute
from tests.runkit import compose_and_run

REPO = Path(__file__).resolve().parents[1]

# tests/fixtures/synthetic_drift_tiny.json (seed 1, 3 sessions): sessions of 26, 35 and 25 turns; the 8 questions'
# evidence (each speaker's latest state) is D2:14, D2:8, D2:28, D2:24, D2:12, D3:6, D3:10, D2:30. Asked after the
# evidence's session, D<s>:<i> has (turns in session s) - i turns and 0 sessions after it; asked at the end, D2:<i>
# has 35 - i + 25 turns and 1 session after it, D3:<i> 25 - i turns and 0 sessions.
EVIDENCE = ["D2:14", "D2:8", "D2:28", "D2:24", "D2:12", "D3:6", "D3:10", "D2:30"]
AFTER = {e: {"turns": {"D2": 35, "D3": 25}[e[:2]] - int(e[3:]), "sessions": 0} for e in EVIDENCE}
END = {e: {"turns": 35 - int(e[3:]) + 25, "sessions": 1} if e[:2] == "D2" else
       {"turns": 25 - int(e[3:]), "sessions": 0} for e in EVIDENCE}  # fmt: skip
# bins (edges 0, 1, 10, 50, 100 turns; 0, 1, 2 sessions): after: turns 21 27 7 11 23 19 15 5; end: 46 52 32 36 48 19
# 15 30
BINS = {
    ("after_evidence", "turns"): {"1-9": 2, "10-49": 6},
    ("after_evidence", "sessions"): {"0": 8},
    ("end", "turns"): {"10-49": 7, "50-99": 1},
    ("end", "sessions"): {"0": 2, "1": 6},
}


def _run(tmp: Path, dataset: str) -> Path:
    return compose_and_run(tmp, f"dataset={dataset}", "+experiment=retention", "method=hybrid_rag")


@pytest.fixture(scope="module")
def drift_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("drift"), "synthetic_drift")


def test_make_retention_runs_on_the_drift_corpus_too() -> None:
    datasets = targets.dataset_overrides(None, "retention")
    assert datasets["synthetic_drift"] == ["dataset=synthetic_drift"] and "locomo" in datasets
    assert "synthetic_drift" not in targets.dataset_overrides(None, "table1")


def test_drift_questions_are_asked_after_their_evidence_mid_stream(drift_run: Path) -> None:
    records = files.read_jsonl(drift_run / files.PREDICTIONS)
    by_point = {(r["evidence"][0], r["ask"]): r["since"] for r in records}
    assert sorted(r["evidence"][0] for r in records) == sorted(EVIDENCE * 2)  # two records per question
    assert {e: by_point[e, "after_evidence"] for e in EVIDENCE} == AFTER
    assert {e: by_point[e, "end"] for e in EVIDENCE} == END


def test_the_retention_table_bins_the_drift_corpus_by_hand(drift_run: Path) -> None:
    table = compute([load_run(drift_run)])
    assert set(table["dataset"]) == {"synthetic_drift"}
    f1 = table[table["metric"] == "F1"]
    for (ask, unit), bins in BINS.items():
        part = f1[(f1["ask"] == ask) & (f1["distance"] == unit)]
        assert dict(zip(part["bin"], part["n"], strict=True)) == bins, (ask, unit)


def test_the_report_has_a_table_and_a_figure_per_dataset(drift_run: Path, tmp_path: Path) -> None:
    locomo = load_run(_run(tmp_path / "locomo", "locomo"))
    found = {
        "retention": {
            ds: [targets.Point("retention", ds, ("method=hybrid_rag",), r.config_hash, r)]
            for ds, r in (("locomo", locomo), ("synthetic_drift", load_run(drift_run)))
        }
    }
    written = paper.render_retention(found, tmp_path / "tables", tmp_path / "figures")
    names = {p.name for p in written}
    assert {"retention.md", "retention.csv", "retention.png", "retention_synthetic_drift.png"} <= names
    text = (tmp_path / "tables" / "retention.md").read_text()
    assert "## LoCoMo" in text and "## Synthetic drift corpus" in text
