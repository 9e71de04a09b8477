"""End to end: `allmem run` on two real LoCoMo conversations against the stub server, then replayed offline.

The first run calls the real openai client (answer and judge prompts) against tests/llm_stub.py; its 4o-J must
equal the value recomputed from the stub's decision rule on the written predictions. The same command with
llm=replay must complete from the cache alone, with zero requests, and reproduce the predictions and verdicts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from allmem import files
from tests.faultkit import cli
from tests.llm_stub import StubLLM, default_verdict

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-e2e-SECRET-91b2"


def _allmem_run(args: list[str], cwd: Path, env: dict[str, str]) -> Path:
    proc = cli("run", *args, cwd=cwd, environ=env, timeout=600)
    assert proc.rc == 0, proc.err[-4000:]
    assert KEY not in proc.out + proc.err
    done = [line for line in proc.out.splitlines() if line.startswith("[allmem] done: ")]
    assert done, proc.out[-2000:]
    return Path(done[-1].removeprefix("[allmem] done: "))


@pytest.mark.slow
def test_locomo_two_dialogues_against_the_stub_then_replay(tmp_path: Path, locomo_path: Path) -> None:
    stub = StubLLM().start()
    try:
        env = os.environ | {"ALLMEM_E2E_KEY": KEY, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
        common = [
            "dataset=locomo", "dataset.limit_dialogues=2", f"dataset.path={locomo_path}", "run.progress=false",
            f"run.root={tmp_path / 'runs'}", f"paths.cache_dir={tmp_path / 'cache'}",
        ]  # fmt: skip
        run_dir = _allmem_run(
            [
                *common,
                "llm=openai",
                f"llm.base_url={stub.base_url}",
                "llm.backoff_base_s=0.01",
                "llm.api_key_env=ALLMEM_E2E_KEY",
                "llm.rpm=null",
                "llm.tpm=null",
            ],
            REPO,
            env,
        )
        records = files.read_jsonl(run_dir / files.PREDICTIONS)
        n_calls = stub.count
        assert len(records) > 100 and n_calls == 2 * len(records)  # one answer + one judge call per question
        templates = {r.body["messages"][-1]["content"].split("\n", 1)[0][:30] for r in stub.requests}
        assert len(templates) >= 3  # answer prompts and judge prompts were exercised

        yes = sum(default_verdict(r["question"], r["gold"], r["prediction"]) for r in records)
        assert {r["judge"]["verdict"] for r in records} <= {"yes", "no"}
        assert yes == sum(r["judge"]["verdict"] == "yes" for r in records)
        metrics = json.loads((run_dir / files.METRICS).read_text())
        assert metrics["overall"]["judge"] == pytest.approx(100.0 * yes / len(records))
        cost = metrics["cost"]
        assert cost["generate"]["calls"] == len(records) and cost["judge"]["calls"] == len(records)
        assert cost["generate"]["tokens_in"] > 0 and cost["judge"]["cached"] == 0
        calls = [json.loads(x) for x in (run_dir / files.CALLS).read_text().splitlines()]
        assert len(calls) == n_calls and {c["phase"] for c in calls} == {"generate", "judge"}
        # every prediction joins its prompts: by question id, and by the answer's and the judge's prompt hash
        by_key = {(c["question_id"], c["prompt_hash"]): c for c in calls}
        for r in records:
            answer_call = by_key[(r["question_id"], r["answer"]["prompt_hash"])]
            assert answer_call["phase"] == "generate" and answer_call["template"] == r["answer"]["template"]
            assert by_key[(r["question_id"], r["judge"]["prompt_hash"])]["phase"] == "judge"
            assert r["answer"]["cached"] is False and "error" not in r and "error" not in r["answer"]

        replay_dir = _allmem_run([*common, "llm=replay"], REPO, env)
        assert stub.count == n_calls  # zero network calls
        replayed = files.read_jsonl(replay_dir / files.PREDICTIONS)

        def same(r: dict) -> dict:  # latencies are measurements; the replayed calls are cache hits
            return {k: v for k, v in r.items() if k != "latency_ms"} | {
                "judge": r["judge"] | {"cached": None},
                "answer": r["answer"] | {"cached": None},
            }

        assert [same(r) for r in replayed] == [same(r) for r in records]
        assert all(r["judge"]["cached"] and r["answer"]["cached"] for r in replayed)
        replay_metrics = json.loads((replay_dir / files.METRICS).read_text())
        assert replay_metrics["overall"]["judge"] == metrics["overall"]["judge"]
        assert replay_metrics["cost"]["all"]["cached"] == replay_metrics["cost"]["all"]["calls"] == n_calls

        for path in tmp_path.rglob("*"):
            if path.is_file():
                assert KEY.encode() not in path.read_bytes(), path
    finally:
        stub.stop()


@pytest.mark.slow
def test_dry_run_books_estimates_and_calls_nothing(tmp_path: Path, fixtures_dir: Path) -> None:
    """llm=openai llm.dry_run=true: the run completes on the offline roles, the stub sees no request, the ledger
    books the configured models with estimated tokens for every answer and judge prompt, and 4o-J stays null."""
    stub = StubLLM().start()
    try:
        env = os.environ | {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
        env.pop("OPENAI_API_KEY", None)  # a dry run needs no key
        run_dir = _allmem_run(
            [
                f"dataset.path={fixtures_dir / 'locomo_tiny.json'}",
                "method=bm25",
                "run.progress=false",
                f"run.root={tmp_path / 'runs'}",
                f"paths.cache_dir={tmp_path / 'cache'}",
                "llm=openai",
                f"llm.base_url={stub.base_url}",
                "llm.dry_run=true",
            ],  # fmt: skip
            REPO,
            env,
        )
        assert stub.count == 0
        records = files.read_jsonl(run_dir / files.PREDICTIONS)
        calls = [json.loads(x) for x in (run_dir / files.CALLS).read_text().splitlines()]
        by_phase = {p: [c for c in calls if c["phase"] == p] for p in ("generate", "judge")}
        assert len(by_phase["generate"]) == len(by_phase["judge"]) == len(records) == len(calls) // 2
        assert all(c["dry_run"] and c["estimated"] for c in calls)
        assert {c["model"] for c in by_phase["generate"]} == {"gpt-4o-mini"}
        assert {c["model"] for c in by_phase["judge"]} == {"gpt-4o"}
        assert all(c["tokens_in"] > 0 for c in calls)
        metrics = json.loads((run_dir / files.METRICS).read_text())
        assert metrics["overall"]["judge"] is None and "judge" not in records[0]
        assert metrics["backend"]["llm_dry_run"] is True and metrics["backend"]["offline"] is True
        assert metrics["cost"]["judge"]["tokens_in"] == sum(c["tokens_in"] for c in by_phase["judge"])
    finally:
        stub.stop()
