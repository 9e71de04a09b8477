"""The judge's sanity probes (allmem.metrics.judge_sanity): known-right answers are each question's gold,
known-wrong ones another question's gold sharing no word with it; the rates count what the judge accepted."""

from __future__ import annotations

from pathlib import Path

from allmem.llm import build_llm
from allmem.metrics.judge_sanity import probes, sanity
from allmem.metrics.protocols import as_protocol

RECORDS = [
    {"dialogue_id": "d1", "question_id": "q1", "question": "Pet?", "gold": "a dog", "prediction": "x", "category": 1},
    {"dialogue_id": "d1", "question_id": "q2", "question": "Pet name?", "gold": "the dog Rex", "prediction": "x",
     "category": 1},  # shares "dog" with q1: never q1's known-wrong answer
    {"dialogue_id": "d1", "question_id": "q3", "question": "City?", "gold": "Paris", "prediction": "x", "category": 4},
    {"dialogue_id": "d2", "question_id": "q4", "question": "Job?", "gold": "nurse", "prediction": "x", "category": 4},
]  # fmt: skip


def test_probes_pair_each_question_with_its_gold_and_an_unrelated_gold() -> None:
    got = [(kind, r["question_id"], r["prediction"]) for kind, r in probes(RECORDS, as_protocol("allmem"))]
    assert got == [
        ("known_right", "q1", "a dog"), ("known_wrong", "q1", "Paris"),
        ("known_right", "q2", "the dog Rex"), ("known_wrong", "q2", "Paris"),
        ("known_right", "q3", "Paris"), ("known_wrong", "q3", "a dog"),
        ("known_right", "q4", "nurse"),  # d2 has no other question: no known-wrong probe
    ]  # fmt: skip


class _Judging:
    def __init__(self, llm: object) -> None:
        self._llm, self.can_judge = llm, True

    def __getattr__(self, name: str) -> object:
        return getattr(self._llm, name)


def test_rates_count_what_the_judge_accepted(tmp_path: Path) -> None:
    def lenient(req) -> str:  # noqa: ANN001 - accepts every answer but "Paris"
        return "[[no]]" if "Model response: Paris" in req.messages[-1]["content"] else "[[yes]]"

    llm = build_llm({"_target_": "allmem.llm.scripted.ScriptedBackend", "backend": "scripted",
                     "script": {"judge_allmem_default": lenient}, "cache": {"enabled": False}})  # fmt: skip
    out = sanity(_Judging(llm), RECORDS, as_protocol("allmem"))
    assert out["known_right"] == {"n": 4, "accepted": 3, "rejected": 1, "invalid": 0, "accept_rate": 75.0}
    assert out["known_wrong"] == {"n": 3, "accepted": 1, "rejected": 2, "invalid": 0, "accept_rate": 100 / 3}
    assert out["failed"] == 0
