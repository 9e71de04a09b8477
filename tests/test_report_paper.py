"""The summarise step on hand-made run directories: numbers worked out by hand, missing runs named, files written."""

from __future__ import annotations

import re
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib import image
from report_fixture import DIALOGUES, write_experiment, write_run

from allmem.fingerprint import source_fingerprint
from allmem.report import main as report_main
from allmem.report.paper import summarise
from allmem.report.runs import find_runs
from allmem.report.targets import LME_SKIPPED, TARGETS, collect, expand, experiments_of, sweep_points

N_Q = 8  # 2 dialogues x 4 questions
DPI = 150  # allmem.report.paper_figures.save
# each figure's figsize in inches (allmem/report/paper_figures.py, allmem/report/sweep.py)
INCHES = {"fig3": (11, 4.4), "fig4": (13, 6), "fig5": (15, 4.6), "fig6": (6.5, 4.2), "sweep": (10, 4)}


def _check_figure(png: Path, name: str) -> None:
    """The PNG is the figure's size at the saved DPI and has something drawn; the PDF beside it is one page."""
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", png
    w, h = INCHES[name]
    assert struct.unpack(">II", head[16:24]) == (round(w * DPI), round(h * DPI)), png
    pixels = image.imread(png)[..., :3]
    drawn = (pixels < 0.9).any(axis=-1).mean()  # share of pixels that are not white or near it
    assert 0.01 < drawn < 0.6, (png, drawn)
    rgb = np.rint(pixels.reshape(-1, 3) * 255).astype(np.uint32)  # 8-bit channels: one integer per colour
    colours = len(np.unique(rgb @ np.array([1 << 16, 1 << 8, 1], dtype=np.uint32)))
    assert colours > 50, (png, colours)  # lines, text and colours, not a flat image
    pdf = png.with_suffix(".pdf").read_bytes()
    assert pdf.startswith(b"%PDF-") and len(re.findall(rb"/Type\s*/Page\b(?!s)", pdf)) == 1, png


@pytest.fixture(scope="module")
def table1_root(tmp_path_factory):
    """table1's methods: All-Mem answers everything, bm25 questions 0-3, the others nothing; naive_rag missing."""
    root = tmp_path_factory.mktemp("runs")
    rules = {"method=allmem": lambda i: True, "method=bm25": lambda i: i < 4}
    write_experiment(
        root, "table1", lambda label, i: rules.get(label, lambda i: False)(i), skip=["method=naive_rag"]
    )
    return root


@pytest.mark.slow
def test_table1_values_by_hand(table1_root, tmp_path):
    summarise(["table1"], table1_root, tmp_path)
    text = (tmp_path / "tables" / "table1.md").read_text()
    # All-Mem: F1 = 1 on every question, a constant: the interval has zero width.
    assert "| allmem | n/a | 100.00 [100.00, 100.00] |" in text
    # bm25 is right on questions 0-3 (conv-26) of 8 -> mean 50; against All-Mem d = (0,0,0,0,-1,-1,-1,-1): exact
    # sign-flip test (2^8 <= 10000 patterns), |mean d| = 0.5 only when the four -1 agree: 2 * 2^4 / 2^8 = 0.125.
    assert "-50.00 (p 0.125)" in text
    frame = pd.read_csv(tmp_path / "tables" / "table1.csv")
    row = frame[
        (frame.label == "bm25")
        & (frame.metric == "f1")
        & (frame.group == "overall")
        & (frame.subset == "all")
    ]
    assert row["mean"].item() == 50.0 and row["n"].item() == N_Q
    assert row["ci_low"].item() < 50.0 < row["ci_high"].item()
    # held out = conv-44 (questions 4-7): bm25 answers none of them there
    held = frame[(frame.label == "bm25") & (frame.metric == "f1") & (frame.subset == "held-out")]
    assert held["mean"].item() == 0.0 and held["n"].item() == 4
    # naive_rag was left missing: named, never a number
    assert "Missing (not run, failed or incomplete) in table1 on locomo: method=naive_rag" in text
    assert "| naive_rag |" not in text
    assert LME_SKIPPED in text
    assert "2000 resamples" in text and "git 0123456789" in text and "offline backend" in text
    assert "Context tokens" in text and "| 200 |" in text


def test_table2_cost_by_hand(table1_root, tmp_path):
    summarise(["table2", "table3"], table1_root, tmp_path)
    cost = pd.read_csv(tmp_path / "tables" / "table2.csv").set_index("method")
    # per dialogue: ingest 2 s + stream end 1 s, 10 turns; All-Mem spent 2 x 500 ms in ATC runs per dialogue
    assert cost.loc["bm25", "write_ms_per_turn"] == pytest.approx(300.0)
    assert cost.loc["allmem", "write_ms_per_turn"] == pytest.approx((3000 - 1000) / 10)
    # 4 ATC runs of 580 tokens and 500 ms over 2 x (6 + 4) turns
    assert cost.loc["allmem", "atc_events"] == 4
    assert cost.loc["allmem", "atc_tokens_per_event"] == pytest.approx(580)
    assert cost.loc["allmem", "atc_tokens_per_turn"] == pytest.approx(4 * 580 / 20)
    assert cost.loc["allmem", "atc_s_per_turn"] == pytest.approx(4 * 0.5 / 20)
    assert cost.loc["allmem", "write_tokens_per_turn"] == pytest.approx(120 / 20)
    assert pd.isna(cost.loc["bm25", "usd"])  # offline: never priced
    t3 = pd.read_csv(tmp_path / "tables" / "table3.csv")
    assert set(t3["method"]) == {"allmem", "allmem_hybrid"}  # the methods that consolidate
    t3 = t3[t3["method"] == "allmem"].set_index("stage")
    assert t3.loc["merge", "events"] == 4 and t3.loc["merge", "executed"] == 4
    assert t3.loc["split", "noop"] == 4 and t3.loc["split", "tokens_per_event"] == pytest.approx(30)
    assert t3.loc["diagnosis", "events"] == 4 * 5


def test_retrieval_table_by_hand(table1_root, tmp_path):
    summarise(["retrieval"], table1_root, tmp_path)
    frame = pd.read_csv(tmp_path / "tables" / "retrieval.csv")
    mean = frame.set_index(["label", "metric"])["mean"]
    # one gold turn per question, ranked first when the answer is right: bm25 right on 4 of 8, All-Mem on all
    assert mean[("bm25", "turn_recall@5")] == 50.0 and mean[("allmem", "turn_recall@5")] == 100.0
    assert mean[("bm25", "session_any@1")] == 50.0  # D1:i and D9:9 are in different sessions
    text = (tmp_path / "tables" / "retrieval.md").read_text()
    assert "| allmem | 100.00 | 100.00 | 100.00 | 100.00 |" in text and "unit P@5" in text
    assert "| n/a | 8 |" in text  # these records predate ranked units: unit precision unknown, never 0


def test_a_narrower_summarise_adds_to_the_per_question_table(table1_root, tmp_path, capsys):
    """`make memgpt_window` after `make paper` must not leave only its own runs in per_question.parquet: rows of
    other runs stay while made by the same code and while their directories are there; a damaged table is rebuilt."""
    root = tmp_path / "runs"
    shutil.copytree(table1_root, root)
    (stage1,) = write_experiment(root, "stage1_bm25", lambda label, i: True)
    out = tmp_path / "out"
    path = out / "tables" / "per_question.parquet"
    summarise(["table1"], root, out)  # table1's runs and stage1_bm25's
    both = pd.read_parquet(path)
    n_table1 = len(find_runs(table1_root))
    assert both["config_hash"].nunique() == n_table1 + 1 and len(both) == (n_table1 + 1) * N_Q
    assert (both["run_dir"] == str(stage1)).sum() == N_Q and set(both["code"]) == {source_fingerprint()}

    summarise(["table2"], root, out)  # reads table1's runs only
    assert "and 1 kept from an earlier step" in capsys.readouterr().out
    again = pd.read_parquet(path)
    assert again["config_hash"].nunique() == n_table1 + 1 and len(again) == len(both)
    assert set(again["run_dir"]) == set(both["run_dir"])

    other = again.assign(code=again["code"].where(again["run_dir"] != str(stage1), "another-code"))
    other.to_parquet(path, index=False)
    summarise(["table2"], root, out)  # the stage1 rows were made by other code: dropped, never mixed in
    assert pd.read_parquet(path)["config_hash"].nunique() == n_table1

    summarise(["table1"], root, out)
    shutil.rmtree(stage1)
    summarise(["table2"], root, out)  # a run whose directory is gone: its rows go too
    assert str(stage1) not in set(pd.read_parquet(path)["run_dir"])

    path.write_bytes(b"not parquet")
    capsys.readouterr()
    summarise(["table2"], root, out)
    assert "not readable" in capsys.readouterr().out
    assert pd.read_parquet(path)["config_hash"].nunique() == n_table1


@pytest.mark.slow
def test_figures_and_parquet(tmp_path):
    root = tmp_path / "runs"
    for exp in ("table1", "fig3", "fig3_anchors", "fig4_theta", "fig4_dsigma", "fig5"):
        # which questions a run answers: a function of its label alone (zlib.crc32, not hash(): the same in every
        # process whatever PYTHONHASHSEED)
        write_experiment(root, exp, lambda label, i: (zlib.crc32(label.encode()) + i) % 3 != 0)
    out = tmp_path / "out"
    written = summarise(["figures"], root, out)
    for name in ("fig3", "fig4", "fig5", "fig6"):
        for ext in ("png", "pdf"):
            assert out / "figures" / f"{name}.{ext}" in written
        _check_figure(out / "figures" / f"{name}.png", name)
    table = pd.read_parquet(out / "tables" / "per_question.parquet")
    n_runs = table["config_hash"].nunique()
    assert len(table) == n_runs * N_Q
    assert {"method", "dataset", "cfg.method.retrieval.K", "score.f1", "latency_ms.stage1"} <= set(
        table.columns
    )
    assert set(table["dialogue_id"]) == set(DIALOGUES)


def test_targets_registry_expands_groups_and_orders_experiments():
    paper = [t for t in TARGETS if "paper" in TARGETS[t].groups]  # allmem/report/targets.ini's order
    assert expand(["paper"]) == paper and "table1" in paper and "memgpt_window" not in paper
    assert expand(["figures", "tables"]) == [
        t for t in TARGETS if {"tables", "figures"} & set(TARGETS[t].groups)
    ]
    assert experiments_of(["table8", "fig7"]) == ["atc_audit"] and experiments_of(["table5"]) == []
    assert expand(["ablations"]) == ["table4"]
    assert experiments_of(["fig3"]) == ["table1", "fig3", "fig3_anchors"]
    assert experiments_of(["table1"]) == ["table1", "stage1_bm25", "stage1_hybrid"]
    with pytest.raises(SystemExit, match="unknown target"):
        expand(["table9"])


def test_sweep_points_are_hydras_cartesian_product():
    pts = sweep_points("fig3")
    assert len(pts) == 4 * 3
    assert ("method.retrieval.K=16", "method.retrieval.L=40") in pts


def test_collect_finds_runs_by_config_hash_not_by_name(tmp_path):
    path = write_run(tmp_path, ["+experiment=table1", "dataset=locomo", "method=bm25"], lambda i: True)
    renamed = path.parent / "some-other-name"
    path.rename(renamed)
    found = collect(["table1"], tmp_path, None)
    runs = [p.run for p in found["table1"]["locomo"] if p.run is not None]
    assert [r.path for r in runs] == [renamed]


def test_cli_sweep_summary(tmp_path, capsys):
    root = tmp_path / "runs"
    for K in (4, 16):
        write_run(root, ["method=allmem", f"method.retrieval.K={K}"], lambda i, K=K: i < K // 2)
    assert report_main(["sweep", "--runs", str(root), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "tables" / "sweep.md").read_text()
    assert "method.retrieval.K" in text
    assert "| 4 | n/a | 25.00 [" in text and "| 16 | n/a | 100.00 [100.00, 100.00]" in text
    _check_figure(tmp_path / "out" / "figures" / "sweep.png", "sweep")


@pytest.mark.slow
def test_driver_launches_only_incomplete_experiments(tmp_path, capsys, monkeypatch):
    from allmem.experiments import main as paper_main
    from allmem.report import targets

    write_experiment(tmp_path, "table1", lambda label, i: True)
    reads = []
    monkeypatch.setattr(targets, "find_runs", lambda root: reads.append(root) or find_runs(root))
    assert paper_main(["run", "fig3", "--runs", str(tmp_path), "--jobs", "3", "--dry-run"]) == 0
    assert len(reads) == 1  # nothing launched: the run directories are read once for all three experiments
    out = capsys.readouterr().out
    n = len(sweep_points("table1"))
    assert f"table1 on locomo: {n}/{n} runs complete, nothing to run" in out
    grid = len(sweep_points("fig3"))  # the README invites editing the grid: any size passes
    assert f"fig3 on locomo: 1/{grid} complete; running:" in out  # the default point is Table 1's All-Mem run
    assert (
        "run -m +experiment=fig3 dataset=locomo" in out
        and "hydra/launcher=local hydra.launcher.n_jobs=3" in out
    )
    assert LME_SKIPPED in out


@pytest.mark.slow
def test_table1_shows_the_stage1_variants_by_experiment(table1_root, tmp_path):
    """stage1_bm25 runs allmem_noatc: its row is named by the experiment, beside table1's own allmem_noatc."""
    root = tmp_path / "runs"
    write_experiment(root, "table1", lambda label, i: label == "method=allmem_noatc")
    write_experiment(root, "stage1_bm25", lambda label, i: i < 2)
    summarise(["table1"], root, tmp_path / "out")
    frame = pd.read_csv(tmp_path / "out" / "tables" / "table1.csv")
    f1 = frame[(frame.metric == "f1") & (frame.group == "overall") & (frame.subset == "all")].set_index(
        "label"
    )
    assert f1.loc["allmem_noatc", "mean"] == 100.0
    assert f1.loc["allmem_noatc,experiment=stage1_bm25", "mean"] == 25.0  # 2 of 8
    text = (tmp_path / "out" / "tables" / "table1.md").read_text()
    assert "in stage1_hybrid on locomo: (defaults)" in text  # not run: named as missing


@pytest.mark.slow
def test_ablations_hybrid_by_hand(tmp_path):
    """allmem_hybrid answers all 8; w/o lexical only the fit conversation's 4 (conv-26), the others nothing."""
    root = tmp_path / "runs"
    rules = {"method=allmem_hybrid": lambda i: True, "method=allmem_hybrid_nolex": lambda i: i < 4}
    write_experiment(root, "ablations_hybrid", lambda label, i: rules.get(label, lambda i: False)(i))
    summarise(["ablations_hybrid"], root, tmp_path / "out")
    frame = pd.read_csv(tmp_path / "out" / "tables" / "ablations_hybrid.csv")
    nolex = frame[(frame.label == "allmem_hybrid_nolex") & (frame.metric == "R@5")].set_index("subset")
    assert nolex.loc["fit", "mean"] == 100.0 and nolex.loc["fit", "delta"] == 0.0
    assert nolex.loc["held-out", "mean"] == 0.0 and nolex.loc["held-out", "delta"] == -100.0
    assert nolex.loc["all", "mean"] == 50.0 and nolex.loc["held-out", "n"] == 4
    # four -1 differences on the held-out five: exact sign-flip p = 2 / 2^4
    assert nolex.loc["held-out", "p"] == pytest.approx(0.125)
    text = (tmp_path / "out" / "tables" / "ablations_hybrid.md").read_text()
    assert text.index("### Held-out") < text.index("### Fit") < text.index("### All")
    assert "w/o lexical channel" in text and "offline backend" in text


def test_table1_names_a_shared_run_by_its_own_experiment(tmp_path):
    """A run made by another experiment with the same config (here ablations' All-Mem) is Table 1's `allmem`."""
    root = tmp_path / "runs"
    write_run(root, ["+experiment=ablations", "dataset=locomo", "method=allmem"], lambda i: True)
    summarise(["table1"], root, tmp_path / "out")
    frame = pd.read_csv(tmp_path / "out" / "tables" / "table1.csv")
    assert set(frame["label"]) == {"allmem"}


def test_item_cache_never_stores_records_other_than_the_bytes_hashed(tmp_path, monkeypatch):
    """Scores of a file that changed between hashing and reading are used once, not cached under the digest."""
    from allmem.report import items
    from allmem.report.runs import find_runs

    rule, tokens = (
        (lambda i: i in (2, 5, 7)),
        (lambda i: 123 + i),
    )  # content no other test writes: not cached yet
    write_run(tmp_path, ["+experiment=table1", "dataset=locomo", "method=bm25"], rule, tokens)
    run = find_runs(tmp_path)[0]
    half = run.records()[:4]
    monkeypatch.setattr(type(run), "records", lambda self: half)  # what a reader racing a rewrite would see
    assert len(items.item_frame(run)) == 4
    monkeypatch.undo()
    assert len(items.item_frame(find_runs(tmp_path)[0])) == N_Q  # rescored from the file, not the torn read
