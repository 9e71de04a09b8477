"""Table 5 (dataset statistics) on a LoCoMo file written here, every count worked out by hand."""

from __future__ import annotations

import json

import pytest

from allmem.report.tables import table5
from benchmarks.locomo import load_locomo

# One conversation: session 1 has two turns (3 and 1 tokens), session 2 one turn (3 tokens) with an image.
# o200k_base: "cat cat cat" -> cat, " cat", " cat" (3); "dog" (1); "hello there friend" (3).
DOC = [
    {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "cat cat cat"},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "dog"},
            ],
            "session_2_date_time": "2:00 pm on 9 May, 2023",
            "session_2": [
                {"speaker": "Ana", "dia_id": "D2:1", "text": "hello there friend", "blip_caption": "a cat"},
            ],
        },
        "qa": [
            {"question": "q1", "answer": "a", "evidence": ["D1:1", "D2:1"], "category": 1},
            {"question": "q2", "answer": "b", "evidence": ["D1:2"], "category": 4},
            {"question": "q3", "adversarial_answer": "c", "evidence": ["D9:9"], "category": 5},
            {"question": "q4", "answer": "d", "evidence": [], "category": 4},
        ],
    }
]


def test_counts_by_hand(tmp_path) -> None:
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps(DOC))
    rows = {r.statistic: r.value for r in table5.compute(load_locomo(path), "locomo")}
    assert rows["conversations"] == 1 and rows["sessions"] == 2 and rows["turns"] == 3
    assert rows["turns with an image caption"] == 1
    assert rows["tokens per turn (mean)"] == pytest.approx(7 / 3)  # (3 + 1 + 3) / 3
    assert rows["tokens per history (mean)"] == 7 and rows["tokens, all histories"] == 7
    assert rows["questions"] == 4
    assert rows["category 1 (multi-hop)"] == 1 and rows["category 4 (single-hop)"] == 2
    assert rows["category 5 (adversarial)"] == 1 and "category 2 (temporal)" not in rows
    assert rows["evidence turns per question (mean)"] == pytest.approx(4 / 4)  # 2 + 1 + 1 + 0
    assert rows["questions without evidence"] == 1
    assert rows["evidence ids matching no turn"] == 1  # D9:9


def test_render_writes_markdown_and_csv(tmp_path, monkeypatch) -> None:
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps(DOC))
    real = table5.load
    monkeypatch.setattr(table5, "load", lambda ds, p=None: real(ds, str(path)))
    written = table5.render(tmp_path / "tables", None, "LongMemEval-s: skipped")
    md = written[0].read_text()
    assert "| turns | 3 |" in md and "| tokens per turn (mean) | 2.3 |" in md
    assert "sha256:" in md and "LongMemEval-s: skipped." in md
    assert written[1].read_text().count("\n") == 1 + len(table5.compute(load_locomo(path), "locomo"))
