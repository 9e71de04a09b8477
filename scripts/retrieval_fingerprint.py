"""Every ranked id and score of a method's retrieval on real LoCoMo questions, to show a change moved none of them.

Why: latency work on the retrieval path (issue 12) promises identical results; approximate comparisons would let
a reordered float sum or a changed tie-break slip through. This writes, per conversation, method and question,
the ranked ids and the scores as exact hex floats (banks built as ``scripts/bench_latency.py`` builds them:
consolidation off), and compares two such files. Each question is asked twice in a row, so state carried from one
query to the next that changes a result fails here too.

    python scripts/retrieval_fingerprint.py --out /tmp/before.json            # on the old code
    python scripts/retrieval_fingerprint.py --out /tmp/after.json --compare /tmp/before.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_latency import METHODS, method_config, retrieval_and_vector  # noqa: E402


def log(msg: str) -> None:
    print(f"[fingerprint] {msg}", file=sys.stderr, flush=True)


def fingerprint(n_dialogues: int, methods: Sequence[str]) -> dict[str, Any]:
    """{"conv|method|question index": [ids, scores as hex floats, anchors, candidates]}."""
    import torch

    from allmem.build import build, build_embedder, build_run_llm
    from allmem.memory.retrieve import Retriever
    from allmem.paths import resolve_data_path
    from allmem.run.pipeline import ingest
    from allmem.systems import Resources
    from benchmarks.locomo import load_locomo

    torch.set_num_threads(1)
    cfg = method_config("allmem", ["atc.enabled=false"])
    embedder = build_embedder(cfg)
    tmp = Path(tempfile.mkdtemp(prefix="fingerprint_"))
    llm = build_run_llm(cfg, tmp)
    configs = {m: retrieval_and_vector(m) for m in methods}
    out: dict[str, Any] = {}
    for d in load_locomo(resolve_data_path("locomo", None))[:n_dialogues]:
        t0 = time.perf_counter()
        system = build(cfg.method, resources=Resources(embedder=embedder, llm=llm, run_dir=tmp))
        ingest(system, d, progress=False)
        log(f"{d.id}: bank of {len(system.bank)} units in {time.perf_counter() - t0:.0f}s")
        for m, (rcfg, vector) in configs.items():
            r = Retriever(system.bank, embedder, rcfg, vector)
            for i, q in enumerate(d.questions):
                first, again = r.retrieve(q.text), r.retrieve(q.text)
                row = [first.ids, [float(s).hex() for s in first.scores], first.n_anchors, first.n_candidates]
                if [again.ids, [float(s).hex() for s in again.scores]] != row[:2]:
                    raise SystemExit(f"{d.id} {m} question {i}: asked twice, answered differently")
                out[f"{d.id}|{m}|{i}"] = row
    return out


def compare(new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    """Keys whose results differ, or that only one side has."""
    return sorted(k for k in set(new) | set(old) if new.get(k) != old.get(k))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--locomo", type=int, default=2, help="first N LoCoMo conversations")
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    ap.add_argument("--compare", type=Path, help="an earlier --out file: exit 1 if any result differs")
    args = ap.parse_args(argv)
    result = fingerprint(args.locomo, args.methods)
    args.out.write_text(json.dumps(result), encoding="utf-8")
    print(f"{len(result)} queries written to {args.out}")
    if args.compare:
        differ = compare(result, json.loads(args.compare.read_text(encoding="utf-8")))
        print(
            f"{len(differ)} of {len(result)} differ from {args.compare}"
            + (f": {differ[:10]}" if differ else "")
        )
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
