"""Shared fixtures and the suite's guards.

- ``slow``: every test that loads the real embedding model or the real LoCoMo, starts a program in a subprocess
  (the CLI, a script, make, a browser: each costs seconds of interpreter start and imports), or takes more than
  about ten seconds (figures, the notebook). ``make test`` runs everything (CI), ``make test-fast`` skips them.
  A test that asks for the ``locomo_path`` or ``embedder`` fixture is marked here, so the marker cannot be
  forgotten; a test that is not marked and still loads the real model or starts such a subprocess fails and
  says so.
- Composing the config and running it in this process: ``tests/runkit.py`` (``compose``, ``compose_and_run``);
  the real CLI in a subprocess: ``tests/faultkit.py`` (``allmem_run``).
- No test writes into the checkout: caches (``ALLMEM_CACHE``), results and Hydra's logs (``ALLMEM_RESULTS``,
  read by ``configs/paths/default.yaml``) go to a temporary folder for the whole session, subprocesses
  included; Hypothesis keeps no example database; and a test that leaves a new file in the checkout fails,
  naming it.
- Heavy objects (the embedding model) are built once per session, lazily.
- The run takes the longest modules first (``tests/durations.json``, ``make test-durations``), so pytest-xdist's
  workers finish together; the order changes no result.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.llm_stub import StubLLM

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SLOW_FIXTURES = ("locomo_path", "embedder")  # the real LoCoMo file, the real MiniLM model
# The order a run takes: the longest modules first, by the seconds their tests took when `make test-durations` last
# wrote DURATIONS. pytest-xdist's workers then end on short tests, not one waiting on a long test the other has left
# it. A test the file does not name counts as _UNTIMED_SLOW_S when marked slow (the marker's "about ten seconds").
DURATIONS = REPO / "tests" / "durations.json"
_TIMED_FROM = 0.5  # seconds: shorter tests are left out of the file (they run last, in pytest's order)
_UNTIMED_SLOW_S = 10.0

# Tool caches the test run itself writes (not the tests): left out of the checkout guard.
_TOOL_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"}

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

settings.register_profile("allmem", database=None)  # no .hypothesis/ example database in the checkout
settings.load_profile("allmem")

_SESSION_TMP = Path(tempfile.mkdtemp(prefix="allmem-tests-"))
SESSION_CACHE = _SESSION_TMP / "cache"
# The embedding model's ONNX export (allmem/embed_onnx.py; ~20 s to make) is shared by every process of the test
# run: pytest-xdist's workers inherit this variable from the process that starts them, which sets it first.
_SHARED_ONNX = "ALLMEM_TESTS_SHARED_ONNX"


def pytest_configure(config: pytest.Config) -> None:
    # Set for the whole session, before any test runs, so subprocesses inherit them too.
    os.environ["ALLMEM_CACHE"] = str(SESSION_CACHE)
    os.environ["ALLMEM_RESULTS"] = str(_SESSION_TMP / "results")
    onnx = Path(os.environ.setdefault(_SHARED_ONNX, str(_SESSION_TMP / "onnx")))
    onnx.mkdir(parents=True, exist_ok=True)  # the export itself is made under its own lock
    SESSION_CACHE.mkdir(parents=True, exist_ok=True)
    (SESSION_CACHE / "onnx").symlink_to(onnx, target_is_directory=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_SESSION_TMP, ignore_errors=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store-durations", action="store_true",
        help=f"write each test's seconds (>= {_TIMED_FROM} s) to tests/{DURATIONS.name}: the order runs take",
    )  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(name in getattr(item, "fixturenames", ()) for name in SLOW_FIXTURES):
            item.add_marker(pytest.mark.slow)
    known = _durations()
    # A module's tests stay together and in their order, so its module-scoped fixtures are set up once.
    module: dict[str, float] = defaultdict(float)
    for item in items:
        module[item.path.as_posix()] += known.get(
            item.nodeid, _UNTIMED_SLOW_S if item.get_closest_marker("slow") else 0.0
        )
    # stable: ties keep pytest's order
    items.sort(key=lambda item: module[item.path.as_posix()], reverse=True)


def _durations() -> dict[str, float]:
    """``tests/durations.json``: test id -> seconds. It orders the run only, so a stale, missing or damaged file
    changes no result (the run then keeps pytest's order for what it does not name)."""
    try:
        data = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(k, str) and isinstance(v, int | float)}


_timed: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _timed[report.nodeid] = _timed.get(report.nodeid, 0.0) + report.duration  # setup, call and teardown


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    writer = not hasattr(config, "workerinput")  # under xdist: the controller, which sees every report
    if config.getoption("store_durations") and writer:
        timed = {k: round(v, 1) for k, v in sorted(_timed.items()) if v >= _TIMED_FROM}
        DURATIONS.write_text(json.dumps(timed, indent=0) + "\n", encoding="utf-8")


def _checkout_paths() -> set[str]:
    """Every file and folder of the checkout, tool caches excepted (a few ms)."""
    out: set[str] = set()
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in _TOOL_DIRS and not d.endswith(".egg-info")]
        rel = os.path.relpath(folder, REPO)
        out.add(rel)
        out.update(os.path.join(rel, f) for f in files)
    return out


_known_paths: set[str] = set()


@pytest.fixture(autouse=True)
def _nothing_written_into_the_checkout() -> Iterator[None]:
    if not _known_paths:
        _known_paths.update(_checkout_paths())
    yield
    new = _checkout_paths() - _known_paths
    _known_paths.update(new)  # reported once, by the test that wrote them
    if new:
        pytest.fail(f"the test wrote into the checkout (use tmp_path): {sorted(new)[:10]}", pytrace=False)


@pytest.fixture(autouse=True)
def _real_model_only_in_slow_tests(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("slow"):
        return
    from allmem.embed import Embedder

    def refuse(self: Embedder) -> None:
        raise RuntimeError(
            "this test loads the real embedding model: use allmem.embed.HashEmbedder (embedder=hash) "
            "or mark it @pytest.mark.slow"
        )

    monkeypatch.setattr(Embedder, "_load", refuse)


# Programs a test that is not marked slow may start: quick tools the code itself runs (allmem/run/attempts.py reads
# the git commit of every run) or that libraries run to find a shared library.
_QUICK_PROGRAMS = {"git", "ldconfig", "ldconfig.real", "uname", "gcc", "cc", "ld", "objdump"}


@pytest.fixture(autouse=True)
def _subprocesses_only_in_slow_tests(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    # slow tests may; so may the real-model tier (llm), which starts its model's server
    if any(request.node.get_closest_marker(m) for m in ("slow", "llm")):
        return
    start = subprocess.Popen.__init__

    def refuse(self: subprocess.Popen, args, *rest, **kwargs) -> None:  # noqa: ANN001 - as Popen's
        argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
        program = os.path.basename(os.fsdecode(argv[0])).split()[0] if argv else ""
        if program not in _QUICK_PROGRAMS:
            raise RuntimeError(
                f"this test starts {program!r} in a subprocess (a program's start and imports cost seconds): "
                "run it in this process (tests/runkit.py) or mark it @pytest.mark.slow"
            )
        start(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def locomo_path() -> Path:
    """The real LoCoMo file (shared/, beside the checkout). Tests needing it skip nowhere: CI has it."""
    for cand in (
        REPO / "data" / "locomo" / "locomo10.json",
        REPO.parent / "shared" / "data" / "locomo" / "locomo10.json",
    ):
        if cand.exists():
            return cand
    raise FileNotFoundError(
        "LoCoMo not found under data/locomo/ or ../shared/data/locomo/: run `allmem download locomo` "
        "or put the shared data folder beside the checkout (as CI does)"
    )


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    """The test session's cache folder (``ALLMEM_CACHE``), so tests never depend on a developer's warm cache,
    and in-process and CLI runs share one embedding store and one model export."""
    return SESSION_CACHE


@pytest.fixture(scope="session")
def embedder(cache_dir: Path):  # noqa: ANN201 - allmem.embed.Embedder, imported lazily
    """The real local MiniLM embedder (one instance for the whole test session)."""
    import torch

    from allmem.embed import Embedder

    torch.set_num_threads(1)
    return Embedder(cache_dir=cache_dir / "embeddings")


@pytest.fixture
def stub() -> Iterator[StubLLM]:
    """A local OpenAI-compatible stub on 127.0.0.1 (tests/llm_stub.py), stopped after the test."""
    server = StubLLM().start()
    yield server
    server.stop()
