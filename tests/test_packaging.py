"""A non-editable install runs on its own: ``pip install .`` ships the configs and the debug fixtures.

The wheel is built from a copy of the sources (building writes ``build/`` and ``*.egg-info`` next to them) and
installed without dependencies into a fresh venv that sees this venv's packages through a ``.pth`` line, so the
test needs no network. That line does not run this venv's ``.pth`` files, so the editable allmem (and the
``PYTHONPATH`` of the checkout, removed) cannot shadow the wheel: the test checks where ``allmem`` comes from.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = (
    "pyproject.toml",
    "setup.py",
    "README.md",
    "allmem",
    "baselines",
    "benchmarks",
    "configs",
    "tests/fixtures",
)


@pytest.mark.slow
def test_a_wheel_installed_elsewhere_runs_the_debug_config(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(src)],
                   check=True, capture_output=True)  # fmt: skip
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    Path(purelib, "project-venv.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    wheel = next((tmp_path / "dist").glob("allmem-*.whl"))
    subprocess.run(
        [*pip, "--python", str(python), "install", "--no-deps", str(wheel)], check=True, capture_output=True
    )

    # a user's shell: none of the folders this test session points allmem and tiktoken at
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "ALLMEM_RESULTS", "ALLMEM_CACHE", "TIKTOKEN_CACHE_DIR")
    }
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    where = subprocess.run([python, "-c", "import allmem; print(allmem.__file__)"], cwd=empty, env=env,
                           check=True, capture_output=True, text=True).stdout  # fmt: skip
    assert where.startswith(purelib), where
    done = subprocess.run([env_dir / "bin" / "allmem", "run", "+debug=default"], cwd=empty, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    # results and caches of an install go to the current directory (docs/REPRODUCE.md, "Setup")
    assert [p.name for p in (empty / "results" / "debug").rglob("DONE")] == ["DONE"]
    assert (empty / ".cache").is_dir()
