"""The environment lock (requirements.lock, scripts/lock.py): it pins every package with hashes, it satisfies the
ranges pyproject.toml declares (so editing them without ``make lock`` fails here), and allmem reaches only the
public API of the packages it names."""

from __future__ import annotations

import io
import re
import sys
import tokenize
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import lock  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements.lock"


def test_read_lock_parses_pins_and_refuses_a_range(tmp_path: Path) -> None:
    path = tmp_path / "r.lock"
    path.write_text(
        "# comment\n--find-links x\nPyYAML==6.0.4 \\\n    --hash=sha256:ab\n    # via allmem\n"
        "torch==2.13.0+cpu \\\n    --hash=sha256:cd\nrouge_score==0.1.2 ; python_version >= '3'\n"
    )
    assert lock.read_lock(path) == {"pyyaml": "6.0.4", "torch": "2.13.0+cpu", "rouge-score": "0.1.2"}
    path.write_text("numpy==2.4.6\nopenai>=3\n")
    with pytest.raises(ValueError, match=r"r\.lock:2: not an exact pin"):
        lock.read_lock(path)


def test_differences_name_each_changed_missing_and_extra_package() -> None:
    lines = lock.differences(
        {"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "2.1", "d": "4"}, ("lock", "venv")
    )
    assert lines == ["b: 2 -> 2.1", "c: 3 -> not in venv", "d: not in lock -> 4"]


@pytest.mark.slow  # pip in a subprocess
def test_check_passes_on_equal_and_fails_on_a_drifted_environment(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    have = lock.installed(sys.executable)
    exact = tmp_path / "exact.lock"
    exact.write_text("".join(f"{name}=={version}\n" for name, version in have.items()))
    assert lock.main(["check", str(exact)]) == 0
    assert f"equals {exact} ({len(have)} packages)" in capsys.readouterr().out
    name = sorted(have)[0]
    drifted = tmp_path / "drifted.lock"
    drifted.write_text(exact.read_text().replace(f"{name}=={have[name]}\n", f"{name}==0.0.0\n"))
    assert lock.main(["check", str(drifted)]) == 1
    assert f"{name}: 0.0.0 -> {have[name]}" in capsys.readouterr().err


def test_the_lock_pins_every_package_with_a_hash_and_torchs_cpu_build() -> None:
    entries = re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text(encoding="utf-8").split("\n", 2)[2])
    pins = lock.read_lock(LOCK)
    assert len(entries) == len(pins) > 100
    assert all("--hash=sha256:" in entry for entry in entries)
    assert pins["torch"].endswith("+cpu")
    assert "pip" in pins  # the installer is locked too


def _declared(extras: tuple[str, ...]) -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return [r for r in reqs if r.name != "allmem"]  # allmem[wandb] inside dev: its own extra, listed below


def test_the_lock_satisfies_every_declared_range() -> None:
    """Every dependency of the locked extras is pinned at a version its declared range admits; a range edited
    without ``make lock`` fails here, named."""
    pins = lock.read_lock(LOCK)
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    extras = tuple(re.search(r"^LOCK_EXTRAS := (.+)$", makefile, re.M).group(1).split()) + ("wandb",)
    for req in _declared(extras):
        name = lock.canonical(req.name)
        assert name in pins, f"{req.name} is declared but not in requirements.lock: run make lock"
        assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} is outside {req}"


def test_major_releases_that_could_break_us_are_bounded() -> None:
    bounded = {lock.canonical(r.name) for r in _declared(()) if any(s.operator == "<" for s in r.specifier)}
    assert {"torch", "numpy", "pandas", "openai", "httpx", "faiss-cpu", "sentence-transformers"} <= bounded


def test_no_code_names_the_openai_clients_transport() -> None:
    """The backend uses openai's public API; its HTTP library (httpx2 in openai 3.x) is its own business, so no
    module imports or names it outside comments and strings that are docstrings."""
    hits = []
    for path in [*(REPO / "allmem").rglob("*.py"), *(REPO / "baselines").rglob("*.py")]:
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
        hits += [
            f"{path.relative_to(REPO)}:{t.start[0]}"
            for t in tokens
            if t.type == tokenize.NAME and t.string == "httpx2"
        ]
    assert hits == []
