"""The packed context of each record (``contexts.jsonl.gz``, records version 5): written by the run's one writer
with the record's key, the exact text the reader got (within the budget), gzip a member per line; a torn last
member is cut and contexts whose record is not kept are dropped on resume. Workers and resume: see
tests/test_scale_parallel.py (``same_result`` compares this file)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from allmem import files
from allmem.budget import count_tokens
from allmem.run import attempts
from allmem.types import RECORD_VERSION, RecordError
from tests.faultkit import allmem_run, done_dir

BUDGET = 60  # small enough that the tiny dialogues' retrieved units do not all fit


def _key(r: dict) -> tuple:
    return (r["dialogue_id"], r["question_id"], r.get("ask") or "end")


@pytest.mark.slow  # the CLI in a subprocess
def test_a_debug_run_stores_each_records_packed_context_within_the_budget(tmp_path):
    run = done_dir(
        allmem_run(tmp_path, "+debug=default", "dataset=locomo", "method=bm25", f"budget.tokens={BUDGET}")
    )
    preds = files.read_jsonl(run / files.PREDICTIONS)
    ctxs = files.read_jsonl(run / files.CONTEXTS, whole=True)
    assert [_key(c) for c in ctxs] == [_key(p) for p in preds]  # one line per record, in the record order
    assert len(preds) == 14  # locomo_tiny: 8 + 6 questions
    dropped = 0
    for p, c in zip(preds, ctxs, strict=True):
        assert count_tokens(c["text"]) == p["context_tokens"] <= BUDGET
        assert len(c["units"]) == p["context_units"]
        assert len(c["text"].split("\n")) == max(1, len(c["units"]))  # a line per packed unit
        assert all(set(u) == {"id", "source_ids"} for u in c["units"])
        dropped += p["dropped_tokens"] > 0
    assert dropped > 0  # the budget bit somewhere: the file holds what was packed, not what was retrieved
    for p, c in zip(preds, ctxs, strict=True):  # what was packed came from what was retrieved
        assert {s for u in c["units"] for s in u["source_ids"]} <= set(p["ranked_source_ids"])
    manifest = json.loads((run / files.MANIFEST).read_text())
    assert manifest["records"] == RECORD_VERSION == 6


def _write_members(path: Path, rows: list[dict]) -> None:
    path.write_bytes(files.encode_lines(path, [files.dump_line(r) for r in rows]))


def test_gz_lines_are_one_member_each_and_a_torn_member_is_a_torn_tail(tmp_path):
    path = tmp_path / files.CONTEXTS
    rows = [{"question_id": f"q{i}", "text": "x" * i} for i in range(3)]
    _write_members(path, rows)
    assert [json.loads(x) for x in gzip.decompress(path.read_bytes()).splitlines()] == rows  # plain gzip
    with files.JsonlWriter(path) as out:  # appends one more member
        out.write({"question_id": "q3", "text": ""})
    whole = path.read_bytes()
    path.write_bytes(whole[:-5])  # killed inside the last member
    assert [r["question_id"] for r in files.read_jsonl(path)] == ["q0", "q1", "q2"]
    with pytest.raises(RecordError, match="torn at byte"):
        files.read_jsonl(path, whole=True)
    complete = len(files.encode_lines(path, [files.dump_line(r) for r in rows]))
    assert files.repair_jsonl(path) == len(whole) - 5 - complete  # the cut member's bytes
    assert files.read_jsonl(path, whole=True) == rows  # cut back to the complete members
    path.write_bytes(path.read_bytes() + b"not gzip at all")
    with pytest.raises(RecordError, match=f"{files.CONTEXTS}: byte"):
        files.read_jsonl(path)


def test_resume_drops_the_contexts_of_records_not_kept(tmp_path):
    """Dialogue d2 is redone: q3 failed and q4 was cut after its context line, before its prediction line. Their
    contexts go (they are written again with their records); q2 (answered in d2) and d1's stay."""
    run = tmp_path / "run"
    run.mkdir()
    preds = [
        {"dialogue_id": "d1", "question_id": "q1"},
        {"dialogue_id": "d2", "question_id": "q2"},
        {"dialogue_id": "d2", "question_id": "q3", "error": "answer: timeout"},
    ]
    (run / files.PREDICTIONS).write_text("".join(files.dump_line(p) for p in preds))
    ctx = [{"dialogue_id": d, "question_id": q, "ask": "end", "text": q, "units": []} for d, q in
           [("d1", "q1"), ("d2", "q2"), ("d2", "q3"), ("d2", "q4")]]  # fmt: skip
    _write_members(run / files.CONTEXTS, ctx)
    (run / files.CONTEXTS).write_bytes((run / files.CONTEXTS).read_bytes() + gzip.compress(b'{"torn"')[:9])
    dialogues = [_Dialogue("d1", ["q1"]), _Dialogue("d2", ["q2", "q3", "q4"])]
    done, redo = attempts.resume(run, dialogues)
    assert redo == ["d2"] and done == {("q1", "end"), ("q2", "end")}
    assert [c["question_id"] for c in files.read_jsonl(run / files.CONTEXTS, whole=True)] == ["q1", "q2"]


class _Q:
    def __init__(self, qid: str) -> None:
        self.id = qid
        self.dialogue_id = ""
        self.evidence = ()


class _Dialogue:
    def __init__(self, did: str, qids: list[str]) -> None:
        self.id = did
        self.questions = [_Q(q) for q in qids]
