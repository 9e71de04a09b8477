"""Every code reference in the docs points at something that exists.

Scanned: ``README.md``, ``docs/*.md`` and every README inside the packages. Checked: backticked repository paths
(``allmem/budget.py``, ``configs/method/``; a bare ``name.py`` or ``name.md``, as the module tables write
them, must be a file of the packages), relative markdown links, and backticked dotted names of our packages (``allmem.budget.context_line``),
which must import. Placeholders (``<group>``, ``*``) and folders that only runs or downloads create are skipped.
And no doc names a path outside the repository (``_outside``): the docs stand alone.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted(
    {REPO / "README.md", *(REPO / "docs").glob("*.md")}
    | {
        p
        for top in ("allmem", "baselines", "benchmarks", "scripts", "configs")
        for p in (REPO / top).rglob("README.md")
    }
)
# Created by runs, downloads or the developer, never committed: a doc may name them before they exist.
GENERATED = (
    "data/",
    "results/runs",
    "results/figures",
    "results/debug",
    "results/.hydra",
    "results/tables/per_question.parquet",  # written by every summarise step, holds LoCoMo's text: not committed
    "results/audit",  # Table 8's sheets and drift-corpus runs (make table8): LoCoMo text, not committed
    ".cache",
    "configs/local",
)
_BACKTICK = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_PATH = re.compile(r"[A-Za-z0-9_.\-/]+")
_DOTTED = re.compile(r"(?:allmem|baselines|benchmarks)(?:\.[A-Za-z_]\w*)+")
_FILE_EXT = (".py", ".md", ".yaml", ".yml", ".json", ".jsonl", ".txt", ".toml", ".sh", ".png", ".sqlite")


def _is_repo_path(token: str, doc: Path) -> bool:
    if not _PATH.fullmatch(token) or token.startswith(("../", "http")) or token.startswith(GENERATED):
        return False
    if "/" in token:  # anchored at the repository root or at the doc's folder ("n/a" is neither)
        first = token.split("/")[0]
        return (REPO / first).exists() or (doc.parent / first).exists()
    return token.endswith((".py", ".md"))  # a bare file name: a module or doc of the folder being described


def _exists(token: str, doc: Path) -> bool:
    if (doc.parent / token).exists() or (REPO / token).exists():
        return True
    return "/" not in token and any(_PACKAGE_FILES.get(token, ()))


_PACKAGE_FILES: dict[str, list[Path]] = {}
for _top in ("allmem", "baselines", "benchmarks", "scripts", "tests", "docs"):
    for _p in (REPO / _top).rglob("*"):
        if _p.suffix in (".py", ".md"):
            _PACKAGE_FILES.setdefault(_p.name, []).append(_p)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def _references(doc: Path) -> tuple[list[str], list[str]]:
    text = doc.read_text(encoding="utf-8")
    paths, names = [], []
    for span in _BACKTICK.findall(text):
        token = span.strip()
        if token.endswith(_FILE_EXT) or "/" in token:
            if _is_repo_path(token, doc):
                paths.append(token)
        elif m := _DOTTED.match(token):
            names.append(m.group(0))
    for target in _LINK.findall(text):
        target = target.split("#")[0]
        if target and not target.startswith(("http", "mailto:")) and not target.startswith(GENERATED):
            paths.append(target)
    return paths, names


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_referenced_path_exists(doc: Path) -> None:
    paths, _ = _references(doc)
    missing = sorted({p for p in paths if not _exists(p, doc)})
    assert not missing, f"{doc.relative_to(REPO)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_referenced_python_name_imports(doc: Path) -> None:
    _, names = _references(doc)
    broken = sorted({n for n in names if not _resolves(n)})
    assert not broken, f"{doc.relative_to(REPO)} names Python objects that do not exist: {broken}"


def test_the_checker_catches_a_stale_reference(tmp_path: Path) -> None:
    doc = tmp_path / "README.md"
    doc.write_text("See `allmem/memory/atc/report.py`, `allmem.memory.atc.report` and [x](nowhere.md).")
    paths, names = _references(doc)
    assert [p for p in paths if not _exists(p, doc)] == ["allmem/memory/atc/report.py", "nowhere.md"]
    assert [n for n in names if not _resolves(n)] == ["allmem.memory.atc.report"]


# A path that leaves the repository (issue 34: the docs stand alone). The docs write paths from the repository root,
# and links from the doc's folder; so outside a link a path starting with ``../`` leaves the repository, and a link
# leaves it when it resolves above the root. An absolute path into a machine's own folders (``/work/...``,
# ``/home/...``) names something no other checkout has. Placeholders a reader replaces (``/path/to/...``,
# ``/other/clone/...``, ``ALLMEM_CACHE=/local/...``) and ``/tmp`` (scratch) are not paths of ours.
_UP = re.compile(r"(?<![\w.\])/])\.\./[^\s`)\]'\"]*")
_MACHINE = re.compile(r"(?<![\w.~])/(?:work|home|root|mnt|Users|srv|opt|var)/[^\s`)\]'\"]*")


def _outside(doc: Path, root: Path = REPO) -> list[str]:
    """What ``doc`` names outside the repository at ``root``: ``../`` paths in its text, links resolving above the
    root, absolute paths into a machine's folders (a sentence's closing punctuation is not part of a path)."""
    text = doc.read_text(encoding="utf-8")
    found = []
    for target in _LINK.findall(text):
        path = target.split("#")[0]
        if path and not path.startswith(("http", "mailto:")):
            if not (doc.parent / path).resolve().is_relative_to(root.resolve()):
                found.append(path)
    prose = _LINK.sub("]()", text)  # the link targets are checked above, from the doc's folder
    return found + [p.rstrip(".,;:") for p in (*_UP.findall(prose), *_MACHINE.findall(text))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_doc_names_a_path_outside_the_repository(doc: Path) -> None:
    outside = _outside(doc)
    assert not outside, f"{doc.relative_to(REPO)} names paths outside the repository: {outside}"


def test_the_outside_check_catches_each_kind(tmp_path: Path) -> None:
    """By hand: which of these leave a repository whose doc sits in ``docs/``."""
    root = tmp_path / "repo"
    doc = root / "docs" / "x.md"
    doc.parent.mkdir(parents=True)
    doc.write_text(
        "see `../shared/docs/BASELINES.md` and ../shared/data/locomo/; [up](../../elsewhere.md), "
        "[in](../README.md), [a](BASELINES.md#x), `/work/shared/data`, /home/me/notes. "
        "`ALLMEM_CACHE=/local/cache` `${TMPDIR:-/tmp}/allmem-cache` `--figures figs/` [web](https://x.org/../y)"
    )
    assert _outside(doc, root) == [
        "../../elsewhere.md", "../shared/docs/BASELINES.md", "../shared/data/locomo/", "/work/shared/data",
        "/home/me/notes",
    ]  # fmt: skip


def test_test_modules_never_import_each_other() -> None:
    """docs/DESIGN.md, "Conventions": shared helpers live in helper modules (``tests/fakes.py`` ...), so a test
    module can be run, moved or deleted on its own."""
    imports = re.compile(r"^\s*(?:from|import)\s+(?:tests\.)?(test_\w+)", re.MULTILINE)
    offenders = {
        path.name: found
        for path in sorted((REPO / "tests").glob("test_*.py"))
        if (found := imports.findall(path.read_text(encoding="utf-8")))
    }
    assert not offenders, offenders
