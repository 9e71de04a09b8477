"""The runner and run directory end to end: files written, rerun skipped, kill-and-resume, score == metrics."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest

from allmem import files
from allmem.errors import ConfigError
from allmem.metrics import score_file
from allmem.metrics.protocols import get_protocol
from allmem.reader.framing import NOT_MENTIONED
from allmem.run import identity
from allmem.run.runner import run
from allmem.types import Question
from tests.faultkit import CliProcess, cli, env
from tests.runkit import compose

REPO = Path(__file__).resolve().parents[1]


def _common(tmp: Path, cache: Path) -> list[str]:
    return [
        f"run.root={tmp}",
        f"paths.cache_dir={cache}",
        "embedder=hash",  # the run contract does not depend on the model; the real one is for slow tests
        "run.progress=false",
    ]


def _strip_latency(records: list[dict]) -> list[dict]:
    """Latencies are measurements and the attempt number says when a line was written; every other field must
    be identical."""
    return [{k: v for k, v in r.items() if k not in ("latency_ms", "attempt")} for r in records]


def test_tiny_run_writes_the_contract_and_reruns_skip(tmp_path, cache_dir, fixtures_dir):
    tiny = fixtures_dir / "locomo_tiny.json"
    cfg = compose("method=bm25", f"dataset.path={tiny}", *_common(tmp_path, cache_dir))
    run_dir = run(cfg)
    for name in (files.CONFIG, files.PREDICTIONS, files.METRICS, files.MANIFEST, files.DONE):
        assert (run_dir / name).exists(), name

    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    raw = json.loads(tiny.read_text())
    assert len(records) == sum(len(s["qa"]) for s in raw)
    assert len({r["question_id"] for r in records}) == len(records)
    for r in records:
        assert r["context_tokens"] <= cfg.budget.tokens
        assert {"retrieve", "generate"} <= set(r["latency_ms"])

    manifest = json.loads((run_dir / files.MANIFEST).read_text())
    assert manifest["backend"]["offline"] is True
    assert str(tiny) in manifest["data"]

    # `allmem score` on the run's predictions reproduces the run's metrics exactly.
    metrics = json.loads((run_dir / files.METRICS).read_text())
    rescored = score_file(run_dir / files.PREDICTIONS, "allmem")
    assert rescored == {k: metrics[k] for k in rescored}
    assert metrics["overall"]["judge"] is None  # offline: no LLM judged, so no 4o-J
    assert "offline" in metrics["overall"]["judge_reason"]

    # A complete run is skipped: nothing is rewritten.
    before = (run_dir / files.PREDICTIONS).stat().st_mtime_ns
    assert run(cfg) == run_dir
    assert (run_dir / files.PREDICTIONS).stat().st_mtime_ns == before


def test_score_command_prints_the_metrics(tmp_path, cache_dir, fixtures_dir, capsys):
    from allmem.cli import main

    tiny = fixtures_dir / "locomo_tiny.json"
    run_dir = run(compose("method=full_history", f"dataset.path={tiny}", *_common(tmp_path, cache_dir)))
    capsys.readouterr()
    # as `allmem score` does, without a second interpreter
    assert main(["score", str(run_dir / files.PREDICTIONS), "--protocol", "allmem"]) == 0
    printed = json.loads(capsys.readouterr().out)
    metrics = json.loads((run_dir / files.METRICS).read_text())
    assert printed == {k: metrics[k] for k in printed}


def test_kill_and_resume_equals_uninterrupted(tmp_path, cache_dir, locomo_path):
    """SIGKILL a real run mid-way; rerunning completes it with the same predictions, no duplicates, no gaps."""
    common = [f"paths.cache_dir={cache_dir}", f"embedder.cache_dir={cache_dir / 'embeddings'}", "run.progress=false",
              "method=bm25", f"dataset.path={locomo_path}", "dataset.limit_dialogues=1",
              "dataset.limit_questions=40"]  # fmt: skip
    killed_root, clean_root = tmp_path / "killed", tmp_path / "clean"
    proc = CliProcess(["run", f"run.root={killed_root}", "run.name=r", *common], REPO, env())
    preds = killed_root / "r" / files.PREDICTIONS
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if preds.exists() and preds.read_text().count("\n") >= 5:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    n_before = preds.read_text().count("\n")
    assert not (killed_root / "r" / files.DONE).exists()

    for root in (killed_root, clean_root):
        res = cli("run", f"run.root={root}", "run.name=r", *common, cwd=REPO)
        assert res.rc == 0, res.err[-2000:]
    resumed = files.read_jsonl(preds)
    clean = files.read_jsonl(clean_root / "r" / files.PREDICTIONS)
    assert n_before < len(clean)
    assert _strip_latency(resumed) == _strip_latency(clean)
    # The other records stay true: one stats line per dialogue, the cost of the kept work equals the clean
    # run's (the abandoned calls are kept under attempt 1 and summed apart), both attempts in the manifest.
    k_metrics = json.loads((killed_root / "r" / files.METRICS).read_text())
    c_metrics = json.loads((clean_root / "r" / files.METRICS).read_text())
    for key in ("calls", "tokens_in", "tokens_out"):
        assert k_metrics["cost"]["all"][key] == c_metrics["cost"]["all"][key]
    assert k_metrics["cost_all_attempts"]["all"]["calls"] >= c_metrics["cost"]["all"]["calls"]
    assert k_metrics["run"]["attempts"] == 2 and c_metrics["run"]["attempts"] == 1
    manifest = json.loads((killed_root / "r" / files.MANIFEST).read_text())
    assert [(a["attempt"], a["status"]) for a in manifest["attempts"]] == [
        (1, "interrupted"),
        (2, "complete"),
    ]
    assert all(a["git"]["sha"] and a["data_digest"] and a["started_at"] for a in manifest["attempts"])
    assert len(files.read_jsonl(killed_root / "r" / files.SYSTEM_STATS)) == 1


def test_torn_last_line_is_cut_before_appending(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"question_id": "a"}\n{"question_id": "b", "predi')
    assert [r["question_id"] for r in files.read_jsonl(path)] == ["a"]
    with files.JsonlWriter(path) as out:
        out.write({"question_id": "b"})
    assert [r["question_id"] for r in files.read_jsonl(path)] == ["a", "b"]


def test_changed_config_refuses_to_resume(tmp_path, cache_dir, fixtures_dir):
    tiny = fixtures_dir / "locomo_tiny.json"
    base = ["method=bm25", f"dataset.path={tiny}", "run.name=same", *_common(tmp_path, cache_dir)]
    identity.prepare(tmp_path / "same", compose(*base))
    with pytest.raises(ConfigError, match="different config"):
        identity.prepare(tmp_path / "same", compose(*base, "budget.tokens=100"))


def test_two_options_is_seeded_and_holds_the_gold():
    two_options = get_protocol("allmem").options
    q = Question(id="conv-1:q0001", dialogue_id="conv-1", text="?", gold="blue", evidence=(), category=5)
    opts = two_options(q, seed=0)
    assert sorted(opts) == sorted([NOT_MENTIONED, "blue"])
    assert two_options(q, seed=0) == opts
    q4 = Question(id="x", dialogue_id="conv-1", text="?", gold="blue", evidence=(), category=4)
    assert two_options(q4, seed=0) == ()
    # Over many ids both orders occur (the shuffle is real, not a constant order), and the seed changes some.
    qs = [
        Question(id=f"q{i}", dialogue_id="d", text="?", gold="g", evidence=(), category=5) for i in range(20)
    ]
    assert len({two_options(q, 0) for q in qs}) == 2
    assert [two_options(q, 0) for q in qs] != [two_options(q, 7) for q in qs]


@pytest.mark.slow
def test_multirun_and_report(tmp_path, cache_dir, fixtures_dir):
    tiny = fixtures_dir / "locomo_tiny.json"
    res = cli(
        "run",
        "-m",
        "method=bm25,full_history",
        f"dataset.path={tiny}",
        *_common(tmp_path, cache_dir),
        cwd=REPO,
    )
    assert res.rc == 0, res.err[-2000:]
    done = sorted(p.parent.name.split("-")[0].split(",")[0] for p in tmp_path.rglob(files.DONE))
    assert done == ["bm25", "full_history"]
    out = cli("report", str(tmp_path), cwd=REPO)
    assert out.rc == 0, out.err[-2000:]
    # rows are labelled by the run's name: the method and its overrides (here the hash embedder)
    assert "| bm25,embedder=hash |" in out.out and "| full_history,embedder=hash |" in out.out
    assert "offline" in out.out


def test_longmemeval_tiny_with_allmem(tmp_path, cache_dir, fixtures_dir):
    """One memory per question, session-level evidence; All-Mem with consolidation on runs through."""
    tiny = fixtures_dir / "longmemeval_s_tiny.json"
    cfg = compose(
        "dataset=longmemeval_s", f"dataset.path={tiny}", "method=allmem", *_common(tmp_path, cache_dir)
    )
    run_dir = run(cfg)
    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    raw = json.loads(tiny.read_text())
    assert [r["question_id"] for r in records] == [q["question_id"] for q in raw]
    for r, q in zip(records, raw, strict=True):
        assert r["dialogue_id"] == q["question_id"]  # its own haystack
        assert r["question_type"] == q["question_type"]
        # turn ids <session id>:<turn index> of its own haystack (the scorer credits their sessions)
        assert {s.rpartition(":")[0] for s in r["ranked_source_ids"]} <= set(q["haystack_session_ids"])
        assert {"embed", "stage1", "stage2", "stage3"} <= set(r["latency_ms"])
    metrics = json.loads((run_dir / files.METRICS).read_text())
    assert set(metrics["groups"]) == {q["question_type"] for q in raw}
    stats = files.read_jsonl(run_dir / files.SYSTEM_STATS)
    assert len(stats) == len(raw) and all("atc" in s for s in stats)


def test_malformed_dataset_fails_before_a_run_directory_exists(tmp_path, cache_dir, fixtures_dir):
    from benchmarks import DatasetError

    bad = fixtures_dir / "malformed" / "locomo_bad_category.json"
    with pytest.raises(DatasetError, match="locomo_bad_category.json.*qa\\[1\\].category"):
        run(compose("method=bm25", f"dataset.path={bad}", *_common(tmp_path, cache_dir)))
    assert not any(tmp_path.rglob(files.CONFIG))


# Run identity: which overrides make a new run directory. A key that can change a result must (seed orders the
# two options of category-5 questions; judge adds the 4o-J column); a key that only places files or tunes
# execution must not, or a finished run would be redone (or, worse, a changed one skipped as complete).
MUST_CHANGE = [
    "run.seed=7", "run.judge=false", "budget.tokens=1024", "protocol=mem0", "protocol.ks=[1,3]",
    "method.k=20", "llm.judge.model=other", "llm.temperature=0.5", "dataset.limit_questions=3",
    "generator=extractive", "dataset.sample=5", "dataset.sample_dialogues=1", "budget.fill=true",
]  # fmt: skip
MUST_NOT_CHANGE = [
    "run.progress=false", "embedder.cache_dir=/elsewhere/emb", "paths.cache_dir=/elsewhere", "wandb.enabled=true",
    "llm.max_concurrency=4", "llm.cache.enabled=true", "hydra.run.dir=/elsewhere/hydra",
    # under llm=openai: how long to wait, how often to retry, how fast to go, where the key is read from
    "llm=openai llm.timeout_s=5", "llm=openai llm.try_timeout_s=5", "llm=openai llm.call_timeout_s=60",
    "llm=openai llm.max_retries=0", "llm=openai llm.rpm=10",
    "llm=openai llm.api_key_env=OTHER_KEY", "llm=openai llm.cache.path=/elsewhere/r.sqlite",
    # how many processes and which machines run it; thread pools that keep their results in order
    "run.workers=4", "run.shard=2/3", "method=allmem method.write.describe_workers=4", "method=allmem atc.workers=1",
]  # fmt: skip


def _rel_dir(tmp_path: Path, tiny: Path, extra: list[str], method: str = "bm25") -> Path:
    overrides = [f"method={method}", f"dataset.path={tiny}", f"run.root={tmp_path}", *extra]
    return identity.resolve(compose(*overrides), overrides).relative_to(tmp_path)


@pytest.mark.parametrize("override", MUST_CHANGE)
def test_result_keys_change_the_run_directory(tmp_path, fixtures_dir, override):
    tiny = fixtures_dir / "locomo_tiny.json"
    base = _rel_dir(tmp_path, tiny, [])
    changed = _rel_dir(tmp_path, tiny, [override])
    assert changed != base
    assert base.parent == changed.parent == Path("locomo")
    # the name says why (HELM-style: the arguments), the hash keeps distinct configs apart
    assert changed.name.startswith(f"bm25,{override}-")


@pytest.mark.parametrize("override", MUST_NOT_CHANGE)
def test_placement_and_execution_keys_keep_the_run_directory(tmp_path, fixtures_dir, override):
    tiny = fixtures_dir / "locomo_tiny.json"
    *base, key = override.split()
    assert _rel_dir(tmp_path, tiny, [*base, key]) == _rel_dir(tmp_path, tiny, base)


def test_data_enter_the_identity_by_content_not_by_path(tmp_path, fixtures_dir):
    tiny = fixtures_dir / "locomo_tiny.json"
    copy = tmp_path / "elsewhere" / "copy.json"
    copy.parent.mkdir()
    copy.write_bytes(tiny.read_bytes())
    assert _rel_dir(tmp_path, copy, []) == _rel_dir(tmp_path, tiny, [])
    edited = tmp_path / "edited.json"
    edited.write_text(tiny.read_text().replace("Biscuit", "Muffin"))
    assert _rel_dir(tmp_path, edited, []) != _rel_dir(tmp_path, tiny, [])


def test_run_names_come_from_the_overrides(tmp_path, fixtures_dir):
    tiny = fixtures_dir / "locomo_tiny.json"
    plain = _rel_dir(tmp_path, tiny, [])
    assert re.fullmatch(r"bm25-[0-9a-f]{10}", plain.name)
    exp = _rel_dir(tmp_path, tiny, ["+experiment=stage1_bm25", "method.retrieval.K=8"], method="allmem_noatc")
    assert re.fullmatch(r"allmem_noatc,experiment=stage1_bm25,method\.retrieval\.K=8-[0-9a-f]{10}", exp.name)
    named = _rel_dir(tmp_path, tiny, ["run.name=mine", "run.seed=3"])
    assert named == Path("mine")


def test_a_crash_is_recorded_in_the_manifest_and_never_sealed(tmp_path, cache_dir, fixtures_dir, monkeypatch):
    """An exception inside the answer loop leaves an attempt marked crashed with its message, and no DONE."""
    import allmem.run.runner as runner_mod

    def boom(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(runner_mod, "_answer_all", boom)
    tiny = fixtures_dir / "locomo_tiny.json"
    cfg = compose("method=bm25", f"dataset.path={tiny}", "run.name=crash", *_common(tmp_path, cache_dir))
    with pytest.raises(RuntimeError, match="disk on fire"):
        run(cfg)
    run_dir = next(p.parent for p in tmp_path.rglob(files.MANIFEST))
    assert not (run_dir / files.DONE).exists()
    last = json.loads((run_dir / files.MANIFEST).read_text())["attempts"][-1]
    assert (last["status"], last["last_error"]) == ("crashed", "disk on fire")
