"""Scale benchmark (``make bench-scale``): every Table 1 method's time per turn on LongMemEval-shaped haystacks.

Not a timed test: timings depend on the machine and its load, so every table prints ratios to ``naive_rag`` measured
in the same run, and the load average before and after.

1. A LongMemEval-format file of ``--fraction`` of LongMemEval-s (or ``--questions``) is written by
   ``scripts/make_longmemeval.py`` (fresh text in every session, ~230-token turns).
2. Per embedding backend (``--embedders``, config names of ``configs/embedder/``) and per method (Table 1's list,
   ``configs/experiment/table1.yaml``), one offline ``allmem run`` in its own process with a cold cache
   (``ALLMEM_CACHE`` pointed at a fresh folder) and one BLAS/torch thread. Printed: wall and CPU time per turn,
   each as a ratio to ``naive_rag`` on the same backend, the process tree's peak RSS (``wait4``), the texts
   looked up in the embedding store per turn and the share it already held (``system_stats.jsonl``'s
   ``embedding_cache``). Two times per turn: ``run`` is the run's whole wall time (the manifest's ``wall_s``:
   imports, model load, questions) over its turns; ``steady`` is the write path (``ingest_s + end_stream_s`` of
   ``system_stats.jsonl``) of every dialogue after the first, over their turns, which is what a run of 500
   haystacks pays per turn. And the write path's embedding work: tokens per turn the model read for the texts the
   store did not hold, and slots per turn, the positions of the forward passes that carried them (padding to the
   length bucket and dummy rows included: ``allmem.embed_batch``), counted in the run's process (``counted_run``).
3. The same runs in sequence on one shared cache, as the jobs of a sweep (``make paper``) share it: a text
   another method embedded (a rendered turn, a descriptor, a Split sentence) is read from the content-addressed
   store, and the share of such hits is printed (``--no-shared`` skips this part); a descriptor another allmem
   variant computed is read from the offline reply store (``allmem.llm.offline``).
   Then the same on a copy of the file whose later haystacks repeat distractor sessions of earlier ones, as the
   real LongMemEval-s file does (``REPEATED_SHARE`` of its session occurrences, ``with_repeats``; the generated
   file's sessions are all fresh, the worst case): what a method embeds for a repeated session is read from the
   store (``--no-repeats`` skips this part).
4. For ``--par-method`` on ``--par-questions`` haystacks of its own: the wall speed-up of ``run.workers=2`` and of
   two shards (``run.shard=1/2`` and ``2/2`` as two concurrent processes) over one process, and E, the projection's
   parallel efficiency: the write path of the same haystacks alone over its time in the two shards
   (``contention_efficiency``; each process's first haystack and its fixed cost left out).
5. The projected wall time of a full LongMemEval-s Table 1 (500 haystacks, ~250,000 turns) at 2 and 32 cores, for
   the cold, shared and repeated-sessions runs, with the formula printed: each method's steady time per turn, time
   per question and fixed cost per process (``projection``); then the same at 32 cores with every method's W cut to
   its tokens' share of its slots (what no batching scheme beats), and the sum of W that 1 h at 32 cores needs.

    python scripts/bench_scale.py                                   # make bench-scale
    python scripts/bench_scale.py --fraction 0.004 --sessions 10 --methods naive_rag allmem
    python scripts/bench_scale.py --embedders minilm minilm_torch minilm_onnx_int8 --methods naive_rag allmem
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.lme_synth import LME_S_QUESTIONS, LME_S_SESSIONS, TURN_PAIRS

ROOT = Path(__file__).resolve().parents[1]
# LongMemEval-s's size, from the generator's constants: 500 haystacks of 50 sessions of (3 + 7) / 2 user/assistant
# pairs on average, so 500 x 50 x 10 = 250,000 turns.
LME_S_TURNS = LME_S_QUESTIONS * LME_S_SESSIONS * sum(TURN_PAIRS)
NODE = 32  # the projection's many-core case: a 32-core node or a SLURM array of 32 tasks
# LongMemEval-s's file repeats distractor sessions across haystacks (its sampler draws each from shared pools):
# 23,867 session occurrences in its 500 histories (LongMemEval issue #54, on longmemeval_s_cleaned.json) hold 19,195
# distinct sessions (the count after pooling every history's sessions, reported by vshulcz/deja-vu PR #3862;
# nambok/mentedb PR #85 reports 19,194). So about 19.6% of what a full run meets, an earlier haystack held.
LME_S_SESSION_OCCURRENCES = 23_867
LME_S_DISTINCT_SESSIONS = 19_195
REPEATED_SHARE = 1 - LME_S_DISTINCT_SESSIONS / LME_S_SESSION_OCCURRENCES


def log(msg: str) -> None:
    print(f"[bench-scale] {msg}", file=sys.stderr, flush=True)


def table1_methods() -> list[str]:
    """Table 1's compared methods, from their one home (``configs/experiment/table1.yaml``)."""
    import yaml

    node = yaml.safe_load((ROOT / "configs" / "experiment" / "table1.yaml").read_text())
    return [m.strip() for m in str(node["hydra"]["sweeper"]["params"]["method"]).split(",")]


def compose_config(overrides: list[str] | None = None) -> Any:
    """This checkout's composed config. ``allmem.paths`` registers the ``${allmem.*:}`` resolvers the configs use
    (``hydra.searchpath`` among them: composing fails without them)."""
    from hydra import compose, initialize_config_dir

    import allmem.paths  # noqa: F401 - registers the resolvers on import

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        return compose("config", overrides=overrides or [])


def run_keys() -> set[str]:
    """The keys of the composed config's ``run`` node (to tell whether workers / shards exist in this code)."""
    return set(compose_config().run.keys())


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


COUNTED = "--counted-run"  # the child mode that runs `allmem run` and tallies the embedder's forward passes


def tally_pass(tally: dict[str, int], p: Any) -> None:
    """Add one forward pass (``allmem.embed_batch.Pass``) to ``tally``: its texts, their tokens (the attention mask
    of their rows) and its slots (every position of every row)."""
    tally["texts"] += len(p.texts)
    tally["tokens"] += int(p.attention_mask[: len(p.texts)].sum())
    tally["slots"] += int(p.input_ids.size)


def counted_run(out: Path, args: list[str]) -> int:
    """``allmem run args`` in this process, tallying the embedder's forward passes (any backend) made while a
    dialogue is written (``allmem.run.pipeline.ingest``, questions asked mid-stream left out), the path the steady
    time per turn measures: the texts, their tokens and the passes' slots (rows x length: padding and dummy rows
    included). Written to ``out`` as JSON when the run ends. Passes are counted where they run, so only texts the
    cache did not hold; workers' passes run in other processes and are not counted (the timed runs use none)."""
    from allmem import embed, embed_onnx
    from allmem.cli import main as allmem_main
    from allmem.run import pipeline

    tally = {"texts": 0, "tokens": 0, "slots": 0}
    writing = [False]

    def counting(run: Any) -> Any:
        def wrapped(self: Any, p: Any) -> Any:
            if writing[0]:
                tally_pass(tally, p)
            return run(self, p)

        return wrapped

    def phase(fn: Any, on: bool) -> Any:
        def wrapped(*a: Any, **kw: Any) -> Any:
            was, writing[0] = writing[0], on
            try:
                return fn(*a, **kw)
            finally:
                writing[0] = was

        return wrapped

    embed_onnx.OnnxEncoder.run = counting(embed_onnx.OnnxEncoder.run)  # type: ignore[method-assign]
    embed.Embedder._torch_pass = counting(embed.Embedder._torch_pass)  # type: ignore[method-assign]
    pipeline.ingest = phase(pipeline.ingest, True)  # type: ignore[assignment]
    pipeline.answer_question = phase(pipeline.answer_question, False)  # type: ignore[assignment]
    try:
        return allmem_main(args)
    finally:
        out.write_text(json.dumps(tally))


def start(
    args: list[str], cache: Path, extra_env: dict[str, str] | None = None, count: Path | None = None
) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(
        ALLMEM_CACHE=str(cache), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", WANDB_MODE="disabled",
    )  # fmt: skip
    env.update(extra_env or {})
    runner = [__file__, COUNTED, str(count)] if count else ["-m", "allmem.cli"]
    cmd = [sys.executable, *runner, "run", *args, "run.progress=false"]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen[bytes]) -> tuple[int, float, float, str]:
    """Wait for ``proc``; (exit code, CPU seconds of its tree, peak RSS in MB of its tree, output tail)."""
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    tail = out.decode("utf-8", "replace").strip().splitlines()[-3:]
    return proc.returncode, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, " | ".join(tail)


def run_dirs(root: Path) -> list[Path]:
    from allmem import files

    return sorted(p.parent for p in root.rglob(files.MANIFEST))


def dialogue_stats(run_dir: Path) -> list[dict[str, Any]]:
    from allmem import files

    return files.read_jsonl(run_dir / files.SYSTEM_STATS)


def seed_export(embedder: str, work: Path) -> Path | None:
    """An ONNX backend's export, made once here (``allmem.embed_onnx``: once per cache folder in real use) and
    copied into each cold cache, so the runs time embedding and not a one-off export. None for torch."""

    node = compose_config([f"embedder={embedder}"]).embedder
    if node.get("backend", "torch") == "torch":
        return None
    seed = work / "onnx_seed" / embedder
    if not (seed / "onnx").is_dir():
        # in a child process: a run forked from a parent that loaded torch would report the parent's memory as
        # its own peak RSS (Linux carries the high-water mark across fork and exec)
        subprocess.run([sys.executable, __file__, "--export-only", embedder, str(seed)], check=True)
    return seed / "onnx"


def export_only(embedder: str, seed: Path) -> None:
    from allmem.build import build_embedder

    os.environ["ALLMEM_CACHE"] = str(seed)  # the export goes to <cache>/onnx
    emb = build_embedder(compose_config([f"embedder={embedder}"]), cache_dir=seed / "scratch")
    emb.encode(["export the model once"])
    emb.close()


def copy_seed(seed: Path | None, cache: Path) -> None:
    if seed is not None and not (cache / "onnx").exists():
        import shutil

        shutil.copytree(seed, cache / "onnx")


def with_repeats(src: Path, dst: Path, share: float, seed: int) -> tuple[int, int]:
    """Copy the LongMemEval-format file ``src`` to ``dst`` with ``share`` of the sessions after the first haystack
    replaced by distractor sessions an earlier haystack showed, as the real file repeats them (``REPEATED_SHARE``):
    ids and turns copied, the slot's date kept, none twice in one haystack, evidence sessions never replaced nor
    copied. Each haystack replaces what brings the running total to round(``share`` x the sessions so far), as far
    as its distractors and the earlier ones allow. Returns (sessions replaced, sessions after the first haystack);
    the same seed writes the same file."""
    import random

    rng = random.Random(seed)
    questions = json.loads(src.read_text())
    pool: dict[str, Any] = {}  # distractor sessions by id, as the file first shows them
    replaced = later = 0
    for n, q in enumerate(questions):
        ids, sessions = q["haystack_session_ids"], q["haystack_sessions"]
        evidence = set(q.get("answer_session_ids") or [])
        own = [k for k, sid in enumerate(ids) if sid not in evidence]
        slots: list[int] = []
        if n:
            later += len(ids)
            choices = [sid for sid in pool if sid not in ids]
            count = min(len(own), len(choices), max(0, round(share * later) - replaced))
            slots = sorted(rng.sample(own, count))
            for k, sid in zip(slots, rng.sample(choices, count), strict=True):
                ids[k], sessions[k] = sid, pool[sid]
        replaced += len(slots)
        pool.update((ids[k], sessions[k]) for k in own if k not in slots)
    dst.write_text(json.dumps(questions))
    return replaced, later


def write_path_s(stat: dict[str, Any]) -> float:
    """A dialogue's write-path seconds (``system_stats.jsonl``): its turns and its end of stream."""
    return float(stat["ingest_s"]) + float(stat["end_stream_s"])


def measure(args: list[str], root: Path, cache: Path, seed: Path | None = None) -> dict[str, Any]:
    """One run in its own process: wall / CPU per turn (run and steady), time per question, peak RSS."""
    from allmem import files

    copy_seed(seed, cache)
    count = root.with_name(root.name + ".passes.json")
    t0 = time.perf_counter()
    code, cpu, rss, tail = finish(start([*args, f"run.root={root}"], cache, count=count))
    wall = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"bench-scale: allmem run {' '.join(args)} failed (exit {code}): {tail}")
    (run_dir,) = run_dirs(root)
    stats = dialogue_stats(run_dir)
    turns = sum(int(s["turns"]) for s in stats)
    looked_up = sum(int((s.get("embedding_cache") or {}).get("texts", 0)) for s in stats)
    embedded = sum(int((s.get("embedding_cache") or {}).get("embedded", 0)) for s in stats)
    terms = cost_terms(wall, stats, files.read_jsonl(run_dir / files.PREDICTIONS))
    passes = json.loads(count.read_text())
    return {
        "run_dir": run_dir, "turns": turns, "wall_s": wall, "cpu_s": cpu, "rss_mb": rss,
        "run_ms": 1000 * wall / turns, "cpu_ms": 1000 * cpu / turns, **terms,
        "texts": looked_up, "embedded": embedded, "tokens": passes["tokens"], "slots": passes["slots"],
    }  # fmt: skip


# A question's own time: the latencies allmem.run.pipeline.answer_question records around its three steps.
QUESTION_PHASES = ("retrieve", "pack", "generate")


def cost_terms(
    wall_s: float, stats: list[dict[str, Any]], predictions: list[dict[str, Any]]
) -> dict[str, Any]:
    """A run's projection terms, all from one clock (wall time of a one-thread process): ``steady_ms`` per turn (the
    write path of every dialogue after the first: the first carries the warm-up), ``question_ms`` (mean over the
    answered questions) and ``fixed_s``, what one process pays whatever its size (imports, model load, the first
    dialogue's warm-up, scoring): its wall time less the other two times its turns and questions."""
    rest = stats[1:]
    if not rest:
        log("one dialogue only: its warm-up is counted in the steady time per turn (use 2 or more haystacks)")
        rest = stats
    steady_turns = sum(int(s["turns"]) for s in rest)
    steady_s = sum(write_path_s(s) for s in rest)
    steady_ms = 1000 * steady_s / steady_turns if steady_turns else 0.0
    asked = [
        sum(float(r["latency_ms"][k]) for k in QUESTION_PHASES)
        for r in predictions
        if r.get("error") is None and all(k in (r.get("latency_ms") or {}) for k in QUESTION_PHASES)
    ]
    question_ms = sum(asked) / len(asked) if asked else 0.0
    turns = sum(int(s["turns"]) for s in stats)
    fixed_s = wall_s - (steady_ms * turns + question_ms * len(asked)) / 1000
    if fixed_s < 0:
        log(
            f"fixed cost per process came out at {fixed_s:.1f} s (the run's phases overlap its wall time): 0 used"
        )
    return {
        "steady_ms": steady_ms,
        "question_ms": question_ms,
        "questions": len(asked),
        "fixed_s": max(0.0, fixed_s),
    }


HEAD = (
    f"{'method':<16}{'turns':>6}{'run ms':>9}{'x':>6}{'cpu ms':>9}{'x':>6}{'steady ms':>11}{'x':>6}"
    f"{'peak RSS MB':>13}{'texts/turn':>12}{'store hits':>12}{'tokens/turn':>13}{'slots/turn':>12}"
)


def row(name: str, r: dict[str, Any], base: dict[str, Any] | None) -> str:
    def ratio(key: str) -> str:
        return f"{r[key] / base[key]:.2f}" if base else "-"

    hits = f"{1 - r['embedded'] / r['texts']:.1%}" if r["texts"] else "-"
    return (
        f"{name:<16}{r['turns']:>6}{r['run_ms']:>9.1f}{ratio('run_ms'):>6}{r['cpu_ms']:>9.1f}"
        f"{ratio('cpu_ms'):>6}{r['steady_ms']:>11.1f}{ratio('steady_ms'):>6}{r['rss_mb']:>13.0f}"
        f"{r['texts'] / r['turns']:>12.1f}{hits:>12}{r['tokens'] / r['turns']:>13.1f}{r['slots'] / r['turns']:>12.1f}"
    )


def write_data(path: Path, questions: int, sessions: int, seed: int) -> None:
    """A LongMemEval-format file: ``questions`` haystacks of ``sessions`` sessions (scripts/make_longmemeval.py)."""
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_longmemeval.py"), str(path), "--questions", str(questions),
         "--sessions", str(sessions), "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip


def lme_args(path: Path) -> list[str]:
    """The ``allmem run`` overrides that read the LongMemEval-format file ``path``."""
    return ["dataset=longmemeval_s", f"dataset.path={path}"]


def contention_efficiency(
    order: list[str], one: list[dict[str, Any]], sharded: list[dict[str, Any]], n: int
) -> tuple[float, float, float]:
    """E of the projection: the write path of the same dialogues timed in one process alone, over its time in ``n``
    one-thread shards running at once (so E = 1 when concurrent processes do not slow each other). Returns (E, the
    seconds alone, the seconds in the shards).

    ``order`` is the dataset's dialogue ids in file order; both runs' ``system_stats.jsonl`` lines are matched to it
    by ``dialogue_id``. Only positions n and later count: shard i/n's first dialogue is position i-1
    (``allmem.run.shards.positions``), and a process's first dialogue carries its warm-up, as ``cost_terms`` leaves
    it out of W. The processes' fixed costs (imports, model load, scoring) stay out too: the projection counts F
    once per task, so a speed-up of whole wall times, which includes F, would count it twice (and 3 haystacks over
    2 shards cannot beat a speed-up of 1.5)."""
    alone_by = {s["dialogue_id"]: s for s in one}
    shard_by = {s["dialogue_id"]: s for s in sharded}
    if sorted(alone_by) != sorted(order) or sorted(shard_by) != sorted(order):
        raise SystemExit("bench-scale: the one-process and sharded runs do not hold the dataset's dialogues")
    later = order[n:]
    if not later:
        raise SystemExit(f"bench-scale: E needs more than {n} haystacks (each process's first is left out)")
    alone = sum(write_path_s(alone_by[d]) for d in later)
    together = sum(write_path_s(shard_by[d]) for d in later)
    return alone / together, alone, together


def parallel_part(
    method: str, embedder: str, questions: int, sessions: int, seed: int, work: Path, keys: set[str],
    seed_export: Path | None,
) -> float | None:  # fmt: skip
    """``method`` on ``questions`` haystacks of its own (an even number, so two shards get equal halves): one
    process, ``run.workers=2``, and two concurrent shards; their wall speed-ups, and E (``contention_efficiency``)."""
    data = work / "lme_parallel.json"
    write_data(data, questions, sessions, seed)
    args = [*lme_args(data), f"embedder={embedder}", f"method={method}"]
    one = measure(args, work / "par1", work / "cache_par1", seed_export)
    print(
        f"\n## Parallel: {method}, {questions} haystacks, cold caches; one process: {one['wall_s']:.1f} s wall"
    )
    if "workers" in keys:
        two = measure([*args, "run.workers=2"], work / "w2", work / "cache_w2", seed_export)
        print(
            f"run.workers=2: {two['wall_s']:.1f} s wall, speed-up {one['wall_s'] / two['wall_s']:.2f}, "
            f"peak RSS {two['rss_mb']:.0f} MB"
        )
    else:
        print(
            "run.workers=2: skipped, this code's run config has no run.workers (scale-par's branch adds it)"
        )
    if "shard" not in keys:
        print("run.shard=i/n: skipped, this code's run config has no run.shard (scale-par's branch adds it)")
        return None
    for i in (1, 2):
        copy_seed(seed_export, work / f"cache_s{i}")
    root, t0 = work / "s2", time.perf_counter()
    procs = [start([*args, f"run.shard={i}/2", f"run.root={root}"], work / f"cache_s{i}") for i in (1, 2)]
    results = [finish(p) for p in procs]
    wall = time.perf_counter() - t0
    if any(code != 0 for code, *_ in results):
        print(f"run.shard=i/2: a shard failed: {[tail for *_, tail in results]}")
        return None
    rss = max(r for _, _, r, _ in results)
    print(
        f"run.shard=1/2 + 2/2 (two processes): {wall:.1f} s wall, speed-up {one['wall_s'] / wall:.2f} (whole runs: "
        f"each process's fixed cost included), peak RSS {rss:.0f} MB"
    )
    (run_dir,) = run_dirs(root)
    order = [q["question_id"] for q in json.loads(data.read_text())]
    efficiency, alone, together = contention_efficiency(
        order, dialogue_stats(one["run_dir"]), dialogue_stats(run_dir), 2
    )
    print(
        f"E = {efficiency:.2f}: the write path of haystacks 3-{questions}, {alone:.1f} s in one process alone over "
        f"{together:.1f} s in the two shards (each process's first haystack left out); two processes on this "
        f"machine: {NODE} at once are not measured"
        + (
            "; over 1 is noise (processes that share a machine are not faster than one alone): 1 used"
            if efficiency > 1
            else ""
        )
    )
    return min(efficiency, 1.0)


def hours(f: float, w: float, q: float, p: int, e: float) -> float:
    """T(P) of ``projection``, in hours: F in s per task, W in ms per turn, Q in ms per question."""
    return (f + (w * LME_S_TURNS + q * LME_S_QUESTIONS) / 1000 / p) / e / 3600


def projection(
    rows: dict[str, dict[str, Any]],
    embedder: str,
    efficiency: float | None,
    caches: str,
    one_node: bool = False,
) -> None:
    """The wall time of a full LongMemEval-s Table 1 split into P one-thread tasks (a task per core: a node's
    ``run.shard=i/P`` processes or a SLURM array; ``one_node``: the node's only, whose tasks share one cache), each
    running every method on 1/P of the haystacks.

    Per method (``cost_terms``): W = steady ms per turn, Q = ms per question and F = what one process pays whatever
    its size. All three are wall times of one-thread processes, so load on the machine raises them. The figure in
    parentheses is the earlier all-in estimate: CPU ms per turn with F spread over this bench's few turns, usually
    higher because it counts F again for every 306 turns or so, most of all for the cheap methods."""
    e = efficiency if efficiency else 1.0
    e_note = (
        f"E = {e:.2f} (the write path's time alone over its time in two concurrent shards, measured above)"
        if efficiency
        else "E = 1 (ideal: not measured here)"
    )
    w = sum(r["steady_ms"] for r in rows.values())
    q = sum(r["question_ms"] for r in rows.values())
    f = sum(r["fixed_s"] for r in rows.values())
    all_in = sum(r["cpu_ms"] for r in rows.values())
    print(
        f"\n## Projected full LongMemEval-s Table 1 (embedder={embedder}, offline, {len(rows)} methods; {caches})"
    )
    print(
        f"T(P) = [sum F + (sum W x {LME_S_TURNS:,} turns + sum Q x {LME_S_QUESTIONS} questions) / P] / E; {e_note}"
    )
    print(f"sum W = {w:.1f} ms per turn, sum Q = {q:.0f} ms per question, sum F = {f:.1f} s per task")
    many = f"{NODE}-core node" + ("" if one_node else f" or a SLURM array of {NODE} tasks")
    for label, p in (("2 cores", 2), (many, NODE)):
        upper = all_in / 1000 * LME_S_TURNS / (p * e) / 3600
        print(
            f"  P={p:<3} ({label}): {hours(f, w, q, p, e):.2f} h  (all-in CPU ms per turn, {all_in:.1f}: {upper:.2f} h)"
        )
    # What no batching scheme beats: each method's W cut to the share of its passes' slots that its texts' own
    # tokens fill (no padding, no dummy rows), as if W were all embedding; a method that embeds nothing keeps its W.
    w_tokens = sum(
        r["steady_ms"] * (r["tokens"] / r["slots"] if r.get("slots") else 1.0) for r in rows.values()
    )
    print(
        f"  with no padding and no dummy rows (each W x its tokens / slots; a lower bound): sum W = {w_tokens:.1f} ms "
        f"per turn, P={NODE}: {hours(f, w_tokens, q, NODE, e):.2f} h"
    )
    w_hour = ((3600 * e - f) * NODE * 1000 - q * LME_S_QUESTIONS) / LME_S_TURNS
    print(f"  1 h at P={NODE} needs sum W <= {w_hour:.1f} ms per turn ({w_hour / w:.0%} of this run's)")
    per_dialogue = {
        m: (r["steady_ms"] * LME_S_TURNS / LME_S_QUESTIONS + r["question_ms"]) / 1000 for m, r in rows.items()
    }
    slowest = max(per_dialogue, key=per_dialogue.__getitem__)
    print(
        f"  one haystack (~{LME_S_TURNS // LME_S_QUESTIONS} turns) of the slowest method ({slowest}): "
        f"{per_dialogue[slowest]:.0f} s: no schedule finishes sooner (a dialogue is never split across processes)"
    )


def part(
    title: str, methods: list[str], data_args: list[str], emb: str, root: Path, seed: Path | None,
    *, shared_cache: bool,
) -> dict[str, dict[str, Any]]:  # fmt: skip
    """One run per method (naive_rag first, so every row's ratio prints as soon as its run ends); each method a
    cache of its own, or all of them one."""
    print(f"\n## {title}")
    print(HEAD, flush=True)
    rows: dict[str, dict[str, Any]] = {}
    for m in methods:
        tag = f"{emb}_{m}"
        log(f"{root.name} {tag} ...")
        cache = root / "cache" / (emb if shared_cache else tag)
        rows[m] = measure([*data_args, f"method={m}", f"embedder={emb}"], root / "runs" / tag, cache, seed)
        print(row(m, rows[m], rows.get("naive_rag")), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = ap.add_mutually_exclusive_group()
    size.add_argument(
        "--fraction", type=float, default=0.006, help="fraction of LongMemEval-s's 500 questions"
    )
    size.add_argument("--questions", type=int, help="questions (haystacks) instead of --fraction")
    ap.add_argument(
        "--sessions", type=int, default=10, help=f"sessions per haystack (LongMemEval-s: {LME_S_SESSIONS})"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", nargs="+", help="default: Table 1's list")
    ap.add_argument("--embedders", nargs="+", default=["minilm"], help="configs/embedder/ names")
    ap.add_argument("--par-method", default="naive_rag", help="method of the workers / shards part")
    ap.add_argument(
        "--par-questions",
        type=int,
        default=6,
        help="haystacks of the workers / shards part (even, at least 4)",
    )
    ap.add_argument("--no-parallel", action="store_true", help="skip the workers / shards part")
    ap.add_argument("--no-shared", action="store_true", help="skip the runs on one shared cache")
    ap.add_argument(
        "--no-repeats",
        action="store_true",
        help="skip the shared-cache runs on haystacks that repeat sessions",
    )
    ap.add_argument("--work", type=Path, help="folder for the file, runs and caches (default: a temp folder)")
    a = ap.parse_args(argv)
    if a.par_questions < 4 or a.par_questions % 2:
        ap.error(
            f"--par-questions must be even and at least 4 (two shards, each first left out), got {a.par_questions}"
        )

    methods = a.methods or table1_methods()
    methods = ["naive_rag", *(m for m in methods if m != "naive_rag")]
    work = a.work or Path(tempfile.mkdtemp(prefix="bench_scale_"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "lme.json"
    n_q = a.questions if a.questions else max(2, round(a.fraction * LME_S_QUESTIONS))
    write_data(data, n_q, a.sessions, a.seed)
    print(
        f"# bench-scale: {n_q} haystacks x {a.sessions} sessions ({n_q / LME_S_QUESTIONS:.1%} of LongMemEval-s's"
    )
    print(
        f"# questions, {a.sessions / LME_S_SESSIONS:.0%} of its sessions); {os.cpu_count()} CPUs; load average before {load_average()}"
    )
    data_args = lme_args(data)
    repeats_data = work / "lme_repeats.json"
    n_repeated = n_later = 0
    if not a.no_repeats:
        n_repeated, n_later = with_repeats(data, repeats_data, REPEATED_SHARE, a.seed)
        if not n_repeated:
            log(
                f"{n_q} haystacks x {a.sessions} sessions leave no session to repeat: the repeats part is skipped"
            )
            a.no_repeats = True
    cold: dict[str, dict[str, dict[str, Any]]] = {}
    shared: dict[str, dict[str, dict[str, Any]]] = {}
    repeats: dict[str, dict[str, dict[str, Any]]] = {}
    seeds = {emb: seed_export(emb, work) for emb in a.embedders}
    for emb in a.embedders:
        cold[emb] = part(
            f"embedder={emb}: time per turn (cold cache per method, one thread; x = ratio to naive_rag in this run)",
            methods, data_args, emb, work / "cold", seeds[emb], shared_cache=False,
        )  # fmt: skip
        if not a.no_shared:
            shared[emb] = part(
                f"embedder={emb}: the same runs in sequence on one cache, as a sweep's jobs share it (embedding "
                "store, offline reply store and LLM response cache; store hits = texts another method had embedded)",
                methods, data_args, emb, work / "shared", seeds[emb], shared_cache=True,
            )  # fmt: skip
        if not a.no_repeats:
            repeats[emb] = part(
                f"embedder={emb}: the same runs in sequence on one cache, on a copy of the file with {n_repeated} of "
                f"the {n_later} sessions after the first haystack replaced by distractor sessions an earlier one "
                f"showed, as LongMemEval-s's file repeats {REPEATED_SHARE:.1%} of its session occurrences "
                f"(REPEATED_SHARE); the first haystack holds none, and W leaves it out (its cost goes to F)",
                methods, lme_args(repeats_data), emb, work / "repeats", seeds[emb], shared_cache=True,
            )  # fmt: skip
    efficiency = None
    if not a.no_parallel:
        first = a.embedders[0]
        efficiency = parallel_part(
            a.par_method, first, a.par_questions, a.sessions, a.seed, work, run_keys(), seeds[first]
        )
    for emb in a.embedders:
        projection(cold[emb], emb, efficiency, "cold caches: every method embeds its own texts")
        if emb in shared:
            projection(shared[emb], emb, efficiency, "one shared cache, as `make paper` runs a sweep")
        if emb in repeats:
            projection(
                repeats[emb],
                emb,
                efficiency,
                "one shared cache, sessions repeated as LongMemEval-s's file repeats them; an upper bound on what the "
                "repeats save: here every repeat's first showing was embedded before it, as when all tasks share one "
                "cache on one node and no two run the same session at once (a cache per node saves less)",
                one_node=True,
            )
    print(f"\n# load average after {load_average()}; work folder {work}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == [COUNTED]:
        sys.exit(counted_run(Path(sys.argv[2]), sys.argv[3:]))
    if sys.argv[1:2] == ["--export-only"]:
        export_only(sys.argv[2], Path(sys.argv[3]))
        sys.exit(0)
    sys.exit(main())
