"""The dialogues of one run in ``run.workers`` processes, with one writer.

Each worker process (forked from a forkserver that imported the heavy libraries once, ``_pool``) keeps one embedder
and one BLAS/OpenMP/torch thread, takes one dialogue at a time and writes everything that dialogue makes into its
own part folder,
``<run_dir>/parts/<index>/``: the run files by their usual names (``predictions.jsonl``, ``system_stats.jsonl``,
``calls.jsonl`` from its own ledger, ``atc_events.jsonl`` and saved banks from its own memory system). The
parent is the one writer of the run files: it appends each finished part to them strictly in the dataset's
order (``merge_part``) and removes it, so the run directory is the one a single process makes, by
``allmem.run.compare.same_result``.

Failures keep the single-process rules. A worker that dies (killed, out of memory, a crash) breaks the pool:
each dialogue then in flight has what its part holds merged and its other questions recorded as failed (no
``DONE``; the rerun asks them again), and the remaining dialogues go to a fresh pool. A ``CircuitOpen`` in a
worker stops the dispatch as it stops the in-process loop. A part left behind by a killed parent is merged
before the next attempt's resume (``recover``), exactly as a killed single process leaves its lines in the
run files; a merge cut short is redone from the sizes it recorded first, so no line is written twice.

Workers get a dialogue, never the dataset: ``dialogues[i:i + 1]`` is a one-item list, or for LongMemEval a
one-span view of the file (``benchmarks.longmemeval.LongMemEvalFile``), which the worker decodes itself.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import shutil
import signal
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from allmem import files
from allmem.errors import ConfigError
from allmem.run import asking
from allmem.threads import ONE_THREAD_ENV
from allmem.types import Dialogue, record_key

log = logging.getLogger("allmem.run")

# The files a part holds and the parent appends to the run's own, in this order.
# A part's contexts.jsonl.gz is gzip members, whole after its torn tail is cut: appending them is concatenating.
_MERGED = (files.PREDICTIONS, files.SYSTEM_STATS, files.CALLS, files.EVENTS, files.CONTEXTS)
# What the forkserver imports once before it forks the workers (``allmem.run.worker_preload``).
PRELOAD = "allmem.run.worker_preload"


def workers(cfg: DictConfig) -> int:
    """``run.workers`` (configs/config.yaml): dialogues answered at once, each in its own process."""
    value = cfg.run.workers
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"run.workers: must be an integer >= 1, got {value!r}")
    return value


def part_dir(out_dir: Path, index: int) -> Path:
    return out_dir / files.PARTS / f"{index:06d}"


def merge_part(part: Path, out_dir: Path) -> int:
    """Append a part's lines to ``out_dir``'s run files (a torn last line of the part cut first), move its other
    files (saved banks) there, and remove it; returns the prediction lines added. Safe to repeat after a kill at
    any point: the run files' sizes before the first append are recorded in the part (``files.MERGING``) and a
    repeat cuts them back to those sizes; a part whose merge ended is renamed before it is removed."""
    marker = part / files.MERGING
    if marker.exists():
        sizes = {str(k): int(v) for k, v in json.loads(marker.read_text(encoding="utf-8")).items()}
        for name, size in sizes.items():
            target = out_dir / name
            if target.exists() and target.stat().st_size > size:
                with target.open("r+b") as fh:
                    fh.truncate(size)
    else:
        for name in _MERGED:
            files.repair_jsonl(out_dir / name)
        sizes = {
            name: (out_dir / name).stat().st_size if (out_dir / name).exists() else 0 for name in _MERGED
        }
        files.write_json(marker, sizes)
    added = 0
    for name in _MERGED:
        src = part / name
        if not src.exists():
            continue
        files.repair_jsonl(src)
        data = src.read_bytes()
        if name == files.PREDICTIONS:
            added = data.count(b"\n")
        files.append_bytes(out_dir / name, data)
    for extra in sorted(part.rglob("*")):  # e.g. banks/<dialogue>/ (method.save_banks)
        rel = extra.relative_to(part)
        if extra.is_file() and rel.name not in (*_MERGED, files.MERGING) and len(rel.parts) > 1:
            dest = out_dir / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(extra, dest)
    gone = part.with_name(part.name + ".merged")
    os.replace(part, gone)
    shutil.rmtree(gone, ignore_errors=True)
    return added


def recover(out_dir: Path) -> int:
    """Merge every part a killed attempt left (finished or not; the resume then treats its lines as those of a
    killed single process) and remove merged ones; returns how many parts were merged."""
    root = out_dir / files.PARTS
    if not root.is_dir():
        return 0
    merged = 0
    for part in sorted(root.iterdir()):
        if part.name.endswith(".merged"):
            shutil.rmtree(part, ignore_errors=True)
        elif part.is_dir():
            merge_part(part, out_dir)
            merged += 1
    if merged:
        log.info("%s: merged %d part(s) an interrupted attempt left", out_dir, merged)
    return merged


@dataclass(frozen=True)
class _Task:
    index: int  # the dialogue's position in the run's sequence
    source: Sequence[Dialogue]  # that one dialogue: dialogues[index:index + 1]
    done: frozenset[tuple[str, str]]  # its (question id, ask point) pairs already answered
    attempt: int
    part: str


@dataclass(frozen=True)
class _Outcome:
    answered: int
    stopped: str | None = None  # the CircuitOpen that stopped it


def answer_all(
    cfg: DictConfig, out_dir: Path, dialogues: Sequence[Dialogue], done: set[tuple[str, str]], redo: set[str],
    attempt: int, bar: Any,
) -> BaseException | None:  # fmt: skip
    """The parallel ``runner._answer_all``: every dialogue in ``redo`` with unanswered questions, by
    ``run.workers`` processes; parts merged in the dataset's order. Returns the ``CircuitOpen`` that stopped it,
    else None; an error raised in a worker is raised here once the finished parts are merged."""
    from allmem.llm.client import CircuitOpen

    ask = str(cfg.protocol.get("ask", "end"))
    answered: dict[int, frozenset[tuple[str, str]]] = {}  # per dialogue to answer, its keys already answered
    for i, d in enumerate(dialogues):  # one pass: a LongMemEval dialogue is decoded from its span each time
        if d.id in redo and asking.todo(d.questions, ask, done):
            ids = {q.id for q in d.questions}
            answered[i] = frozenset(k for k in done if k[0] in ids)
    plan = list(answered)
    n_workers = min(workers(cfg), max(len(plan), 1))
    cfg_data = files.plain(cfg)
    queue = deque(plan)
    results: dict[int, _Outcome | BaseException] = {}
    inflight: dict[Future[_Outcome], int] = {}
    order = deque(plan)
    stopped: BaseException | None = None
    error: BaseException | None = None
    pool = _pool(n_workers, cfg_data)
    ended = False
    try:
        while order:
            while queue and stopped is None and error is None and len(inflight) < 2 * n_workers:
                i = queue.popleft()
                part = part_dir(out_dir, i)
                shutil.rmtree(part, ignore_errors=True)
                task = _Task(i, dialogues[i : i + 1], answered[i], attempt, str(part))
                inflight[pool.submit(_work, task)] = i
            while order and order[0] in results:
                i = order.popleft()
                _merge_outcome(out_dir, dialogues, i, results.pop(i), done, attempt, bar, ask)
            if not order or not inflight:
                break  # all merged, or stopped: nothing more is dispatched
            finished, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
            broken = False
            for fut in finished:
                i = inflight.pop(fut)
                try:
                    outcome = fut.result()
                except BrokenProcessPool as exc:
                    broken = True
                    results[i] = exc
                    continue
                except Exception as exc:  # a bug or an expected error in the worker: the attempt ends with it
                    error = error or exc
                    results[i] = exc
                    continue
                results[i] = outcome
                bar.update(outcome.answered)
                if outcome.stopped is not None and stopped is None:
                    stopped = CircuitOpen(outcome.stopped)
            if broken:  # every dialogue in flight died with the pool
                for fut, i in list(inflight.items()):
                    results[i] = BrokenProcessPool("worker died")
                    inflight.pop(fut)
                pool.shutdown(wait=True, cancel_futures=True)  # its manager thread already ended the workers
                pool = _pool(n_workers, cfg_data)
                gc.collect()  # the broken pool's queue locks are released now, not reported leaked at exit
        ended = error is None
    finally:
        if ended:
            pool.shutdown(wait=True)
        else:
            _stop(pool)
    with contextlib.suppress(OSError):  # an empty parts/ folder: every part merged
        (out_dir / files.PARTS).rmdir()
    if error is not None:
        raise error
    return stopped


def _merge_outcome(
    out_dir: Path, dialogues: Sequence[Dialogue], i: int, outcome: _Outcome | BaseException,
    done: set[tuple[str, str]], attempt: int, bar: Any, ask: str = "end",
) -> None:  # fmt: skip
    """Merge dialogue ``i``'s part; when its worker died, record its questions the part did not answer as
    failed (the run is then not complete and the rerun asks them again)."""
    from allmem.run.pipeline import failed_record

    part = part_dir(out_dir, i)
    recorded = (
        {record_key(r)[1:] for r in files.read_jsonl(part / files.PREDICTIONS)} if part.is_dir() else set()
    )
    if part.is_dir():
        merge_part(part, out_dir)
    if isinstance(outcome, BrokenProcessPool):
        dialogue = dialogues[i]
        why = (
            f"a worker process died (killed, out of memory or a crash) while dialogue {dialogue.id} was in "
            "flight, which ends every dialogue then in flight; rerun to answer its questions"
        )
        lost = [(q, p) for q, p in asking.todo(dialogue.questions, ask, done) if (q.id, p) not in recorded]
        for q, p in lost:
            failed = replace(failed_record(q, why, attempt), ask=p)
            files.append_jsonl(out_dir / files.PREDICTIONS, failed.to_json())
        bar.update(len(lost) + len(recorded))
        log.warning("%s: %d question(s) recorded as failed", why, len(lost))


def _pool(n: int, cfg_data: dict[str, Any]) -> ProcessPoolExecutor:
    """``n`` workers forked from a forkserver: a new interpreter, started once per process, that has imported the
    libraries every worker needs (``allmem.run.worker_preload``); not ``fork`` (torch, the parent's threads) and
    not ``spawn`` (each worker paid those imports again). A worker takes the parent's environment and folder as
    they are now (``_init``), not as they were when the forkserver started."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([PRELOAD])
    return ProcessPoolExecutor(
        n, mp_context=context, initializer=_init, initargs=(cfg_data, dict(os.environ), os.getcwd())
    )


def _stop(pool: ProcessPoolExecutor) -> None:
    """Stop the pool now (after an error or Ctrl-C too): queued work cancelled, running workers terminated."""
    processes = dict(getattr(pool, "_processes", None) or {})  # Python 3.11 has no terminate_workers()
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes.values():
        if proc.is_alive():
            proc.terminate()
    for proc in processes.values():
        proc.join(timeout=10)


_STATE: dict[str, Any] = {}


def _init(cfg_data: dict[str, Any], environ: dict[str, str], cwd: str) -> None:
    """Per worker process: the parent's environment and folder, one native thread per pool, Ctrl-C left to the
    parent, the config (no bars of its own)."""
    os.environ.clear()
    os.environ.update(environ)
    os.environ.update(ONE_THREAD_ENV)
    os.chdir(cwd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the pool and records the attempt
    from threadpoolctl import threadpool_limits

    _STATE["limits"] = threadpool_limits(1)
    from tqdm.auto import tqdm

    # not tqdm's default multiprocessing lock: a killed worker would leak its semaphore
    tqdm.set_lock(threading.RLock())
    cfg_data["run"]["progress"] = False  # the parent's bar counts every worker's questions
    _STATE["cfg"] = OmegaConf.create(cfg_data)


def _work(task: _Task) -> _Outcome:
    """One dialogue in a worker: its own services writing into the part folder, then ``answer_dialogue``."""
    from allmem.build import build_embedder
    from allmem.llm.client import CircuitOpen
    from allmem.run import pipeline

    cfg = _STATE["cfg"]
    if "embedder" not in _STATE:
        _STATE["embedder"] = build_embedder(cfg)
    if "protocol" not in _STATE:
        from hydra.utils import instantiate

        _STATE["protocol"] = instantiate(cfg.protocol)
    protocol = _STATE["protocol"]
    part = Path(task.part)
    part.mkdir(parents=True, exist_ok=True)
    dialogue = task.source[0]
    svc = pipeline.Services.build(cfg, part, embedder=_STATE["embedder"])
    if svc.ledger is not None:
        svc.ledger.set_attempt(task.attempt)
    todo = asking.todo(dialogue.questions, str(cfg.protocol.get("ask", "end")), set(task.done))
    count = _Counter()
    try:
        with (
            files.JsonlWriter(part / files.PREDICTIONS) as out,
            files.JsonlWriter(part / files.SYSTEM_STATS) as stats_out,
            files.JsonlWriter(part / files.CONTEXTS) as contexts_out,
        ):
            pipeline.answer_dialogue(
                cfg, svc, protocol, pipeline.judge_fn(cfg, svc.llm, protocol), dialogue, todo, task.attempt, out,
                stats_out, count, contexts_out=contexts_out,
            )  # fmt: skip
    except CircuitOpen as exc:
        return _Outcome(count.n, stopped=str(exc))
    return _Outcome(count.n)


class _Counter:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, n: int) -> None:
        self.n += n
