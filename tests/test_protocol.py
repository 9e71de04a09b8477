"""The run's Protocol object is what every stage asks: ks and table k, the question framing, the answer template."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from allmem import files
from allmem.metrics.protocols import as_protocol, get_protocol
from allmem.reader.framing import NOT_MENTIONED
from allmem.report.tables import find_runs, main_table
from allmem.run.runner import run
from allmem.types import AnswerRequest
from tests.faultkit import cli
from tests.runkit import compose


def _by_hand(ranked: list[str], gold: list[str], k: int) -> tuple[float, float]:
    """R@k and N@k of PROTOCOL.md, written out: share of gold ids in the top k; binary DCG over ideal DCG."""
    gold = list(dict.fromkeys(gold))
    if not gold:
        return 0.0, 0.0
    top = ranked[:k]
    recall = sum(g in top for g in gold) / len(gold)
    dcg = sum(1 / math.log2(i + 2) for i, sid in enumerate(top) if sid in gold)
    idcg = sum(1 / math.log2(i + 2) for i in range(min(len(gold), k)))
    return recall, dcg / idcg


@pytest.fixture(scope="module")
def ks_run(tmp_path_factory, cache_dir, fixtures_dir) -> Path:
    root = tmp_path_factory.mktemp("ks")
    overrides = [
        "method=bm25", f"dataset.path={fixtures_dir / 'locomo_tiny.json'}", f"run.root={root}",
        f"paths.cache_dir={cache_dir}", "run.progress=false", "protocol.ks=[1,2]", "protocol.table_k=2",
    ]  # fmt: skip
    return run(compose(*overrides), overrides)


@pytest.mark.slow
def test_protocol_ks_are_honoured_by_the_run(ks_run):
    metrics = json.loads((ks_run / files.METRICS).read_text())
    assert metrics["ks"] == [1, 2] and metrics["table_k"] == 2
    assert metrics["metrics"] == ["f1", "bleu1", "rougeL", "R@1", "N@1", "R@2", "N@2"]
    assert "R@2" in metrics["table_metrics"] and "R@5" not in metrics["overall"]["scores"]
    records = files.read_jsonl(ks_run / files.PREDICTIONS)
    for k in (1, 2):
        hand = [_by_hand(r["ranked_source_ids"], r["evidence"], k) for r in records]
        assert metrics["overall"]["scores"][f"R@{k}"] == pytest.approx(
            100 * sum(h[0] for h in hand) / len(hand)
        )
        assert metrics["overall"]["scores"][f"N@{k}"] == pytest.approx(
            100 * sum(h[1] for h in hand) / len(hand)
        )


@pytest.mark.slow
def test_score_command_and_report_use_the_runs_protocol(ks_run):
    out = cli("score", str(ks_run), cwd=ks_run)
    assert out.rc == 0, out.err[-2000:]
    printed = json.loads(out.out)
    metrics = json.loads((ks_run / files.METRICS).read_text())
    assert printed == {k: metrics[k] for k in printed}
    table = main_table(find_runs(ks_run.parent.parent))
    assert "| R@2 | N@2 |" in table and "R@5" not in table
    # An explicit --ks rescoring says so, instead of silently using other cut-offs.
    other = cli("score", str(ks_run), "--ks", "1,5", "--table-k", "5", cwd=ks_run)
    assert other.rc == 0, other.err[-2000:]
    assert json.loads(other.out)["ks"] == [1, 5]


@pytest.mark.slow
def test_the_protocol_frames_questions_and_picks_templates(ks_run):
    """Category 5 goes out as the two-option prompt, the others as the LoCoMo prompt, as the ledger shows."""
    records = {r["question_id"]: r for r in files.read_jsonl(ks_run / files.PREDICTIONS)}
    calls = [c for c in files.read_jsonl(ks_run / files.CALLS) if c["phase"] == "generate"]
    assert len(calls) == len(records)
    for call in calls:
        rec = records[call["question_id"]]
        want = "answer_locomo_options" if rec.get("category") == 5 else "answer_locomo"
        assert call["template"] == want == rec["answer"]["template"]
        if rec.get("category") == 5:
            assert sorted(rec["options"]) == sorted([NOT_MENTIONED, rec["gold"]])


def test_answer_templates_and_judges_per_protocol():
    lme = AnswerRequest(question_id="q1", question="?", question_type="multi-session")
    assert get_protocol("allmem").answer_template(lme) == "answer_longmemeval"
    assert get_protocol("locomo").answer_template(AnswerRequest("c:q1", "?", category=4)) == "answer_locomo"
    record = {"question_id": "c:q1", "category": 5, "question": "?", "gold": "g", "prediction": "p"}
    assert not get_protocol("mem0").judges(record) and get_protocol("allmem").judges(record)
    assert get_protocol("mem0").judge_template(record) == "judge_mem0"
    assert get_protocol("longmemeval").judge_template(record | {"question_type": "knowledge-update"}) == (
        "judge_lme_update"
    )
    # a protocol config node builds the same object as its name with the same ks
    node = {"_target_": "allmem.metrics.protocols.get_protocol", "name": "mem0", "ks": [1, 2], "table_k": 1}
    assert as_protocol(node) == get_protocol("mem0", [1, 2], 1)
