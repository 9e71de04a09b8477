"""Scale-out: ``run.workers`` (dialogues in worker processes, one writer) and ``run.shard=i/n`` (shards sealed by
the last one to finish or by ``allmem merge``) make the run directory a single process makes
(``allmem.run.compare.same_result``); a dead worker or shard leaves the run unsealed and the rerun completes only
what was missing. Tiny fixtures and the hash embedder: every run takes seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from allmem import files
from allmem.cli import main as cli_main
from allmem.errors import ConfigError
from allmem.run import compare, parallel, shards
from tests.faultkit import Result, allmem_run, cli, common, done_dir, env

LME = ("+debug=default", "dataset=longmemeval_s", "method=allmem")  # 3 haystacks, ATC events and LLM calls


def _rows(run: Path, name: str) -> list[dict]:
    return files.read_jsonl(run / name)


@pytest.mark.slow  # worker or shard processes
def test_workers_and_sealed_shards_make_the_single_process_run(tmp_path):
    cache = tmp_path / "cache"
    one = done_dir(allmem_run(tmp_path, *LME, "run.workers=1", cache=cache))
    (tmp_path / "w2").mkdir()
    two = done_dir(allmem_run(tmp_path / "w2", *LME, "run.workers=2", cache=cache))
    (tmp_path / "sh").mkdir()
    first = allmem_run(tmp_path / "sh", *LME, "run.shard=2/2", cache=cache)  # shard 2 of 2 finishes first
    assert first.rc == 0, first.err[-2000:]
    assert "[allmem] shard 2/2 done; the run is sealed when every shard is" in first.out
    sharded = Path(first.out.strip().rsplit(": ", 1)[1])
    assert not (sharded / files.DONE).exists()  # one shard is not the run
    assert [r["dialogue_id"] for r in _rows(sharded / files.SHARDS / "2-of-2", files.PREDICTIONS)] == [
        _rows(one, files.PREDICTIONS)[1]["dialogue_id"]
    ]  # positions 1, 3, 5, ... of the data
    last = allmem_run(tmp_path / "sh", *LME, "run.shard=1/2", "run.workers=2", cache=cache)
    assert done_dir(last) == sharded

    assert one.name == two.name == sharded.name  # workers and shards are not part of the run's identity
    assert compare.same_result(one, two) == []
    assert compare.same_result(one, sharded) == []
    for run in (two, sharded):  # one writer, the dataset's order; no scratch left behind
        for name in (files.PREDICTIONS, files.SYSTEM_STATS, files.CONTEXTS):
            assert [r["dialogue_id"] for r in _rows(run, name)] == [
                r["dialogue_id"] for r in _rows(one, name)
            ]
        # the packed contexts are byte for byte the single process's (gzip members with mtime 0)
        assert (run / files.CONTEXTS).read_bytes() == (one / files.CONTEXTS).read_bytes()
        assert not (run / files.PARTS).exists() and not (run / files.SHARDS).exists()
    assert (
        len(_rows(one, files.EVENTS)) > 0 and len(_rows(one, files.CALLS)) > 0
    )  # there was something to merge
    assert len(_rows(one, files.CONTEXTS)) == len(_rows(one, files.PREDICTIONS)) > 0
    manifest = json.loads((sharded / files.MANIFEST).read_text())
    assert sorted(a["shard"] for a in manifest["attempts"]) == ["1/2", "2/2"]


DYING = (
    "+debug=default", "dataset=locomo", "method=bm25", "method._target_=tests.faultkit.dying_bm25",
    "+method.die_on=conv-2", "+method.die_after=3",
)  # fmt: skip


def _dying_run(where: Path, *args: str) -> Result:
    """``allmem run`` with ``tests.faultkit`` importable in the run's processes (they start outside the checkout)."""
    return allmem_run(where, *args, environ=env(PYTHONPATH=str(Path(__file__).resolve().parents[1])))


def _no_question_asked_twice(run: Path) -> None:
    """One prediction per question, and no answer call for a question after the attempt that answered it; one
    packed context per prediction, in its order (the redone dialogue's cut ones dropped and written again)."""
    preds = _rows(run, files.PREDICTIONS)
    assert len(preds) == len({p["question_id"] for p in preds}) == 14  # locomo_tiny: 8 + 6 questions
    assert [
        (c["dialogue_id"], c["question_id"]) for c in files.read_jsonl(run / files.CONTEXTS, whole=True)
    ] == [(p["dialogue_id"], p["question_id"]) for p in preds]
    answered_in = {p["question_id"]: p["attempt"] for p in preds}
    asked = [c for c in _rows(run, files.CALLS) if c.get("question_id") is not None]
    assert {c["question_id"] for c in asked} == set(answered_in)
    assert all(c["attempt"] <= answered_in[c["question_id"]] for c in asked)


def _same_but_spent(a: Path, b: Path) -> None:
    """The same result, except the calls an interrupted attempt spent (``calls.jsonl`` keeps them, and
    ``cost_all_attempts`` counts them; ``cost``, the kept work, must be equal)."""
    diffs = compare.same_result(a, b, limit=100)
    assert all(d.startswith(("metrics.json.cost_all_attempts", files.CALLS)) for d in diffs), diffs


@pytest.mark.slow  # worker or shard processes
def test_a_dead_worker_or_shard_leaves_the_run_unsealed_and_the_rerun_completes_only_what_was_missing(
    tmp_path,
):
    marker = tmp_path / "died"  # the method dies once, at conv-2's third question, unless this file exists
    args = (*DYING, f"+method.marker={marker}")
    marker.write_text("not this time\n")
    clean = done_dir(_dying_run(tmp_path, *args))
    marker.unlink()

    (tmp_path / "w").mkdir()
    killed = _dying_run(tmp_path / "w", *args, "run.workers=2")
    assert killed.rc == 1 and marker.exists()
    assert "a worker process died" in killed.last_line() and "is not complete (no DONE)" in killed.last_line()
    rel = clean.relative_to(tmp_path / "runs")
    run = tmp_path / "w" / "runs" / rel
    assert not (run / files.DONE).exists()
    preds = _rows(run, files.PREDICTIONS)
    conv2 = [p for p in preds if p["dialogue_id"] == "conv-2"]
    assert [p.get("error") is None for p in conv2] == [
        True,
        True,
        False,
        False,
        False,
        False,
    ]  # 2 answered, then died
    resumed = _dying_run(tmp_path / "w", *args, "run.workers=2")
    assert done_dir(resumed) == run
    _no_question_asked_twice(run)
    assert {
        p["question_id"]: p["attempt"] for p in _rows(run, files.PREDICTIONS) if p["dialogue_id"] == "conv-2"
    } == {
        f"conv-2:q{i:04d}": 1 if i < 2 else 2 for i in range(6)
    }  # the two answered before the death are kept, not asked again
    _same_but_spent(clean, run)

    marker.unlink()
    (tmp_path / "s").mkdir()
    assert _dying_run(tmp_path / "s", *args, "run.shard=1/2").rc == 0  # conv-1 only
    dead = _dying_run(tmp_path / "s", *args, "run.shard=2/2")  # the whole shard process dies in conv-2
    assert dead.rc == 3 and marker.exists()
    sharded = tmp_path / "s" / "runs" / rel
    assert not (sharded / files.DONE).exists()
    assert len(_rows(sharded / files.SHARDS / "2-of-2", files.PREDICTIONS)) == 2
    assert done_dir(_dying_run(tmp_path / "s", *args, "run.shard=2/2")) == sharded
    _no_question_asked_twice(sharded)
    _same_but_spent(clean, sharded)


@pytest.mark.slow  # worker or shard processes
def test_the_submitit_local_launcher_runs_two_shards_that_seal_one_run(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    proc = cli("run", "-m", *common(tmp_path), "+debug=default", "dataset=longmemeval_s", "method=bm25",
               "hydra/launcher=submitit_local", "run.shard=1/2,2/2", cwd=tmp_path, timeout=600)  # fmt: skip
    assert proc.rc == 0, proc.err[-2000:]
    (run,) = [p.parent for p in (tmp_path / "runs").rglob(files.DONE)]
    assert len(_rows(run, files.PREDICTIONS)) == 3
    attempts = json.loads((run / files.MANIFEST).read_text())["attempts"]
    assert sorted(a["shard"] for a in attempts) == ["1/2", "2/2"] and len({a["pid"] for a in attempts}) == 2


def _fake_shard(run_dir: Path, i: int, n: int, dialogues: list[list], total: int, done: bool = True) -> None:
    path = shards.folder(run_dir, (i, n))
    path.mkdir(parents=True)
    files.write_json(path / files.SHARD_INFO, {"shard": [i, n], "n_dialogues": total, "dialogues": dialogues,
                                               "config_hash": "h", "label": "x", "backend": {}, "inputs": {}})  # fmt: skip
    if done:
        files.write_atomic(path / files.DONE, "complete\n")


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ([], "no shards to merge"),
        ([(1, [[0, "a"], [1, "b"]], True), (2, [[2, "c"]], False)], "shard 2/2 is not finished"),
        ([(1, [[0, "a"], [1, "b"]], True), (2, [[1, "b"], [2, "c"]], True)], "dialogue b (position 1) is in shard 1/2 and shard 2/2"),
        ([(1, [[0, "a"]], True), (2, [[2, "c"]], True)], "1 of 3 dialogues are in no shard (first: position 1)"),
    ],
)  # fmt: skip
def test_merge_refuses_in_one_line(tmp_path, capsys, layout, message):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for i, dialogues, done in layout:
        _fake_shard(run_dir, i, 2, dialogues, 3, done)
    assert cli_main(["merge", str(run_dir)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"allmem merge: error: {run_dir}: ") and message in err[0], err
    assert not (run_dir / files.DONE).exists()
    assert cli_main(["merge", str(tmp_path / "nowhere")]) == 1
    assert capsys.readouterr().err.strip() == f"allmem merge: error: {tmp_path / 'nowhere'}: not a folder"


@pytest.mark.parametrize("value", ["0/2", "3/2", "1", "a/b", "1/0"])
def test_a_bad_shard_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"^run.shard: must be i/n with 1 <= i <= n"):
        shards.parse(value)


def test_shard_i_of_n_takes_every_nth_dialogue_from_position_i_minus_1():
    assert [list(shards.select(list("abcdefg"), (i, 3))) for i in (1, 2, 3)] == [
        ["a", "d", "g"], ["b", "e"], ["c", "f"],
    ]  # fmt: skip
    assert shards.parse(" 2 / 8 ") == (2, 8) and shards.parse(None) is None


def test_a_merge_cut_short_is_redone_without_writing_a_line_twice(tmp_path):
    out = tmp_path / "run"
    part = parallel.part_dir(out, 0)
    part.mkdir(parents=True)
    files.append_jsonl(out / files.PREDICTIONS, {"question_id": "old"})
    files.append_jsonl(part / files.PREDICTIONS, {"question_id": "q1"})
    files.append_jsonl(part / files.PREDICTIONS, {"question_id": "q2"})
    (part / files.CALLS).write_text('{"question_id": "q1"}\n{"question_id": "q2", "torn')  # a killed worker
    # a parent killed after recording the sizes and appending part of the lines:
    files.write_json(part / files.MERGING, {files.PREDICTIONS: (out / files.PREDICTIONS).stat().st_size})
    files.append_jsonl(out / files.PREDICTIONS, {"question_id": "q1"})
    assert parallel.recover(out) == 1
    assert [r["question_id"] for r in _rows(out, files.PREDICTIONS)] == ["old", "q1", "q2"]
    assert [r["question_id"] for r in _rows(out, files.CALLS)] == ["q1"]  # the torn line cut
    assert not (out / files.PARTS / "000000").exists()


@pytest.mark.slow  # worker or shard processes
def test_the_circuit_breaker_stops_every_worker_and_seals_nothing(tmp_path):
    """An endpoint that fails every chat call: each worker's client opens its breaker after two failed calls, the
    parent dispatches nothing more, the attempt is recorded as stopped and the run is not sealed. One question at a
    time per worker (``llm.max_concurrency=1``), so each failed question is written before the breaker opens; with
    concurrent questions which one the breaker stops on is a race (tests/test_online_scale.py)."""
    from tests.llm_stub import StubLLM

    stub = StubLLM().start()
    stub.script(*[("status", 500)] * 60)
    try:
        res = allmem_run(
            tmp_path, "+debug=default", "dataset=locomo", "method=bm25", "llm=openai", f"llm.base_url={stub.base_url}",
            "llm.api_key_env=SCALE_KEY", "llm.rpm=null", "llm.tpm=null", "llm.max_retries=0", "llm.breaker_after=2",
            "llm.max_concurrency=1", "run.workers=2", environ=env(SCALE_KEY="sk-scale-test"),
        )  # fmt: skip
    finally:
        stub.stop()
    assert res.rc == 1 and "then the run stopped early" in res.last_line(), res.err[-2000:]
    (run,) = [p.parent for p in (tmp_path / "runs").rglob(files.MANIFEST)]
    assert not (run / files.DONE).exists() and not (run / files.PARTS).exists()
    preds = _rows(run, files.PREDICTIONS)
    assert preds and all(p.get("error") for p in preds) and len(preds) < 14  # stopped before asking them all
    assert json.loads((run / files.MANIFEST).read_text())["attempts"][-1]["status"] == "stopped"


def test_a_worker_is_handed_one_longmemeval_span_not_the_file():
    """What a worker task carries for LongMemEval: ``dialogues[i:i + 1]``, a view of one byte span that pickles
    without any dialogue text and decodes to the same dialogue in the worker."""
    import pickle

    from benchmarks.longmemeval import load_longmemeval
    from tests.faultkit import FIXTURES

    data = load_longmemeval(FIXTURES / "longmemeval_s_tiny.json")
    one = data[1:2]
    blob = pickle.dumps(one)
    assert len(one) == 1 and one[0] == data[1]
    assert pickle.loads(blob)[0] == data[1]
    assert data[1].sessions[0].turns[0].text.encode() not in blob  # spans, not text


@pytest.mark.slow  # worker processes (a forkserver: an interpreter that imports the heavy libraries)
def test_a_worker_takes_the_parents_environment_and_folder_as_they_are_when_its_pool_starts(
    tmp_path, monkeypatch
):
    """Workers are forked from a forkserver that lives as long as the parent: each pool's workers still see the
    parent's environment and folder of that moment (not the forkserver's), with one native thread per pool."""
    import os

    cfg = {"run": {"progress": True}}
    for mark, folder in (("first", tmp_path / "a"), ("second", tmp_path / "b")):
        folder.mkdir()
        monkeypatch.chdir(folder)
        monkeypatch.setenv("ALLMEM_TEST_MARK", mark)
        monkeypatch.setenv("OMP_NUM_THREADS", "7")
        pool = parallel._pool(1, cfg)
        try:
            seen = [pool.submit(fn, *args).result(timeout=120) for fn, *args in (
                (os.getenv, "ALLMEM_TEST_MARK"), (os.getcwd,), (os.getenv, "OMP_NUM_THREADS"))]  # fmt: skip
        finally:
            pool.shutdown()
        assert seen == [mark, str(folder), "1"]
