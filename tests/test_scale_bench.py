"""``make bench-scale``'s script composes this checkout's config (scripts/bench_scale.py).

Why: the bench reads the run config (does this code have ``run.workers`` / ``run.shard``?) and an embedder's backend
through Hydra's compose API, outside ``allmem run``; the configs use allmem's own resolvers
(``hydra.searchpath: ${allmem.searchpath:}``), so composing without them failed at the bench's first step. Checked in
a fresh interpreter: the test session has imported allmem (and so registered the resolvers) already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

_PROBE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("bench_scale", sys.argv[1])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
print(json.dumps({
    "keys": sorted(bench.run_keys()),
    "int8": bench.compose_config(["embedder=minilm_onnx_int8"]).embedder.backend,
    "default": bench.compose_config([]).embedder.backend,
    "torch": bench.compose_config(["embedder=minilm_torch"]).embedder.backend,
}))
"""


@pytest.mark.slow  # a fresh interpreter
def test_the_bench_composes_the_config_in_a_fresh_interpreter():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(REPO / "scripts" / "bench_scale.py")],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"workers", "shard"} <= set(got["keys"])
    assert got["int8"] == "onnx_int8"
    assert got["torch"] == "torch" and got["default"] == "onnx_fp32"
