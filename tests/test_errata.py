"""LoCoMo answer-key errata (allmem/metrics/errata.py): every entry names exactly one question of the real file,
they change exactly the listed questions, and metrics.json carries the file's hash and both views."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from allmem.metrics import score_records
from allmem.metrics.errata import ErrataError, apply, errata_block, load, match, path_for
from benchmarks import load_dataset


def _rec(qid: str, dialogue: str, question: str, prediction: str, gold: str, evidence=(), verdict=None,
         category=1) -> dict:  # fmt: skip
    rec = {
        "question_id": qid, "dialogue_id": dialogue, "category": category, "question": question,
        "prediction": prediction, "gold": gold, "evidence": list(evidence), "ranked_source_ids": ["D1:1", "D2:1"],
    }  # fmt: skip
    if verdict is not None:
        rec["judge"] = {"verdict": verdict}
    return rec


@pytest.mark.slow
def test_every_entry_matches_exactly_one_question_of_the_real_file(locomo_path: Path) -> None:
    before = hashlib.sha256(locomo_path.read_bytes()).hexdigest()
    errata = load("locomo")
    assert errata is not None and len(errata.entries) >= 11
    questions = [
        q
        for d in load_dataset(
            {"name": "locomo", "_target_": "benchmarks.locomo.load_locomo", "path": str(locomo_path)}
        )
        for q in d.questions
    ]
    records = [{"dialogue_id": q.dialogue_id, "question": q.text, "question_id": q.id} for q in questions]
    hits = match(errata, records)
    assert sorted(e.key for e in hits.values()) == sorted(e.key for e in errata.entries)  # each one, once
    for entry in errata.entries:  # and no entry's conversation + text names two questions
        assert sum((q.dialogue_id, q.text.strip()) == entry.key for q in questions) == 1, entry.key
    assert hashlib.sha256(locomo_path.read_bytes()).hexdigest() == before  # the dataset file is not touched


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "locomo.yaml"
    path.write_text(
        """version: 3
entries:
  - {conversation: c1, question: "Where?", problem: p, action: correct, answer: "Paris", source: s,
     evidence: ["D2:1"]}
  - {conversation: c1, question: "Who?", problem: p, action: exclude, source: s}
  - {conversation: c9, question: "Never asked?", problem: p, action: exclude, source: s}
""",
        encoding="utf-8",
    )
    return path


def test_errata_change_exactly_the_listed_questions(tmp_path: Path) -> None:
    errata = load("locomo", _file(tmp_path))
    records = [
        _rec("q1", "c1", "Where?", "paris", "London", ["D1:1"], verdict="no"),  # corrected: gold and evidence
        _rec("q2", "c1", "Who?", "bob", "bob", ["D1:1"], verdict="yes"),  # excluded
        _rec("q3", "c2", "Where?", "rome", "rome", ["D1:1"], verdict="yes"),  # same text, other conversation
    ]
    fixed, changed = apply(errata, records)
    assert changed == {"corrected": ["q1"], "excluded": ["q2"]}
    assert [r["question_id"] for r in fixed] == ["q1", "q3"]
    assert fixed[0]["gold"] == "Paris" and fixed[0]["evidence"] == ["D2:1"] and fixed[0]["verdict"] is None
    assert fixed[1] == {**records[2]}  # untouched
    assert records[0]["gold"] == "London"  # the input records are not changed


def test_errata_block_scores_by_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = path_for
    monkeypatch.setattr(
        "allmem.metrics.errata.path_for", lambda d: _file(tmp_path) if d == "locomo" else real(d)
    )
    records = [
        _rec("q1", "c1", "Where?", "paris", "London", ["D1:1"], verdict="no"),
        _rec("q2", "c1", "Who?", "bob", "bob", ["D1:1"], verdict="yes"),
        _rec("q3", "c2", "Where?", "rome", "milan", ["D9:9"], verdict="no"),
    ]
    out = score_records(records, "allmem", dataset="locomo")
    # without errata: F1 0, 1, 0 -> 33.33; R@1 (ranked D1:1 first) 1, 1, 0 -> 66.67; judge 1 yes of 3
    assert out["overall"]["scores"]["f1"] == pytest.approx(100 / 3)
    assert out["overall"]["scores"]["R@1"] == pytest.approx(200 / 3)
    assert out["overall"]["judge"] == pytest.approx(100 / 3)
    block = out["errata"]
    assert (
        block["version"] == 3 and block["sha256"] == hashlib.sha256(_file(tmp_path).read_bytes()).hexdigest()
    )
    assert (block["affected"], block["unmatched"], block["entries"]) == (2, 1, 3)
    assert block["corrected"] == ["q1"] and block["excluded"] == ["q2"]
    # with errata: q1 now gold "Paris" (F1 1) with evidence D2:1 (ranked second: R@1 0, R@3 1); q2 gone
    assert block["n_scored"] == 2
    assert block["overall"]["scores"]["f1"] == pytest.approx(50.0)
    assert block["overall"]["scores"]["R@1"] == pytest.approx(0.0)
    assert block["overall"]["scores"]["R@3"] == pytest.approx(50.0)
    # q1's old verdict was given against "London": not reused; q3's "no" is the only verdict left
    assert block["overall"]["judge"] == pytest.approx(0.0)
    assert block["overall"]["judge_counts"]["missing"] == 1
    assert score_records(records, "allmem").get("errata") is None  # no dataset named: no errata view
    assert errata_block(records, "allmem", "longmemeval_s") is None  # a dataset without an errata file


def test_bad_errata_files_are_named(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    for text, message in (
        (
            "version: 1\nentries:\n  - {conversation: c, question: q, problem: p, action: fix, source: s}\n",
            "action",
        ),
        (
            "version: 1\nentries:\n  - {conversation: c, question: q, problem: p, action: correct, source: s}\n",
            "answer",
        ),  # fmt: skip
        ("version: 0\nentries: []\n", "version"),
        (
            "version: 1\nentries:\n  - {conversation: c, question: q, problem: p, action: exclude, source: s}\n"
            "  - {conversation: c, question: q, problem: p, action: exclude, source: s}\n",
            "same question",
        ),
    ):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ErrataError, match=message):
            load("locomo", path)
    path.write_text(
        "version: 1\nentries:\n  - {conversation: c, question: q, problem: p, action: exclude, source: s}\n",
        encoding="utf-8",
    )
    twice = [{"dialogue_id": "c", "question": "q", "question_id": "a"}, {"dialogue_id": "c", "question": "q ",
             "question_id": "b"}]  # fmt: skip
    with pytest.raises(ErrataError, match="matches two records"):
        match(load("locomo", path), twice)


def test_the_shipped_file_is_where_the_loader_looks() -> None:
    assert path_for("locomo").is_file() and load("locomo").version >= 1


def test_allmem_score_reports_the_errata_of_the_runs_dataset(tmp_path: Path, capsys) -> None:
    import json

    import yaml

    from allmem import files
    from allmem.metrics import main as score_main

    rec = _rec("conv-42:q0", "conv-42", "Is it likely that Nate has friends besides Joanna?",
               "yes teammates on his video game team", "Yesteammates on hisvideo game team.")  # fmt: skip
    files.write_atomic(tmp_path / files.PREDICTIONS, files.dump_line(rec))
    files.write_atomic(tmp_path / files.CONFIG, yaml.safe_dump({"dataset": {"name": "locomo"},
                                                                "protocol": {"name": "allmem"}}))  # fmt: skip
    assert score_main([str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    # {yes, teammates, on, his, video, game, team} against the key's {yesteammates, on, hisvideo, game, team}:
    # 3 shared -> P 3/7, R 3/5, F1 = 2*(3/7)(3/5)/((3/7)+(3/5)) = 1/2; with the corrected key all 7 match -> 1
    assert out["overall"]["scores"]["f1"] == pytest.approx(50.0)
    assert out["errata"]["corrected"] == ["conv-42:q0"] and out["errata"]["overall"]["scores"]["f1"] == 100.0
