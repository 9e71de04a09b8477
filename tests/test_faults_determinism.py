"""The same config gives the same predictions and ATC events whatever the caches, workers and hash seed.

Two ``allmem run`` processes of All-Mem with consolidation (ATC after every session, a low threshold so its
operators execute) with the real embedding model: the first with cold embedding and response caches, one worker
and ``PYTHONHASHSEED=1``; the second with the caches the first left warm, four workers and ``PYTHONHASHSEED=2``.
Only what describes the execution may differ: latencies, cache hits and the attempt number.
"""

from __future__ import annotations

import pytest

from allmem import files
from tests.faultkit import FIXTURES, allmem_run, done_dir, env

TIMING = ("latency_ms", "llm_latency_ms", "cached")


def _same(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        r = {k: v for k, v in r.items() if k not in (*TIMING, "attempt")}
        if isinstance(r.get("answer"), dict):
            r["answer"] = {k: v for k, v in r["answer"].items() if k != "cached"}
        out.append(r)
    return out


@pytest.mark.slow
def test_cold_and_warm_caches_workers_and_hash_seed_do_not_change_results(tmp_path):
    cache = tmp_path / "shared-cache"
    base = [
        "method=allmem", f"dataset.path={FIXTURES / 'locomo_tiny.json'}", "atc.theta=0.3", "atc.every_sessions=1",
        "llm.cache.enabled=true",
    ]  # fmt: skip
    runs = []
    for name, seed, workers in (("cold", "1", 1), ("warm", "2", 4)):
        (tmp_path / name).mkdir()
        res = allmem_run(
            tmp_path / name, *base, f"atc.workers={workers}", f"method.write.describe_workers={workers}",
            environ=env(PYTHONHASHSEED=seed), hashed=False, cache=cache,
        )  # fmt: skip
        assert res.rc == 0, res.err[-3000:]
        runs.append(done_dir(res))
    cold, warm = runs
    events = [files.read_jsonl(d / files.EVENTS) for d in runs]
    assert any(e["kind"] == "target" and e["state"] == "executed" for e in events[0]), "ATC changed nothing"
    assert _same(events[0]) == _same(events[1])
    preds = [files.read_jsonl(d / files.PREDICTIONS) for d in runs]
    assert _same(preds[0]) == _same(preds[1])
    # the second run really was warm: its answers came from the response cache
    assert all(p["answer"]["cached"] for p in preds[1]) and not any(p["answer"]["cached"] for p in preds[0])
