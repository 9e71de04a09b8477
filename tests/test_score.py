"""score_records / score_file / the score CLI: protocols, aggregation, judge handling, input errors.

Expected numbers are worked out by hand in the comments from the definitions in PROTOCOL.md.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from allmem.metrics import RecordError, get_protocol, item_scores, main, score_file, score_records
from allmem.metrics.aggregate import NO_JUDGE_REASON, NO_JUDGED_IN_GROUP

REPO = Path(__file__).resolve().parents[1]
L3 = math.log2(3)


def _rec(
    qid: str, cat: int, pred: str, gold: Any, ev: list[str], ranked: list[str], verdict: str | None = None
):
    rec: dict[str, Any] = {
        "question_id": qid,
        "dialogue_id": "conv-x",
        "category": cat,
        "prediction": pred,
        "gold": gold,
        "evidence": ev,
        "ranked_source_ids": ranked,
    }
    if verdict is not None:
        rec["judge"] = {"verdict": verdict, "raw": f"[[{verdict}]]"}
    return rec


LOCOMO = [
    _rec(
        "q1",
        1,
        "hiking, painting",
        "painting, hiking, swimming",
        ["D1:1", "D2:3"],
        ["D1:1", "D9:9", "D2:3"],
        "yes",
    ),
    _rec("q2", 4, "2022", 2022, ["D3:1"], ["D3:1"], "no"),  # integer gold
    _rec("q3", 3, "", "Likely yes; she mentioned it", [], ["D1:1"], "invalid"),  # empty pred, empty evidence
    _rec("q4", 5, "Not mentioned in the conversation", "Her sister", ["D4:2"], []),  # no verdict
]


def test_allmem_protocol_overall() -> None:
    out = score_records(LOCOMO, "allmem")
    s = out["overall"]["scores"]
    assert out["n_records"] == out["n_scored"] == out["overall"]["count"] == 4
    # set F1: q1 P = 1, R = 2/3 -> 0.8; q2 1; q3 0 (empty); q4 0 -> 1.8 / 4
    assert s["f1"] == pytest.approx(45.0)
    # BLEU-1: q1 p1 = 1, BP = exp(1 - 3/2); q2 1; q3, q4 0
    assert s["bleu1"] == pytest.approx(100 * (math.exp(-0.5) + 1) / 4)
    # R@1: q1 1/2, q2 1, q3 0 (empty gold still counted), q4 0 (nothing ranked)
    assert s["R@1"] == pytest.approx(37.5)
    assert s["R@3"] == pytest.approx(50.0)
    # N@3: q1 DCG = 1 + 1/log2(4), IDCG = 1 + 1/log2(3); q2 1
    assert s["N@3"] == pytest.approx(100 * (1.5 / (1 + 1 / L3) + 1) / 4)
    assert out["overall"]["n"]["R@3"] == 4


def test_judge_aggregation_excludes_and_counts_invalid() -> None:
    out = score_records(LOCOMO, "allmem")
    # yes 1, no 1, invalid 1 (out of the denominator), missing 1 -> 100 * 1 / 2
    assert out["overall"]["judge"] == pytest.approx(50.0)
    assert out["overall"]["judge_counts"] == {"yes": 1, "no": 1, "invalid": 1, "missing": 1}
    assert "judge_reason" not in out["overall"]
    assert out["groups"]["1"]["judge"] == 100.0
    assert out["groups"]["4"]["judge"] == 0.0
    # a group whose only verdict is invalid, and one with none, have no judge number
    assert out["groups"]["3"]["judge"] is None
    assert out["groups"]["3"]["judge_reason"] == NO_JUDGED_IN_GROUP
    assert out["groups"]["5"]["judge_reason"] == NO_JUDGED_IN_GROUP


def test_no_judge_reports_null_with_reason_not_a_proxy() -> None:
    plain = [{k: v for k, v in r.items() if k != "judge"} for r in LOCOMO]
    out = score_records(plain, "allmem")
    assert out["overall"]["judge"] is None
    assert out["overall"]["judge_reason"] == NO_JUDGE_REASON == "no LLM judge ran (offline backend)"
    assert all(g["judge"] is None and g["judge_reason"] == NO_JUDGE_REASON for g in out["groups"].values())


def test_groups_are_category_strings_in_numeric_order() -> None:
    out = score_records(LOCOMO, "allmem")
    assert list(out["groups"]) == ["1", "3", "4", "5"]
    assert out["groups"]["1"]["scores"]["f1"] == pytest.approx(80.0)
    assert all(g["count"] == 1 for g in out["groups"].values())


def test_mem0_excludes_category5_and_uses_nltk_bleu() -> None:
    out = score_records(LOCOMO, "mem0")
    assert (out["n_records"], out["n_scored"], out["n_excluded"]) == (4, 3, 1)
    assert list(out["groups"]) == ["1", "3", "4"]
    assert "rougeL" not in out["metrics"]
    # F1 over q1..q3: (0.8 + 1 + 0) / 3
    assert out["overall"]["scores"]["f1"] == pytest.approx(100 * 1.8 / 3)
    # q1 NLTK tokens: pred [hiking , painting], gold [painting , hiking , swimming]: all 3 clipped matches,
    # c = 3 < r = 5 so BP = exp(1 - 5/3); q2 1; q3 0
    assert out["overall"]["scores"]["bleu1"] == pytest.approx(100 * (math.exp(-2 / 3) + 1) / 3)


def test_locomo_protocol_official_scores() -> None:
    out = score_records(LOCOMO, "locomo")
    assert out["metrics"][0] == "f1"
    # q1 category 1 best-match average 2/3; q2 1; q3 empty prediction 0; q4 category 5 phrase 1
    assert out["overall"]["scores"]["f1"] == pytest.approx(100 * (2 / 3 + 1 + 0 + 1) / 4)
    assert out["groups"]["5"]["scores"]["f1"] == 100.0


def test_locomo_protocol_needs_a_category() -> None:
    rec = {**LOCOMO[0], "category": None, "question_type": "multi-session"}
    with pytest.raises(RecordError, match="'category'"):
        score_records([rec], "locomo")


LME = [
    {"question_id": "a1", "question_type": "multi-session", "prediction": "x", "gold": "y",
     "evidence": ["s1", "s2"], "ranked_source_ids": ["s3", "s1", "s2"], "judge": {"verdict": "yes"}},
    {"question_id": "b2_abs", "question_type": "multi-session", "prediction": "x", "gold": "y",
     "evidence": ["s9"], "ranked_source_ids": [], "judge": {"verdict": "no"}},
    {"question_id": "c3", "question_type": "temporal-reasoning", "prediction": "x", "gold": "y",
     "evidence": ["s1"], "ranked_source_ids": ["s1"]},
]  # fmt: skip


def test_longmemeval_skips_abstention_for_retrieval_only() -> None:
    out = score_records(LME, "longmemeval")
    o = out["overall"]
    assert o["count"] == 3 and o["n"]["recall_any@1"] == 2
    # a1: any@1 0, c3: 1 -> 50; a1 ndcg@3 = (0 + 1 + 1/log2 3) / (1 + 1); c3 1
    assert o["scores"]["recall_any@1"] == pytest.approx(50.0)
    assert o["scores"]["recall_all@3"] == pytest.approx(100.0)
    assert o["scores"]["ndcg_any@3"] == pytest.approx(100 * ((1 + 1 / L3) / 2 + 1) / 2)
    # the abstention question still counts for the judge: yes 1, no 1, missing 1
    assert o["judge"] == pytest.approx(50.0)
    assert o["judge_counts"]["missing"] == 1
    assert list(out["groups"]) == ["multi-session", "temporal-reasoning"]
    assert out["groups"]["multi-session"]["n"]["ndcg_any@5"] == 1


def test_item_scores_align_with_records() -> None:
    items = item_scores(LOCOMO, "mem0")
    assert items[3] is None  # category 5 excluded under mem0
    assert items[0] is not None and items[0]["f1"] == pytest.approx(0.8)


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.mark.parametrize("protocol", ["allmem", "mem0", "locomo"])
def test_score_file_agrees_with_score_records_and_is_order_free(tmp_path: Path, protocol: str) -> None:
    path = _write_jsonl(tmp_path / "predictions.jsonl", LOCOMO)
    from_file = score_file(path, protocol)
    shuffled = LOCOMO[:]
    random.Random(3).shuffle(shuffled)
    text = json.dumps(from_file, allow_nan=False)
    assert text == json.dumps(score_records(LOCOMO, protocol), allow_nan=False)
    assert text == json.dumps(score_records(shuffled, protocol), allow_nan=False)


def test_cli_prints_and_writes_the_same_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write_jsonl(tmp_path / "predictions.jsonl", LOCOMO)
    out = tmp_path / "sub" / "metrics.json"
    assert main([str(path), "--protocol", "mem0", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text()) == score_file(path, "mem0")


def test_cli_reports_errors_with_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("{oops\n", encoding="utf-8")
    assert main([str(path)]) == 2
    assert f"{path}:1" in capsys.readouterr().err


GOOD = json.dumps(LOCOMO[0])


@pytest.mark.parametrize(
    ("bad_line", "field"),
    [
        ('{"question_id": "q9", ', "not valid JSON"),
        ('["a list"]', "JSON object"),
        (json.dumps({k: v for k, v in LOCOMO[1].items() if k != "gold"}), "'gold'"),
        (json.dumps({**LOCOMO[1], "prediction": None}), "'prediction'"),
        (json.dumps({**LOCOMO[1], "evidence": "D3:1"}), "'evidence'"),
        (json.dumps({**LOCOMO[1], "ranked_source_ids": [1, 2]}), "'ranked_source_ids'"),
        (json.dumps({**LOCOMO[1], "judge": {"verdict": "maybe"}}), "'judge'"),
        (json.dumps({**LOCOMO[1], "category": 7}), "'category'"),
        (json.dumps({k: v for k, v in LOCOMO[1].items() if k != "category"}), "'category'"),
        (json.dumps({**LOCOMO[1], "question_id": ""}), "'question_id'"),
        (json.dumps({**LOCOMO[1], "question_id": "q1"}), "duplicate"),  # q1 is on line 1
    ],
)
def test_malformed_jsonl_names_file_line_and_field(tmp_path: Path, bad_line: str, field: str) -> None:
    path = tmp_path / "preds.jsonl"
    path.write_text(f"{GOOD}\n\n{bad_line}\n", encoding="utf-8")  # blank line 2 is skipped
    with pytest.raises(RecordError) as err:
        score_file(path, "allmem")
    assert f"{path}:3" in str(err.value)
    assert field in str(err.value)


def test_same_question_id_in_two_dialogues_is_fine() -> None:
    other = {**LOCOMO[0], "dialogue_id": "conv-y"}
    assert score_records([LOCOMO[0], other], "allmem")["n_scored"] == 2


def test_get_protocol_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="unknown protocol"):
        get_protocol("bleu")
    with pytest.raises(ValueError, match="table_k"):
        get_protocol("allmem", ks=(1, 3), table_k=5)
    assert get_protocol("allmem", ks=[1, 5]).metric_names()[3:] == ["R@1", "N@1", "R@5", "N@5"]


@pytest.mark.parametrize("name", ["allmem", "mem0", "locomo", "longmemeval"])
def test_protocol_configs_instantiate(name: str) -> None:
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(REPO / "configs" / "protocol" / f"{name}.yaml")
    assert "ks" not in cfg and "table_k" not in cfg  # stated once, for every protocol, in configs/config.yaml
    proto = instantiate(cfg)
    assert proto == get_protocol(name) and (proto.ks, proto.table_k) == ((1, 3, 5, 10), 5)


def test_real_locomo_oracle_under_mem0(locomo_path: Path) -> None:
    """Gold answers and gold evidence as predictions on the real LoCoMo: checks counts and the empty-gold rule."""
    records = []
    for sample in json.loads(locomo_path.read_text(encoding="utf-8")):
        for i, q in enumerate(sample["qa"]):
            gold = str(q["answer"] if "answer" in q else q["adversarial_answer"])
            records.append(
                _rec(f"{sample['sample_id']}:{i}", q["category"], gold, gold, q["evidence"], q["evidence"])
            )
    out = score_records(records, "mem0")
    assert (out["n_records"], out["n_scored"], out["n_excluded"]) == (1986, 1540, 446)
    assert [g["count"] for g in out["groups"].values()] == [282, 321, 96, 841]
    assert out["overall"]["scores"]["f1"] == 100.0
    # N@1 is 1 wherever there is gold; the 4 category-3 questions with empty evidence score 0 and still count
    assert out["overall"]["scores"]["N@1"] == pytest.approx(100 * 1536 / 1540)
    assert out["overall"]["judge_reason"] == NO_JUDGE_REASON


def test_prediction_record_round_trips_and_old_files_still_score() -> None:
    """The runner writes ``Prediction.to_json``; the scorer reads it back unchanged, and lines written before
    the provenance fields existed (no ``answer``, ``attempt``) still score the same."""
    from allmem.types import AnswerInfo, Prediction

    pred = Prediction(
        question_id="conv-x:q0001", dialogue_id="conv-x", question="Where?", prediction="the park", gold="park",
        evidence=("D1:1",), ranked_source_ids=("D1:1", "D2:2"), category=4, context_tokens=12, context_units=2,
        latency_ms={"retrieve": 1.5}, answer=AnswerInfo("answer_locomo", "ab12", cached=False), attempt=2,
        judge={"verdict": "yes", "template": "judge_allmem_default"},
    )  # fmt: skip
    line = pred.to_json()
    assert line["answer"] == {"template": "answer_locomo", "prompt_hash": "ab12", "cached": False}
    assert Prediction.from_json(json.loads(json.dumps(line))) == pred
    old = {k: v for k, v in line.items() if k not in ("answer", "attempt")}
    assert (
        score_records([old], "allmem") == score_records([line], "allmem") == score_records([pred], "allmem")
    )


def test_a_failed_question_is_never_scored(tmp_path: Path) -> None:
    failed = {**LOCOMO[1], "prediction": "", "error": "answer: transport: APIConnectionError after 4 retries"}
    path = tmp_path / "preds.jsonl"
    path.write_text(f"{GOOD}\n{json.dumps(failed)}\n", encoding="utf-8")
    with pytest.raises(
        RecordError, match=r"preds.jsonl:2: question 'q2' failed \(answer: transport.*run it again"
    ):
        score_file(path, "allmem")
