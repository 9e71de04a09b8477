"""``method=http`` (allmem/remote.py) against the reference server (examples/memory_server.py) on 127.0.0.1: the
same system answers the same behind HTTP as in-process, by the comparison rule; a service that fails is retried
by the LLM client's loop and then fails its dialogue's questions, as a failed LLM call does."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from allmem import files
from allmem.errors import RunFailed
from allmem.run.compare import same_predictions
from examples.memory_server import serving
from tests.runkit import compose_and_run

FAST_RETRIES = ["method.max_retries=2", "method.backoff_base_s=0.01", "method.backoff_max_s=0.02"]


@pytest.mark.parametrize(("method", "mode"), [("bm25", "turn"), ("allmem", "session")])
def test_http_answers_as_the_same_system_in_process(method: str, mode: str, tmp_path: Path) -> None:
    """All-Mem (consolidation on, merged units of several utterances) and BM25, a session or a turn per call."""
    local = compose_and_run(tmp_path / "local", f"method={method}")
    k = 50 if method == "bm25" else 16  # what the system itself returns: bm25 k, All-Mem's K
    with serving(method) as url:
        remote = compose_and_run(tmp_path / "remote", "method=http", f"method.url={url}", f"method.ingest={mode}",
                                 f"method.k={k}")  # fmt: skip
    assert (remote / files.DONE).exists()
    assert same_predictions(local, remote) == []
    preds = files.read_jsonl(remote / files.PREDICTIONS)
    assert preds and all(p["ranked_source_ids"] and "error" not in p for p in preds)
    # not a vacuous equality: the answers and rankings differ from another method's
    other = compose_and_run(tmp_path / "other", "method=full_history")
    assert same_predictions(other, remote) != []


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_service_fails_the_run_with_its_calls_booked(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(RunFailed, match="questions failed"):
        compose_and_run(tmp_path, "method=http", f"method.url={url}", *FAST_RETRIES, "+llm.breaker_after=0")
    (run_dir,) = [p.parent for p in tmp_path.rglob(files.PREDICTIONS)]
    preds = files.read_jsonl(run_dir / files.PREDICTIONS)
    assert preds and all("ingest of" in p["error"] and "memory service" in p["error"] for p in preds)
    calls = files.read_jsonl(run_dir / files.CALLS)
    # one failed reset per dialogue: the dialogue's later calls are not sent once its memory is incomplete
    assert [(c["phase"], c["backend"], c["model"], c["ok"], c["retries"]) for c in calls] == [
        ("write", "http", "http:reset", False, 2)
    ] * len({p["dialogue_id"] for p in preds})
    assert not (run_dir / files.DONE).exists()


class _Flaky(BaseHTTPRequestHandler):
    """Answers 503 to the first ``fail`` searches, then forwards to the reference server behind it."""

    protocol_version = "HTTP/1.1"
    fail = 1
    target = ""
    seen: list[int] = []

    def do_POST(self) -> None:  # noqa: N802
        import httpx

        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        route = self.path.strip("/")
        if route == "search" and type(self).fail > 0:
            type(self).fail -= 1
            type(self).seen.append(503)
            self.send_response(503)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        reply = httpx.post(
            f"{type(self).target}/{route}", content=body, headers={"content-type": "application/json"}
        )
        self.send_response(reply.status_code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply.content)))
        self.end_headers()
        self.wfile.write(reply.content)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


def test_a_5xx_is_retried_and_the_answer_is_unchanged(tmp_path: Path) -> None:
    local = compose_and_run(tmp_path / "local", "method=bm25")
    with serving("bm25") as url:
        _Flaky.fail, _Flaky.target, _Flaky.seen = 1, url, []
        proxy = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        try:
            remote = compose_and_run(tmp_path / "remote", "method=http",
                                     f"method.url=http://127.0.0.1:{proxy.server_address[1]}", *FAST_RETRIES)  # fmt: skip
        finally:
            proxy.shutdown()
            proxy.server_close()
    assert _Flaky.seen == [503]  # one search failed once, then was asked again
    assert same_predictions(local, remote) == []
    assert not (remote / files.CALLS).exists() or not any(
        not c["ok"] for c in files.read_jsonl(remote / files.CALLS)
    )


def test_a_malformed_unit_is_refused_naming_the_field() -> None:
    from allmem.remote import unit_of

    with pytest.raises(ValueError, match=r"units\[0\]\.source_ids"):
        unit_of(json.loads('{"id": "u1", "text": "hi", "source_ids": []}'), "units[0]")


class _Minimal(BaseHTTPRequestHandler):
    """A service with only the required routes: a 404 for the optional ones."""

    protocol_version = "HTTP/1.1"
    target = ""

    def do_POST(self) -> None:  # noqa: N802
        import httpx

        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        route = self.path.strip("/")
        if route in ("end", "stats", "session/start", "session/end"):
            reply = httpx.Response(404, content=b"")
        else:
            reply = httpx.post(f"{type(self).target}/{route}", content=body)
        self.send_response(reply.status_code)
        self.send_header("content-length", str(len(reply.content)))
        self.end_headers()
        self.wfile.write(reply.content)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


def test_the_optional_routes_may_be_missing(tmp_path: Path) -> None:
    local = compose_and_run(tmp_path / "local", "method=bm25")
    with serving("bm25") as url:
        _Minimal.target = url
        proxy = ThreadingHTTPServer(("127.0.0.1", 0), _Minimal)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        try:
            remote = compose_and_run(tmp_path / "remote", "method=http", "method.ingest=turn",
                                     f"method.url=http://127.0.0.1:{proxy.server_address[1]}")  # fmt: skip
        finally:
            proxy.shutdown()
            proxy.server_close()
    assert same_predictions(local, remote) == []
    assert [s["dialogue_id"] for s in files.read_jsonl(remote / files.SYSTEM_STATS)]  # stats: {} from the 404
