"""Support for the fault tests: a way to run the real CLI quickly.

Where the embedding model is not the point, a run uses allmem's model-free ``HashEmbedder`` (``embedder=hash``,
the one the debug config uses) and takes seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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


def allmem_run(
    tmp: Path, *args: str, environ: dict[str, str] | None = None, timeout: float = 300, hashed: bool = True,
    cache: Path | None = None,
) -> Result:  # fmt: skip
    """``allmem run`` as a user types it, from a folder outside the checkout (``tmp``)."""
    proc = subprocess.run(
        [sys.executable, "-m", "allmem.cli", "run", *common(tmp, hashed, cache), *args],
        cwd=tmp, env=environ or env(), capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    return Result(proc.returncode, proc.stdout, proc.stderr)


def popen_run(tmp: Path, *args: str, environ: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "allmem.cli", "run", *common(tmp), *args],
        cwd=tmp, env=environ or env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


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
