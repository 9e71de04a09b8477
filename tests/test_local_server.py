"""The local model's server manager (allmem/llm/local_server.py) without starting a model: its settings come
from llm=local, a port held by another program or an unknown model file is refused in one line, and a run with
llm=local and no server stops before anything is written, naming make llm-server."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from allmem.defaults import llm_config
from allmem.errors import ConfigError
from allmem.llm import local_server
from tests.faultkit import FIXTURES, REPO, allmem_run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server(tmp_path: Path, port: int, *over: str) -> local_server.Server:
    cfg = llm_config(["llm=local", f"llm.base_url=http://127.0.0.1:{port}/v1", *over])
    return local_server.Server.of(cfg, folder=tmp_path)


def test_settings_come_from_the_llm_config_so_client_and_server_agree(tmp_path: Path) -> None:
    srv = _server(tmp_path, 9123, "llm.context_window=4096", "llm.server.threads=1")
    assert (srv.port, srv.alias, srv.context, srv.threads) == (9123, "smollm2-135m-instruct-q4_1", 4096, 1)
    assert srv.pid_file == tmp_path / "server-9123.pid" and srv.log_file == tmp_path / "server-9123.log"
    with pytest.raises(ConfigError, match=r"llm.base_url: 'http://10.0.0.5:80/v1': the local server runs on"):
        local_server.Server.of(llm_config(["llm=local", "llm.base_url=http://10.0.0.5:80/v1"]))


def test_a_port_held_by_another_program_is_refused(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        srv = _server(tmp_path, held.getsockname()[1])
        with pytest.raises(
            local_server.ServerError, match=r"is taken by a program that is not an LLM server"
        ):
            local_server.start(srv)
    assert not srv.pid_file.exists()


def test_status_and_stop_without_a_server(tmp_path: Path) -> None:
    srv = _server(tmp_path, _free_port())
    assert local_server.status(srv) == f"no server answers at {srv.base_url}"
    srv.pid_file.write_text("999999999\n")  # a stale pid file: no such process
    assert local_server.stop(srv).startswith("no server of ours runs on port")
    assert not srv.pid_file.exists()


def test_a_model_file_that_does_not_exist_is_named(tmp_path: Path) -> None:
    srv = _server(tmp_path, _free_port(), f"llm.server.model_file={tmp_path / 'none.gguf'}")
    with pytest.raises(ConfigError, match=r"llm.server.model_file: .*none.gguf: no such file"):
        local_server.model_path(srv)


def test_the_llm_lock_pins_the_server_and_its_sdist_hash() -> None:
    line = local_server._lock_line(REPO / local_server.LLM_LOCK, local_server.LLAMA)
    assert line.startswith("llama-cpp-python==0.3.36 ") and "--hash=sha256:" in line


@pytest.mark.slow  # the CLI in a subprocess
def test_a_run_with_llm_local_and_no_server_stops_in_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    res = allmem_run(tmp_path, "+debug=default", "method=bm25", "llm=local", f"llm.base_url={url}",
                     f"dataset.path={FIXTURES / 'locomo_tiny.json'}")  # fmt: skip
    assert res.rc == 1
    assert res.last_line() == (
        f"allmem run: error: llm=local: no LLM server answers at {url}; start one with `make llm-server` "
        "(or `allmem llm start`)"
    )
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow  # the CLI in a subprocess
def test_the_cli_says_what_it_did_in_one_line(tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.run(
        [sys.executable, "-m", "allmem.cli", "llm", "status", f"llm.base_url=http://127.0.0.1:{port}/v1"],
        capture_output=True, text=True, timeout=120, env={"ALLMEM_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert (
        proc.returncode == 1
        and proc.stdout.strip() == f"[allmem llm] no server answers at http://127.0.0.1:{port}/v1"
    )
