"""LongMemEval turn ids through every method of Table 1 (and ``method=http``): a small LongMemEval-format file from
the generator (benchmarks/lme_synth.py) run end to end on the debug config (hash embedder, offline LLM); every
ranked id, every recorded unit and every packed context unit names turns ``<session id>:<turn index>`` of the
question's own haystack, and the records' gold turns are exactly the file's ``has_answer`` turns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from allmem import files
from allmem.metrics.retrieval import session_ranking
from benchmarks.lme_synth import write_longmemeval
from examples.memory_server import serving
from tests.runkit import compose_and_run

REPO = Path(__file__).resolve().parents[1]
TABLE1 = OmegaConf.load(REPO / "configs" / "experiment" / "table1.yaml").hydra.sweeper.params.method.split(
    ","
)


@pytest.fixture(scope="module")
def lme_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 questions x 3 sessions of ~10 turns each (the generator plants the answers in has_answer turns)."""
    return write_longmemeval(tmp_path_factory.mktemp("lme") / "small.json", questions=2, sessions=3, seed=5)


def _run(tmp: Path, data: Path, *overrides: str) -> Path:
    return compose_and_run(tmp, "dataset=longmemeval_s", f"dataset.path={data}", *overrides)


def _check_turn_ids(run_dir: Path, data: Path) -> None:
    raw = {e["question_id"]: e for e in json.loads(data.read_text())}
    assert (run_dir / files.DONE).exists() and (run_dir / files.METRICS).exists()  # sealed, scored
    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    assert sorted(r["question_id"] for r in records) == sorted(raw)
    for r in records:
        e = raw[r["question_id"]]
        assert r["gold"] == e["answer"]
        sizes = dict(zip(e["haystack_session_ids"], map(len, e["haystack_sessions"]), strict=True))
        turn_ids = {f"{sid}:{j}" for sid, n in sizes.items() for j in range(n)}
        has_answer = [
            f"{sid}:{j}"
            for sid, turns in zip(e["haystack_session_ids"], e["haystack_sessions"], strict=True)
            for j, t in enumerate(turns)
            if t.get("has_answer")
        ]
        assert "error" not in r and r["ranked_source_ids"] and r["ranked_units"]
        assert set(r["ranked_source_ids"]) <= turn_ids, r["ranked_source_ids"][:5]
        assert {i for u in r["ranked_units"] for i in u} <= turn_ids
        assert sorted(r["evidence_turns"]) == sorted(has_answer) and r["evidence"] == e["answer_session_ids"]
        # the session-level score the run reports reads the turns' sessions: recall_any / R@k from them by hand
        assert set(session_ranking(r["ranked_source_ids"])) <= set(sizes)
    contexts = files.read_jsonl(run_dir / files.CONTEXTS)
    packed = [i for c in contexts for u in c["units"] for i in u["source_ids"]]
    assert packed and all(":" in i and i.rpartition(":")[0] in {s for e in raw.values() for s in
                                                                 e["haystack_session_ids"]} for i in packed)  # fmt: skip


@pytest.mark.parametrize("method", TABLE1)
def test_every_table1_method_ranks_longmemeval_turn_ids(method: str, lme_file: Path, tmp_path: Path) -> None:
    _check_turn_ids(_run(tmp_path, lme_file, f"method={method}"), lme_file)


@pytest.mark.parametrize("experiment", ["stage1_bm25", "stage1_hybrid"])
def test_table1_stage1_variants_rank_longmemeval_turn_ids(
    experiment: str, lme_file: Path, tmp_path: Path
) -> None:
    _check_turn_ids(_run(tmp_path, lme_file, f"+experiment={experiment}", "run.bank_cache=null"), lme_file)


def test_http_method_ranks_longmemeval_turn_ids(lme_file: Path, tmp_path: Path) -> None:
    with serving("allmem") as url:
        run_dir = _run(tmp_path, lme_file, "method=http", f"method.url={url}", "method.k=16")
    _check_turn_ids(run_dir, lme_file)


def test_session_scores_of_a_longmemeval_run_are_its_turns_sessions(lme_file: Path, tmp_path: Path) -> None:
    """The allmem protocol's R@1 on LongMemEval, by hand from a record: the first ranked turn's session among the
    answer sessions, over their number."""
    run_dir = _run(tmp_path, lme_file, "method=bm25")
    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    metrics = json.loads((run_dir / files.METRICS).read_text())
    by_hand = [
        len({r["ranked_source_ids"][0].rpartition(":")[0]} & set(r["evidence"])) / len(set(r["evidence"]))
        for r in records
    ]
    assert sum(by_hand) > 0  # not vacuous: over raw turn ids nothing would match a session id
    assert metrics["overall"]["scores"]["R@1"] == pytest.approx(100 * sum(by_hand) / len(by_hand))
