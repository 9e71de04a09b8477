"""``allmem report site`` (allmem/report/site/): the static site loads in headless Chromium without console
errors, shows dataset text holding ``<script>`` as text, and its explorer and comparison counts are the ones
counted by hand from the runs below; the first page loads no run's details or contexts (``chunks/``) until a
question is opened, long lists are drawn a page at a time, and the main table's cells are the subsets' means.
Without a browser the browser tests skip, unless ALLMEM_REQUIRE_BROWSER=1 (CI)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from allmem import files
from allmem.report.runs import Run
from allmem.report.site import MARK, PARTS, _views, write_site
from tests.runkit import compose_and_run

EVIL = "<script>window.PWNED=1</script> what?"
# (question, gold, prediction of A, prediction of B): A right on q0, q1; B right on q0, q2 (F1 1 or 0)
QUESTIONS = [(EVIL, "red", "red", "red"), ("q1", "blue", "blue", "zzz"), ("q2", "green", "zzz", "green"),
             ("q3", "cat", "zzz", "yyy")]  # fmt: skip


def _run(tmp_path: Path, name: str, which: int, contexts: bool = False, questions: list = QUESTIONS) -> Run:
    path = tmp_path / name
    path.mkdir()
    records = [
        {"question_id": f"conv-26:q{i}", "dialogue_id": "conv-26", "category": 1, "question": q,
         "prediction": row[which], "gold": gold, "evidence": ["D1:1"], "ranked_source_ids": ["D1:1"],
         "context_tokens": 10}
        for i, (q, gold, *row) in enumerate(questions)
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


def _need_browser() -> str:
    browser = _browser()
    if browser is None:
        if os.environ.get("ALLMEM_REQUIRE_BROWSER") == "1":
            pytest.fail("ALLMEM_REQUIRE_BROWSER=1 but no chromium on PATH (make chromium)")
        pytest.skip("no chromium on PATH (make chromium installs it)")
    return browser


def _console(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if "CONSOLE" in line]


@pytest.mark.slow  # headless Chromium
def test_site_loads_without_errors_and_counts_match(tmp_path: Path) -> None:
    browser = _need_browser()
    index = write_site([_run(tmp_path, "a", 0, contexts=True), _run(tmp_path, "b", 1)], tmp_path / "site")
    proc = _load(browser, index.as_uri())
    assert _console(proc) == []
    dom = proc.stdout
    assert "PWNED" not in re.sub(r"&lt;script&gt;window\.PWNED=1&lt;/script&gt;", "", dom)
    assert "&lt;script&gt;window.PWNED=1&lt;/script&gt; what?" in dom
    assert '<p id="ecount">4 questions</p>' in dom
    assert "a right and b wrong: 1; b right and a wrong: 1" in dom
    # the first page loads index.js and the answers of the two runs compared: no details or context until a
    # question is opened
    assert 'src="index.js"' in dom
    assert sorted(re.findall(rf'<script src="({PARTS}/[^"]+)"', dom)) == [
        f"{PARTS}/0/answers.js",
        f"{PARTS}/1/answers.js",
    ]
    assert "<tr><td>conv-26:q1</td><td>q1</td><td>blue</td><td>blue</td><td>zzz</td></tr>" in dom.replace(
        ' class="q ok"', ""
    )

    # a question opened by its link: run a's packed context, the evidence turn's line marked; b stored none
    opened = _load(browser, index.as_uri() + "#q=conv-26%3Aq1")
    assert _console(opened) == []
    assert "<span>[1 May 2023] Mel: off topic 1\n</span>" in opened.stdout  # not evidence: no class
    assert '<span class="ev">[2 May 2023] Caroline: evidence 1\n</span>' in opened.stdout
    assert opened.stdout.count("context: not recorded") == 1  # run b
    # what the opened question loaded: each run's answers and details of its dialogue, and run a's context of q1 only
    loaded = sorted(re.findall(rf'<script src="({PARTS}/[^"]+)"', opened.stdout))
    assert loaded == [
        f"{PARTS}/{r}/{n}.js" for r, n in [(0, "answers"), (0, "c1"), (0, "d0"), (1, "answers"), (1, "d0")]
    ]
    assert "<summary>a: blue (correct, retrieval hit)</summary>" in opened.stdout
    assert "loading" not in opened.stdout  # every part arrived


@pytest.mark.slow  # headless Chromium
def test_site_long_lists_are_drawn_a_page_at_a_time(tmp_path: Path) -> None:
    """250 questions: the count is of all 250, the list draws 200 rows and offers the other 50."""
    browser = _need_browser()
    many = [(f"question {i}", "x", "x", "y") for i in range(250)]
    index = write_site([_run(tmp_path, "a", 0, questions=many), _run(tmp_path, "b", 1, questions=many)],
                       tmp_path / "site")  # fmt: skip
    proc = _load(browser, index.as_uri())
    assert _console(proc) == []
    assert '<p id="ecount">250 questions</p>' in proc.stdout
    assert proc.stdout.count('<tr class="q ok" data-qid=') == 200  # a's answers are all right
    assert "<button>show 50 more (200 of 250 shown)</button>" in proc.stdout
    assert "a right and b wrong: 250; b right and a wrong: 0" in proc.stdout
    assert "<button>show 50 more (200 of 250 shown)</button>" in proc.stdout.split('id="clist"')[1]


def test_site_table_views_are_means_over_each_subset() -> None:
    """The main table's cells by view and category, counted by hand: f1 1, 0, 0.5, NaN (no score) for a fit
    question of category 1, a fit one of 2 and two held-out ones of 1."""
    frame = pd.DataFrame({"f1": [1.0, 0.0, 0.5, np.nan]})
    cells = _views(frame, ["f1", "judge"], ["fit", "fit", "held-out", "held-out"], ["1", "2", "1", "1"])
    assert cells["all|"] == [4, [100 * 1.5 / 3, None]]  # the NaN has no score; judge: no column
    assert cells["all|1"] == [3, [75.0, None]]
    assert cells["fit|"] == [2, [50.0, None]]
    assert cells["fit|1"] == [1, [100.0, None]]
    assert cells["held-out|2"] == [0, [None, None]]
    assert cells["held-out|1"] == [2, [50.0, None]]
    assert set(cells) == {f"{v}|{c}" for v in ("all", "fit", "held-out") for c in ("", "1", "2")}


def test_site_replaces_only_its_own_parts_folder(tmp_path: Path) -> None:
    out = tmp_path / "site"
    write_site([_run(tmp_path, "a", 0, contexts=True)], out)
    assert (out / PARTS / MARK).is_file() and (out / PARTS / "0" / "c3.js").is_file()
    write_site([_run(tmp_path, "b", 1)], out)  # no contexts now: the old ones are gone
    assert sorted(p.name for p in (out / PARTS / "0").iterdir()) == ["answers.js", "d0.js"]
    # a build that fails on its second run leaves the site before it whole
    site = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    bad = _run(tmp_path, "bad", 0)
    (bad.path / files.PREDICTIONS).write_text("{not json\n")
    with pytest.raises(ValueError, match="predictions.jsonl:1: not valid JSON"):
        write_site([_run(tmp_path, "c", 0, contexts=True), bad], out)
    assert {
        p: p.read_bytes() for p in out.rglob("*") if p.is_file() and f".{PARTS}-building" not in str(p)
    } == site
    write_site([_run(tmp_path, "d", 0)], out)  # and the next build clears what it left
    assert not (out / f".{PARTS}-building").exists()
    foreign = tmp_path / "other"
    (foreign / PARTS).mkdir(parents=True)
    (foreign / PARTS / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not written by allmem report site"):
        write_site([_run(tmp_path, "e", 0)], foreign)
    assert (foreign / PARTS / "keep.txt").read_text() == "mine"


def test_a_longmemeval_hit_credits_ranked_turns_to_their_gold_session():
    """LongMemEval records rank turn ids (``<session>:<turn>``) while their gold names sessions: the explorer's
    hit / miss counts a ranked turn as its session, as the scorer does. By hand: the ranked sessions are s1, s2, s3
    (s1's two turns count once), so gold s2 is a hit at k=2 and gold s3 a miss (the old turn-id check missed both)."""
    from allmem.report.site import _hit

    ranked = ["s1:0", "s1:4", "s2:1", "s3:0"]
    assert _hit({"evidence": ["s2"], "ranked_source_ids": ranked}, 2) is True
    assert _hit({"evidence": ["s3"], "ranked_source_ids": ranked}, 2) is False
    assert _hit({"evidence": ["D1:3"], "category": 1, "ranked_source_ids": ["D1:2", "D1:3"]}, 1) is False
    assert _hit({"evidence": [], "ranked_source_ids": ranked}, 2) is None


def _hashed(run: Run, written_at: str = "2026-01-01T00:00:00") -> Run:
    """``run`` with what a sealed run records: its config hash (``metrics.json`` ``run.config_hash``, here from its
    folder's name) and the time its files were written (``manifest.json``)."""
    files.write_json(run.path / files.MANIFEST, {"written_at": written_at})
    metrics = {**run.metrics, "run": {"label": run.path.name, "config_hash": f"hash-{run.path.name}"},
               "groups": {"1": {"scores": {"f1": 50.0}}}}  # fmt: skip
    files.write_json(run.path / files.METRICS, metrics)
    return Run(path=run.path, cfg=run.cfg, metrics=metrics)


def _shown(index: Path) -> list[dict]:
    """The figures a built site lists (index.js's ``figures``)."""
    import json

    text = (index.parent / "index.js").read_text(encoding="utf-8")
    return json.loads(text.removeprefix("window.ALLMEM_DATA = ").removesuffix(";\n"))["figures"]


def test_the_site_shows_only_figures_drawn_from_its_runs(tmp_path: Path) -> None:
    """Figures beside a page of runs a and b: one drawn from a and b (shown, captioned with both), one from a and
    a run c not on the page, one from c, one from a run of a's config written at another time, and one naming no
    runs (as the committed paper figures, drawn before figures named their runs): only the first is shown, and
    only it is copied."""
    from allmem.report.figures import f1_by_group
    from allmem.report.provenance import figure_runs

    a, b, c = (_hashed(_run(tmp_path, n, 0)) for n in "abc")
    (tmp_path / "rerun").mkdir()
    again = _hashed(_run(tmp_path / "rerun", "a", 0), "2026-02-02T00:00:00")  # a's config, written again
    figs = tmp_path / "figs"
    figs.mkdir()
    f1_by_group([a, b], figs / "ours.png")
    f1_by_group([a, c], figs / "part.png")
    f1_by_group([c], figs / "other.png")
    f1_by_group([again], figs / "rerun.png")
    f1_by_group([a], figs / "paper.png")
    (figs / "paper.runs.json").unlink()
    assert [r["label"] for r in figure_runs(figs / "ours.png")] == ["a", "b"]
    assert figure_runs(figs / "paper.png") is None
    index = write_site([a, b], tmp_path / "site", figs)
    assert _shown(index) == [{"src": f"{PARTS}/figures/ours.png", "runs": ["a", "b"]}]
    assert sorted(p.name for p in (tmp_path / "site" / PARTS / "figures").iterdir()) == ["ours.png"]
    # the same folder beside a page of run c alone: only the figure drawn from c; beside a page without runs: none
    assert [f["src"] for f in _shown(write_site([c], tmp_path / "site", figs))] == [
        f"{PARTS}/figures/other.png"
    ]
    assert _shown(write_site([], tmp_path / "empty", figs)) == []


@pytest.mark.slow  # headless Chromium
def test_the_debug_site_shows_no_paper_figure(tmp_path: Path) -> None:
    """The quickstart's site: two debug runs on the LoCoMo fixture beside the committed paper figures
    (results/figures, drawn from the full LoCoMo) and a figure drawn from the two runs: in headless Chromium the
    page shows that figure alone, captioned with its runs; without it, it says there is none."""
    from allmem.report.figures import f1_by_group
    from allmem.report.runs import find_runs

    browser = _need_browser()
    repo = Path(__file__).resolve().parents[1]
    for method in ("bm25", "naive_rag"):
        compose_and_run(tmp_path / "debug", f"method={method}", cache=tmp_path / "cache")
    runs = find_runs(tmp_path / "debug")
    figs = tmp_path / "figures"
    shutil.copytree(repo / "results" / "figures", figs)
    paper = sorted(p.name for p in figs.glob("*.png"))
    assert "fig3.png" in paper
    index = write_site(runs, tmp_path / "site", figs)
    proc = _load(browser, index.as_uri())
    assert _console(proc) == []
    assert "<img" not in proc.stdout and "none: no figure was drawn from these runs" in proc.stdout
    f1_by_group(runs, figs / "debug_f1.png")
    index = write_site(runs, tmp_path / "site", figs)
    proc = _load(browser, index.as_uri())
    assert _console(proc) == []
    assert re.findall(r'<img src="([^"]+)"', proc.stdout) == [f"{PARTS}/figures/debug_f1.png"]
    labels = ", ".join(r.label for r in runs)
    assert f"<figcaption>drawn from {labels}</figcaption>" in proc.stdout
    assert not any(name in proc.stdout for name in paper)
