"""Reproducible subsets (benchmarks/sampling.py): stratified question draws, dialogue draws, their record and
their place in the run's identity."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from allmem import files
from allmem.errors import ConfigError
from allmem.run import identity
from allmem.run.runner import run
from allmem.types import Dialogue, Question
from benchmarks import load_dataset, sampling
from tests.runkit import compose, in_folder


def _dialogues(sizes: dict[int, int], n_dialogues: int = 3) -> list[Dialogue]:
    """Questions of each category spread over ``n_dialogues`` dialogues in turn."""
    qs = [(cat, i) for cat, n in sizes.items() for i in range(n)]
    out = []
    for d in range(n_dialogues):
        mine = tuple(
            Question(id=f"d{d}:q{j}", dialogue_id=f"d{d}", text=f"q{j}?", gold="x", evidence=(), category=cat)
            for j, (cat, _) in enumerate(qs)
            if j % n_dialogues == d
        )
        out.append(Dialogue(id=f"d{d}", sessions=(), questions=mine))
    return out


def _ids(dialogues: list[Dialogue]) -> list[str]:
    return [q.id for d in dialogues for q in d.questions]


def test_quotas_by_largest_remainder() -> None:
    # exact shares of 5 over 5/3/2: 2.5, 1.5, 1.0 -> floors 2, 1, 1; one left, tie on .5 goes to the larger group
    assert sampling.quotas({"a": 5, "b": 3, "c": 2}, 5) == {"a": 3, "b": 1, "c": 1}
    assert sampling.quotas({"a": 1, "b": 1}, 9) == {"a": 1, "b": 1}  # never more than there is
    assert sampling.quotas({"1": 282, "2": 321, "3": 96, "4": 841, "5": 446}, 100) == {
        "1": 14, "2": 16, "3": 5, "4": 42, "5": 23,  # 14.20, 16.16, 4.83, 42.35, 22.46: .83 and .46 round up
    }  # fmt: skip


def test_same_seed_same_ids_other_seed_other_ids_and_shares_hold() -> None:
    full = _dialogues({1: 10, 2: 7, 4: 20, 5: 3})
    a = sampling.apply(full, {"sample": 12, "sample_seed": 1})
    assert _ids(a) == _ids(sampling.apply(full, {"sample": 12, "sample_seed": 1}))
    assert _ids(a) != _ids(sampling.apply(full, {"sample": 12, "sample_seed": 2}))
    shares = Counter(q.category for d in a for q in d.questions)
    total = 40
    for cat, n in {1: 10, 2: 7, 4: 20, 5: 3}.items():
        assert abs(shares[cat] - 12 * n / total) < 1  # within one question of the full set's share
    assert sum(shares.values()) == 12
    order = _ids(full)
    assert [order.index(i) for i in _ids(a)] == sorted(order.index(i) for i in _ids(a))  # dataset order kept


def test_sample_dialogues_then_questions_and_empty_dialogues_dropped() -> None:
    full = _dialogues({1: 6}, n_dialogues=6)  # one question per dialogue
    picked = sampling.apply(full, {"sample_dialogues": 2, "sample_seed": 0})
    assert len(picked) == 2 and all(len(d.questions) == 1 for d in picked)
    assert [d.id for d in picked] == sorted(d.id for d in picked)
    one = sampling.apply(full, {"sample": 3, "sample_seed": 0})
    assert len(one) == 3  # dialogues with no sampled question are not streamed


def test_bad_values_are_named() -> None:
    for conf, key in (({"sample": 0}, "sample"), ({"sample": "5"}, "sample"), ({"sample_seed": 1.5}, "seed"),
                      ({"sample_dialogues": True}, "sample_dialogues")):  # fmt: skip
        with pytest.raises(ConfigError, match=key):
            sampling.apply([], conf)


def test_sampling_keys_count_only_when_sampling_is_on() -> None:
    base = identity.config_hash(compose(), "d")
    assert identity.config_hash(compose("dataset.sample_seed=7"), "d") == base  # sampling off: seed is moot
    on = identity.config_hash(compose("dataset.sample=50"), "d")
    assert on != base
    assert identity.config_hash(compose("dataset.sample=50", "dataset.sample_seed=7"), "d") != on
    assert identity.config_hash(compose("dataset.sample_dialogues=2"), "d") != base
    # the hash of a config made before the keys existed is unchanged
    old = files.plain(compose())
    del old["dataset"]["sample"], old["dataset"]["sample_seed"], old["dataset"]["sample_dialogues"]
    assert identity.config_hash(old, "d") == base


def test_a_sampled_run_records_its_ids(tmp_path: Path) -> None:
    cfg = compose(
        "+debug=default", "method=bm25", "dataset.sample=5", "dataset.sample_seed=3", *in_folder(tmp_path)
    )
    expected = _ids(load_dataset(cfg.dataset))
    run_dir = run(cfg)
    metrics = json.loads((run_dir / files.METRICS).read_text(encoding="utf-8"))
    drawn = metrics["inputs"]["sample"]
    assert (drawn["sample"], drawn["sample_seed"]) == (5, 3) and len(drawn["question_ids"]) == 5
    assert [i.split("/", 1)[1] for i in drawn["question_ids"]] == expected
    assert [r["question_id"] for r in files.read_jsonl(run_dir / files.PREDICTIONS)] == expected
    cats = Counter(r["category"] for r in files.read_jsonl(run_dir / files.PREDICTIONS))
    assert sum(cats.values()) == 5 and len(cats) == 5  # 14 questions over 5 categories: one of each


@pytest.mark.slow
def test_real_locomo_shares_within_one_question(locomo_path: Path) -> None:
    conf = {"name": "locomo", "_target_": "benchmarks.locomo.load_locomo", "path": str(locomo_path)}
    full = load_dataset(conf)
    sizes = Counter(q.category for d in full for q in d.questions)
    total = sum(sizes.values())
    a = load_dataset({**conf, "sample": 200, "sample_seed": 0})
    b = load_dataset({**conf, "sample": 200, "sample_seed": 1})
    assert _ids(a) == _ids(load_dataset({**conf, "sample": 200, "sample_seed": 0})) and _ids(a) != _ids(b)
    got = Counter(q.category for d in a for q in d.questions)
    assert sum(got.values()) == 200
    assert all(abs(got[c] - 200 * n / total) < 1 for c, n in sizes.items())
    assert len(a) == 10  # every conversation still holds a sampled question: sampling saved no ingestion
