"""Fig. 7's rule: the Update whose archived unit ranked highest without ATC; the drift corpus when none qualifies."""

from __future__ import annotations

from pathlib import Path

from allmem.report.audit import Edit
from allmem.report.figures import fig7
from allmem.report.figures.fig7 import Question, pick


def unit(uid: str, sid: str, visible: bool = True) -> dict:
    return {"id": uid, "date": "2023-05-08T13:00:00", "order": 0, "summary": f"s {uid}", "keywords": [],
            "visible": visible, "evidence": [{"speaker": "Ann", "text": f"t {sid}", "caption": None,
                                              "date": "8 May", "source_ids": [sid]}]}  # fmt: skip


def update(dlg: str, run: int, cur: tuple[str, str], old: tuple[str, str]) -> Edit:
    before = [unit(*cur), unit(*old)]
    after = [unit(*cur), unit(*old, visible=False)]
    return Edit("run", {"kind": "target", "state": "executed", "op": "update", "dialogue": dlg, "run": run,
                        "ids": [cur[0], old[0]], "before": before, "after": after,
                        "links": [["version", cur[0], old[0]]]})  # fmt: skip


# Three Updates; archived turns D1:1 (a), D1:5 (b), D2:2 (c, another dialogue).
A = update("conv-1", 1, ("u9", "D3:1"), ("u1", "D1:1"))
B = update("conv-1", 2, ("u8", "D3:2"), ("u5", "D1:5"))
C = update("conv-2", 1, ("u7", "D4:1"), ("u2", "D2:2"))
QUESTIONS = {
    "conv-1": [
        Question("q1", "first?", "x", ("D9:9", "D1:1", "D3:1")),  # a at rank 2
        Question("q2", "second?", "y", ("D1:5", "D1:1")),  # b at rank 1, a at rank 2
    ],
    "conv-2": [Question("q3", "third?", "z", ("D2:2",))],  # c at rank 1, but conv-2 comes after conv-1
}


def test_picks_the_update_whose_archived_unit_ranked_highest() -> None:
    case = pick([A, B, C], QUESTIONS, k=5)
    assert case is not None and case.edit is B and case.question.id == "q2" and case.rank == 1
    case = pick([A, C], QUESTIONS, k=5)  # a ranks 2 (q1 and q2), c ranks 1: c wins on rank
    assert case.edit is C and case.rank == 1
    case = pick([A], QUESTIONS, k=5)  # rank 2 twice: the earlier question
    assert case.edit is A and case.question.id == "q1" and case.rank == 2
    assert case.archived["visible"] is False and case.current["id"] == "u9"


def test_nothing_qualifies_beyond_k_or_without_questions() -> None:
    assert pick([A], QUESTIONS, k=1) is None  # a only ever at rank 2
    assert pick([A, B], {"conv-2": QUESTIONS["conv-2"]}, k=5) is None  # no question of their dialogue


class FakeRun:
    def __init__(self, dataset: str, method: str) -> None:
        self.dataset, self.method, self.consolidates = dataset, method, method == "allmem"


class FakePoint:
    def __init__(self, run: FakeRun) -> None:
        self.run = run


def test_render_falls_back_to_the_drift_corpus(tmp_path: Path, monkeypatch) -> None:
    found = {"atc_audit": {ds: [FakePoint(FakeRun(ds, m)) for m in ("allmem", "allmem_noatc")]
                           for ds in ("locomo", "synthetic_drift")}}  # fmt: skip
    asked: list[str] = []

    def run_case(with_atc: FakeRun, without: FakeRun) -> fig7.Case | None:
        asked.append(with_atc.dataset)
        if with_atc.dataset == "locomo":
            return None  # no LoCoMo Update qualifies
        case = pick([A], QUESTIONS, 5)
        case.top_with, case.where = ("D3:1", "D9:9"), "the drift corpus"
        return case

    drawn: list[fig7.Case] = []
    monkeypatch.setattr(fig7, "run_case", run_case)
    monkeypatch.setattr(
        fig7, "draw", lambda case, out, runs, note: drawn.append(case) or [out.with_suffix(".png")]
    )
    monkeypatch.setattr(fig7, "footer", lambda runs, target, notes: " ".join(n for n in notes if n))
    written = fig7.render(found, tmp_path / "tables", tmp_path / "figures", None, "LME skipped")
    assert asked == ["locomo", "synthetic_drift"] and drawn and drawn[0].edit is A
    md = (tmp_path / "tables" / "fig7.md").read_text()
    assert written[-1] == tmp_path / "tables" / "fig7.md"
    assert "the drift corpus" in md and "LoCoMo: no Update qualified under the rule." in md
    assert "1. `D9:9`: \n2. `D1:1` (archived unit): \n3. `D3:1` (current unit): " in md  # without ATC
    assert "**Version link**: version: u9 -> u1" in md


def test_render_says_when_nothing_qualifies(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(fig7, "footer", lambda runs, target, notes: " ".join(n for n in notes if n))
    fig7.render({}, tmp_path / "tables", tmp_path / "figures", None, "LME skipped")
    md = (tmp_path / "tables" / "fig7.md").read_text()
    assert "no figure" in md and "Synthetic drift corpus: no complete atc_audit runs" in md
