"""Retrieval at every granularity (allmem/metrics/granularity.py) on hand-made rankings, every value by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from allmem.metrics.granularity import granular, names, session_of
from benchmarks import load_dataset
from tests.runkit import compose_and_run

REPO = Path(__file__).resolve().parents[1]


def test_session_of() -> None:
    assert session_of("D3:5") == "D3"
    assert session_of("answer_7161e7e2_1:4") == "answer_7161e7e2_1"
    assert session_of("answer_7161e7e2_1") == "answer_7161e7e2_1"  # a session id already


def test_a_merged_unit_with_three_evidence_turns() -> None:
    # units best first: a merged unit holding three gold turns of session 1, a unit of an unrelated turn,
    # a unit holding the fourth gold turn (session 2)
    units = [("D1:1", "D1:2", "D1:3"), ("D5:9",), ("D2:4",)]
    ranked = ["D1:1", "D1:2", "D1:3", "D5:9", "D2:4"]  # rank_source_ids of those units
    gold = ["D1:1", "D1:2", "D1:3", "D2:4"]
    out = granular(ranked, units, gold, (), ks=(1, 3))
    # turn level, k=3: top ids D1:1..D1:3 -> 3 of 4 gold: any 1, all 0, recall 3/4
    assert (out["turn_any@3"], out["turn_all@3"], out["turn_recall@3"]) == (1.0, 0.0, 0.75)
    # NDCG@3: hits at ranks 1, 2, 3: DCG = 1 + 1/log2(3) + 1/2; ideal over min(4, 3) = 3: the same -> 1
    assert out["turn_ndcg@3"] == pytest.approx(1.0)
    # unit precision@3: units 1 and 3 hold gold, unit 2 does not -> 2/3; @1: 1/1
    assert out["P@3"] == pytest.approx(2 / 3) and out["P@1"] == 1.0
    # session level: ranked sessions D1, D5, D2; gold sessions {D1, D2}: k=1 -> any 1, all 0, recall 1/2
    assert (out["session_any@1"], out["session_all@1"], out["session_recall@1"]) == (1.0, 0.0, 0.5)
    # k=3: both found; NDCG hits at ranks 1 and 3: (1 + 1/2) / (1 + 1/log2(3))
    assert out["session_all@3"] == 1.0
    assert out["session_ndcg@3"] == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    # turn level @1: only D1:1 -> recall 1/4; NDCG 1 / ideal 1 = 1
    assert out["turn_recall@1"] == 0.25 and out["turn_ndcg@1"] == 1.0
    assert list(out) == names((1, 3))


def test_fewer_units_than_k_count_as_misses_and_no_gold_is_none() -> None:
    out = granular(["D1:1"], [("D1:1",)], ["D1:1"], (), ks=(5,))
    assert out["P@5"] == pytest.approx(1 / 5) and out["turn_all@5"] == 1.0
    empty = granular(["D1:1"], [("D1:1",)], [], (), ks=(5,))
    assert all(v is None for v in empty.values())


def test_older_longmemeval_records_rank_sessions_so_turn_level_is_not_measured() -> None:
    units = [("s2",), ("s1",)]
    out = granular(["s2", "s1"], units, ["s1:3"], ["s1"], ks=(1, 2), turn_level=False)
    assert out["turn_any@2"] is None and out["turn_ndcg@2"] is None
    assert (out["session_any@1"], out["session_any@2"], out["P@1"], out["P@2"]) == (0.0, 1.0, 0.0, 0.5)
    # NDCG@2: the one gold session at rank 2 -> (1/log2(3)) / 1
    assert out["session_ndcg@2"] == pytest.approx(1 / math.log2(3))


def test_a_longmemeval_ranking_of_turn_ids_with_a_merged_unit() -> None:
    # LongMemEval gold: has_answer turns a:2, a:5 (session a) and c:0 (session c); answer sessions a and c.
    # units best first: a merged unit holding a:2 and a:5 (two evidence turns), a unit of b:1, a unit of c:0
    units = [("a:2", "a:5"), ("b:1",), ("c:0",)]
    ranked = ["a:2", "a:5", "b:1", "c:0"]
    out = granular(ranked, units, ["a:2", "a:5", "c:0"], ["a", "c"], ks=(2, 3))
    # turn @2: a:2, a:5 -> 2 of 3 gold: any 1, all 0, recall 2/3; NDCG hits at 1, 2 over ideal min(3, 2) = 2 -> 1
    assert (out["turn_any@2"], out["turn_all@2"], out["turn_recall@2"]) == (1.0, 0.0, pytest.approx(2 / 3))
    assert out["turn_ndcg@2"] == pytest.approx(1.0)
    # turn @3: a:2, a:5, b:1 -> still 2/3; NDCG (1 + 1/log2 3) / (1 + 1/log2 3 + 1/2)
    idcg3 = 1 + 1 / math.log2(3) + 0.5
    assert out["turn_recall@3"] == pytest.approx(2 / 3)
    assert out["turn_ndcg@3"] == pytest.approx((1 + 1 / math.log2(3)) / idcg3)
    # unit P: the merged unit counts once: @2 1/2, @3 (units 1 and 3) 2/3
    assert out["P@2"] == 0.5 and out["P@3"] == pytest.approx(2 / 3)
    # sessions: a, b, c; gold {a, c}: @2 any 1, all 0, recall 1/2, NDCG 1 / (1 + 1/log2 3); @3 all 1
    assert (out["session_any@2"], out["session_all@2"], out["session_recall@2"]) == (1.0, 0.0, 0.5)
    assert out["session_ndcg@2"] == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert out["session_all@3"] == 1.0
    assert out["session_ndcg@3"] == pytest.approx((1 + 0.5) / (1 + 1 / math.log2(3)))


def test_longmemeval_scorers_credit_ranked_turns_to_their_sessions() -> None:
    from allmem.metrics.protocols import credited, get_protocol
    from allmem.metrics.retrieval import kept_ranking

    record = {"question_id": "q1", "question_type": "multi-session", "evidence": ["a", "c"],
              "ranked_source_ids": ["a:2", "a:5", "b:1", "c:0"]}  # fmt: skip
    assert credited(record) == ["a", "b", "c"]
    assert credited({**record, "question_type": None, "category": 1}) == record["ranked_source_ids"]
    # the synthetic drift corpus has question types too, but its gold names turns: ranked turns as they are
    drift = {**record, "question_type": "knowledge-update", "evidence": ["D2:3"]}
    assert credited(drift) == record["ranked_source_ids"]
    # LongMemEval's official recall_any / recall_all at k=2 over sessions a, b: any 1, all 0
    lme = get_protocol("longmemeval", ks=(2,), table_k=2).score_retrieval(record)
    assert (lme["recall_any@2"], lme["recall_all@2"]) == (1.0, 0.0)
    # the allmem protocol's R@2 over sessions: a of {a, c} -> 1/2 (over turn ids it would credit nothing)
    assert get_protocol("allmem", ks=(2,), table_k=2).score_retrieval(record)["R@2"] == 0.5
    # kept ids: at least n, and more until they span the sessions asked for
    assert kept_ranking(record["ranked_source_ids"], 2, 1) == ["a:2", "a:5"]
    assert kept_ranking(record["ranked_source_ids"], 2, 2) == ["a:2", "a:5", "b:1"]
    assert kept_ranking(record["ranked_source_ids"], 1, 9) == record["ranked_source_ids"]


def test_longmemeval_loader_reads_has_answer_turn_ids() -> None:
    conf = {"name": "longmemeval_s", "_target_": "benchmarks.longmemeval.load_longmemeval",
            "path": str(REPO / "tests" / "fixtures" / "longmemeval_s_tiny.json")}  # fmt: skip
    first = load_dataset(conf)[0].questions[0]
    # the fixture's first question: session answer_7161e7e2_1's turn 0 has has_answer true
    assert first.evidence == ("answer_7161e7e2_1",)
    assert first.evidence_turns == ("answer_7161e7e2_1:0",)
    assert {session_of(t) for t in first.evidence_turns} <= set(first.evidence)
    # every turn's source id is its own stable id <session>:<index in the session>
    turns = load_dataset(conf)[0].turns()
    assert all(t.source_id == t.id == f"{t.session_id}:{t.id.rpartition(':')[2]}" for t in turns)
    assert [t.source_id for t in turns if t.session_id == "answer_7161e7e2_1"][:2] == [
        "answer_7161e7e2_1:0", "answer_7161e7e2_1:1",
    ]  # fmt: skip


def test_runs_record_units_and_turn_gold_and_the_table_reads_them(tmp_path: Path) -> None:
    from allmem import files
    from allmem.report.runs import load_run
    from allmem.report.tables import retrieval

    run_dir = compose_and_run(tmp_path, "dataset=longmemeval_s", "method=naive_rag")
    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    first = records[0]
    assert first["evidence_turns"] == ["answer_7161e7e2_1:0"]
    assert first["ranked_units"] and len(first["ranked_units"]) <= 10  # the top max(ks) units
    # naive_rag: one turn per unit, each a LongMemEval turn id <session>:<index> of the question's own haystack
    assert all(len(u) == 1 and session_of(u[0]) != u[0] for u in first["ranked_units"])
    table = retrieval.compute([load_run(run_dir)]).set_index("metric")
    scored = [r for r in records if "_abs" not in r["question_id"]]
    # unit P@1 by hand: the share of questions whose first unit holds one of their has_answer turns
    expected = [float(bool(set(r["ranked_units"][0]) & set(r["evidence_turns"]))) for r in scored]
    assert table.loc["P@1", "mean"] == pytest.approx(100 * sum(expected) / len(expected))
    assert table.loc["P@1", "n"] == len(expected) == 2
    # turn any@5 by hand from the recorded ranking: some has_answer turn among the first five ranked ids
    any5 = [float(bool(set(r["ranked_source_ids"][:5]) & set(r["evidence_turns"]))) for r in scored]
    assert table.loc["turn_any@5", "n"] == 2
    assert table.loc["turn_any@5", "mean"] == pytest.approx(100 * sum(any5) / 2)


def _rec(
    qid: str, evidence: list[str], ranked: list[str], units: list[list[str]] | None = None, **extra
) -> dict:
    """A validated record (``Prediction.scoring_view``) with what the granularity summary reads."""
    return {"question_id": qid, "dialogue_id": "d", "category": 1, "question_type": None, "evidence": evidence,
            "evidence_turns": [], "ranked_source_ids": ranked,
            "ranked_units": [[s] for s in ranked] if units is None else units, **extra}  # fmt: skip


def test_the_metrics_summary_means_every_granularity_over_the_questions_with_gold() -> None:
    """By hand, LoCoMo-style records at k=2: q1 gold D1:1, D2:4 ranked D1:1, D1:2, D2:4 (turn any 1, all 0;
    sessions D1, D2 both in: session all 1); q2 gold D3:1 ranked D4:1, D3:1 (turn any/all 1, session any/all 1);
    q3 without gold (left out everywhere); q4 an abstention id (left out); q5 of category 5, which the mem0
    protocol does not score."""
    from allmem.metrics.granularity import summary
    from allmem.metrics.protocols import get_protocol

    records = [
        _rec("q1", ["D1:1", "D2:4"], ["D1:1", "D1:2", "D2:4"]),
        _rec("q2", ["D3:1"], ["D4:1", "D3:1"]),
        _rec("q3", [], ["D1:1"]),
        _rec("x_abs", ["D1:1"], ["D9:9"]),
        _rec("q5", ["D5:1"], ["D9:9"], category=5),
    ]
    out = summary(records, get_protocol("allmem", ks=(2,), table_k=2))
    assert (out["count"], out["ks"], out["levels"]) == (4, [2], ["turn", "session", "unit"])
    s, n = out["scores"], out["n"]
    assert n["turn_all@2"] == n["session_all@2"] == n["P@2"] == 3  # q1, q2, q5 have gold
    # turn any: 1, 1, 0 -> 2/3; turn all: 0, 1, 0 -> 1/3; session all: q1 {D1, D2} in D1, D2 -> 1; q2 {D3} in
    # D4, D3 -> 1; q5 {D5} not in D9 -> 0: 2/3; unit P@2: q1 1/2, q2 1/2, q5 0 -> 1/3
    assert s["turn_any@2"] == pytest.approx(200 / 3) and s["turn_all@2"] == pytest.approx(100 / 3)
    assert s["session_all@2"] == pytest.approx(200 / 3) and s["P@2"] == pytest.approx(100 / 3)
    # session recall: q1 1, q2 1, q5 0 -> 2/3; turn recall: 1/2, 1, 0 -> 1/2
    assert s["session_recall@2"] == pytest.approx(200 / 3) and s["turn_recall@2"] == pytest.approx(50)
    assert set(s) == set(n) == set(names((2,)))
    mem0 = summary(records, get_protocol("mem0", ks=(2,), table_k=2))  # category 5 is not scored: q1, q2
    assert mem0["count"] == 3 and mem0["n"]["turn_all@2"] == 2 and mem0["scores"]["turn_all@2"] == 50.0


def test_the_metrics_summary_of_older_longmemeval_records_has_no_turn_level() -> None:
    """LongMemEval records that rank sessions (records version 5 and earlier): session level and unit precision
    (over sessions) only; the same records ranking turn ids measure turns too."""
    from allmem.metrics.granularity import ranks_turns, summary
    from allmem.metrics.protocols import get_protocol

    lme = {"category": None, "question_type": "multi-session"}
    old = [_rec("q1", ["s1"], ["s2", "s1"], evidence_turns=["s1:3"], **lme)]
    new = [_rec("q1", ["s1"], ["s2:0", "s1:3"], evidence_turns=["s1:3"], **lme)]
    assert (ranks_turns(old), ranks_turns(new)) == (False, True)
    protocol = get_protocol("allmem", ks=(1, 2), table_k=2)
    before, after = summary(old, protocol), summary(new, protocol)
    assert before["levels"] == ["session", "unit"] and before["n"]["turn_any@2"] == 0
    assert before["scores"]["turn_any@2"] is None and before["scores"]["session_any@2"] == 100.0
    assert after["levels"] == ["turn", "session", "unit"]
    # the gold turn s1:3 is ranked second: turn any@1 0, @2 1; NDCG@2 1/log2(3)
    assert (after["scores"]["turn_any@1"], after["scores"]["turn_any@2"]) == (0.0, 100.0)
    assert after["scores"]["turn_ndcg@2"] == pytest.approx(100 / math.log2(3))


def test_a_locomo_run_states_every_granularity_in_metrics_and_the_table_reads_it(tmp_path: Path) -> None:
    """A LoCoMo run (the debug fixture): metrics.json holds session-level and all-gold (strict) retrieval, equal
    to the values computed by hand from its predictions; the retrieval table's numbers are metrics.json's, read
    from it (a changed value in metrics.json shows in the table)."""
    from allmem import files
    from allmem.report.runs import load_run
    from allmem.report.tables import retrieval

    run_dir = compose_and_run(tmp_path, "dataset=locomo", "method=bm25")
    records = [r for r in files.read_jsonl(run_dir / files.PREDICTIONS) if r["evidence"]]
    block = files.read_json(run_dir / files.METRICS)["granularity"]
    assert block["levels"] == ["turn", "session", "unit"] and block["count"] == 14
    for k in block["ks"]:
        # strict (all-gold) at turn level: every evidence turn among the first k ranked ids
        strict = [set(r["evidence"]) <= set(r["ranked_source_ids"][:k]) for r in records]
        # at session level: every evidence turn's session among the first k distinct sessions of the ranking
        sessions = [
            {g.split(":")[0] for g in r["evidence"]}
            <= set(list(dict.fromkeys(s.split(":")[0] for s in r["ranked_source_ids"]))[:k])
            for r in records
        ]
        assert block["n"][f"turn_all@{k}"] == block["n"][f"session_all@{k}"] == len(records)
        assert block["scores"][f"turn_all@{k}"] == pytest.approx(100 * sum(strict) / len(records))
        assert block["scores"][f"session_all@{k}"] == pytest.approx(100 * sum(sessions) / len(records))
    # on this fixture strict retrieval is harder at turn level than at session level: the two are not one number
    assert block["scores"]["session_all@10"] > block["scores"]["turn_all@10"]
    table = retrieval.compute([load_run(run_dir)]).set_index("metric")
    assert table["mean"].to_dict() == block["scores"] and table["n"].to_dict() == block["n"]
    metrics = files.read_json(run_dir / files.METRICS)
    metrics["granularity"]["scores"]["session_all@5"] = 12.5
    files.write_json(run_dir / files.METRICS, metrics)
    assert retrieval.compute([load_run(run_dir)]).set_index("metric").loc["session_all@5", "mean"] == 12.5
    # a run sealed before metrics.json held the block: the table computes it from the records, the same numbers
    del metrics["granularity"]
    files.write_json(run_dir / files.METRICS, metrics)
    assert retrieval.compute([load_run(run_dir)]).set_index("metric")["mean"].to_dict() == block["scores"]
