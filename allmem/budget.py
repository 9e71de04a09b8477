"""The matched context budget: every method's evidence is cut to the same number of generator tokens.

PROTOCOL: "evidence beyond the budget is dropped in the method's own ranking order, at unit boundaries". We read
that as a *prefix* cut: walk the ranking best-first and stop at the first unit that does not fit; it and every
unit ranked after it are dropped. Why not skip it and keep filling with smaller, lower-ranked units: that would
let a method's context depend on unit lengths rather than its ranking (a method with short low-ranked units
would get extra evidence no ranking asked for), and the packed set would no longer be "the method's top-n".
Units are never truncated, so a first unit larger than the whole budget leaves the context empty.

With ``budget.fill`` (the equal-context view, ``fill``) the budget is also a target: the harness asks the method
for deeper rankings (``MemorySystem.set_depth``, factor 1, 2, 4, ...) until the packed context is full (a unit
had to be dropped, so the context is within one unit of the budget) or a deeper ranking brings no new unit (the
memory has nothing more to give). Each method's depth rule: docs/BASELINES.md, "Equal context".

The kept units are then ordered chronologically (timestamp, then natural id order, so ``D3:5`` precedes
``D3:10``) and rendered one line each: ``[8 May 2023] Speaker: text``. Only the date is shown: LoCoMo sessions
carry a time of day nobody asks about, and a date per line is what the generation prompt's "resolve relative
dates with the log entry's date" needs; the chronological order already conveys same-day order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from allmem.errors import ConfigError
from allmem.tokens import count_tokens
from allmem.types import RetrievalResult, Retrieved, format_date

_WS = re.compile(r"\s+")
_DIGITS = re.compile(r"(\d+)")


@dataclass(frozen=True)
class Packed:
    """What the generator sees (``units``/``lines``/``text``, chronological) and the token accounting.

    ``used_tokens``: tokens of ``text`` (the rendered context); ``dropped_tokens``: tokens of the rendered lines
    of the units that were not packed; ``n_dropped``: how many units were dropped.
    """

    units: tuple[Retrieved, ...]
    lines: tuple[str, ...]
    text: str
    used_tokens: int
    dropped_tokens: int
    n_dropped: int


@lru_cache(maxsize=1 << 16)
def _line_tokens(line: str) -> int:
    """Memoised: whole-history methods re-render the same lines for every question."""
    return count_tokens(line)


def context_line(unit: Retrieved) -> str:
    """One context line: ``[date] Speaker: text [image: caption]``, built from the unit's parts.

    Newlines inside a unit (LongMemEval assistant turns, the records of a merged unit) are collapsed so each
    unit stays one line.
    """
    text = _WS.sub(" ", unit.text).strip()
    if unit.timestamp is not None:
        return f"[{format_date(unit.timestamp)}] {text}"
    return text


@lru_cache(maxsize=1 << 16)
def _natural(s: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders digit runs numerically: ``D3:5`` < ``D3:10`` < ``D10:1``."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in _DIGITS.split(s) if p)


def chronological(units: Sequence[Retrieved]) -> list[Retrieved]:
    """Timestamp, then natural id order, then ranking position; undated units go last in ranking order."""
    return [units[i] for i in _chronological_order(units)]


def _chronological_order(units: Sequence[Retrieved]) -> list[int]:
    """The positions of ``units`` in ``chronological`` order."""
    dated = [i for i, u in enumerate(units) if u.timestamp is not None]
    undated = [i for i, u in enumerate(units) if u.timestamp is None]
    dated.sort(key=lambda i: (units[i].timestamp, _natural(units[i].id), i))
    return dated + undated


def pack(units: Sequence[Retrieved], budget_tokens: int) -> Packed:
    """Keep the longest prefix of ``units`` (ranking order, best first) whose rendered context fits the budget.

    A unit first costs its line's tokens plus one for the joining newline (memoised, cheap); since BPE over the
    joined string need not be additive, the prefix is then adjusted with exact counts of the rendered text, so
    the result is the longest prefix whose context fits and ``used_tokens <= budget_tokens`` always holds.
    """
    if budget_tokens < 0:
        raise ValueError(f"budget.tokens must be >= 0, got {budget_tokens}")
    lines = [context_line(u) for u in units]
    costs = [_line_tokens(line) for line in lines]
    n_keep, total = 0, 0
    for cost in costs:
        step = cost + (1 if n_keep else 0)
        if total + step > budget_tokens:
            break
        total += step
        n_keep += 1

    def render(n: int) -> tuple[list[Retrieved], list[str], str, int]:
        order = _chronological_order(units[:n])  # the lines above are reused: rendering is the costly part
        kept_lines = [lines[i] for i in order]
        text = "\n".join(kept_lines)
        return [units[i] for i in order], kept_lines, text, count_tokens(text)

    best = render(n_keep)
    # the estimate is usually an upper bound (".\n" can merge into one token): grow while the exact text fits
    while n_keep < len(units):
        grown = render(n_keep + 1)
        if grown[3] > budget_tokens:
            break
        best, n_keep = grown, n_keep + 1
    while best[3] > budget_tokens and n_keep > 0:
        n_keep -= 1
        best = render(n_keep)
    kept, kept_lines, text, used = best
    return Packed(
        units=tuple(kept),
        lines=tuple(kept_lines),
        text=text,
        used_tokens=used,
        dropped_tokens=sum(costs[n_keep:]),
        n_dropped=len(units) - n_keep,
    )


# The deepest factor ``fill`` tries: a ranking that still grows at 2**20 times its configured depth is not a
# memory running out, it is a bug (a ranking that grows without end), and is refused rather than looped on.
MAX_FACTOR = 1 << 20


@dataclass(frozen=True)
class Filled:
    """``fill``'s answer: the ranking used (``result``), its packing and the depth factor that produced it."""

    result: RetrievalResult
    packed: Packed
    factor: int


def fill(ranking: Callable[[int], RetrievalResult], budget_tokens: int) -> Filled:
    """Pack the ranking at depth factor 1, then 2, 4, ... while everything fits and the budget is not reached;
    stop at the first ranking that overflows the budget, or keep the last one when doubling the depth adds no
    unit (the memory is exhausted). ``ranking(factor)`` is the method's ranking at that factor."""
    factor = 1
    result = ranking(factor)
    packed = pack(result.units, budget_tokens)
    while packed.n_dropped == 0 and packed.used_tokens < budget_tokens:
        if factor >= MAX_FACTOR:
            raise RuntimeError(f"budget.fill: the ranking still grows at {factor} times its depth")
        deeper = ranking(factor * 2)
        if len(deeper.units) <= len(result.units):
            break
        factor, result = factor * 2, deeper
        packed = pack(result.units, budget_tokens)
    return Filled(result, packed, factor)


class Filling:
    """``system`` as the runner asks it under ``budget.fill``: ``retrieve`` returns the ranking ``fill`` settles on
    (the system's depth put back afterwards); every other attribute is the system's. One ``retrieve`` call does
    the whole deepening, so the runner's one-retrieval-at-a-time order (``allmem.run.questions``) covers it."""

    def __init__(self, system: Any, budget_tokens: int) -> None:
        if not getattr(system, "can_deepen", False):
            raise ConfigError(
                f"budget.fill: method {getattr(system, 'name', type(system).__name__)!r} has no retrieval depth to "
                "raise (MemorySystem.set_depth); run it without budget.fill"
            )
        self.system, self.budget_tokens = system, budget_tokens

    def __getattr__(self, name: str) -> Any:
        return getattr(self.system, name)

    def retrieve(self, query: str, when: datetime | None = None) -> RetrievalResult:
        def ranking(factor: int) -> RetrievalResult:
            self.system.set_depth(factor)
            return self.system.retrieve(query, when)

        try:
            return fill(ranking, self.budget_tokens).result
        finally:
            self.system.set_depth(1)
