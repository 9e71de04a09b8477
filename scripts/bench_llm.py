"""The local model's speed on this machine (``make bench-llm``): prefill and decode tokens per second on a
LoCoMo prompt of about 1,500 tokens, and requests per minute with one server of N threads against N servers of
one thread each (llama-cpp-python's server answers one request at a time, so "slots" are processes here).

Every number comes from the server's own ``usage`` and wall clocks measured here, in one run, side by side; it
writes ``results/llm/tables/llm_bench.md`` and prints it. It starts and stops its own servers (ports 8790+).

.venv/bin/python scripts/bench_llm.py [--requests 6] [--out results/llm]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from allmem.defaults import llm_config
from allmem.llm import local_server
from allmem.paths import repo_root, resolve_data_path

BASE_PORT = 8790


def _prompt(words: int = 1100) -> str:
    """The first turns of LoCoMo's conv-26 as one prompt (about 1,500 SmolLM2 tokens)."""
    data = json.loads(resolve_data_path("locomo", None).read_text(encoding="utf-8"))
    conv = data[0]["conversation"]
    turns = [f"{t['speaker']}: {t['text']}" for k in sorted(conv) if k.startswith("session_") and isinstance(conv[k], list)
             for t in conv[k]]  # fmt: skip
    text, n = [], 0
    for t in turns:
        text.append(t)
        n += len(t.split())
        if n >= words:
            break
    return "\n".join(text) + "\n\nSummarise the conversation above in three sentences."


def _fresh(prompt: str, tag: str) -> str:
    """The prompt with a tag at its start: llama.cpp reuses the longest cached prefix of the previous prompt, so
    prompts that differ only at the end would be timed without their prefill."""
    return f"Request {tag}.\n{prompt}"


def _ask(port: int, prompt: str, max_tokens: int) -> tuple[float, dict]:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
    }
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})  # fmt: skip
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=900) as reply:  # noqa: S310 - loopback
        usage = json.loads(reply.read())["usage"]
    return time.perf_counter() - t0, usage


def _servers(n: int, threads: int, folder: Path) -> list[local_server.Server]:
    out = []
    for i in range(n):
        cfg = llm_config(["llm=local", f"llm.base_url=http://127.0.0.1:{BASE_PORT + i}/v1",
                           f"llm.server.threads={threads}"])  # fmt: skip
        srv = local_server.Server.of(cfg, folder=folder)
        print(f"[bench-llm] {local_server.start(srv)}", file=sys.stderr)
        out.append(srv)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=6, help="requests per concurrency setting")
    parser.add_argument("--decode", type=int, default=128, help="tokens to decode per request")
    parser.add_argument("--out", type=Path, default=repo_root() / "results" / "llm")
    args = parser.parse_args(argv)
    folder = repo_root() / ".cache" / "llm"
    prompt = _prompt()
    rows = []
    one = _servers(1, 2, folder)
    try:
        _ask(one[0].port, "Hello", 4)  # warm-up: model pages in
        prefill = [_ask(one[0].port, _fresh(prompt, f"p{i}"), 1) for i in range(3)]
        full = [_ask(one[0].port, _fresh(prompt, f"f{i}"), args.decode) for i in range(3)]
        p_tok = statistics.median(u["prompt_tokens"] for _, u in prefill)
        p_s = statistics.median(t for t, _ in prefill)
        d_tok = statistics.median(u["completion_tokens"] for _, u in full)
        d_s = statistics.median(t for t, _ in full) - p_s
        speed = (p_tok, p_tok / p_s, d_tok, d_tok / d_s if d_s > 0 else float("nan"))
        t0 = time.perf_counter()
        for i in range(args.requests):
            _ask(one[0].port, _fresh(prompt, f"s{i}"), args.decode)
        rows.append(
            ("1 server, 2 threads, 1 request at a time", args.requests / (time.perf_counter() - t0) * 60)
        )
        t0 = time.perf_counter()
        with ThreadPoolExecutor(2) as pool:
            list(
                pool.map(
                    lambda i: _ask(one[0].port, _fresh(prompt, f"c{i}"), args.decode), range(args.requests)
                )
            )
        rows.append(
            ("1 server, 2 threads, 2 requests at a time", args.requests / (time.perf_counter() - t0) * 60)
        )
    finally:
        for srv in one:
            local_server.stop(srv)
    two = _servers(2, 1, folder)
    try:
        for srv in two:
            _ask(srv.port, "Hello", 4)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(2) as pool:
            list(
                pool.map(
                    lambda i: _ask(two[i % 2].port, _fresh(prompt, f"t{i}"), args.decode),
                    range(args.requests),
                )
            )
        rows.append(
            (
                "2 servers, 1 thread each, 2 requests at a time",
                args.requests / (time.perf_counter() - t0) * 60,
            )
        )
    finally:
        for srv in two:
            local_server.stop(srv)
    base = rows[0][1]
    lines = [
        "# The local model's speed (scripts/bench_llm.py)",
        f"SmolLM2-135M-Instruct Q4_1, llama-cpp-python's server, this machine's CPU; one run, side by side. Prompt: "
        f"{p_tok:.0f} tokens of LoCoMo conv-26; decode up to {args.decode} tokens.",
        "| Prefill tokens | Prefill tokens/s | Decoded tokens | Decode tokens/s |\n|---|---|---|---|\n"
        f"| {speed[0]:.0f} | {speed[1]:.0f} | {speed[2]:.0f} | {speed[3]:.1f} |",
        "| Servers and requests in flight | Requests / min | Ratio to the first |\n|---|---|---|\n"
        + "\n".join(f"| {name} | {rpm:.2f} | {rpm / base:.2f} |" for name, rpm in rows),
    ]
    text = "\n\n".join(lines) + "\n"
    out = args.out / "tables" / "llm_bench.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
