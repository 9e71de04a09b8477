"""``make bench-scale``'s script composes this checkout's config (scripts/bench_scale.py).

Why: the bench reads the run config (does this code have ``run.workers`` / ``run.shard``?) and an embedder's backend
through Hydra's compose API, outside ``allmem run``; the configs use allmem's own resolvers
(``hydra.searchpath: ${allmem.searchpath:}``), so composing without them failed at the bench's first step. Checked in
a fresh interpreter: the test session has imported allmem (and so registered the resolvers) already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

_PROBE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("bench_scale", sys.argv[1])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
print(json.dumps({
    "keys": sorted(bench.run_keys()),
    "int8": bench.compose_config(["embedder=minilm_onnx_int8"]).embedder.backend,
    "default": bench.compose_config([]).embedder.backend,
    "torch": bench.compose_config(["embedder=minilm_torch"]).embedder.backend,
}))
"""


@pytest.mark.slow  # a fresh interpreter
def test_the_bench_composes_the_config_in_a_fresh_interpreter():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(REPO / "scripts" / "bench_scale.py")],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"workers", "shard"} <= set(got["keys"])
    assert got["int8"] == "onnx_int8"
    assert got["torch"] == "torch" and got["default"] == "onnx_fp32"


def _bench_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_scale", REPO / "scripts" / "bench_scale.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_projection_pays_each_process_once_per_task_and_each_turn_once(capsys):
    """Two methods worked out by hand: W = 100 + 50 ms per turn, Q = 2000 + 1000 ms per question, F = 10 + 5 s per
    task. P = 2: (15 + (150 x 250,000 + 3000 x 500) / 1000 / 2) / 3600 = 19,515 / 3600 = 5.42 h; P = 32:
    (15 + 39,000 / 32) / 3600 = 0.34 h. All-in (150 + 80 ms per turn spread over 250,000 turns): 7.99 h and 0.50 h.
    The slowest haystack: 100 ms x 500 turns + 2 s = 52 s."""
    rows = {
        "a": {"steady_ms": 100.0, "question_ms": 2000.0, "fixed_s": 10.0, "cpu_ms": 150.0},
        "b": {"steady_ms": 50.0, "question_ms": 1000.0, "fixed_s": 5.0, "cpu_ms": 80.0},
    }
    _bench_module().projection(rows, "minilm", None, "cold caches")
    out = capsys.readouterr().out
    assert "sum W = 150.0 ms per turn, sum Q = 3000 ms per question, sum F = 15.0 s per task" in out
    assert "P=2   (2 cores): 5.42 h  (all-in CPU ms per turn, 230.0: 7.99 h)" in out
    assert (
        "P=32  (32-core node or a SLURM array of 32 tasks): 0.34 h  (all-in CPU ms per turn, 230.0: 0.50 h)"
        in out
    )
    assert "of the slowest method (a): 52 s" in out
    # 1 h at P = 32: ((3600 - 15) s x 32 x 1000 - 3000 ms x 500) / 250,000 = 452.88 ms per turn, 302% of 150
    assert "1 h at P=32 needs sum W <= 452.9 ms per turn (302% of this run's)" in out


def test_the_floor_cuts_each_w_to_its_tokens_share_of_its_slots(capsys):
    """Worked out by hand: a's passes held 600 tokens in 800 slots, so its W of 100 ms becomes 75; b embedded
    nothing (no slots), so its 50 ms stay. Sum W = 125: P = 32 gives (15 + (125 x 250,000 + 3000 x 500) / 1000 /
    32) / 3600 = (15 + 1023.4) / 3600 = 0.29 h."""
    rows = {
        "a": {"steady_ms": 100.0, "question_ms": 2000.0, "fixed_s": 10.0, "cpu_ms": 150.0, "tokens": 600,
              "slots": 800},
        "b": {"steady_ms": 50.0, "question_ms": 1000.0, "fixed_s": 5.0, "cpu_ms": 80.0, "tokens": 0, "slots": 0},
    }  # fmt: skip
    _bench_module().projection(rows, "minilm", None, "cold caches")
    assert "(each W x its tokens / slots; a lower bound): sum W = 125.0 ms per turn, P=32: 0.29 h" in (
        capsys.readouterr().out
    )


def test_a_pass_is_tallied_as_its_texts_tokens_and_every_slot():
    """Two one-word texts, each [CLS] word [SEP] = 3 tokens, go in the 8-token bucket, whose passes have 256 // 8 =
    32 rows: one pass of 32 x 8 = 256 slots, 6 of them the texts' tokens (the 30 dummy rows' [CLS] [SEP] are not)."""
    from allmem.embed import packaged_model_path
    from allmem.embed_batch import Batcher

    (p,) = Batcher(packaged_model_path()).passes(["hello", "world"])
    tally = {"texts": 0, "tokens": 0, "slots": 0}
    _bench_module().tally_pass(tally, p)
    assert tally == {"texts": 2, "tokens": 6, "slots": 256}


def test_cost_terms_leave_out_the_first_dialogue_and_failed_questions():
    """Worked out by hand. Steady: dialogues 2 and 3, (2.0 + 2.0) s over 40 turns = 100 ms per turn (the first,
    with its warm-up, is left out). Questions: the two answered ones take 100 + 50 + 850 ms; the failed one has no
    latencies and is skipped. Fixed: 20 s of wall time less 100 ms x 50 turns and 1 s x 2 questions = 13 s; a run
    whose phases add up to more than its wall time gets 0, not a negative cost."""
    stats = [
        {"turns": 10, "ingest_s": 1.0, "end_stream_s": 1.0},
        {"turns": 20, "ingest_s": 1.5, "end_stream_s": 0.5},
        {"turns": 20, "ingest_s": 1.0, "end_stream_s": 1.0},
    ]
    ok = {"error": None, "latency_ms": {"retrieve": 100.0, "pack": 50.0, "generate": 850.0, "embed": 9.0}}
    failed = {"error": "answer: no reply", "latency_ms": {}}
    bench = _bench_module()
    got = bench.cost_terms(20.0, stats, [ok, failed, ok])
    assert got == {"steady_ms": 100.0, "question_ms": 1000.0, "questions": 2, "fixed_s": 13.0}
    assert bench.cost_terms(5.0, stats, [ok, ok])["fixed_s"] == 0.0
    assert bench.cost_terms(5.0, stats, [])["question_ms"] == 0.0


def test_e_is_the_write_path_alone_over_the_same_haystacks_in_two_concurrent_shards():
    """Worked out by hand, times from a real pair of runs (naive_rag, 4 haystacks). Positions 0 and 1 are the two
    shards' first haystacks (and position 0 the lone process's), so only positions 2 and 3 count: (5.47 + 6.58) /
    (5.48 + 6.97) = 12.05 / 12.45 = 0.968. Both runs' lines are matched to the dataset's order by dialogue id, in
    whatever order they were written; the write path is ingest + end of stream."""
    order = ["a", "b", "c", "d"]
    alone = [("b", 5.72), ("a", 5.87), ("c", 5.47), ("d", 6.58)]
    two = [("d", 6.97), ("b", 6.84), ("a", 6.52), ("c", 5.48)]

    def stats(rows):
        return [{"dialogue_id": d, "ingest_s": 1.0, "end_stream_s": t - 1.0} for d, t in rows]

    bench = _bench_module()
    e, one_s, two_s = bench.contention_efficiency(order, stats(alone), stats(two), 2)
    assert (one_s, two_s) == (pytest.approx(12.05), pytest.approx(12.45))
    assert e == pytest.approx(12.05 / 12.45)
    with pytest.raises(SystemExit, match="more than 2 haystacks"):
        bench.contention_efficiency(order[:2], stats(alone[:2]), stats(two[1:3]), 2)
    with pytest.raises(SystemExit, match="do not hold the dataset's dialogues"):
        bench.contention_efficiency(order, stats(alone), stats(two[:3]), 2)


def _haystack(q, sessions=5, evidence=(1,)):
    ids = [f"{q}_s{k}" for k in range(sessions)]
    return {
        "question_id": q, "answer_session_ids": [ids[k] for k in evidence], "haystack_session_ids": ids,
        "haystack_dates": [f"2023/01/0{k + 1} (Sun) 10:00" for k in range(sessions)],
        "haystack_sessions": [[{"role": "user", "content": f"{sid} says hi"}] for sid in ids],
    }  # fmt: skip


def test_repeats_copy_earlier_distractor_sessions_into_later_haystacks(tmp_path):
    """Three haystacks of five sessions (the second of each is evidence), share 0.36: the running totals are
    round(0.36 x 5) = 2 and round(0.36 x 10) = 4, so 2 sessions of each later haystack become distractors shown
    earlier in the file (ids and turns copied, dates kept), 4 of the 10 (a share of each haystack's own 4
    distractors would give round(1.44) = 1 each); the first haystack and every evidence session stay as they were;
    no id twice in one haystack; the same seed writes the same bytes. The real file's share: 1 - 19,195 / 23,867 =
    4,672 / 23,867 = 0.1958."""
    src = tmp_path / "lme.json"
    original = [_haystack(q) for q in ("a", "b", "c")]
    src.write_text(json.dumps(original))
    bench = _bench_module()
    assert bench.REPEATED_SHARE == pytest.approx(4672 / 23867)
    assert bench.with_repeats(src, tmp_path / "r1.json", 0.36, seed=3) == (4, 10)
    got = json.loads((tmp_path / "r1.json").read_text())
    assert got[0] == original[0]
    shown: set[str] = set(original[0]["haystack_session_ids"]) - {"a_s1"}
    for before, after in zip(original[1:], got[1:], strict=True):
        ids = after["haystack_session_ids"]
        moved = [k for k, sid in enumerate(ids) if sid != before["haystack_session_ids"][k]]
        assert len(moved) == 2 and 1 not in moved and len(set(ids)) == 5
        for k in moved:
            assert ids[k] in shown
            assert after["haystack_sessions"][k] == [{"role": "user", "content": f"{ids[k]} says hi"}]
        assert after["haystack_dates"] == before["haystack_dates"]
        shown |= {sid for k, sid in enumerate(ids) if k != 1}
    bench.with_repeats(src, tmp_path / "r2.json", 0.36, seed=3)
    assert (tmp_path / "r1.json").read_bytes() == (tmp_path / "r2.json").read_bytes()


def test_repeats_stop_where_distractors_run_out(tmp_path):
    """Share 0.6. Haystack a shows one distractor (a_s4; the rest is evidence); b is all evidence, so it replaces
    none of the round(0.6 x 5) = 3 it is due; c is due round(0.6 x 10) - 0 = 6, holds 4 distractors, but only a_s4
    was shown before: 1 replaced of the 10 sessions after the first haystack."""
    src = tmp_path / "lme.json"
    hays = [
        _haystack("a", evidence=(0, 1, 2, 3)),
        _haystack("b", evidence=range(5)),
        _haystack("c", evidence=(0,)),
    ]
    src.write_text(json.dumps(hays))
    assert _bench_module().with_repeats(src, tmp_path / "r.json", 0.6, seed=0) == (1, 10)
    got = json.loads((tmp_path / "r.json").read_text())
    assert got[:2] == hays[:2]
    assert "a_s4" in got[2]["haystack_session_ids"] and got[2]["haystack_session_ids"][0] == "c_s0"
