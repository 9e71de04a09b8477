"""Keyword extraction on one long turn: time per size and the ratio to the previous size (linear ≈ 2.0).

Side by side: the sentence-start test the extractor used before (a regex over the text before every name,
quadratic) and the one it uses now (a look back over whitespace). Text: LoCoMo turns glued together.

    .venv/bin/python scripts/bench_keywords.py [--max-chars 1000000]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time

from allmem.paths import resolve_data_path
from allmem.text.keywords import _NAME_RE, KeywordExtractor, _sentence_start

_OLD_START = re.compile(r"(?:^|[.!?:;]\s+|\n\s*)$")


def _old_starts(text: str, starts: list[int]) -> list[object]:
    return [_OLD_START.search(text[:i]) for i in starts]


def _new_starts(text: str, starts: list[int]) -> list[bool]:
    return [_sentence_start(text, i) for i in starts]


def _text(n: int, turns: list[str]) -> str:
    rng = random.Random(0)
    parts, size = [], 0
    while size < n:
        parts.append(rng.choice(turns))
        size += len(parts[-1]) + 1
    return " ".join(parts)[:n]


def _timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-chars", type=int, default=1_000_000)
    parser.add_argument(
        "--old-up-to", type=int, default=128_000, help="largest size the old test is timed on"
    )
    args = parser.parse_args()
    data = json.loads(resolve_data_path("locomo", None).read_text(encoding="utf-8"))
    turns = [
        t["text"] for s in data for k, v in s["conversation"].items() if k.startswith("session_") and isinstance(v, list)
        for t in v
    ]  # fmt: skip
    extractor = KeywordExtractor()
    extractor("warm up")
    print(f"{'chars':>9} | {'old start test s':>16} {'ratio':>6} | {'new start test s':>16} {'ratio':>6} | "
          f"{'keywords() s':>12} {'ratio':>6}")  # fmt: skip
    prev: dict[str, float] = {}
    n = 16_000
    while n <= args.max_chars:
        text = _text(n, turns)
        starts = [m.start() for m in _NAME_RE.finditer(text)]
        row = {
            "old": _timed(_old_starts, text, starts) if n <= args.old_up_to else None,
            "new": _timed(_new_starts, text, starts),
            "all": _timed(extractor, text, ["Caroline", "Melanie"]),
        }
        cells = []
        for key in ("old", "new", "all"):
            v = row[key]
            ratio = f"{v / prev[key]:6.2f}" if v is not None and prev.get(key) else "     -"
            cells.append(f"{v:16.3f} {ratio}" if v is not None else f"{'-':>16} {'-':>6}")
            if v is not None:
                prev[key] = v
        print(f"{n:>9} | " + " | ".join(cells))
        n *= 2


if __name__ == "__main__":
    main()
