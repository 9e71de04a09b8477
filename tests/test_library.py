"""All-Mem as a library (allmem/library.py, docs/LIBRARY.md): the documented example runs as written; settings
come from configs/ alone; search, consolidation and save / load behave as documented."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from allmem import AllMem, Consolidation, SearchResult, Unit
from allmem.defaults import CONFIG_DIR, method_node

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "LIBRARY.md"
MAY, JUNE = datetime(2023, 5, 8), datetime(2023, 6, 1)


@pytest.mark.slow  # the documented example in a subprocess
def test_the_documented_example_runs(tmp_path: Path) -> None:
    text = DOC.read_text()
    section = text.split("## All-Mem as a library", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    script = tmp_path / "example.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "beagle" in proc.stdout  # the unit that answers the question was found and printed
    assert list(tmp_path.iterdir()) == [script]  # the example leaves nothing behind


def _memory(**changes: object) -> AllMem:
    mem = AllMem.paper(embedder="hash", **changes)
    mem.add_session([("Ana", "I moved to Lisbon in May."), ("Ben", "Do you like it there?")], when=MAY)
    mem.add_session([("Ana", "Thanks!"), ("Ben", "I adopted a beagle named Rui."), ("Ana", "Thanks a lot!")],
                    when=JUNE)  # fmt: skip
    return mem


def test_turn_ids_sessions_and_search_under_the_budget() -> None:
    mem = AllMem.paper(embedder="hash")
    s = mem.add_session(
        [("Ana", "I moved to Lisbon."), {"speaker": "Ben", "text": "Nice!", "id": "b1"}], when=MAY
    )
    assert (s.id, s.turn_ids) == ("S1", ("S1:1", "b1"))
    assert mem.add_turn("Ana", "Lisbon is sunny.", when=JUNE) == "S2:1"  # no session open: a new one
    assert mem.add_turn("Ben", "Good.", when=JUNE) == "S2:2"
    assert mem.add_turn("Ana", "Bye.", when=JUNE, new_session=True) == "S3:1"
    found = mem.search("Lisbon", budget_tokens=1000)
    assert isinstance(found, SearchResult) and all(isinstance(u, Unit) for u in found.units)
    assert {t for u in found.units for t in u.source_turns} == {"S1:1", "b1", "S2:1", "S2:2", "S3:1"}
    assert found.dropped == 0 and found.tokens <= 1000
    # a budget of one line: the best unit alone; the others count as dropped
    first = found.units[0]
    line = next(x for x in found.context.splitlines() if x.endswith(first.text))
    small = mem.search("Lisbon", budget_tokens=len(line.split()) + 8)
    assert small.units[: len(small.units)] == found.units[: len(small.units)]
    assert small.dropped == len(found.units) - len(small.units) > 0


def test_paper_settings_are_the_config_files_and_changes_apply() -> None:
    mem = AllMem.paper(embedder="hash", retrieval={"K": 3})
    node = method_node("allmem")
    assert mem.system.retrieval_cfg.K == 3 and mem.system.retrieval_cfg.L == node["retrieval"]["L"]
    again = AllMem.from_config(CONFIG_DIR / "method" / "allmem.yaml", embedder="hash")
    assert again.system.retrieval_cfg.K == node["retrieval"]["K"]
    assert again.system.atc_cfg == AllMem.paper(embedder="hash").system.atc_cfg


def test_consolidation_reports_what_it_changed() -> None:
    mem = _memory(atc={"every_sessions": None})  # only when asked
    before = mem.stats()
    assert (before.units, before.visible, before.turns, before.sessions) == (5, 5, 5, 2)
    report = mem.consolidate()
    assert isinstance(report, Consolidation) and report.ran
    after = mem.stats()
    # each executed edit adds one unit and archives its sources; the bank stays consistent with the report
    assert report.executed.get("merge", 0) >= 1  # the offline diagnoser merges one speaker's "Thanks!"s
    assert after.units == before.units + sum(report.executed.values()) == report.units
    assert after.visible == report.visible == after.units - after.archived < before.visible
    merged = [u for u in mem.search("Thanks", budget_tokens=2000).units if len(u.source_turns) > 1]
    assert merged and set(merged[0].source_turns) <= {"S2:1", "S2:3"}
    assert mem.consolidate() == Consolidation(False, {}, 0, after.units, after.visible)  # nothing new written
    off = _memory(atc={"enabled": False}).consolidate()
    assert not off.ran and off.executed == {}


def test_save_and_load_are_data_only_and_give_the_same_memory(tmp_path: Path) -> None:
    mem = _memory()
    out = mem.save(tmp_path / "m")
    assert not [p for p in out.rglob("*") if p.suffix in (".pkl", ".pickle")]
    settings = json.loads((out / "library.json").read_text())
    assert (
        settings["format"] == "allmem-library"
        and settings["embedder"]["_target_"] == "allmem.embed.HashEmbedder"
    )
    again = AllMem.load(out)
    assert again.stats() == mem.stats()
    assert again.search("beagle") == mem.search("beagle")
    assert again.add_turn("Ben", "Rui is two.", when=JUNE, new_session=True) == "S3:1"  # the stream goes on


def test_load_refuses_a_folder_it_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "library.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="library.json: not an allmem library memory"):
        AllMem.load(tmp_path)
