"""``allmem download locomo|longmemeval_s|longmemeval_m|longmemeval_oracle``: fetch a benchmark file into ``data/`` where the resolver finds it.

Two promises matter more than the happy path: a file that differs from the one our numbers were measured on is
rejected (LoCoMo's sha256 is pinned; LongMemEval has no published checksum, so we record the one we fetched in
``<file>.sha256`` and print it), and an offline machine gets an answer within seconds that says where to fetch the file by hand and where
to put it. Hence a short connect probe before any client that would otherwise retry for half a minute, and
``HF_HUB_OFFLINE`` honoured before the hub client is even imported.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import socket
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from allmem.files import sha256_file, write_atomic
from allmem.paths import dataset_files, repo_root

log = logging.getLogger(__name__)

LOCOMO_URL = "https://raw.githubusercontent.com/snap-research/locomo/main/data/locomo10.json"
LOCOMO_PAGE = "https://github.com/snap-research/locomo (file data/locomo10.json)"
# sha256 of the locomo10.json every number in this project was measured on (../shared/data/locomo/).
LOCOMO_SHA256 = "896e7bdfa089ef257a7a60ac7b3ecf815840fb975d1970fa28d49e7e8e179a3f"
# The hub holds longmemeval_s_cleaned.json, longmemeval_m_cleaned.json and longmemeval_oracle.json: each variant's
# hub file is the first file name of its allmem.paths.DATASETS entry (one home for the names).
LONGMEMEVAL_REPO = "xiaowu0162/longmemeval-cleaned"
LONGMEMEVAL_VARIANTS = ("longmemeval_s", "longmemeval_m", "longmemeval_oracle")
DEFAULT_TIMEOUT_S = 10.0
NAMES = ("locomo", *LONGMEMEVAL_VARIANTS)


def longmemeval_page(filename: str) -> str:
    """Where a user fetches a LongMemEval file by hand."""
    return f"https://huggingface.co/datasets/{LONGMEMEVAL_REPO} (file {filename})"


class DownloadError(RuntimeError):
    """A download failed; the message says what to do by hand."""


class ChecksumError(DownloadError):
    """A file's sha256 differs from the expected one."""


def verify_sha256(path: str | os.PathLike[str], expected: str) -> str:
    """The file's sha256 if it equals ``expected``; ChecksumError otherwise."""
    got = sha256_file(path)
    if got != expected.lower():
        raise ChecksumError(f"{path}: sha256 {got} does not match the expected {expected}")
    return got


def _is_true(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _probe(url: str, timeout: float) -> None:
    """Fail fast (OSError) unless a TCP connection to ``url``'s host (or its proxy) opens within ``timeout``.

    Name resolution is not covered by socket timeouts, so the attempt runs in a daemon thread we stop waiting
    for; clients with their own retry loops (the hub client retries ~25 s) only start once this succeeds.
    """
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    if parts.scheme in proxies and not urllib.request.proxy_bypass(parts.hostname or ""):
        parts = urlsplit(proxies[parts.scheme])
    if not parts.hostname:
        raise OSError(f"no host in URL {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            socket.create_connection((parts.hostname, port), timeout=timeout).close()
            outcome.append(None)
        except OSError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(timeout + 0.5)
    if not outcome:
        raise OSError(f"no answer from {parts.hostname}:{port} within {timeout:g} s")
    if outcome[0] is not None:
        raise outcome[0]


def _help(title: str, page: str, target: Path, reason: str) -> str:
    return (
        f"could not download {title}: {reason}\n"
        f"This machine may be offline. Fetch it by hand from {page}\n"
        f"and put it at {target} (or pass dataset.path=/path/to/{target.name})."
    )


def _record(path: Path, digest: str) -> None:
    """Write ``<file>.sha256`` (sha256sum format) so the manifest and later runs can check the data."""
    write_atomic(path.with_name(path.name + ".sha256"), f"{digest}  {path.name}\n")


def _download_locomo(target: Path, url: str, timeout: float, force: bool) -> Path:
    if target.exists() and not force:
        try:
            verify_sha256(target, LOCOMO_SHA256)
            log.info("%s already present and verified", target)
            return target
        except ChecksumError:
            log.warning("%s exists but its checksum differs; downloading again", target)
    part = target.with_name(target.name + ".part")
    try:
        _probe(url, timeout)
        target.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=timeout) as resp, open(part, "wb") as out:
            shutil.copyfileobj(resp, out)
    except (OSError, urllib.error.URLError) as exc:
        part.unlink(missing_ok=True)
        raise DownloadError(_help("LoCoMo", LOCOMO_PAGE, target, f"{url}: {exc}")) from exc
    digest = sha256_file(part)
    if digest != LOCOMO_SHA256:
        part.unlink(missing_ok=True)
        raise ChecksumError(
            f"{url}: the downloaded file's sha256 is {digest} but this project's numbers use {LOCOMO_SHA256}; "
            f"the upstream file may have changed. Nothing was written to {target}."
        )
    os.replace(part, target)
    _record(target, digest)
    return target


def _download_longmemeval(
    target: Path, title: str, endpoint: str | None, timeout: float, force: bool
) -> Path:
    """Fetch ``target.name`` from the hub's LongMemEval repository; the hub file name is the target's name."""
    page = longmemeval_page(target.name)
    if target.exists() and not force:
        log.info("%s already present (sha256 %s)", target, sha256_file(target))
        return target
    if _is_true(os.environ.get("HF_HUB_OFFLINE")):
        raise DownloadError(_help(title, page, target, "HF_HUB_OFFLINE is set (unset it to download)"))
    base = endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    try:
        _probe(base, timeout)
        from huggingface_hub import hf_hub_download

        target.parent.mkdir(parents=True, exist_ok=True)
        # beside the target, so the last step is a rename on one file system: a kill never leaves a partial
        # file under the final name (which later runs would take as present)
        with tempfile.TemporaryDirectory(prefix=".allmem-dl-", dir=target.parent) as tmp:
            fetched = hf_hub_download(
                LONGMEMEVAL_REPO,
                target.name,
                repo_type="dataset",
                local_dir=tmp,
                etag_timeout=timeout,
                endpoint=base,
            )
            os.replace(fetched, target)
    except Exception as exc:  # noqa: BLE001 - the hub client raises many types; all mean "not fetched"
        raise DownloadError(_help(title, page, target, f"{base}: {exc}")) from exc
    digest = sha256_file(target)
    _record(target, digest)
    log.info("%s sha256 %s (no published checksum: recorded in %s.sha256)", target, digest, target.name)
    return target


def download(
    name: str,
    dest: str | os.PathLike[str] | None = None,
    *,
    url: str | None = None,
    endpoint: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    force: bool = False,
) -> Path:
    """Fetch dataset ``name`` into ``<dest>/<folder>/<file>`` and return that path.

    ``dest`` defaults to ``<repo>/data`` (where ``resolve_data_path`` looks). ``url`` overrides the LoCoMo
    source and ``endpoint`` the Hugging Face endpoint (tests point both at loopback). ``timeout`` bounds the
    connection attempt, so an offline machine fails within seconds.
    """
    if name not in NAMES:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(NAMES)}")
    spec = dataset_files(name)
    root = Path(dest) if dest is not None else repo_root() / "data"
    target = root / spec.folder / spec.files[0]
    if name == "locomo":
        return _download_locomo(target, url or LOCOMO_URL, timeout, force)
    return _download_longmemeval(target, spec.title, endpoint, timeout, force)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``allmem download``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="allmem download", description="Fetch a benchmark file into data/.")
    parser.add_argument("name", choices=NAMES)
    parser.add_argument("--dest", default=None, help="data root (default: <repo>/data)")
    parser.add_argument("--url", default=None, help="LoCoMo source URL (default: the GitHub file)")
    parser.add_argument(
        "--endpoint", default=None, help="Hugging Face endpoint (default: HF_ENDPOINT or hub)"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="connect timeout, seconds")
    parser.add_argument("--force", action="store_true", help="download even if the file is present")
    args = parser.parse_args(argv)
    try:
        path = download(
            args.name, args.dest, url=args.url, endpoint=args.endpoint, timeout=args.timeout, force=args.force
        )
    except DownloadError as exc:
        print(f"allmem download: {exc}", file=sys.stderr)
        return 1
    digest = sha256_file(path)
    recorded = path.with_name(path.name + ".sha256")
    if not recorded.exists():  # a file put there by hand: record what we saw, as for a download
        _record(path, digest)
    print(f"{args.name}: {path}")
    print(f"sha256 {digest}  {path.name} (recorded in {recorded})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
