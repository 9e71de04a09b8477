"""The real-model tier (``-m llm``; make test-llm, CI): every LLM role against a real model, llama.cpp's server with
SmolLM2-135M-Instruct (``llm=local``), started here through ``allmem.llm.local_server``.

Each method of Table 1 that calls an LLM (All-Mem's descriptors and ATC, the baselines' own prompts, the reader
and the judge for every method) answers the debug fixture's first dialogue. Between the runs and the server sits
a recording proxy, so what the server said is counted apart from what allmem booked: every run seals, every
booked call's tokens are the server's ``usage``, the verdicts parse, the per-role invalid counts are in
metrics.json, and the same command again is answered from the response cache with no request at all.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from allmem.defaults import llm_config
from allmem.files import read_jsonl
from allmem.llm import local_server
from allmem.report.runs import find_runs
from allmem.report.tables.llm_roles import render
from allmem.run import compare
from tests.faultkit import REPO, allmem_run, done_dir

# The runs of all methods happen in one module fixture, inside the first test's time limit: on 2 busy cores a
# 135M model takes minutes per method, so the tier gets far more than the suite's per-test default.
pytestmark = [pytest.mark.llm, pytest.mark.timeout(3000)]

PORT = 8779  # not llm=local's default, so a developer's own server is left alone
METHODS = ("allmem", "naive_rag", "mem0", "amem", "lightmem", "hipporag", "memgpt")
SLICE = ("+debug=default", "dataset.limit_dialogues=1", "dataset.limit_questions=3")


class Recorder:
    """A pass-through proxy that keeps, per request, the path and the server's ``usage``."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.seen: list[dict] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self, body: bytes | None) -> None:
                req = urllib.request.Request(recorder.upstream + self.path, data=body, method=self.command,
                                             headers={"content-type": "application/json"})  # fmt: skip
                try:
                    with urllib.request.urlopen(req, timeout=600) as reply:  # noqa: S310 - loopback
                        status, data = reply.status, reply.read()
                except urllib.error.HTTPError as err:
                    status, data = err.code, err.read()
                if self.path.endswith("/chat/completions"):
                    usage = json.loads(data).get("usage") if status == 200 else None
                    recorder.seen.append({"status": status, "usage": usage})
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._forward(None)

            def do_POST(self) -> None:  # noqa: N802
                self._forward(self.rfile.read(int(self.headers.get("content-length", 0))))

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def server() -> local_server.Server:
    # one thread: two OpenMP threads on a 2-core machine whose other core is busy stall each other (measured
    # here: prefill fell from ~180 to ~55 tokens/s and JSON-grammar decoding to ~1 token/s)
    cfg = llm_config(["llm=local", f"llm.base_url=http://127.0.0.1:{PORT}/v1", "llm.server.threads=1"])
    srv = local_server.Server.of(cfg, folder=REPO / ".cache" / "llm")  # the model file is kept between runs
    print(local_server.start(srv))
    yield srv
    print(local_server.stop(srv))


@pytest.fixture(scope="module")
def proxy(server: local_server.Server) -> Recorder:
    rec = Recorder(f"http://127.0.0.1:{server.port}")
    yield rec
    rec.httpd.shutdown()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, proxy: Recorder) -> dict[str, tuple[Path, list[dict]]]:
    """Each method run once on the slice, each with a cache of its own (with a shared one, naive_rag would be
    answered from allmem's cached reader and judge calls and ask the server nothing); with what the server was
    asked during that run."""
    tmp = tmp_path_factory.mktemp("tier")
    out = {}
    for method in METHODS:
        before = len(proxy.seen)
        res = allmem_run(tmp, *SLICE, f"method={method}", "llm=local", f"llm.base_url={proxy.url}/v1",
                         cache=tmp / "cache" / method, timeout=1800)  # fmt: skip
        assert res.rc == 0, f"{method}: {res.err[-2000:]}"
        out[method] = (done_dir(res), proxy.seen[before:])
    return out


@pytest.mark.parametrize("method", METHODS)
def test_each_method_seals_with_the_servers_own_token_counts(runs, method: str) -> None:  # noqa: ANN001
    run, seen = runs[method]
    assert (run / "DONE").exists()
    calls = read_jsonl(run / "calls.jsonl")
    asked = [c for c in calls if not c["cached"] and c.get("error") is None]
    assert asked and len(asked) == len([s for s in seen if s["status"] == 200])
    assert all(c["backend"] == "local" and c["model"] == "smollm2-135m-instruct-q4_1" for c in calls)
    assert all(c["tokens_in"] > 0 and c["tokens_out"] > 0 and not c["estimated"] for c in asked)
    served = [s["usage"] for s in seen if s["status"] == 200]
    assert sum(c["tokens_in"] for c in asked) == sum(u["prompt_tokens"] for u in served)
    assert sum(c["tokens_out"] for c in asked) == sum(u["completion_tokens"] for u in served)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["backend"]["llm"] == "local" and not metrics["backend"]["offline"]
    assert set(metrics["llm_roles"]) >= {"answer_locomo"} | {
        t for t in metrics["llm_roles"] if t.startswith("judge")
    }
    for role, counts in metrics["llm_roles"].items():  # every role's invalid and unusable rates are reported
        assert counts["calls"] > 0 and 0.0 <= counts["invalid_rate"] <= 1.0, role


@pytest.mark.parametrize("method", METHODS)
def test_the_judge_gives_verdicts_that_parse(runs, method: str) -> None:  # noqa: ANN001
    metrics = json.loads((runs[method][0] / "metrics.json").read_text())
    counts = metrics["overall"]["judge_counts"]
    assert counts["yes"] + counts["no"] > 0 and counts["invalid"] == 0  # the verdict grammar holds
    assert metrics["overall"]["judge"] is not None and "judge_invalid_rate" in metrics["overall"]


def test_the_memory_roles_ran_for_real(runs) -> None:  # noqa: ANN001
    """The write path of each memory system asked the model its own prompts (not only the reader)."""
    roles = {m: set(json.loads((runs[m][0] / "metrics.json").read_text())["llm_roles"]) for m in METHODS}
    assert {"descriptor", "diagnose"} <= roles["allmem"]
    assert {"mem0_extract"} <= roles["mem0"] and {"amem_analyze"} <= roles["amem"]
    assert {"lightmem_extract"} <= roles["lightmem"] and {"hipporag_ner", "hipporag_triples"} <= roles[
        "hipporag"
    ]
    assert {"memgpt_pressure"} & roles["memgpt"] or {"memgpt_search"} & roles["memgpt"]
    assert roles["naive_rag"] == {r for r in roles["naive_rag"] if r.startswith(("answer_", "judge_"))}


def test_a_second_run_replays_from_the_cache_with_no_request(runs, proxy, tmp_path: Path) -> None:  # noqa: ANN001
    first, _ = runs["allmem"]
    cache = (
        first.parents[2] / "cache" / "allmem"
    )  # <tmp>/runs/<dataset>/<run>; the method's cache is <tmp>/cache/allmem
    before = len(proxy.seen)
    res = allmem_run(
        tmp_path, *SLICE, "method=allmem", "llm=local", f"llm.base_url={proxy.url}/v1", cache=cache
    )
    assert res.rc == 0, res.err[-2000:]
    assert proxy.seen[before:] == []  # not one request reached the server
    assert compare.same_result(first, done_dir(res)) == []


def test_the_llm_report_names_the_model_and_counts_per_role(runs) -> None:  # noqa: ANN001
    root = runs["allmem"][0].parents[1]
    page = render(find_runs(root))
    assert "Model: smollm2-135m-instruct-q4_1" in page and "none is GPT-4o's" in page
    assert "| `allmem` | `descriptor` |" in page and "| `mem0` | `mem0_extract` |" in page
