"""Recoverability of archived evidence (paper, Sec. 5 / App.; docs/METHOD.md).

h(v) for an archived unit v is the directed shortest-path distance from the visible surface over all typed
links (infinite when no path exists). Reported: the share unreachable, the median h, H_0.95 (the smallest hop
budget H with R(H) >= 0.95) and the curve R(H) = share of archived units with h <= H. The authors' code measures
an undirected BFS over sibling and version links only: offered as ``mode="ref_undirected"``.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from allmem.memory.bank import LINK_TYPES, MemoryBank

MODES = ("directed", "ref_undirected")


def hop_distances(bank: MemoryBank, mode: str = "directed") -> dict[str, float]:
    """h(v) for every archived unit v (``math.inf`` when unreachable), by one multi-source BFS."""
    if mode not in MODES:
        raise ValueError(f"recoverability mode must be one of {MODES}, got {mode!r}")
    types = LINK_TYPES if mode == "directed" else ("sibling", "version")
    dist: dict[str, int] = {uid: 0 for uid in bank.visible_ids()}
    queue = deque(dist)
    while queue:
        u = queue.popleft()
        nbrs = [lk.dst for t in types for lk in bank.out_links(u, t)]
        if mode == "ref_undirected":
            nbrs += [lk.src for t in types for lk in bank.in_links(u, t)]
        for v in nbrs:
            if v not in dist:
                dist[v] = dist[u] + 1
                queue.append(v)
    return {u.id: float(dist.get(u.id, math.inf)) for u in bank.units() if not u.visible}


def summarize(h: dict[str, float], max_h: int = 10) -> dict[str, Any]:
    """Share unreachable, median h, H_0.95 and R(H) for H = 0..max(max_h, largest finite h). JSON-safe."""
    values = sorted(h.values())
    n = len(values)
    finite = [v for v in values if math.isfinite(v)]
    top = int(max([max_h, *finite])) if finite else max_h
    curve = {H: (sum(1 for v in finite if v <= H) / n if n else 0.0) for H in range(top + 1)}
    h95 = next((H for H, r in curve.items() if r >= 0.95), None)
    if n == 0:
        median = None
    else:
        mid = values[(n - 1) // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
        median = mid if math.isfinite(mid) else None
    return {
        "n_archived": n,
        "unreachable_share": (n - len(finite)) / n if n else 0.0,
        "median_h": median,
        "h95": h95,
        "curve": {str(H): r for H, r in curve.items()},
    }


def recoverability(bank: MemoryBank, mode: str = "directed", max_h: int = 10) -> dict[str, Any]:
    return {"mode": mode, **summarize(hop_distances(bank, mode), max_h)}
