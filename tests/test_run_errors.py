"""How a run ends when something outside it goes wrong, through the real CLI.

Each case ends in one line (``allmem run: error: ...`` naming the file or key) and a set exit status, never a
traceback; an attempt that began is never left "running" in the manifest; nothing failed is sealed (no DONE);
and a rerun after the cause is gone completes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from allmem import files
from tests.faultkit import FIXTURES, Result, allmem_run, common, done_dir, env, popen_run
from tests.llm_stub import StubLLM

TINY = FIXTURES / "locomo_tiny.json"
BASE = ("method=bm25", f"dataset.path={TINY}", "run.name=r")
pytestmark = pytest.mark.slow  # every case runs the CLI in a subprocess


def _one_line_error(res, *needles: str, rc: int = 1) -> str:
    assert res.rc == rc, (res.rc, res.err[-2000:])
    assert "Traceback" not in res.err, res.err[-2000:]
    last = res.last_line()
    assert last.startswith("allmem run: error: "), res.err[-2000:]
    for needle in needles:
        assert needle in last, last
    return last


def _statuses(run_dir: Path) -> list[str]:
    return [a["status"] for a in json.loads((run_dir / files.MANIFEST).read_text())["attempts"]]


# ------------------------------------------------------------------ item 8: a corrupt line in predictions.jsonl


def test_a_corrupt_middle_line_names_file_and_line_and_ends_the_attempt_failed(tmp_path):
    first = allmem_run(tmp_path, *BASE)
    run_dir = done_dir(first)
    (run_dir / files.DONE).unlink()  # as if the run had stopped before sealing
    preds = run_dir / files.PREDICTIONS
    lines = preds.read_text().splitlines(keepends=True)
    assert len(lines) > 5
    lines[4] = '{"question_id": garbage\n'  # line 5: not JSON, and not the last line (no torn tail)
    preds.write_text("".join(lines))

    for _ in range(2):  # every rerun says the same, and each attempt is closed, never left "running"
        res = allmem_run(tmp_path, *BASE)
        _one_line_error(res, f"{preds}: line 5: not valid JSON", f"sed -i '5d' {preds}")
    assert _statuses(run_dir) == ["complete", "failed", "failed"]
    assert not (run_dir / files.DONE).exists()

    del lines[4]  # the fix the message names: delete the line; its question is asked again
    preds.write_text("".join(lines))
    again = allmem_run(tmp_path, *BASE)
    assert again.rc == 0, again.err[-2000:]
    assert _statuses(run_dir) == ["complete", "failed", "failed", "complete"]
    assert len(files.read_jsonl(preds)) == len(lines) + 1


def test_a_line_that_is_json_but_no_record_is_refused_too(tmp_path):
    run_dir = done_dir(allmem_run(tmp_path, *BASE))
    (run_dir / files.DONE).unlink()
    with (run_dir / files.SYSTEM_STATS).open("a") as fh:
        fh.write("[1, 2]\n")
    n = len((run_dir / files.SYSTEM_STATS).read_text().splitlines())
    res = allmem_run(tmp_path, *BASE)
    _one_line_error(res, f"{run_dir / files.SYSTEM_STATS}: line {n}: not a JSON object")
    assert _statuses(run_dir)[-1] == "failed"


def test_a_corrupt_manifest_is_one_line_naming_it(tmp_path):
    run_dir = done_dir(allmem_run(tmp_path, *BASE))
    (run_dir / files.DONE).unlink()
    (run_dir / files.MANIFEST).write_text('{"attempts": [')
    res = allmem_run(tmp_path, *BASE)
    _one_line_error(res, f"{run_dir / files.MANIFEST}: not a JSON object")
    assert (run_dir / files.MANIFEST).read_text() == '{"attempts": ['  # left as found, for the user to see


# ------------------------------------------------------------------ item 10: Ctrl-C and SIGTERM


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_run_ends_in_one_line_and_an_interrupted_attempt(tmp_path, signum):
    stub = StubLLM().start()
    stub.script(("delay", 20.0))  # the first answer call hangs: the run is mid-question when the signal comes
    args = [
        "method=bm25", f"dataset.path={TINY}", "run.name=r", "llm=openai", f"llm.base_url={stub.base_url}",
        "llm.api_key_env=FAULTS_KEY", "llm.rpm=null", "llm.tpm=null", "llm.timeout_s=60",
        "llm.max_concurrency=1",  # one question at a time: the hanging call is the only request
    ]  # fmt: skip
    keyed = env(FAULTS_KEY="sk-lifecycle")
    run_dir = tmp_path / "runs" / "r"
    try:
        proc = popen_run(tmp_path, *args, environ=keyed)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and stub.count < 1:
            time.sleep(0.05)  # the stub records POSTs only: the first is the hanging answer call
        assert proc.poll() is None and stub.count == 1, "the run never reached its first answer call"
        assert _statuses(run_dir) == ["running"]
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=10)  # at once, not after the hanging call
        assert proc.returncode == 128 + signum, err[-2000:]
        assert "Traceback" not in err, err[-2000:]
        last = [x for x in err.splitlines() if x.strip()][-1]
        assert last == (
            f"allmem run: error: interrupted by {signal.Signals(signum).name}; nothing was sealed, "
            "rerun the same command to resume"
        )
        assert _statuses(run_dir) == ["interrupted"]
        assert not (run_dir / files.DONE).exists()

        again = allmem_run(tmp_path, *args, environ=keyed)  # the lock was released: the rerun completes
        assert again.rc == 0, again.err[-2000:]
        assert _statuses(run_dir) == ["interrupted", "complete"]
        assert (run_dir / files.DONE).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        stub.stop()


# ------------------------------------------------------------------ item 10: full disk, unwritable folder

# Loaded by the subprocess before the CLI: fsync of predictions.jsonl fails as a full disk makes it fail (the
# kernel reports ENOSPC at write-back, and the error carries no file name). Nothing else is changed.
_ENOSPC_PLUGIN = """
import errno, os
_fsync = os.fsync
def fsync(fd):
    if os.readlink(f"/proc/self/fd/{fd}").endswith("predictions.jsonl"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return _fsync(fd)
os.fsync = fsync
"""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="the ENOSPC plugin finds file names in /proc")
def test_a_full_disk_names_the_file_and_fails_the_attempt(tmp_path):
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "enospc_plugin.py").write_text(_ENOSPC_PLUGIN)
    environ = env()
    environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(plugin), environ.get("PYTHONPATH", "")) if p)
    code = "import sys, enospc_plugin; from allmem.cli import main; sys.exit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", code, "run", *common(tmp_path), *BASE],
        cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    run_dir = tmp_path / "runs" / "r"

    _one_line_error(
        Result(proc.returncode, proc.stdout, proc.stderr),
        f"{run_dir / files.PREDICTIONS}: No space left on device (errno 28)",
    )
    assert _statuses(run_dir) == ["failed"]
    assert not (run_dir / files.DONE).exists()
    again = allmem_run(tmp_path, *BASE)  # space is back: the rerun completes
    assert again.rc == 0, again.err[-2000:]
    assert _statuses(run_dir) == ["failed", "complete"]


def test_a_run_root_that_cannot_be_a_folder_is_one_line_naming_it(tmp_path):
    """``run.root`` under a regular file (ENOTDIR): as root, chmod cannot make a folder read-only, but this is
    the same path through the code (mkdir fails with an OS error naming the path)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    res = allmem_run(tmp_path, *BASE, f"run.root={blocker / 'runs'}")
    _one_line_error(res, f"{blocker / 'runs' / 'r'}: Not a directory (errno 20)")


# ------------------------------------------------------------------ item 10: bad dataset files and limits


def test_a_symlink_loop_as_dataset_path_is_one_line(tmp_path):
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    res = allmem_run(tmp_path, "method=bm25", f"dataset.path={tmp_path / 'a.json'}")
    _one_line_error(res, f"dataset.path '{tmp_path / 'a.json'}' is a symlink that leads to no file")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            '[{"sample_id": ' + "7" * 5000 + "}]",
            "Exceeds the limit (4300 digits) for integer string conversion",
        ),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
    ids=["5000-digit-integer", "100k-deep-nesting"],
)
def test_json_python_cannot_read_is_one_line_naming_the_file(tmp_path, text, problem):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    res = allmem_run(tmp_path, "method=bm25", f"dataset.path={bad}")
    _one_line_error(res, f"{bad}: unreadable JSON: {problem}")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("key", ["limit_dialogues", "limit_sessions", "limit_questions"])
@pytest.mark.parametrize(("value", "shown"), [("-1", "-1"), ("1.5", "1.5"), ("true", "True")])
def test_a_limit_that_is_no_count_is_refused_before_the_run_exists(tmp_path, key, value, shown):
    res = allmem_run(tmp_path, "method=bm25", f"dataset.path={TINY}", f"dataset.{key}={value}")
    _one_line_error(res, f"dataset.{key}: must be null or a non-negative integer, got {shown}")
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ item 10: one bad point of a sweep


@pytest.mark.parametrize("launcher", [(), ("hydra/launcher=local", "hydra.launcher.n_jobs=2")],
                         ids=["in-process", "joblib"])  # fmt: skip
def test_one_failing_point_does_not_stop_a_sweep(tmp_path, launcher):
    bad = tmp_path / "bad.json"
    bad.write_text("[" * 100_000 + "]" * 100_000)
    # a program of its own, not faultkit's forked one: joblib's workers (loky) hang in a forkserver's child
    proc = subprocess.run(  # the failing point first; -m goes before the overrides
        [sys.executable, "-m", "allmem.cli", "run", "-m", *common(tmp_path), *launcher, "method=bm25",
         f"dataset.path={bad},{TINY}"], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    res = Result(proc.returncode, proc.stdout, proc.stderr)
    _one_line_error(res, f"1 of 2 sweep points failed: #0 dataset.path={bad}")
    assert f"allmem run: error: {bad}: unreadable JSON" in res.err
    done = list((tmp_path / "runs").rglob(files.DONE))
    assert len(done) == 1 and TINY.name in (done[0].parent / "config.yaml").read_text()  # the good point ran
