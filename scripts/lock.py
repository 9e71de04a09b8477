"""The environment lock (``requirements.lock``, written by ``make lock`` with uv): read it, check a venv against it,
and say how two locks differ. Standard library only, so it runs before anything is installed.

.venv/bin/python scripts/lock.py check requirements.lock            # the venv equals the lock, or exit 1
python3 scripts/lock.py diff requirements.lock .cache/latest/requirements.lock   # what the newest versions change

``make setup`` installs the lock exactly (``pip install --require-hashes --no-deps``) and ends with ``check``;
``make test-latest`` prints ``diff`` (docs/REPRODUCE.md, "Setup").
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

# A pinned line of a requirements file as uv and pip-tools write it: ``name[extras]==version`` then hashes/markers.
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them (``PyYAML`` = ``pyyaml``, ``rouge_score`` = ``rouge-score``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> dict[str, str]:
    """``{canonical name: version}`` of every pin in ``path``; an unpinned requirement line is an error naming
    the file and line (a lock pins everything)."""
    pins: dict[str, str] = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        text = line.strip()
        if not text or text.startswith(("#", "--")):
            continue
        match = PIN.match(text)
        if match is None:
            raise ValueError(f"{path}:{number}: not an exact pin (name==version): {text[:60]}")
        name = canonical(match.group(1))
        if name in pins and pins[name] != match.group(2):
            raise ValueError(f"{path}:{number}: {name} pinned twice ({pins[name]}, {match.group(2)})")
        pins[name] = match.group(2)
    return pins


def installed(python: str) -> dict[str, str]:
    """``{canonical name: version}`` of what ``python``'s environment holds, editable installs (allmem) left out."""
    out = subprocess.run(
        [python, "-m", "pip", "list", "--format=json", "--exclude-editable", "--disable-pip-version-check"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return {canonical(d["name"]): d["version"] for d in json.loads(out.stdout)}


def differences(want: Mapping[str, str], have: Mapping[str, str], labels: tuple[str, str]) -> list[str]:
    """One line per package whose version differs or that only one side has, sorted by name."""
    lines = []
    for name in sorted(set(want) | set(have)):
        a, b = want.get(name), have.get(name)
        if a != b:
            lines.append(f"{name}: {a or f'not in {labels[0]}'} -> {b or f'not in {labels[1]}'}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/lock.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="the environment equals the union of the locks, or exit 1")
    check.add_argument("locks", nargs="+", type=Path)
    check.add_argument("--python", default=sys.executable, help="the environment's interpreter")
    check.add_argument(
        "--or",
        dest="alternative",
        type=Path,
        default=None,
        help="a lock the environment may equal instead (requirements-llm.lock: the llm extra installed)",
    )
    diff = sub.add_parser("diff", help="how lock B differs from lock A (exit 0 either way)")
    diff.add_argument("a", type=Path)
    diff.add_argument("b", type=Path)
    diff.add_argument(
        "--show", nargs="*", default=(), help="packages whose versions in B to print either way"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "diff":
            a, b = read_lock(args.a), read_lock(args.b)
            lines = differences(a, b, (str(args.a), str(args.b)))
            print(f"[lock] {len(lines)} packages differ between {args.a} and {args.b}")
            print("".join(f"  {line}\n" for line in lines), end="")
            shown = ", ".join(f"{n} {b.get(canonical(n), 'absent')}" for n in args.show)
            if shown:
                print(f"[lock] in {args.b}: {shown}")
            return 0
        want: dict[str, str] = {}
        for lock in args.locks:
            want.update(read_lock(lock))
        have = installed(args.python)
        if args.alternative is not None and args.alternative.exists():
            other = read_lock(args.alternative)
            if not differences(other, have, ("", "")):
                print(f"[lock] the environment equals {args.alternative} ({len(other)} packages)")
                return 0
    except (OSError, ValueError, subprocess.CalledProcessError) as exc:
        print(f"scripts/lock.py: error: {exc}", file=sys.stderr)
        return 2
    names = " + ".join(map(str, args.locks))
    lines = differences(want, have, ("the lock", "the environment"))
    if lines:
        print(
            f"[lock] the environment of {args.python} differs from {names}: {len(lines)} packages",
            file=sys.stderr,
        )
        print("\n".join(f"  {line}" for line in lines), file=sys.stderr)
        print("[lock] rebuild it: rm -rf .venv && make setup", file=sys.stderr)
        return 1
    print(f"[lock] the environment equals {names} ({len(want)} packages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
