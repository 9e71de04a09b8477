"""Online throughput: an All-Mem run against a model that takes ``--delay`` seconds per call, sequential vs parallel.

Starts the test suite's OpenAI-compatible stub (tests/llm_stub.py) on 127.0.0.1 with every reply delayed by
``--delay`` (default 0.3 s) and no client-side pacing (``llm.rpm=null llm.tpm=null``), then runs the same
``allmem run`` twice, each with its own cold caches: ``run.workers=1 llm.max_concurrency=1`` and
``run.workers=--workers llm.max_concurrency=--concurrency``. Every LLM call of the run goes to the stub:
descriptors, ATC roles, answers and the judge. Prints both wall times, the speed-up, the requests each run sent,
and whether the two run directories are the same result (``allmem.run.compare.same_result``). Not a timed test:
the ratio is the figure. ``run.workers`` (dialogues in worker processes) exists only once the runner has it; until
then the parallel run uses one worker and the script says so in one line.

The embedder defaults to ``hash``: the figure is about waiting on the model; with ``--embedder minilm`` the local
model's CPU time (the same in both runs) is added to both.

    python scripts/bench_online.py --tiny                        # tests/fixtures/locomo_tiny.json, seconds
    python scripts/bench_online.py --dialogues 2 --questions 20  # a slice of the real LoCoMo
    python scripts/bench_online.py --dialogues 2                 # two whole conversations (long at concurrency 1)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's allmem and tests.llm_stub, whatever the current directory

from allmem.run.compare import same_result  # noqa: E402
from tests.llm_stub import StubLLM  # noqa: E402

KEY_VAR = "ALLMEM_BENCH_KEY"


def has_workers() -> bool:
    """Whether this checkout's runner has ``run.workers`` (the composed run config declares it)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        return "workers" in compose("config").run


def run_once(args: argparse.Namespace, stub: StubLLM, folder: Path, workers: int, concurrency: int) -> tuple:
    """One ``allmem run`` in a subprocess; returns (wall seconds, requests the stub received, run directory)."""
    overrides = [
        f"method={args.method}", f"embedder={args.embedder}", "llm=openai", f"llm.base_url={stub.base_url}",
        f"llm.api_key_env={KEY_VAR}", "llm.rpm=null", "llm.tpm=null", f"llm.max_concurrency={concurrency}",
        f"run.root={folder / 'runs'}", f"paths.cache_dir={folder / 'cache'}", "run.progress=false",
    ]  # fmt: skip
    if args.tiny:
        overrides.append(f"dataset.path={ROOT / 'tests' / 'fixtures' / 'locomo_tiny.json'}")
    else:
        overrides.append(f"dataset.limit_dialogues={args.dialogues}")
        if args.questions:
            overrides.append(f"dataset.limit_questions={args.questions}")
    if args.data:
        overrides.append(f"dataset.path={args.data}")
    if workers > 1:
        overrides.append(f"run.workers={workers}")
    env = os.environ | {KEY_VAR: "sk-bench-online", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    before = stub.count
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "allmem.cli", "run", *overrides],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    done = [ln for ln in proc.stdout.splitlines() if ln.startswith("[allmem] done: ")]
    if proc.returncode != 0 or not done:
        sys.exit(f"bench_online: allmem run failed (exit {proc.returncode}): {proc.stderr.strip()[-1500:]}")
    return wall, stub.count - before, Path(done[-1].removeprefix("[allmem] done: "))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="the tiny LoCoMo fixture instead of the real data")
    p.add_argument("--data", default=None, help="dataset.path (default: the configured LoCoMo)")
    p.add_argument("--dialogues", type=int, default=2, help="dataset.limit_dialogues")
    p.add_argument("--questions", type=int, default=None, help="dataset.limit_questions (per dialogue)")
    p.add_argument("--method", default="allmem")
    p.add_argument("--embedder", default="hash")
    p.add_argument("--delay", type=float, default=0.3, help="seconds the stub waits before every reply")
    p.add_argument("--workers", type=int, default=2, help="run.workers of the parallel run")
    p.add_argument("--concurrency", type=int, default=16, help="llm.max_concurrency of the parallel run")
    p.add_argument("--keep", type=Path, default=None, help="keep both runs under this folder")
    args = p.parse_args(argv)

    workers = args.workers
    if workers > 1 and not has_workers():
        print(f"[bench] run.workers: not in this checkout's run config (the runner has no worker processes yet); parallel run uses 1 worker, "
              f"llm.max_concurrency={args.concurrency} alone")  # fmt: skip
        workers = 1
    stub = StubLLM(delay_s=args.delay).start()
    try:
        with tempfile.TemporaryDirectory(prefix="bench_online-") as tmp:
            base = args.keep or Path(tmp)
            seq = run_once(args, stub, base / "sequential", 1, 1)
            par = run_once(args, stub, base / "parallel", workers, args.concurrency)
            differences = same_result(seq[2], par[2])
    finally:
        stub.stop()
    slice_ = "tests/fixtures/locomo_tiny.json" if args.tiny else f"LoCoMo, {args.dialogues} dialogues"
    if args.questions and not args.tiny:
        slice_ += f", {args.questions} questions each"
    print(
        f"[bench] {args.method} on {slice_}; stub delay {args.delay:g} s per call; embedder {args.embedder}"
    )
    print(f"workers=1 concurrency=1: {seq[0]:8.1f} s  ({seq[1]} requests)")
    print(f"workers={workers} concurrency={args.concurrency}: {par[0]:8.1f} s  ({par[1]} requests)")
    print(f"speed-up: {seq[0] / par[0]:.2f}x")
    print(f"same result: {not differences}" + ("" if not differences else f" ({'; '.join(differences)})"))
    return 0 if not differences else 1


if __name__ == "__main__":
    raise SystemExit(main())
