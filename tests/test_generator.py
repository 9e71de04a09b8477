"""The size-true LongMemEval generator (benchmarks/lme_synth.py, scripts/make_longmemeval.py).

Its output must be something the real loader reads like the real release, with LongMemEval-s's shape: text no
cache has seen (no session or turn repeated anywhere), turns of LongMemEval's length (user shorter than assistant),
and answers planted in the has_answer turns of the evidence sessions, so retrieval numbers on it mean something.
A generated file run end to end by every Table 1 method: tests/test_lme_turn_ids.py.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from faultkit import REPO
from omegaconf import OmegaConf

from allmem.tokens import count_tokens
from benchmarks import load_dataset
from benchmarks.lme_synth import (
    ABSTENTION_PREFIX,
    PREFERENCE_PREFIX,
    TYPE_COUNTS,
    iter_records,
    write_longmemeval,
)
from benchmarks.longmemeval import load_longmemeval, parse_longmemeval_date


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 questions x 4 sessions, as the brief's smallest useful file."""
    return write_longmemeval(tmp_path_factory.mktemp("gen") / "tiny.json", questions=3, sessions=4, seed=7)


@pytest.fixture(scope="module")
def every_type(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """17 questions: every question type and one abstention question."""
    path = write_longmemeval(tmp_path_factory.mktemp("gen") / "types.json", questions=17, sessions=5, seed=3)
    return json.loads(path.read_text())


def test_tiny_file_loads_through_the_real_loader_and_config(tiny: Path) -> None:
    cfg = OmegaConf.load(REPO / "configs" / "dataset" / "longmemeval_s.yaml")
    cfg.path = str(tiny)
    dialogues = load_dataset(cfg)
    raw = json.loads(tiny.read_text())
    assert [d.id for d in dialogues] == [e["question_id"] for e in raw] and len(dialogues) == 3
    for d, e in zip(dialogues, raw, strict=True):
        assert (
            len(d.sessions) == 4 and [s.id for s in d.sessions] == e["haystack_session_ids"]
        )  # dates ascend
        q = d.questions[0]
        assert q.gold == e["answer"] and set(q.evidence) <= {s.id for s in d.sessions} and q.evidence
        assert q.date > d.sessions[-1].date  # the question is asked after the last session
        assert all(t.role in ("user", "assistant") for s in d.sessions for t in s.turns)


def test_every_question_type_and_abstention(every_type: list[dict[str, Any]]) -> None:
    assert {e["question_type"] for e in every_type} == set(TYPE_COUNTS)
    abstain = [e for e in every_type if e["question_id"].endswith("_abs")]
    assert len(abstain) == 1 and abstain[0]["answer"].startswith(ABSTENTION_PREFIX)


def _answer_parts(entry: dict[str, Any]) -> list[str]:
    """The strings the evidence must contain: the answer, each item of a list answer, the preference."""
    answer = entry["answer"]
    if entry["question_type"] == "single-session-preference":
        return [answer.removeprefix(PREFERENCE_PREFIX).removesuffix(".")]
    return re.split(r", | and ", answer) if entry["question_type"] == "multi-session" else [answer]


def test_answers_are_in_the_has_answer_turns_of_the_evidence(every_type: list[dict[str, Any]]) -> None:
    for e in every_type:
        sessions = dict(zip(e["haystack_session_ids"], e["haystack_sessions"], strict=True))
        marked = {
            sid: [t["content"] for t in turns if t.get("has_answer")] for sid, turns in sessions.items()
        }
        assert {sid for sid, texts in marked.items() if texts} == set(e["answer_session_ids"]), e[
            "question_id"
        ]
        if e["question_id"].endswith("_abs"):
            continue
        evidence_text = " ".join(t for sid in e["answer_session_ids"] for t in marked[sid])
        other_text = " ".join(t["content"] for sid, ts in sessions.items() if not marked[sid] for t in ts)
        for part in _answer_parts(e):
            assert part in evidence_text, (e["question_id"], part)
            assert part not in other_text, (e["question_id"], part)  # distractors never give it away
        if e["question_type"] == "knowledge-update":  # the newer evidence session holds the current value
            latest = max(e["answer_session_ids"], key=lambda s: e["haystack_session_ids"].index(s))
            assert e["answer"] in " ".join(marked[latest])
        if e["question_type"] == "temporal-reasoning":  # the answer is the earlier of the two events
            first = min(e["answer_session_ids"], key=lambda s: parse_longmemeval_date(
                e["haystack_dates"][e["haystack_session_ids"].index(s)]))  # fmt: skip
            assert e["answer"] in " ".join(marked[first])


def test_no_session_or_turn_repeats_within_or_across_haystacks(every_type: list[dict[str, Any]]) -> None:
    sessions = [json.dumps(s) for e in every_type for s in e["haystack_sessions"]]
    turns = [t["content"] for e in every_type for s in e["haystack_sessions"] for t in s]
    ids = [sid for e in every_type for sid in e["haystack_session_ids"]]
    assert len(set(sessions)) == len(sessions) == len(set(ids)) == 17 * 5
    assert len(set(turns)) == len(turns)


def test_same_seed_same_bytes_other_seed_other_text(tmp_path: Path) -> None:
    a = write_longmemeval(tmp_path / "a.json", questions=2, sessions=3, seed=11).read_bytes()
    b = write_longmemeval(tmp_path / "b.json", questions=2, sessions=3, seed=11).read_bytes()
    c = write_longmemeval(tmp_path / "c.json", questions=2, sessions=3, seed=12).read_bytes()
    assert a == b and a != c
    assert not (tmp_path / "a.json.part").exists()


def test_token_lengths_like_longmemeval_s() -> None:
    """LongMemEval-s: ~230 tokens a turn, ~115k a haystack of ~50 sessions; user turns shorter than assistant."""
    user: list[int] = []
    assistant: list[int] = []
    per_haystack = []
    for e in iter_records(questions=4, sessions=50, seed=5):
        total = 0
        for session in e["haystack_sessions"]:
            for t in session:
                n = count_tokens(t["content"])
                (user if t["role"] == "user" else assistant).append(n)
                total += n
        per_haystack.append(total)
    mean = statistics.mean(user + assistant)
    assert 210 <= mean <= 250, mean
    assert statistics.mean(user) < 0.6 * statistics.mean(assistant)
    assert 100_000 <= statistics.mean(per_haystack) <= 130_000, per_haystack
    assert 8 <= len(user + assistant) / (4 * 50) <= 12  # ~10 turns a session


def test_question_types_follow_longmemeval_s_proportions() -> None:
    counts = Counter(e["question_type"] for e in iter_records(questions=500, sessions=1, seed=0))
    assert counts == Counter(TYPE_COUNTS)


@pytest.mark.slow  # the script in a subprocess
def test_script_help_and_fraction(tmp_path: Path) -> None:
    script = REPO / "scripts" / "make_longmemeval.py"
    shown = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0 and "--fraction" in shown.stdout and "has_answer" in shown.stdout
    out = tmp_path / "f.json"
    made = subprocess.run(
        [sys.executable, str(script), str(out), "--fraction", "0.004", "--sessions", "2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert len(load_longmemeval(out)) == 2  # 0.4 % of 500
    assert re.search(r"sha256 [0-9a-f]{64}  f\.json", made.stdout)
    bad = subprocess.run(
        [sys.executable, str(script), str(out), "--fraction", "2"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--fraction must be in (0, 1]" in bad.stderr
