"""Support for the fault tests: a way to run the real CLI quickly.

Where the embedding model is not the point, a run uses allmem's model-free ``HashEmbedder`` (``embedder=hash``,
the one the debug config uses) and takes seconds.

Each ``allmem`` command (``cli``, ``CliProcess``) is a process of its own (its own pid, working folder, environment,
stdout, stderr, signals and exit status), started the way the ``allmem`` command starts it (``allmem.cli.main``),
but forked from a warm interpreter: a forkserver (``multiprocessing``) imports the heavy third-party libraries every
run imports once per test process, instead of each run paying ~4 s for them (nltk with scipy and scikit-learn under
it, pandas, Hydra), and loads tiktoken's encoding once (``tests/forkserver_warm.py``). allmem's own modules,
but for ``allmem.tokens`` and the few it imports, are imported in each run, after its environment is set. A run whose
environment changes what an interpreter reads at start (``PYTHONHASHSEED``, ``PYTHONPATH``, thread counts) gets a
new interpreter instead.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"


@dataclass
class Result:
    rc: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]

    def last_line(self) -> str:
        return self.err_lines[-1] if self.err_lines else ""


def common(tmp: Path, hashed: bool = True, cache: Path | None = None) -> list[str]:
    """Overrides that keep a run inside ``tmp`` (results, caches, Hydra's own folder) and quiet; ``hashed``: the
    model-free embedder; ``cache``: another cache folder (to share one between runs)."""
    out = [
        f"run.root={tmp / 'runs'}", f"paths.cache_dir={cache or tmp / 'cache'}", f"hydra.run.dir={tmp / 'hydra'}",
        f"hydra.sweep.dir={tmp / 'hydra-m'}", "run.progress=false",
    ]  # fmt: skip
    if hashed:
        out.append("embedder=hash")
    return out


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "HYDRA_FULL_ERROR")}
    return base | {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"} | extra


_FORKS = multiprocessing.get_context("forkserver")
_FORKS.set_forkserver_preload(["tests.forkserver_warm"])  # the libraries, and tiktoken's encoding


def _cli_process(argv: list[str], cwd: str, environ: dict[str, str], out: str, err: str) -> None:
    """One ``allmem`` process: ``argv`` run from ``cwd`` with exactly ``environ``, stdout and stderr into files."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(environ)
    for fd, path in ((1, out), (2, err)):
        (sys.stdout if fd == 1 else sys.stderr).flush()
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    from allmem import cli

    sys.argv = ["allmem", *argv]
    try:
        code = cli.main(argv)
    finally:
        atexit._run_exitfuncs()  # as at an interpreter's exit (multiprocessing ends its processes with os._exit)
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)


def _read_at_start(key: str) -> bool:
    """Whether the interpreter or a preloaded library reads this variable only when it starts (the hash seed,
    the import path, thread pools): a forked process would keep the forkserver's value."""
    return key.startswith("PYTHON") or key.endswith("_NUM_THREADS")


def _changes_start(key: str, value: str | None) -> bool:
    """Whether a process forked from here would differ from one started with ``key=value``: a ``PYTHONPATH``
    whose folders this interpreter (and so the forkserver) already imports from does not."""
    if value == os.environ.get(key):
        return False
    if key == "PYTHONPATH" and value is not None:
        here = {os.path.realpath(p) for p in sys.path if p}
        return not all(os.path.realpath(p) in here for p in value.split(os.pathsep) if p)
    return True


class CliProcess:
    """A running ``allmem`` process, with the part of ``subprocess.Popen``'s interface the tests use. It is forked
    from the forkserver, or a new interpreter (``python -m allmem.cli``) where ``environ`` sets a variable read at
    start (``PYTHONHASHSEED``, ...) to another value than this process has."""

    def __init__(self, argv: list[str], cwd: Path, environ: dict[str, str]) -> None:
        self.args = argv
        self.folder = Path(tempfile.mkdtemp(prefix="allmem-cli-"))  # its stdout and stderr files
        self._out, self._err = self.folder / "stdout", self.folder / "stderr"
        fresh = any(_changes_start(k, environ.get(k)) for k in {*environ, *os.environ} if _read_at_start(k))
        self._proc: Any = None
        self._popen: subprocess.Popen[bytes] | None = None
        if fresh:
            with self._out.open("wb") as out, self._err.open("wb") as err:
                self._popen = subprocess.Popen(
                    [sys.executable, "-m", "allmem.cli", *argv], cwd=cwd, env=environ, stdout=out, stderr=err
                )
            self.pid: int = self._popen.pid
        else:
            self._proc = _FORKS.Process(
                target=_cli_process, args=(argv, str(cwd), environ, str(self._out), str(self._err))
            )
            self._proc.start()
            self.pid = self._proc.pid

    @property
    def returncode(self) -> int | None:
        if self._popen is not None:
            return self._popen.poll()
        return self._proc.exitcode  # None while it runs; -N when signal N ended it, as Popen's

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self._popen is not None:
            return self._popen.wait(timeout)
        self._proc.join(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return tuple(p.read_text(encoding="utf-8", errors="replace") for p in (self._out, self._err))  # type: ignore[return-value]


def cli(*argv: str, cwd: Path, environ: dict[str, str] | None = None, timeout: float = 300) -> Result:
    """``allmem ARGV...`` (any command) run from ``cwd`` to its end; ``environ``: its whole environment
    (default: this process's, as ``env()`` makes it)."""
    proc = CliProcess(list(argv), cwd, environ or env())
    try:
        out, err = proc.communicate(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    finally:
        shutil.rmtree(proc.folder, ignore_errors=True)
    return Result(proc.wait(), out, err)


def allmem_run(
    tmp: Path, *args: str, environ: dict[str, str] | None = None, timeout: float = 300, hashed: bool = True,
    cache: Path | None = None,
) -> Result:  # fmt: skip
    """``allmem run`` as a user types it, from a folder outside the checkout (``tmp``)."""
    return cli("run", *common(tmp, hashed, cache), *args, cwd=tmp, environ=environ, timeout=timeout)


def popen_run(tmp: Path, *args: str, environ: dict[str, str] | None = None) -> Any:
    """``allmem run`` started and left running: a ``CliProcess`` (``poll``, ``wait``, ``send_signal``, ...)."""
    return CliProcess(["run", *common(tmp), *args], tmp, environ or env())


def run_dirs(tmp: Path) -> list[Path]:
    """Every run directory made under ``tmp`` (a folder holding config.yaml or a lock)."""
    root = tmp / "runs"
    return (
        sorted({p.parent for p in root.rglob("*") if p.name in ("config.yaml", ".lock")})
        if root.exists()
        else []
    )


def done_dir(result: Result) -> Path:
    lines = [x for x in result.out.splitlines() if x.startswith("[allmem] done: ")]
    assert lines, f"no done line (rc={result.rc}):\n{result.err[-3000:]}"
    return Path(lines[-1].removeprefix("[allmem] done: "))


def dying_bm25(
    die_on: str, marker: str, die_after: int = 3, k: int = 50, k1: float = 0.8, b: float = 0.0,
    resources: object = None,
) -> object:  # fmt: skip
    """A test-only method: BM25 whose process dies (``os._exit``, as a kill -9 or the OOM killer would end it) at
    the ``die_after``-th question of dialogue ``die_on``, once: it first creates the file ``marker`` and never
    dies while that file exists. ``method._target_=tests.faultkit.dying_bm25``, built in the runner's process or
    in a worker process (``run.workers``)."""
    from baselines.bm25 import BM25

    class Dying(BM25):
        asked = 0

        def reset(self, dialogue_id: str) -> None:
            super().reset(dialogue_id)
            self.asked = 0

        def retrieve(self, query, when=None):  # noqa: ANN001, ANN202 - as in BM25
            self.asked += 1
            if self.dialogue_id == die_on and self.asked == die_after and not os.path.exists(marker):
                Path(marker).write_text("died once\n")
                os._exit(3)
            return super().retrieve(query, when)

    return Dying(k=k, k1=k1, b=b, resources=resources)
