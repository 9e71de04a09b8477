"""The package's import graph, read statically (``ast``; an import inside a function counts as much as one at the
top): no module of ``allmem`` imports itself back through others, and its rooms stand on floors that import only
down, with the few exceptions named below (docs/DESIGN.md, "Modules").

A room is a top-level module (``allmem/files.py``) or a subpackage (``allmem/run/``); ``allmem/__init__.py`` is the
room ``allmem``. An arrow is a room importing another; it runs back up when the imported room stands on a higher
floor. Importing a submodule also runs its package's ``__init__``; that implicit import is not an arrow here (the
packages' ``__init__`` files import lazily or not at all)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "allmem"

# Lowest first. A room may import rooms on its own floor or below.
FLOORS: tuple[tuple[str, frozenset[str]], ...] = (
    ("words: records, errors, paths, text", frozenset({"types", "errors", "paths", "fingerprint", "threads", "text"})),
    ("storage: files, caches, configs, tokens, the memory interface", frozenset(
        {"files", "cache_store", "defaults", "tokens", "budget", "systems", "embed_store", "embed_batch", "embed_onnx",
         "embed"}
    )),
    ("model calls", frozenset({"llm"})),
    ("methods: readers, memory systems, a remote system", frozenset({"reader", "memory", "remote"})),
    ("scoring", frozenset({"metrics"})),
    ("runs: config to objects, the run lifecycle", frozenset({"build", "run"})),
    ("products: reports, the library, paper targets", frozenset({"report", "library", "experiments"})),
    ("entry points", frozenset({"cli", ""})),  # "": allmem/__init__.py
)  # fmt: skip

# Arrows allowed to run back up, each with why (at most 3: the house rule). None today.
UPWARD_ALLOWED: dict[tuple[str, str], str] = {}
MAX_UPWARD = 3


def _modules(repo: Path = REPO) -> dict[str, Path]:
    out = {}
    for path in sorted((repo / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(repo).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def import_graph(repo: Path = REPO) -> dict[str, set[str]]:
    """Module → the modules of the package it imports, anywhere in its body (a module-level, function-level or
    ``TYPE_CHECKING`` import alike). ``from a import b`` is an import of ``a.b`` when that is a module, else of
    ``a``; relative imports are resolved."""
    modules = _modules(repo)

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(known(a.name) for a in node.names if a.name.split(".")[0] == PACKAGE)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                if source.split(".")[0] != PACKAGE:
                    continue
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    targets.add(sub if sub in modules else known(source))
        targets.discard(None)
        targets.discard(name)
        graph[name] = {t for t in targets if t is not None}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def room(module: str) -> str:
    """``allmem.run.runner`` → ``run``; ``allmem.files`` → ``files``; ``allmem`` → ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def floor_of(name: str) -> int:
    for i, (_, rooms) in enumerate(FLOORS):
        if name in rooms:
            return i
    raise KeyError(name)


def arrows(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(room, room it imports) → the module imports that make the arrow."""
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for source, targets in graph.items():
        for target in targets:
            if room(source) != room(target):
                out.setdefault((room(source), room(target)), []).append((source, target))
    return out


def upward(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    return {pair: why for pair, why in arrows(graph).items() if floor_of(pair[0]) < floor_of(pair[1])}


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_no_room_imports_itself_back_through_others() -> None:
    """The same at the scale of rooms (a subpackage or top-level module): no two rooms import each other."""
    rooms: dict[str, set[str]] = {room(m): set() for m in import_graph()}
    for source, target in arrows(import_graph()):
        rooms[source].add(target)
    assert cycles(rooms) == []


def test_every_room_stands_on_one_floor() -> None:
    rooms = {room(m) for m in import_graph()}
    placed = [r for _, floor in FLOORS for r in floor]
    assert len(placed) == len(set(placed)), "a room on two floors"
    assert sorted(rooms - set(placed)) == [], "place the new room on a floor in FLOORS"
    assert sorted(set(placed) - rooms) == [], "a room in FLOORS that no longer exists"


def test_arrows_run_down_but_for_the_named_exceptions() -> None:
    up = upward(import_graph())
    assert len(UPWARD_ALLOWED) <= MAX_UPWARD
    assert {pair: sorted(why) for pair, why in up.items() if pair not in UPWARD_ALLOWED} == {}
    assert sorted(set(UPWARD_ALLOWED) - set(up)) == [], (
        "an allowed exception that is gone: drop it from the list"
    )


def test_the_graph_reader_sees_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from allmem.sub import high\n")
    (pkg / "sub" / "high.py").write_text("from .. import low\nimport allmem.sub.other\n")
    (pkg / "sub" / "other.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import high\n"
    )
    graph = import_graph(tmp_path)
    assert graph["allmem.low"] == {"allmem.sub.high"}
    assert graph["allmem.sub.high"] == {"allmem.low", "allmem.sub.other"}
    assert cycles(graph) == [["allmem.low", "allmem.sub.high", "allmem.sub.other"]]
