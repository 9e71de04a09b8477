"""``allmem report site`` (allmem/report/site.py): the static site loads in headless Chromium without console
errors, shows dataset text holding ``<script>`` as text, and its explorer and comparison counts are the ones
counted by hand from the runs below. Without a browser the test skips, unless ALLMEM_REQUIRE_BROWSER=1 (CI)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from allmem.report.runs import Run
from allmem.report.site import write_site
from allmem.run import files

EVIL = "<script>window.PWNED=1</script> what?"
# (question, gold, prediction of A, prediction of B): A right on q0, q1; B right on q0, q2 (F1 1 or 0)
QUESTIONS = [(EVIL, "red", "red", "red"), ("q1", "blue", "blue", "zzz"), ("q2", "green", "zzz", "green"),
             ("q3", "cat", "zzz", "yyy")]  # fmt: skip


def _run(tmp_path: Path, name: str, which: int, contexts: bool = False) -> Run:
    path = tmp_path / name
    path.mkdir()
    records = [
        {"question_id": f"conv-26:q{i}", "dialogue_id": "conv-26", "category": 1, "question": q,
         "prediction": row[which], "gold": gold, "evidence": ["D1:1"], "ranked_source_ids": ["D1:1"],
         "context_tokens": 10}
        for i, (q, gold, *row) in enumerate(QUESTIONS)
    ]  # fmt: skip
    files.write_atomic(path / files.PREDICTIONS, "".join(files.dump_line(r) for r in records))
    if contexts:  # the packed context of each record: a unit off the evidence, then the evidence turn D1:1
        lines = [
            files.dump_line({"dialogue_id": "conv-26", "question_id": r["question_id"], "ask": "end",
                             "text": f"[1 May 2023] Mel: off topic {i}\n[2 May 2023] Caroline: evidence {i}",
                             "units": [{"id": "u0", "source_ids": ["D1:7"]}, {"id": "u1", "source_ids": ["D1:1"]}]})
            for i, r in enumerate(records)
        ]  # fmt: skip
        files.write_atomic(path / files.CONTEXTS, files.encode_lines(files.CONTEXTS, lines))
    cfg = OmegaConf.create({
        "method": {"name": name}, "dataset": {"name": "locomo", "fit_dialogues": ["conv-26"]},
        "protocol": {"name": "allmem", "ks": [1, 5], "table_k": 5},
    })  # fmt: skip
    return Run(path=path, cfg=cfg, metrics={"table_metrics": ["f1", "R@5"], "table_k": 5})


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    return None


def _load(browser: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=2000", "--dump-dom", url],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip


def test_site_loads_without_errors_and_counts_match(tmp_path: Path) -> None:
    browser = _browser()
    if browser is None:
        if os.environ.get("ALLMEM_REQUIRE_BROWSER") == "1":
            pytest.fail("ALLMEM_REQUIRE_BROWSER=1 but no chromium on PATH (make chromium)")
        pytest.skip("no chromium on PATH (make chromium installs it)")
    index = write_site([_run(tmp_path, "a", 0, contexts=True), _run(tmp_path, "b", 1)], tmp_path / "site")
    proc = _load(browser, index.as_uri())
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line]
    assert console == []
    dom = proc.stdout
    assert "PWNED" not in re.sub(r"&lt;script&gt;window\.PWNED=1&lt;/script&gt;", "", dom)
    assert "&lt;script&gt;window.PWNED=1&lt;/script&gt; what?" in dom
    assert '<p id="ecount">4 questions</p>' in dom
    assert "a right and b wrong: 1; b right and a wrong: 1" in dom

    # a question opened by its link: run a's packed context, the evidence turn's line marked; b stored none
    opened = _load(browser, index.as_uri() + "#q=conv-26%3Aq1")
    assert [line for line in opened.stderr.splitlines() if "CONSOLE" in line] == []
    assert "<span>[1 May 2023] Mel: off topic 1\n</span>" in opened.stdout  # not evidence: no class
    assert '<span class="ev">[2 May 2023] Caroline: evidence 1\n</span>' in opened.stdout
    assert opened.stdout.count("context: not recorded") == 1  # run b
