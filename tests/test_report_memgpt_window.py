"""``make memgpt_window``'s summarise step on real (tiny) runs: the window sweep on a generated LongMemEval-shaped
file, its memory columns against the runs' own stats lines, and the files it writes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from allmem import files
from allmem.report.paper import summarise
from allmem.report.targets import dataset_overrides, sweep_points
from allmem.run.runner import run
from allmem.tokens import count_tokens
from allmem.types import format_date
from benchmarks.lme_synth import write_longmemeval
from benchmarks.longmemeval import load_longmemeval
from tests.runkit import compose, in_folder


def test_window_table_from_tiny_runs(tmp_path: Path) -> None:
    data = write_longmemeval(tmp_path / "lme.json", questions=2, sessions=8, seed=1)
    haystacks = list(load_longmemeval(data))
    tokens = [
        sum(count_tokens(f"[{format_date(t.timestamp)}] {t.render()}") for t in d.turns()) for d in haystacks
    ]
    assert all(8192 < n + 2000 < 32768 for n in tokens)  # evicted at 8k only; fits 32k and 128k whole
    assert dataset_overrides(None, "memgpt_window") == {"lme_synth": []}  # never LoCoMo, never the --lme file
    extra = [f"dataset.path={data}", "embedder=hash"]
    root = tmp_path / "runs"
    points = sweep_points("memgpt_window", use_cache=False)
    assert [p[0] for p in points] == [f"method.context_window={w}" for w in (131072, 32768, 8192)]
    stats = {}
    for point in points:
        cfg = compose("+experiment=memgpt_window", *extra, *point, *in_folder(root, tmp_path / "cache"),
                      "run.progress=false")  # fmt: skip
        assert cfg.dataset.name == "longmemeval_s" and cfg.method.name == "memgpt"
        run_dir = run(cfg, overrides=[*point])
        stats[int(cfg.method.context_window)] = files.read_jsonl(run_dir / files.SYSTEM_STATS)
    out = tmp_path / "out"
    written = summarise(["memgpt_window"], root, out, extra=extra)
    frame = pd.read_csv(out / "tables" / "memgpt_window.csv").set_index("window")
    assert list(frame.index) == [8192, 32768, 131072]
    turns = sum(len(d.turns()) for d in haystacks)
    evicted = sum(s.get("evicted_messages", 0) for s in stats[8192])
    assert evicted > 0 and frame.loc[8192, "turns"] == turns and frame.loc[8192, "evicted"] == evicted
    assert frame.loc[8192, "evicted_share"] == 100 * evicted / turns
    assert frame.loc[32768, "evicted"] == frame.loc[131072, "evicted"] == 0
    assert frame.loc[8192, "haystacks"] == 2 and frame.loc[8192, "n"] == 2
    never = sum(s.get("evicted_never_offered", 0) for s in stats[8192])
    assert frame.loc[8192, "never_offered"] == never == 0  # every evicted turn was offered before it left
    assert sum(s.get("eviction_offers", 0) for s in stats[8192]) > 0  # some only by the step before eviction
    rows = sum(s["archival_rows"] for s in stats[32768])
    assert frame.loc[32768, "archival_rows_per_haystack"] == rows / 2
    text = (out / "tables" / "memgpt_window.md").read_text()
    assert f"{100 * evicted / turns:.1f}% ({evicted:,} of {turns:,})" in text
    assert "| 131,072 |" in text and "synthetic file with LongMemEval-s's shape" in text
    assert "Missing" not in text
    assert out / "figures" / "memgpt_window.png" in written
