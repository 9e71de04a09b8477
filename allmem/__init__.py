"""allmem: reference harness and library for All-Mem.

The library (docs/LIBRARY.md): ``from allmem import AllMem``; its typed results ``Unit``, ``SearchResult``,
``Session``, ``Consolidation``, ``Stats``. Imported on first use, so ``import allmem`` (the CLI) stays light.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["AllMem", "Consolidation", "SearchResult", "Session", "Stats", "Unit"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from allmem import library

        return getattr(library, name)
    raise AttributeError(f"module 'allmem' has no attribute {name!r}")
