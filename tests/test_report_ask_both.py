"""Tables that read one record per question read a ``protocol.ask=both`` run's end-of-stream records (the paper's
protocol): Table 1 (with its category-5 and errata views), the retrieval table, Table 2 and the ablation table
give the numbers of the ``protocol.ask=end`` run of the same config, and their footers say so; the retention
view keeps both ask points."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from allmem.report.items import at_end, item_frame
from allmem.report.provenance import ask_note
from allmem.report.runs import load_run
from allmem.report.tables import ablations, cost, retrieval, table1
from tests.runkit import compose_and_run

REPO = Path(__file__).resolve().parents[1]
# turn lists: a mid-stream checkpoint leaves their end-of-stream state unchanged
METHODS = ("bm25", "naive_rag")
N_QUESTIONS = 14  # tests/fixtures/locomo_tiny.json: 8 + 6 questions


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list]:
    tmp = tmp_path_factory.mktemp("askboth")
    out: dict[str, list] = {}
    for ask in ("end", "both"):
        out[ask] = []
        for method in METHODS:
            out[ask].append(load_run(compose_and_run(tmp / ask, f"method={method}", f"protocol.ask={ask}",
                                                     cache=tmp / "cache")))  # fmt: skip
    return out


def test_the_fixture_has_two_records_per_question_under_both(runs: dict[str, list]) -> None:
    fixture = json.loads((REPO / "tests" / "fixtures" / "locomo_tiny.json").read_text())
    assert sum(len(c["qa"]) for c in fixture) == N_QUESTIONS
    for r_end, r_both in zip(runs["end"], runs["both"], strict=True):
        assert len(r_end.records()) == N_QUESTIONS and len(r_both.records()) == 2 * N_QUESTIONS
        assert r_both.asks == ("after_evidence", "end") and r_end.asks == ("end",)
        assert len(r_both.end_records()) == N_QUESTIONS
        # the retention view's frame keeps both points; at_end keeps the end rows, one per question
        assert len(item_frame(r_both)) == 2 * N_QUESTIONS and len(at_end(item_frame(r_both))) == N_QUESTIONS
        # not vacuous: some question scores differently when asked mid-stream, so averaging both would move a mean
    frames = [item_frame(r) for r in runs["both"]]
    assert any(
        (f[f["ask"] == "after_evidence"]["R@5"].to_numpy() != f[f["ask"] == "end"]["R@5"].to_numpy()).any()
        for f in frames
    )


def _numbers(frame: pd.DataFrame) -> pd.DataFrame:
    """A table's frame without what names the runs (labels are the same; the run folders differ)."""
    return frame.drop(columns=[c for c in ("run_dir", "path") if c in frame.columns]).reset_index(drop=True)


def test_table1_of_a_both_run_equals_the_end_run(runs: dict[str, list]) -> None:
    end = table1.compute(runs["end"], "locomo", list(METHODS))
    both = table1.compute(runs["both"], "locomo", list(METHODS))
    pd.testing.assert_frame_equal(_numbers(both), _numbers(end))
    overall = end[(end["subset"] == "all") & (end["group"] == "overall") & (end["metric"] == "R@5")]
    assert set(overall["n"]) == {N_QUESTIONS}  # one record per question, by hand from the fixture


def test_the_other_one_record_per_question_tables_equal_the_end_run(runs: dict[str, list]) -> None:
    for compute in (retrieval.compute,):
        pd.testing.assert_frame_equal(_numbers(compute(runs["both"])), _numbers(compute(runs["end"])))
    t_end, x_end = ablations.compute(runs["end"])
    t_both, x_both = ablations.compute(runs["both"])
    pd.testing.assert_frame_equal(_numbers(t_both), _numbers(t_end))
    c_end, c_both = cost.compute(runs["end"]), cost.compute(runs["both"])
    assert list(c_both["questions"]) == list(c_end["questions"]) == [N_QUESTIONS] * len(METHODS)


def test_the_footer_says_which_records_a_table_reads(runs: dict[str, list]) -> None:
    assert ask_note(runs["end"]) == ""
    note = ask_note(runs["both"])
    assert "end-of-stream records" in note and all(f"`{r.label}`" in note for r in runs["both"])
