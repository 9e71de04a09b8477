"""Load time of the static results site (``allmem report site``) next to a blank page, in one run.

For each repeat it opens a blank page and the site's ``index.html`` in headless Chromium (``--dump-dom``: the
browser prints the DOM once the page's load event has fired and exits) and times the whole process; a site load
counts only when the dumped DOM shows the drawn explorer count (``<p id="ecount">N questions</p>``) and a main
table row. It also reads the in-page time from navigation start to the end of ``site.js``'s drawing: the site is
opened through a copy of ``index.html`` (beside links to the site's other files) with one more script after
``site.js`` that stores ``performance.now()`` on the page. It prints the site's total size, the size of what the
first page loads (the files index.html names) and the times side by side (median, min, max; the site's median
over the blank page's).

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
import urllib.parse
from pathlib import Path

MARKER = re.compile(r'<p id="ecount">\d+ questions</p>')


def _browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    sys.exit("bench_site: no chromium on PATH (make chromium)")


# the moment site.js has drawn the page; and the load event, which waits for the parts an opened question loads
STAMP = (
    "<script>document.documentElement.dataset.drawnMs = performance.now().toFixed(0);"
    ' addEventListener("load", () => { document.documentElement.dataset.loadedMs = performance.now().toFixed(0); });'
    "</script>"
)
DRAWN = re.compile(r'data-drawn-ms="(\d+)"')
LOADED = re.compile(r'data-loaded-ms="(\d+)"')


def _opened(browser: str, url: str, opened: list[float]) -> None:
    """In-page time from navigation start to the load event of the site opened at a question (``#q=<id>``): the
    question's parts (every run's details of its dialogue, the packed contexts) are loaded and drawn by then."""
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    found = LOADED.search(proc.stdout)
    if not found or "<h3>" not in proc.stdout or "loading" in proc.stdout:
        sys.exit(f"bench_site: {url}: the question is not drawn with all its parts at the load event")
    opened.append(int(found.group(1)) / 1000)


def _time(browser: str, url: str, marker: bool, drawn: list[float] | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    took = time.perf_counter() - start
    if marker and not (MARKER.search(proc.stdout) and "<td>" in proc.stdout):
        sys.exit(f"bench_site: {url}: the dumped DOM has no drawn explorer count or table row")
    if drawn is not None:
        if not (found := DRAWN.search(proc.stdout)):
            sys.exit(f"bench_site: {url}: no in-page time stamp in the dumped DOM")
        drawn.append(int(found.group(1)) / 1000)
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
    parser.add_argument("--question", help="also time opening this question id (index.html#q=<id>)")
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
        stamped = Path(tmp) / "site"
        stamped.mkdir()
        for entry in args.site.iterdir():
            if entry.name != "index.html":
                (stamped / entry.name).symlink_to(entry.resolve())
        html = (args.site / "index.html").read_text(encoding="utf-8")
        (stamped / "index.html").write_text(html.replace("</body>", STAMP + "</body>"), encoding="utf-8")
        times: dict[str, list[float]] = {"blank": [], "site": [], "site, in page": []}
        for i in range(args.repeats):  # interleaved, so a busy moment of the machine hits both
            times["blank"].append(_time(browser, blank.as_uri(), marker=False))
            times["site"].append(_time(browser, (args.site / "index.html").resolve().as_uri(), marker=True))
            _time(browser, (stamped / "index.html").as_uri(), marker=True, drawn=times["site, in page"])
            if args.question:
                url = (stamped / "index.html").as_uri() + "#q=" + urllib.parse.quote(args.question, safe="")
                _opened(browser, url, times.setdefault("question, in page", []))
            print(
                f"  repeat {i + 1}/{args.repeats}: blank {times['blank'][-1]:.2f} s, site {times['site'][-1]:.2f} s"
                f" (in page: drawn {times['site, in page'][-1]:.2f} s after navigation start)"
            )
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"{k:13}: median {med[k]:.2f} s  min {min(v):.2f} s  max {max(v):.2f} s  (n={len(v)})")
    print(f"site / blank (medians, whole process): {med['site'] / med['blank']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
