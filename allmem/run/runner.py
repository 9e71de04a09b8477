"""The runner: one configuration end to end, from a config to a sealed run directory.

Reads top to bottom as the data flow: check and load → build → lock the run directory → answer every dialogue
(``allmem.run.pipeline``: ingest, then per question retrieve → pack → generate → judge → one prediction line;
in this process or in ``run.workers`` processes, ``allmem.run.parallel``) → score and seal the run directory.
The harness owns the budget, generation and scoring; memory systems only ingest and retrieve.

Failure rule: everything that can be checked before the run directory exists is (``allmem.run.preflight``, building
every component), so a run that cannot work leaves nothing behind. A question whose LLM calls (ingestion of its
dialogue, retrieval, answer, judge) failed after their retries is written with its ``error`` and does not count
as answered; the run then ends with ``RunFailed`` (one line: how many failed, the endpoint, the last error) and
no ``DONE``, so the next run asks exactly those questions again. A failed run never looks like a result.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig
from tqdm.auto import tqdm

from allmem import files
from allmem.build import checked
from allmem.errors import RunFailed
from allmem.metrics.protocols import Protocol
from allmem.run import asking, attempts, identity, parallel, preflight, shards
from allmem.run.pipeline import Services, answer_dialogue, judge_fn, seal
from allmem.types import ASK_MODES, Dialogue
from benchmarks import load_dataset

log = logging.getLogger("allmem.run")


def task_overrides() -> list[str]:
    """The command line's overrides of this Hydra job (empty outside ``allmem run``): they name the run."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def run(cfg: DictConfig, overrides: list[str] | None = None) -> Path:
    """Run one configuration end to end; returns its run directory. Skips a complete run, resumes a partial one.

    ``overrides`` (default: the Hydra job's) name the directory: ``<dataset>/<method>[,<overrides>]-<hash>``.
    Raises ``RunFailed`` when questions failed (nothing sealed); the other expected errors are listed in
    ``allmem.errors.expected_errors``.
    """
    overrides = task_overrides() if overrides is None else list(overrides)
    digest = identity.data_digest(cfg)
    run_dir = identity.resolve(cfg, overrides, digest)
    if identity.reusable(run_dir, cfg, digest):  # a complete run of another config or data there is refused
        log.info("complete run found, skipping: %s", run_dir)
        print(f"[allmem] skip (complete): {run_dir}")
        return run_dir
    twin = None if cfg.run.get("name") else identity.complete_twin(run_dir)
    if (
        twin is not None
    ):  # the same config and data under another name (e.g. a sweep point equal to the default)
        print(f"[allmem] skip (complete, same config): {twin}")
        return twin
    t_start = time.perf_counter()
    # Everything that can fail on input or config fails here, before the run directory exists.
    preflight.check_config(cfg)
    shard = shards.parse(cfg.run.get("shard"))
    parallel.workers(cfg)  # a bad run.workers is refused here
    dialogues = load_dataset(cfg.dataset)
    input_counts = preflight.check_data(dialogues, cfg)
    protocol: Protocol = checked("protocol", lambda: instantiate(cfg.protocol))
    # a shard writes into its own folder under its own lock (allmem.run.shards); a run into the run directory
    out_dir = run_dir if shard is None else shards.folder(run_dir, shard)
    mine = dialogues if shard is None else shards.select(dialogues, shard)
    svc = Services.build(cfg, out_dir)
    backend = _backend(cfg, svc.llm, svc.embedder)
    data_files = sorted({Path(d.source) for d in dialogues if d.source})
    seal_info = {
        "label": identity.run_label(cfg, overrides),
        "config_hash": identity.config_hash(cfg, digest),
        "backend": backend,
        "inputs": input_counts,
    }

    with attempts.RunLock(out_dir):
        if identity.reusable(run_dir, cfg, digest):  # another process finished it while this one was starting
            print(f"[allmem] skip (complete): {run_dir}")
            return run_dir
        if shard is not None:
            shards.check_layout(run_dir, shard)
        identity.prepare(run_dir, shards.unsharded(cfg))
        attempt = attempts.begin(out_dir, data_files, backend, digest)
        status, stopped = "crashed", None
        try:  # from here on, however the attempt ends (an error, Ctrl-C, SIGTERM), the manifest says how
            if svc.ledger is not None:
                svc.ledger.set_attempt(attempt)
            parallel.recover(out_dir)  # parts a killed attempt left go into the run files first
            done, redo = attempts.resume(out_dir, mine, protocol.ask)
            stopped = _answer_all(cfg, svc, protocol, mine, done, set(redo), attempt)
            status = "stopped" if stopped else "finished"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        except Exception as exc:  # the manifest keeps what ended the attempt; the caller reports it
            stopped = exc
            status = attempts.ended_by(exc)
            raise
        finally:
            records = attempts.readable_records(out_dir)
            failed = [r for r in records if r.get("error") is not None]
            if status == "finished":
                status = "failed" if failed else "complete"
            attempts.end(
                out_dir, attempt, status, answered=len(records) - len(failed), failed=len(failed),
                failed_ids=[r["question_id"] for r in failed][:100],
                last_error=str(stopped) if stopped else (failed[-1]["error"] if failed else None),
                wall_s=round(time.perf_counter() - t_start, 3),
            )  # fmt: skip
        if status != "complete":
            raise RunFailed(_summary(records, failed, stopped, svc, out_dir))
        seal_info["wall_s_last_session"] = time.perf_counter() - t_start
        if shard is None:
            seal(run_dir, records, protocol, seal_info | {"attempts": attempt})
        else:
            shards.finish(out_dir, shard, dialogues, seal_info)
    if shard is not None and not shards.seal_if_complete(run_dir, protocol):
        print(f"[allmem] shard {shard[0]}/{shard[1]} done; the run is sealed when every shard is: {run_dir}")
        return run_dir
    print(f"[allmem] done: {run_dir}")
    return run_dir


def _answer_all(
    cfg: DictConfig, svc: Services, protocol: Protocol, dialogues: Sequence[Dialogue],
    done: set[tuple[str, str]], redo: set[str], attempt: int,
) -> BaseException | None:  # fmt: skip
    """Ingest every dialogue in ``redo`` and answer its unanswered questions, appending each record as it is
    made: here, or in ``run.workers`` processes (``allmem.run.parallel``). Returns the ``CircuitOpen`` that
    stopped the attempt early, else None."""
    from allmem.llm.client import CircuitOpen

    n_total = sum(len(d.questions) for d in dialogues) * len(ASK_MODES[protocol.ask])
    bar = tqdm(
        total=n_total, initial=len(done), desc=f"{cfg.method.name}", unit="q", disable=not cfg.run.progress
    )
    try:
        if parallel.workers(cfg) > 1:
            return parallel.answer_all(cfg, svc.run_dir, dialogues, done, redo, attempt, bar)
        judge = judge_fn(cfg, svc.llm, protocol)
        with (
            files.JsonlWriter(svc.run_dir / files.PREDICTIONS) as out,
            files.JsonlWriter(svc.run_dir / files.SYSTEM_STATS) as stats_out,
            files.JsonlWriter(svc.run_dir / files.CONTEXTS) as contexts_out,
        ):
            for dialogue in dialogues:
                todo = asking.todo(dialogue.questions, protocol.ask, done)
                if dialogue.id not in redo or not todo:
                    continue
                answer_dialogue(
                    cfg, svc, protocol, judge, dialogue, todo, attempt, out, stats_out, bar.update,
                    contexts_out=contexts_out,
                )  # fmt: skip
    except CircuitOpen as exc:
        return exc
    finally:
        bar.close()
    return None


def _summary(
    records: list[dict[str, Any]], failed: list[dict[str, Any]], stopped: BaseException | None, svc: Services,
    run_dir: Path,
) -> str:  # fmt: skip
    """The one line a failed run ends with: how many failed, where the LLM is, the last error, what to do."""
    endpoint = svc.llm.endpoint() if hasattr(svc.llm, "endpoint") else "?"
    last = str(stopped) if stopped is not None else (failed[-1]["error"] if failed else "?")
    head = (
        f"{len(failed)} of {len(records)} questions failed"
        if failed
        else "stopped before any question failed"
    )
    if stopped is not None and failed:
        head += ", then the run stopped early"
    return (
        f"{head} (LLM endpoint {endpoint}; last error: {last}); {run_dir} is not complete (no DONE): "
        "run the same command again to retry only the failed and missing questions"
    )


def _backend(cfg: DictConfig, llm: Any, embedder: Any = None) -> dict[str, Any]:
    """Which backend produced the numbers: every result says so (the embedder the run built, by its name)."""
    return {
        "llm": str(cfg.llm.backend),
        "llm_model": str(cfg.llm.get("model", "")),
        "embedder": str(getattr(embedder, "name", None) or cfg.embedder.get("_target_")),
        "generator": str(cfg.generator._target_),
        # a dry run calls no model: its answers come from the offline roles, so its numbers are offline numbers
        "offline": bool(llm.offline),
        "llm_dry_run": bool(cfg.llm.get("dry_run", False)),
    }
