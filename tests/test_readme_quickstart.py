"""The README's quickstart: at most 60 lines from the title to its end, and every command in it runs.

Each command of the quickstart's ``bash`` blocks is listed in ``HOW`` with the way it is checked:

- ``run``: as written, on the debug fixture (seconds, no model, no network);
- ``env``: an ``export`` line, run as written so that the commands after it see it;
- ``dry``: a make target that installs packages, runs the whole suite or takes minutes on the full LoCoMo,
  checked as ``make -n`` (the target exists and its recipe expands);
- ``help``: a command that needs the network or an LLM, checked as ``--help``.

A command added to the quickstart without an entry here fails ``test_every_quickstart_command_is_checked``.
The commands run in one shell, in order, in a scratch folder whose entries link to the checkout's (its ``.venv``
to the interpreter running the tests) except ``results/``, so they run verbatim and write nothing into the
checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
LIMIT = 60  # issue 23: the README opens with a quickstart of at most 60 lines

HOW = {
    "make setup": "dry",  # installs packages
    "make test": "dry",  # the whole suite, this test included
    ".venv/bin/allmem run -m +debug=default method=allmem,bm25": "run",
    ".venv/bin/allmem report results/debug --out results/debug/overview.md": "run",
    ".venv/bin/allmem report site --runs results/debug --out results/debug/site": "run",
    "make reproduce": "dry",  # every method on the full LoCoMo
    "make site": "dry",  # reads the runs `make reproduce` made
    "export ALLMEM_CONFIG_PATH=$PWD/examples/my_memory/configs PYTHONPATH=$PWD": "env",
    ".venv/bin/allmem run +debug=default method=my_memory": "run",
    "make table1": "dry",  # Table 1 on the full LoCoMo (tests/test_user_systems.py makes it on the fixture)
}


def quickstart_lines(text: str) -> list[str]:
    """From the title to the last line of the ``## Quickstart`` section (the line before the next ``## ``)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "## Quickstart"), None)
    if start is None:
        raise AssertionError("README.md has no '## Quickstart' section")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[:end]


def commands(lines: list[str]) -> list[str]:
    """The commands of the ``bash`` blocks: comments dropped, continued lines joined."""
    out: list[str] = []
    inside = False
    pending = ""
    for line in lines:
        if line.startswith("```"):
            inside = line.strip() == "```bash" if not inside else False
            continue
        if not inside:
            continue
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        if line := (pending + line).strip():
            out.append(" ".join(line.split()))
        pending = ""
    return out


def as_checked(command: str) -> str:
    how = HOW[command]
    if how == "dry":
        assert command.startswith("make "), command
        return "make -n " + command.removeprefix("make ")
    if how == "help":
        return command + " --help"
    return command


def test_the_quickstart_fits_in_sixty_lines() -> None:
    lines = quickstart_lines(README.read_text(encoding="utf-8"))
    assert len(lines) <= LIMIT, (
        f"README.md: the title and quickstart take {len(lines)} lines, more than {LIMIT}"
    )


def test_every_quickstart_command_is_checked() -> None:
    found = commands(quickstart_lines(README.read_text(encoding="utf-8")))
    assert found, "README.md's quickstart has no bash block"
    unchecked = [c for c in found if c not in HOW]
    assert not unchecked, (
        f"quickstart commands with no entry in HOW (say how this test runs them): {unchecked}"
    )
    stale = sorted(set(HOW) - set(found))
    assert not stale, f"HOW names commands the quickstart no longer has: {stale}"
    assert {"make setup", "make test", "make reproduce"} <= set(found)  # set-up, the suite, the real run


def test_the_extraction_reads_blocks_comments_and_continued_lines() -> None:
    text = "# t\n\n## Quickstart\n```bash\na   b  # note\nc \\\n  d\n```\n```python\nx\n```\n\n## Next\n```bash\ne\n```\n"
    lines = quickstart_lines(text)
    assert lines[-1] == "```"
    assert commands(lines) == ["a b", "c d"]


def _scratch_checkout(root: Path) -> Path:
    root.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in ("results", ".venv", ".git") and not entry.name.endswith(".egg-info"):
            (root / entry.name).symlink_to(entry)
    (root / ".venv").symlink_to(Path(sys.prefix))
    return root


@pytest.mark.slow  # CLI runs in subprocesses
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_every_quickstart_command_runs(tmp_path: Path) -> None:
    if not (Path(sys.prefix) / "bin" / "allmem").exists():
        pytest.skip(f"no allmem script in {sys.prefix}/bin: run from the venv `make setup` made")
    found = commands(quickstart_lines(README.read_text(encoding="utf-8")))
    scratch = _scratch_checkout(tmp_path / "checkout")
    script = "set -euxo pipefail\n" + "\n".join(as_checked(c) for c in found) + "\n"
    env = {**os.environ, "ALLMEM_RESULTS": str(scratch / "results"), "PYTHONPATH": str(scratch)}
    env.pop("ALLMEM_CONFIG_PATH", None)
    done = subprocess.run(["bash", "-c", script], cwd=scratch, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

    results = scratch / "results" / "debug"
    runs = sorted(p.parent.relative_to(results).as_posix().rsplit("-", 1)[0] for p in results.rglob("DONE"))
    assert runs == [
        "locomo/allmem,debug=default",
        "locomo/bm25,debug=default",
        "locomo/my_memory,debug=default",
    ]
    overview = (results / "overview.md").read_text(encoding="utf-8")
    assert "| allmem,debug=default |" in overview and "| bm25,debug=default |" in overview
    assert (results / "site" / "index.html").is_file()
    # the dry runs expanded the recipes: the launcher (reproduce, table1) and the site
    assert "allmem paper run" in done.stdout and "allmem report site" in done.stdout, done.stdout[-3000:]
