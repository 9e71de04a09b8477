"""The seams between packages, as a user meets them: one launcher CLI (``allmem paper``), one rule for where
relative paths and defaults point (W&B after sealing: tests/test_report_wandb.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.faultkit import FIXTURES, Result, allmem_run, cli, done_dir, env


def _cli(cwd: Path, *args: str, **extra: str) -> Result:
    return cli(*args, cwd=cwd, environ=env(**extra), timeout=300)


@pytest.mark.slow  # the CLI in a subprocess
def test_report_defaults_to_the_results_folder_allmem_run_writes(tmp_path: Path) -> None:
    """``allmem run`` puts runs under ``paths.results`` (``ALLMEM_RESULTS``, else the repository's ``results/``)
    whatever the current folder; ``allmem report`` looked in ``./results/runs/paper`` of the current folder."""
    results = tmp_path / "results-elsewhere"
    cwd = tmp_path / "somewhere"
    cwd.mkdir()
    res = _cli(cwd, "report", "table2", ALLMEM_RESULTS=str(results))
    lines = [x for x in res.err.splitlines() if x.strip()]
    assert res.rc == 1 and len(lines) == 1, res.err
    assert f"no complete run under {results / 'runs' / 'paper'} for table2" in lines[0]
    assert not (cwd / "results").exists()


@pytest.mark.slow  # the CLI in a subprocess
def test_a_relative_runs_folder_is_relative_to_the_current_folder_for_every_command(tmp_path: Path) -> None:
    """``allmem report --runs rel`` and ``allmem paper --runs rel`` read ``<cwd>/rel``, as ``run.root=rel`` writes
    there (Hydra does not change directory)."""
    res = _cli(tmp_path, "report", "table2", "--runs", "rel", "--out", "out")
    assert res.rc == 1 and "no complete run under rel for table2" in res.err, res.err
    res = _cli(tmp_path, "paper", "list", "table4", "--runs", "rel")
    assert res.rc == 0, res.err
    rows = res.out.splitlines()
    assert rows and all(r.split()[-1] == "missing" for r in rows), res.out
    res = _cli(tmp_path, "paper", "run", "table4", "--runs", "rel", "--dry-run")
    assert res.rc == 0, res.err
    assert f"run.root={tmp_path / 'rel'}" in res.out


def _imports(path: Path) -> set[str]:
    """Every module a source file imports (top level or inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return out


def _importers(of: str, files: list[Path]) -> list[str]:
    return [
        str(p.relative_to(PKG.parent))
        for p in files
        if any(m == of or m.startswith(f"{of}.") for m in _imports(p))
    ]


PKG = Path(__file__).resolve().parents[1] / "allmem"


def test_packages_depend_along_the_data_flow() -> None:
    """The report only reads (nothing below it imports it but the CLI and the paper launcher); the readers sit
    below the evaluation; the report reads run files, not the method's modules."""
    files = sorted(PKG.rglob("*.py"))
    above_report = {PKG / "cli.py", PKG / "experiments.py"}
    outside = [p for p in files if PKG / "report" not in p.parents and p not in above_report]
    assert _importers("allmem.report", outside) == []
    assert _importers("allmem.metrics", sorted((PKG / "reader").glob("*.py"))) == []
    assert _importers("allmem.memory", sorted((PKG / "report").glob("*.py"))) == []


@pytest.mark.slow  # the CLI in a subprocess
def test_table3_from_the_run_files_equals_the_events_summary(tmp_path: Path) -> None:
    """The report reads Table 3 from the per-dialogue ATC summaries in ``system_stats.jsonl`` (it no longer
    imports the method); on a real run they add up to the summary of ``atc_events.jsonl``."""
    from allmem.memory.atc.summary import summarise_run_dir
    from allmem.report.runs import load_run
    from allmem.report.tables.atc import table3_frame

    res = allmem_run(
        tmp_path, "method=allmem", "atc.every_sessions=1", f"dataset.path={FIXTURES / 'locomo_tiny.json'}"
    )
    run_dir = done_dir(res)
    frame = table3_frame([load_run(run_dir)]).set_index("stage")
    expected = summarise_run_dir(run_dir)["table3"]
    assert expected["diagnosis"]["events"] > 0
    for stage, row in expected.items():
        for key in ("events", "executed", "skipped", "noop", "proposals", "accepted", "tokens"):
            if key in row:
                assert frame.loc[stage, key] == row[key], (stage, key)


def test_callers_gate_on_backend_capabilities_not_names() -> None:
    """An offline backend under another name (a user's, or a renamed one) is treated as offline: the reader gives
    it the extractive stand-in and its tokens count as estimates; a cache-only backend refuses a cache miss.
    Before, ``backend.name == "offline"`` / ``== "replay"`` decided."""
    from datetime import datetime

    from allmem.defaults import group_node
    from allmem.embed import HashEmbedder
    from allmem.llm.base import ReplayMiss
    from allmem.llm.cache import ResponseCache
    from allmem.llm.client import LLM
    from allmem.llm.offline import OfflineBackend
    from allmem.llm.prompts import build_request
    from allmem.reader.extractive import ExtractiveGenerator
    from allmem.reader.llm import LLMGenerator, OfflineAnswerPayload, answer_prompt
    from allmem.types import AnswerRequest, Retrieved

    class MyOffline(OfflineBackend):
        name = "my-offline"

    llm = LLM(MyOffline())
    unit = Retrieved.of_text(
        "D1:1", "I painted a sunrise over the lake.", ("D1:1",), 0.9, datetime(2023, 5, 8), "Mel"
    )
    req = AnswerRequest("q1", "What did Mel paint?", category=1, context=(unit,), context_text=unit.text)
    reader = group_node("generator", "extractive")  # the fitted reader settings, from their one home
    answer = LLMGenerator(llm, embedder=HashEmbedder(), extractive=reader, max_tokens=200).answer(req)
    assert "sunrise" in answer.text
    assert llm.offline and not llm.can_judge
    template, variables = answer_prompt(req)
    payload = OfflineAnswerPayload(ExtractiveGenerator(HashEmbedder(), **reader), req)
    assert llm.chat(build_request(template, variables, payload=payload)).estimated  # counted locally

    class MyReplay(OfflineBackend):
        name, offline, cache_only = "my-replay", False, True

    replay = LLM(MyReplay(), cache=ResponseCache(":memory:", enabled=True))
    with pytest.raises(ReplayMiss):
        replay.chat(build_request("answer_locomo", {"context": "c", "question": "q"}))
