"""``allmem download`` and data paths: checksum pinning, fast and informative failure offline, where files go.

No test touches the internet: failures use a closed loopback port or a socket that never answers, and the
happy path is served by a stdlib HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import http.server
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from allmem.paths import DataNotFoundError, cache_dir, repo_root, resolve_data_path
from benchmarks.download import (
    LOCOMO_SHA256,
    ChecksumError,
    DownloadError,
    download,
    main,
    sha256_file,
    verify_sha256,
)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def serve() -> Iterator[dict[str, bytes]]:
    """A loopback HTTP server; tests fill the returned dict (path → body) and read ``serve['_url']``."""
    files: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            body = files.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    files["_url"] = f"http://127.0.0.1:{server.server_address[1]}".encode()
    try:
        yield files
    finally:
        server.shutdown()
        server.server_close()


def _url(files: dict[str, bytes], path: str) -> str:
    return files["_url"].decode() + path


def test_pinned_checksum_is_the_shared_file(locomo_path: Path) -> None:
    assert sha256_file(locomo_path) == LOCOMO_SHA256


def test_verify_rejects_corrupted_file(tmp_path: Path, fixtures_dir: Path) -> None:
    good = tmp_path / "tiny.json"
    shutil.copy(fixtures_dir / "locomo_tiny.json", good)
    digest = sha256_file(good)
    assert verify_sha256(good, digest) == digest
    data = bytearray(good.read_bytes())
    data[10] ^= 0x01
    good.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match="does not match"):
        verify_sha256(good, digest)


def test_locomo_offline_fails_fast_and_says_what_to_do(tmp_path: Path) -> None:
    start = time.monotonic()
    with pytest.raises(DownloadError) as info:
        download("locomo", tmp_path, url=f"http://127.0.0.1:{_closed_port()}/locomo10.json", timeout=2)
    assert time.monotonic() - start < 3
    msg = str(info.value)
    target = tmp_path / "locomo" / "locomo10.json"
    assert "github.com/snap-research/locomo" in msg and str(target) in msg and "offline" in msg
    assert not target.exists() and not target.with_name("locomo10.json.part").exists()


def test_locomo_silent_server_times_out(tmp_path: Path) -> None:
    """A host that accepts the connection but never answers: the read timeout bounds the wait."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(DownloadError, match="timed out"):
            download("locomo", tmp_path, url=f"http://127.0.0.1:{port}/locomo10.json", timeout=0.5)
        assert time.monotonic() - start < 3


def test_locomo_download_verifies_and_records(
    tmp_path: Path, locomo_path: Path, serve: dict[str, bytes]
) -> None:
    serve["/locomo10.json"] = locomo_path.read_bytes()
    path = download("locomo", tmp_path / "main" / "data", url=_url(serve, "/locomo10.json"), timeout=2)
    assert path == tmp_path / "main" / "data" / "locomo" / "locomo10.json"
    assert resolve_data_path("locomo", None, root=tmp_path / "main") == path  # where the loader will look
    assert sha256_file(path) == LOCOMO_SHA256
    assert path.with_name("locomo10.json.sha256").read_text() == f"{LOCOMO_SHA256}  locomo10.json\n"
    # Present and verified: no network needed the second time.
    again = download(
        "locomo", tmp_path / "main" / "data", url=f"http://127.0.0.1:{_closed_port()}/x", timeout=1
    )
    assert again == path


def test_locomo_download_rejects_corrupted(
    tmp_path: Path, locomo_path: Path, serve: dict[str, bytes]
) -> None:
    body = bytearray(locomo_path.read_bytes())
    body[1000] ^= 0x01
    serve["/locomo10.json"] = bytes(body)
    with pytest.raises(ChecksumError, match=LOCOMO_SHA256):
        download("locomo", tmp_path, url=_url(serve, "/locomo10.json"), timeout=2)
    assert list((tmp_path / "locomo").iterdir()) == []


def test_locomo_http_error_is_a_download_error(tmp_path: Path, serve: dict[str, bytes]) -> None:
    with pytest.raises(DownloadError, match="404"):
        download("locomo", tmp_path, url=_url(serve, "/missing.json"), timeout=2)


def test_longmemeval_honours_hf_hub_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(DownloadError) as info:
        download("longmemeval_s", tmp_path)
    assert time.monotonic() - start < 1
    msg = str(info.value)
    assert "HF_HUB_OFFLINE" in msg and "huggingface.co/datasets/xiaowu0162/longmemeval-cleaned" in msg
    assert str(tmp_path / "longmemeval" / "longmemeval_s_cleaned.json") in msg


def test_longmemeval_unreachable_endpoint_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    start = time.monotonic()
    with pytest.raises(DownloadError, match="longmemeval_s_cleaned.json"):
        download("longmemeval_s", tmp_path, endpoint=f"http://127.0.0.1:{_closed_port()}", timeout=1)
    assert time.monotonic() - start < 3
    assert not (tmp_path / "longmemeval").exists()


def test_main_exit_status_and_messages(
    tmp_path: Path, locomo_path: Path, serve: dict[str, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    closed = f"http://127.0.0.1:{_closed_port()}/locomo10.json"
    assert main(["locomo", "--dest", str(tmp_path), "--url", closed, "--timeout", "1"]) == 1
    assert "allmem download: could not download LoCoMo" in capsys.readouterr().err
    serve["/locomo10.json"] = locomo_path.read_bytes()
    assert main(["locomo", "--dest", str(tmp_path), "--url", _url(serve, "/locomo10.json")]) == 0
    assert f"sha256 {LOCOMO_SHA256}  locomo10.json" in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown dataset"):
        download("squad", tmp_path)


# --- paths ------------------------------------------------------------------------------------------------


def test_resolve_data_path_order(tmp_path: Path) -> None:
    root = tmp_path / "main"
    shared = tmp_path / "shared" / "data" / "locomo" / "locomo10.json"
    shared.parent.mkdir(parents=True)
    shared.write_text("[]")
    root.mkdir()
    assert resolve_data_path("locomo", None, root=root) == shared
    local_zip = root / "data" / "locomo" / "locomo10.zip"
    local_zip.parent.mkdir(parents=True)
    local_zip.write_bytes(b"")
    assert resolve_data_path("locomo", None, root=root) == local_zip  # data/ beats ../shared
    explicit = tmp_path / "mine.json"
    explicit.write_text("[]")
    assert resolve_data_path("locomo", str(explicit), root=root) == explicit


def test_resolve_data_path_errors(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match="allmem download longmemeval_s"):
        resolve_data_path("longmemeval_s", None, root=tmp_path / "main")
    with pytest.raises(DataNotFoundError, match="nope.json"):
        resolve_data_path("locomo", str(tmp_path / "nope.json"))
    with pytest.raises(ValueError, match="unknown dataset 'squad'"):
        resolve_data_path("squad", None)


def test_cache_dir_and_repo_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert (repo_root() / "allmem" / "paths.py").exists()
    monkeypatch.delenv("ALLMEM_CACHE", raising=False)
    assert cache_dir() == repo_root() / ".cache"
    monkeypatch.setenv("ALLMEM_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    assert not (tmp_path / "c").exists()
