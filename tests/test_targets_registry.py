"""The paper targets have one registration, allmem/report/targets.ini: the Makefile's targets and `make help`, the
summarise step's renderers and docs/REPRODUCE.md's table are all read or written from it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from allmem.report import paper
from allmem.report.targets import ALIASES, DOCS, GROUPS, REGISTRY, TARGETS, docs_table, docs_with_table

REPO = Path(__file__).resolve().parents[1]
NAMES = [*TARGETS, *ALIASES, *GROUPS]


def _make(*args: str, stdin: str | None = None) -> str:
    out = subprocess.run(["make", "-s", "--no-print-directory", "-C", str(REPO), *args], input=stdin,
                         capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    return out.stdout


@pytest.mark.slow  # make in a subprocess
def test_the_makefile_reads_its_paper_targets_from_the_registry():
    listed = _make(
        "-f", "Makefile", "-f", "-", "print-targets", stdin="print-targets: ; @echo $(PAPER_TARGETS)\n"
    )
    assert sorted(listed.split()) == sorted(NAMES)


@pytest.mark.slow  # make in a subprocess
def test_make_help_prints_every_targets_help_line_without_a_venv():
    text = _make("help", "VENV=/nonexistent")  # help needs nothing installed
    helps = {
        line.split(None, 1)[0]: line.split(None, 1)[1]
        for line in text.splitlines()[1:]
        if line.startswith("  ")
    }
    for name, target in TARGETS.items():
        assert target.help and helps[name] == target.help, name
    assert set(ALIASES) | set(GROUPS) <= set(helps)


def test_every_target_has_one_renderer():
    assert set(paper.RENDER) | set(paper.STANDALONE) == set(TARGETS)
    assert not set(paper.RENDER) & set(paper.STANDALONE)


def test_every_target_is_documented_and_in_a_known_group():
    for target in TARGETS.values():
        assert target.title and target.runs and target.writes, target.name
        assert set(target.groups) <= set(GROUPS), target.name
    assert all(of[0] in TARGETS for of in ALIASES.values())
    assert REGISTRY.is_file()


def test_reproduce_md_holds_the_registrys_table():
    text = (REPO / DOCS).read_text(encoding="utf-8")
    assert docs_table() in text
    assert docs_with_table(text) == text, "run `python -m allmem.report.targets --docs`"
