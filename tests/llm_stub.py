"""A stand-in OpenAI-compatible server for tests: stdlib ``http.server`` on 127.0.0.1, random port.

Speaks ``POST /v1/chat/completions``. By default it answers every allmem template plausibly, recognising it by
the prompt's wording: descriptor JSON, answer JSON, ATC JSON, judge verdicts in each protocol's format. Tests
script it with ``stub.script(...)`` (a queue of replies used before the defaults: an HTTP status to fail with,
or a literal content string) and ``stub.verdict`` (the judge's decision rule). It counts requests and keeps their
bodies, headers and arrival times so tests can check the request shape and the request rate (``per_second``).
``delay_s`` makes every reply wait that long (a model's latency, for throughput benchmarks); ``max_in_flight`` is
the most requests it was answering at once.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float = 0.0  # time.monotonic() on arrival


def default_verdict(question: str, gold: str, response: str) -> bool:
    """Correct iff every word of the gold answer appears in the response (case-insensitive)."""
    words = re.findall(r"[a-z0-9]+", gold.lower())
    have = set(re.findall(r"[a-z0-9]+", response.lower()))
    return bool(words) and all(w in have for w in words)


def graded_verdict(question: str, gold: str, response: str, verdict=default_verdict) -> str:
    """The graded judge's rule: correct by ``verdict``; abstain when the response says "not mentioned" or "don't
    know"; partial when it shares a word with the gold; else wrong."""
    if verdict(question, gold, response):
        return "correct"
    low = response.lower()
    if "not mentioned" in low or "don't know" in low:
        return "abstain"
    shared = set(re.findall(r"[a-z0-9]+", gold.lower())) & set(re.findall(r"[a-z0-9]+", low))
    return "partial" if shared else "wrong"


def usage_for(prompt: str, content: str) -> dict[str, int]:
    """Deterministic token usage the tests can recompute: one token per 4 characters, at least 1."""
    p, c = max(1, len(prompt) // 4), max(1, len(content) // 4)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


@dataclass
class StubLLM:
    """Server state. ``requests`` lists every request received (including failed ones)."""

    verdict: Callable[[str, str, str], bool] = default_verdict
    delay_s: float = 0.0
    max_in_flight: int = 0
    _in_flight: int = 0
    requests: list[Recorded] = field(default_factory=list)
    _queue: deque[tuple[str, Any]] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)  # ends scripted delays at stop()
    _server: ThreadingHTTPServer | None = None

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def per_second(self, since: float) -> list[int]:
        """Requests received in each whole second after ``since`` (a ``time.monotonic()`` value)."""
        with self._lock:
            seconds = [int(r.at - since) for r in self.requests if r.at >= since]
        return [seconds.count(i) for i in range(max(seconds, default=-1) + 1)]

    def script(self, *items: tuple[str, Any]) -> None:
        """Queue replies: ("status", 429) | ("status", 500) | ("content", "raw text") | ("delay", seconds) |
        ("choices", [...]) (a 200 with these choices, e.g. ``[]`` or a null content) | ("body", (status,
        content_type, bytes)) (any HTTP answer, e.g. an HTML gateway page) | ("trickle", (seconds, n)) (a normal
        reply whose body arrives one byte per ``seconds``; it stops after ``n`` bytes or when the client leaves)
        | ("retry_after", (status, header value))."""
        with self._lock:
            self._queue.extend(items)

    def start(self) -> StubLLM:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                with stub._lock:
                    stub._in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub._in_flight)
                self._counted = True
                try:
                    self._answer()
                finally:
                    self._replied()

            def send_response(self, *args: Any, **kwargs: Any) -> None:
                # a request stops being in flight when its reply starts: a client that waits for each reply may send
                # the next one at once, before this thread returns from the handler (a race on busy machines)
                self._replied()
                super().send_response(*args, **kwargs)

            def _replied(self) -> None:
                if getattr(self, "_counted", False):
                    self._counted = False
                    with stub._lock:
                        stub._in_flight -= 1

            def _answer(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                with stub._lock:
                    stub.requests.append(Recorded(self.path, headers, body, time.monotonic()))
                    action = stub._queue.popleft() if stub._queue else None
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(
                        404, {"error": {"message": f"no route {self.path}", "type": "not_found"}}
                    )
                if action is not None and action[0] == "delay":  # answer normally, but too late
                    if stub._stopping.wait(float(action[1])):
                        return  # the stub is stopping: drop the connection instead of holding up stop()
                    action = None
                if action is not None and action[0] == "body":
                    return self._send_bytes(*action[1])
                if action is not None and action[0] == "retry_after":
                    status, value = action[1]
                    return self._send(
                        status, {"error": {"message": "slow down", "type": "rate"}}, {"retry-after": value}
                    )
                if action is not None and action[0] == "trickle":
                    return self._trickle(*action[1])
                if action is not None and action[0] == "status":
                    return self._send(
                        int(action[1]),
                        {"error": {"message": "scripted failure", "type": "server_error"}},
                        {"retry-after": "0"},
                    )
                prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
                if stub.delay_s:
                    time.sleep(stub.delay_s)
                if action is not None and action[0] == "choices":
                    return self._send(200, self._completion(body, prompt, "", action[1]))
                content = action[1] if action is not None else stub.reply(prompt)
                self._send(200, self._completion(body, prompt, content))

            def _completion(
                self, body: dict[str, Any], prompt: str, content: str, choices: Any = None
            ) -> dict[str, Any]:
                if choices is None:
                    message = {"role": "assistant", "content": content}
                    choices = [{"index": 0, "message": message, "finish_reason": "stop"}]
                return {
                    "id": f"chatcmpl-{len(stub.requests)}",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model", "stub"),
                    "choices": choices,
                    "usage": usage_for(prompt, content),
                }

            def _send_bytes(self, status: int, content_type: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _trickle(self, seconds: float, n: int) -> None:
                data = json.dumps(self._completion({}, "", "trickled")).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                try:
                    for i in range(min(n, len(data))):
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
                        time.sleep(seconds)
                except OSError:  # the client gave up: that is the point
                    pass
                self.close_connection = True

            def _send(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self._stopping.clear()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._stopping.set()  # server_close() joins the handler threads: none may still be sleeping
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ------------------------------------------------------------------ default replies per template

    def reply(self, prompt: str) -> str:
        if "[[correct]], [[partial]], [[wrong]] or [[abstain]]" in prompt:
            q, gold, resp = _judge_fields(prompt, "Correct answer", "Model response")
            return f"Stub reasoning. [[{graded_verdict(q, gold, resp, self.verdict)}]]"
        if "end your reply with exactly [[yes]] or [[no]]" in prompt:
            q, gold, resp = _judge_fields(prompt, r"(?:Correct answer|Rubric|Explanation)", "Model response")
            return "Stub reasoning. [[yes]]" if self.verdict(q, gold, resp) else "Stub reasoning. [[no]]"
        if "Answer yes or no only." in prompt:
            q, gold, resp = _judge_fields(prompt, r"(?:Correct Answer|Rubric|Explanation)", "Model Response")
            return "yes" if self.verdict(q, gold, resp) else "no"
        if "label an answer to a question as 'CORRECT' or 'WRONG'" in prompt:
            q, gold, resp = _judge_fields(prompt, "Gold answer", "Generated answer", sep="\n")
            return json.dumps({"label": "CORRECT" if self.verdict(q, gold, resp) else "WRONG"})
        if '{"summary": "...", "keywords"' in prompt and "Evidence (one record per line" in prompt:
            lines = prompt.split("Evidence (one record per line, each with its date):\n", 1)[1].split("\n\n")[
                0
            ]
            first = re.sub(r"^\[[^\]]*\]\s*", "", lines.splitlines()[0]) if lines else "nothing"
            words = [w for w in re.findall(r"[A-Za-z]{5,}", lines)][:4]
            return json.dumps({"summary": first, "keywords": words})
        if '{"proposals"' in prompt:
            return json.dumps({"proposals": []})
        if '{"segments"' in prompt:
            return json.dumps({"segments": [], "reason": "coherent"})
        if '"decline": false' in prompt:
            return json.dumps({"summary": "stub summary", "keywords": ["stub"], "decline": True})
        if '{"answer": "..."}' in prompt:
            return json.dumps({"answer": _stub_answer(prompt)})
        return "stub: unrecognised prompt"


def _judge_fields(prompt: str, gold_label: str, resp_label: str, sep: str = "\n\n") -> tuple[str, str, str]:
    """The last question / gold / response fields (mem0's prompt shows a worked example before the real one)."""
    q = re.findall(r"Question: (.*?)" + re.escape(sep), prompt, re.S)
    g = re.findall(gold_label + r": (.*?)" + re.escape(sep), prompt, re.S)
    r = re.findall(re.escape(resp_label) + r": (.*?)(?:\n|$)", prompt, re.S)
    return (q[-1] if q else "", g[-1] if g else "", r[-1] if r else "")


def _stub_answer(prompt: str) -> str:
    """Option questions: the first option; others: the last memory line's text (a deterministic guess)."""
    opt = re.search(r"^\(a\) (.*)$", prompt, re.M)
    if opt:
        return opt.group(1).strip()
    mem = re.search(r"Memories \(chronological[^\n]*\n(.*?)\n\n", prompt, re.S)
    lines = [ln for ln in (mem.group(1).splitlines() if mem else []) if ln.strip()]
    if not lines or lines == ["(no memories retrieved)"]:
        return "Not mentioned in the conversation"
    return re.sub(r"^\[[^\]]*\]\s*", "", lines[-1])[:80]
