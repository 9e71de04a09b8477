"""Load time of the static results site (``allmem report site``) next to a blank page, in one run.

For each repeat it opens a blank page and the site's ``index.html`` in headless Chromium (``--dump-dom``: the
browser prints the DOM once the page's load event has fired and exits) and times the whole process; a site load
counts only when the dumped DOM shows the drawn explorer count (``<p id="ecount">N questions</p>``) and a main
table row. It prints the site's total size, the size of what the first page loads (the files index.html names)
and the times side by side (median, min, max; the site's median over the blank page's).

    python scripts/bench_site.py results/site --repeats 5
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MARKER = re.compile(r'<p id="ecount">\d+ questions</p>')


def _browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    sys.exit("bench_site: no chromium on PATH (make chromium)")


def _time(browser: str, url: str, marker: bool) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    took = time.perf_counter() - start
    if marker and not (MARKER.search(proc.stdout) and "<td>" in proc.stdout):
        sys.exit(f"bench_site: {url}: the dumped DOM has no drawn explorer count or table row")
    return took


def _first_load(site: Path) -> list[Path]:
    html = (site / "index.html").read_text(encoding="utf-8")
    return [site / "index.html"] + [site / n for n in re.findall(r'(?:src|href)="([^"#:]+)"', html)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("site", type=Path, help="a folder written by allmem report site")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    browser = _browser()
    files = [p for p in args.site.rglob("*") if p.is_file()]
    first = _first_load(args.site)
    print(f"site {args.site}: {len(files)} files, {sum(p.stat().st_size for p in files) / 1e6:.2f} MB")
    print(
        "first load: "
        + ", ".join(f"{p.relative_to(args.site)} {p.stat().st_size / 1e6:.3f} MB" for p in first)
    )
    print(f"first load total: {sum(p.stat().st_size for p in first) / 1e6:.3f} MB")
    with tempfile.TemporaryDirectory() as tmp:
        blank = Path(tmp) / "blank.html"
        blank.write_text("<!doctype html><title>blank</title>", encoding="utf-8")
        times: dict[str, list[float]] = {"blank": [], "site": []}
        for i in range(args.repeats):  # interleaved, so a busy moment of the machine hits both
            times["blank"].append(_time(browser, blank.as_uri(), marker=False))
            times["site"].append(_time(browser, (args.site / "index.html").resolve().as_uri(), marker=True))
            print(
                f"  repeat {i + 1}/{args.repeats}: blank {times['blank'][-1]:.2f} s, site {times['site'][-1]:.2f} s"
            )
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"{k:5}: median {med[k]:.2f} s  min {min(v):.2f} s  max {max(v):.2f} s  (n={len(v)})")
    print(f"site / blank (medians): {med['site'] / med['blank']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
