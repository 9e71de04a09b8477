"""The drift corpus as a dataset: its data file (seeds and sizes) and the questions on each speaker's latest state."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from allmem.types import Dialogue, Session, Turn
from benchmarks.errors import DatasetError
from benchmarks.synthetic_drift import DriftCorpus, load_drift, questions_of, read_spec

T0 = datetime(2023, 1, 2, 10, 0)
TURNS = [  # (session, turn id, speaker, text, fact keys)
    (0, "D1:1", "Ana", "I live in Boston.", {("Ana", "self", "city", "Boston")}),
    (0, "D1:2", "Ana", "I work as a nurse.", {("Ana", "self", "job", "nurse")}),
    (0, "D1:3", "Ben", "My sister lives in Miami.", {("Ben", "relative:sister", "city", "Miami")}),
    (1, "D2:1", "Ana", "I live in Denver now.", {("Ana", "self", "city", "Denver")}),
    (1, "D2:2", "Ana", "As I said, I work as a nurse.", {("Ana", "self", "job", "nurse")}),
]


def dialogue() -> tuple[Dialogue, DriftCorpus]:
    sessions = []
    for s in range(2):
        turns = tuple(Turn(tid, f"S{s + 1}", spk, text, T0 + timedelta(days=9 * s, minutes=i), i, source_id=tid)
                      for i, (ss, tid, spk, text, _) in enumerate(TURNS) if ss == s)  # fmt: skip
        sessions.append(Session(f"S{s + 1}", T0 + timedelta(days=9 * s), s, turns))
    d = Dialogue("syn-9-0", tuple(sessions), ())
    return d, DriftCorpus([d], {d.id: {tid: frozenset(k) for _, tid, _, _, k in TURNS}})


def test_questions_ask_the_latest_state_by_hand() -> None:
    d, corpus = dialogue()
    qs = questions_of(corpus, d)
    got = [(q.text, q.gold, q.evidence, q.question_type) for q in qs]
    # Ana's city changed (Boston -> Denver): an update question; her job was restated: its latest turn, one fact;
    # Ben's sister's city is another holder's state: not asked
    assert got == [
        ("Where does Ana live?", "Denver", ("D2:1",), "knowledge-update"),
        ("What is Ana's job?", "nurse", ("D2:2",), "single-fact"),
    ]
    assert all(q.date == T0 + timedelta(days=10) and q.dialogue_id == d.id for q in qs)
    assert [q.id for q in qs] == ["syn-9-0:q0", "syn-9-0:q1"]


def test_the_data_file_names_seeds_and_sizes(tmp_path) -> None:
    path = tmp_path / "drift.json"
    path.write_text('{"seeds": [3], "n_dialogues": 2, "n_sessions": 4}')
    dialogues = load_drift(path)
    assert [d.id for d in dialogues] == ["syn-3-0", "syn-3-1"] and all(
        len(d.sessions) == 4 for d in dialogues
    )
    assert all(d.questions and d.source == str(path) for d in dialogues)
    assert read_spec(path) == {"seeds": [3], "n_dialogues": 2, "n_sessions": 4}
    for bad, what in (('{"seeds": [], "n_dialogues": 1, "n_sessions": 3}', "seeds"),
                      ('{"seeds": [1], "n_dialogues": 1, "n_sessions": 2}', "n_sessions"),
                      ('{"seeds": [1], "n_dialogues": 1}', "exactly the keys"), ("[1", "not a readable JSON")):  # fmt: skip
        path.write_text(bad)
        with pytest.raises(DatasetError, match=what) as exc:
            read_spec(path)
        assert str(path) in str(exc.value)
