"""Table 1's other views of the same answers (allmem/report/tables/views.py): overall without LoCoMo category 5 and with
the answer-key errata, side by side, computed by hand on a four-question run."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from allmem import files
from allmem.report.runs import Run
from allmem.report.tables import table1, views

# (category, question, prediction, gold): set-F1 by hand in the comments
QUESTIONS = [
    # {rainbow, flag, eagle} vs {rainbow, flag, transgender, symbol}: P 2/3, R 1/2 -> F1 4/7; errata gold
    # "Rainbow flag, eagle" -> F1 1
    (1, "What symbols are important to Caroline?", "rainbow flag eagle", "Rainbow flag, transgender symbol"),
    # {art} vs {art, and, self-expression}: F1 1/2; the errata exclude it
    (4, "What is Melanie's hand-painted bowl a reminder of?", "art", "art and self-expression"),
    (5, "What did Caroline bake?", "x y", "x y"),  # F1 1, adversarial
    (2, "When did they meet?", "zzz", "May 2023"),  # F1 0
]


def _run(tmp_path: Path) -> Run:
    path = tmp_path / "run"
    path.mkdir()
    records = [
        {"question_id": f"conv-26:q{i}", "dialogue_id": "conv-26", "category": cat, "question": q,
         "prediction": pred, "gold": gold, "evidence": ["D1:1"], "ranked_source_ids": ["D1:1"],
         "context_tokens": 10}
        for i, (cat, q, pred, gold) in enumerate(QUESTIONS)
    ]  # fmt: skip
    files.write_atomic(path / files.PREDICTIONS, "".join(files.dump_line(r) for r in records))
    cfg = OmegaConf.create({
        "method": {"name": "allmem"}, "dataset": {"name": "locomo"},
        "protocol": {"name": "allmem", "ks": [1, 5], "table_k": 5},
    })  # fmt: skip
    return Run(path=path, cfg=cfg, metrics={"table_metrics": ["judge", "f1", "R@5", "N@5"]})


def test_overall_four_ways_by_hand(tmp_path: Path) -> None:
    run = _run(tmp_path)
    table = table1.compute([run], "locomo")
    f1 = table[(table["metric"] == "f1") & (table["group"] == "overall")].set_index("subset")["mean"]
    assert f1["all"] == pytest.approx(100 * (4 / 7 + 0.5 + 1 + 0) / 4)
    assert f1["no-cat5"] == pytest.approx(100 * (4 / 7 + 0.5 + 0) / 3)
    assert f1["errata"] == pytest.approx(100 * (1 + 1 + 0) / 3)
    assert f1["errata-no-cat5"] == pytest.approx(100 * (1 + 0) / 2)
    n = table[(table["metric"] == "f1") & (table["group"] == "overall")].set_index("subset")["n"]
    assert (n["all"], n["no-cat5"], n["errata"], n["errata-no-cat5"]) == (4, 3, 3, 2)
    assert set(table.loc[table["subset"] == "errata", "affected"]) == {2}
    text = table1.markdown_for(table, [run], "locomo")
    assert "F1 (all) | F1 (w/o cat. 5) | F1 (errata) | F1 (errata, w/o cat. 5)" in text
    assert f"| {100 * (4 / 7 + 1.5) / 4:.2f} | {100 * (4 / 7 + 0.5) / 3:.2f} | 66.67 | 50.00 |" in text
    # the per-category F1 table ends with the overall score with and without category 5
    assert (
        "| Method | 1 multi-hop | 2 temporal | 4 single-hop | 5 adversarial | overall | overall w/o 5 |"
        in text
    )


def test_errata_frame_rescores_only_the_listed_rows(tmp_path: Path) -> None:
    run = _run(tmp_path)
    frame, affected = views.errata_frame(run)
    assert affected == 2
    assert list(frame["question_id"]) == ["conv-26:q0", "conv-26:q2", "conv-26:q3"]
    assert list(frame["f1"]) == pytest.approx([1.0, 1.0, 0.0])
