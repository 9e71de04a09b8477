"""A reference memory service for ``method=http``: any ``MemorySystem`` behind the REST contract of
docs/LIBRARY.md, on the standard library's ``http.server``. One system, one dialogue at a time, calls handled one
by one (a lock): a reference, not a production server.

    python -m examples.memory_server --method bm25 --port 8765           # a repository (or your own) method
    allmem run method=http method.url=http://127.0.0.1:8765 +debug=default

In a test: ``server, url = start(system)`` serves on 127.0.0.1 at a free port in a thread; ``server.shutdown()``.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from allmem.remote import parse_date, session_of, turn_of, unit_json
from allmem.systems import MemorySystem

MAX_BODY = 64 << 20  # bytes of one request body (a long session is well under this)


def routes(system: MemorySystem) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """The contract's routes over ``system``: each takes the request's JSON object and returns the reply's."""

    def session(body: dict[str, Any]) -> dict[str, Any]:
        info = session_of(body["session"])
        system.start_session(info)
        for raw in body["turns"]:
            system.ingest(turn_of(raw))
        system.end_session(info)
        return {}

    def search(body: dict[str, Any]) -> dict[str, Any]:
        result = system.retrieve(str(body["query"]), parse_date(body.get("date"), "date"))
        k = int(body.get("k") or len(result.units))
        return {"units": [unit_json(u) for u in result.units[:k]], "timings_ms": dict(result.timings_ms)}

    return {
        "reset": lambda b: system.reset(str(b["dialogue_id"])) or {},
        "session/start": lambda b: system.start_session(session_of(b["session"])) or {},
        "turn": lambda b: system.ingest(turn_of(b["turn"])) or {},
        "session/end": lambda b: system.end_session(session_of(b["session"])) or {},
        "session": session,
        "end": lambda b: system.end_stream() or {},
        "checkpoint": lambda b: system.checkpoint() or {},
        "search": search,
        "stats": lambda b: system.stats(),
    }


def make_server(system: MemorySystem, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """An HTTP server for ``system`` (port 0: a free one, ``server.server_address[1]``)."""
    table, lock = routes(system), threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the adapter's client reuses its connection

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            route = self.path.strip("/")
            length = int(self.headers.get("content-length") or 0)
            if route not in table:
                return self._reply(404, {"error": f"no route {route!r}; routes: {', '.join(table)}"})
            if length > MAX_BODY:
                return self._reply(413, {"error": f"body over {MAX_BODY} bytes"})
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("the body must be a JSON object")
                with lock:
                    out = table[route](body)
            except (KeyError, TypeError, ValueError) as exc:  # a malformed request: the caller's error
                return self._reply(400, {"error": f"{type(exc).__name__}: {exc}"})
            self._reply(200, out)

        def _reply(self, status: int, data: Any) -> None:
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: one line per call is noise
            return

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def start(system: MemorySystem, host: str = "127.0.0.1") -> tuple[ThreadingHTTPServer, str]:
    """Serve ``system`` on a free port in a daemon thread; the server and its base URL."""
    server = make_server(system, host, 0)
    threading.Thread(target=server.serve_forever, name="memory-server", daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}"


@contextmanager
def serving(method: str) -> Iterator[str]:
    """A repository method (``build_system``) served on 127.0.0.1 at a free port while the block runs."""
    server, url = start(build_system(method))
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()


def build_system(method: str, embedder: str = "hash") -> MemorySystem:
    """A method of ``configs/method/`` (or of ``ALLMEM_CONFIG_PATH``) with an ``configs/embedder/`` embedder and
    the offline LLM, built without Hydra."""
    from allmem.library import build_method

    return build_method(method, embedder=embedder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.memory_server", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--method", default="bm25", help="a method config name (default bm25)")
    parser.add_argument("--embedder", default="hash", help="an embedder config name (default hash)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    server = make_server(build_system(args.method, args.embedder), args.host, args.port)
    print(f"memory service ({args.method}) on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
