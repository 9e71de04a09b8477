"""Questions asked along the stream (protocol.ask): the ask points by hand, every method config asked mid-stream
without seeing a later turn, two keyed records under `both` that score and resume, and the retention bins."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from pathlib import Path

import pytest

from allmem import files
from allmem.metrics import score_records
from allmem.report.items import item_frame
from allmem.report.runs import load_run
from allmem.report.tables.retention import bin_label, compute
from allmem.run import asking, identity, pipeline
from allmem.run import runner as runner_mod
from allmem.types import Dialogue, Question, Session, Turn
from tests.runkit import compose, compose_and_run

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
METHODS = sorted(p.stem for p in (CONFIGS / "method").glob("*.yaml"))
LATER = {"D2": "zqxjvlemur", "D3": "vorptangle"}  # a token said only in that session

SESSIONS = [
    ("1:00 pm on 1 May, 2023", [("Ana", "My puppy is called Biscuit and he loves the park."),
                                ("Ben", "Biscuit is a lovely name for a puppy.")]),
    ("1:00 pm on 8 May, 2023", [("Ana", "Biscuit learned a new trick at puppy class, the zqxjvlemur."),
                                ("Ben", "Your puppy Biscuit doing the zqxjvlemur trick, amazing.")]),
    ("1:00 pm on 15 May, 2023", [("Ana", "I baked a vorptangle sourdough loaf for the puppy party."),
                                 ("Ben", "The vorptangle loaf sounds tasty, Biscuit will love the party.")]),
]  # fmt: skip
QA = [
    {"question": "What is Ana's puppy called?", "answer": "Biscuit", "evidence": ["D1:1"], "category": 4},
    {"question": "What trick did Ana's puppy Biscuit learn?", "answer": "the zqxjvlemur", "evidence": ["D2:1"],
     "category": 4},
    {"question": "What did Ana bake for the puppy party?", "answer": "a sourdough loaf", "evidence": ["D9:9"],
     "category": 4},
]  # fmt: skip
# By hand from SESSIONS (2 turns each) and QA: turns ingested when each (question, point) is asked, and `since`.
ASKED_AT = {(0, "after_evidence"): 2, (1, "after_evidence"): 4, (2, "after_evidence"): 6,
            (0, "end"): 6, (1, "end"): 6, (2, "end"): 6}  # fmt: skip
SINCE = {(0, "after_evidence"): {"turns": 1, "sessions": 0}, (1, "after_evidence"): {"turns": 1, "sessions": 0},
         (0, "end"): {"turns": 5, "sessions": 2}, (1, "end"): {"turns": 3, "sessions": 1},
         (2, "after_evidence"): None, (2, "end"): None}  # fmt: skip


def _write_fixture(path: Path) -> Path:
    conv: dict = {"speaker_a": "Ana", "speaker_b": "Ben"}
    for i, (date, turns) in enumerate(SESSIONS, 1):
        conv[f"session_{i}_date_time"] = date
        conv[f"session_{i}"] = [
            {"speaker": s, "dia_id": f"D{i}:{j}", "text": t} for j, (s, t) in enumerate(turns, 1)
        ]
    sample = {"sample_id": "conv-ask", "qa": QA, "conversation": conv, "event_summary": {},
              "observation": {}, "session_summary": {}}  # fmt: skip
    path.write_text(json.dumps([sample]))
    return path


def _overrides(tmp: Path, cache: Path, data: Path, method: str, ask: str) -> list[str]:
    return [f"method={method}", f"protocol.ask={ask}", f"dataset.path={data}", f"run.root={tmp / 'runs'}",
            f"paths.cache_dir={cache}", "embedder=hash", "run.progress=false",
            "llm.max_concurrency=1"]  # fmt: skip


def _dialogue() -> Dialogue:
    sessions, order = [], 0
    for i, (_, turns) in enumerate(SESSIONS, 1):
        ts = []
        for j, (speaker, text) in enumerate(turns, 1):
            ts.append(
                Turn(f"D{i}:{j}", f"S{i}", speaker, text, datetime(2023, 5, i), order, source_id=f"D{i}:{j}")
            )
            order += 1
        sessions.append(Session(f"S{i}", datetime(2023, 5, i), i - 1, tuple(ts)))
    qs = tuple(
        Question(f"q{n}", "d", q["question"], q["answer"], tuple(q["evidence"]), 4) for n, q in enumerate(QA)
    )
    return Dialogue("d", tuple(sessions), qs)


def test_plan_by_hand():
    d = _dialogue()
    todo = asking.todo(d.questions, "both", set())
    assert [(q.id, p) for q, p in todo] == [(f"q{n}", p) for n in range(3) for p in ("after_evidence", "end")]
    asks = asking.plan(d, todo)
    got = {(int(a.question.id[1:]), a.point): (a.session, a.since) for a in asks}
    assert got == {
        (0, "after_evidence"): (0, SINCE[0, "after_evidence"]), (0, "end"): (None, SINCE[0, "end"]),
        (1, "after_evidence"): (1, SINCE[1, "after_evidence"]), (1, "end"): (None, SINCE[1, "end"]),
        (2, "after_evidence"): (None, None), (2, "end"): (None, None),
    }  # fmt: skip
    assert asking.todo(d.questions, "end", {("q0", "end")}) == [
        (d.questions[1], "end"),
        (d.questions[2], "end"),
    ]


class _Spy:
    """Wraps each run's system: counts the turns it was given and, per question asked, what retrieve returned."""

    def __init__(self) -> None:
        self.turns = 0
        self.asked: dict[tuple[str, str], dict] = {}
        self.local = threading.local()


@pytest.fixture
def spy(monkeypatch):
    s = _Spy()
    build = pipeline.Services.build.__func__
    answer = pipeline.answer_question

    def spied_build(cls, *args, **kwargs):
        svc = build(cls, *args, **kwargs)
        system = svc.system
        ingest, reset = system.ingest, system.reset

        def counting_ingest(turn):
            s.turns += 1
            return ingest(turn)

        def counting_reset(dialogue_id):
            s.turns = 0
            return reset(dialogue_id)

        system.ingest, system.reset = counting_ingest, counting_reset
        return svc

    def spied_answer(system, generator, question, *args, **kwargs):
        seen = {"turns": s.turns, "ids": set(), "text": ""}
        real = system.retrieve

        class View:
            def __getattr__(self, name):
                return getattr(system, name)

            def retrieve(self, query, when=None):
                result = real(query, when)
                for u in result.units:
                    seen["ids"].update(u.source_ids)
                    seen["text"] += " " + " ".join(p.text for p in u.parts)
                return result

        pred = answer(View(), generator, question, *args, **kwargs)
        s.asked.setdefault((question.id, "pending"), [])
        s.asked[question.id, "pending"].append(seen)
        return pred

    monkeypatch.setattr(pipeline.Services, "build", classmethod(spied_build))
    monkeypatch.setattr(pipeline, "answer_question", spied_answer)
    return s


@pytest.mark.parametrize("method", METHODS)
def test_every_method_asks_mid_stream_and_sees_nothing_later(method, tmp_path, cache_dir, spy):
    data = _write_fixture(tmp_path / "ask.json")
    overrides = _overrides(tmp_path, cache_dir, data, method, "both")
    if method == "http":  # a memory service: the reference server over BM25, checkpoint route included
        from examples.memory_server import build_system, start

        server, url = start(build_system("bm25"))
        try:
            run_dir = runner_mod.run(compose(*overrides, f"method.url={url}"), [])
        finally:
            server.shutdown()
            server.server_close()
    else:
        run_dir = runner_mod.run(compose(*overrides), [])
    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    keys = [(r["question_id"], r["ask"]) for r in records]
    assert len(keys) == len(set(keys)) == 2 * len(QA)  # each question once at each point
    # the records come in ask order: the spy's calls per question line up with that question's records
    for r in records:
        n = int(r["question_id"].rsplit("q", 1)[1])
        seen = spy.asked[r["question_id"], "pending"].pop(0)
        assert seen["turns"] == ASKED_AT[n, r["ask"]], (r["question_id"], r["ask"])
        assert r.get("since") == SINCE[n, r["ask"]]
        streamed = {f"D{i}" for i in range(1, len(SESSIONS) + 1) if 2 * i <= ASKED_AT[n, r["ask"]]}
        later = set(LATER) - streamed
        assert seen["ids"], "nothing retrievable: the checkpoint left the streamed turns unsearchable"
        assert not {sid for sid in seen["ids"] if sid.split(":")[0] in later}, seen["ids"]
        for session in later:
            assert LATER[session] not in seen["text"].lower()
            assert not [sid for sid in r["ranked_source_ids"] if sid.startswith(session + ":")]
    metrics = json.loads((run_dir / files.METRICS).read_text())
    assert set(metrics["by_ask"]) == {"after_evidence", "end"}
    assert all(m["overall"]["count"] == len(QA) for m in metrics["by_ask"].values())


def test_both_scores_and_resumes_by_key(tmp_path, cache_dir):
    data = _write_fixture(tmp_path / "ask.json")
    cfg = compose(*_overrides(tmp_path, cache_dir, data, "bm25", "both"))
    run_dir = runner_mod.run(cfg, [])
    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    metrics = json.loads((run_dir / files.METRICS).read_text())
    for point in ("after_evidence", "end"):
        mine = [r for r in records if r["ask"] == point]
        assert metrics["by_ask"][point]["overall"] == score_records(mine)["overall"]
    assert {k: metrics[k] for k in ("overall", "groups")} == {
        k: score_records([r for r in records if r["ask"] == "end"])[k] for k in ("overall", "groups")
    }
    # a record lost: the rerun asks exactly that (question, ask point) again, and the rest stay
    lost = next(r for r in records if r["question_id"].endswith("q0000") and r["ask"] == "end")
    kept = [r for r in records if r is not lost]
    files.write_atomic(run_dir / files.PREDICTIONS, "".join(files.dump_line(r) for r in kept))
    (run_dir / files.DONE).unlink()
    (run_dir / files.METRICS).unlink()
    assert runner_mod.run(cfg, []) == run_dir
    again = files.read_jsonl(run_dir / files.PREDICTIONS)
    assert [(r["question_id"], r["ask"]) for r in again[: len(kept)]] == [
        (r["question_id"], r["ask"]) for r in kept
    ]
    assert [(r["question_id"], r["ask"], r["attempt"]) for r in again[len(kept) :]] == [
        (lost["question_id"], "end", 2)
    ]
    assert {k: v for k, v in again[-1].items() if k not in ("latency_ms", "attempt")} == {
        k: v for k, v in lost.items() if k not in ("latency_ms", "attempt")
    }
    # a duplicate (question, ask point) is refused; the same question at the two points is not
    with pytest.raises(ValueError, match="duplicate"):
        score_records([*again, again[0]])


def test_ask_end_keeps_the_identity_and_both_changes_it(tmp_path, cache_dir):
    data = _write_fixture(tmp_path / "ask.json")
    base = _overrides(tmp_path, cache_dir, data, "bm25", "end")
    plain = [o for o in base if not o.startswith("protocol.ask")]
    digest = "0" * 64
    h_end, h_plain = (
        identity.config_hash(compose(*base), digest),
        identity.config_hash(compose(*plain), digest),
    )
    assert h_end == h_plain
    assert "ask" not in identity.identity(compose(*plain))["protocol"]
    both = [o.replace("protocol.ask=end", "protocol.ask=both") for o in base]
    assert identity.config_hash(compose(*both), digest) != h_end


def test_retention_bins_by_hand(tmp_path, cache_dir):
    assert [bin_label(v, (0, 1, 10, 50)) for v in (0, 1, 9, 10, 49, 50, 700)] == [
        "0", "1-9", "1-9", "10-49", "10-49", "50+", "50+"
    ]  # fmt: skip
    data = _write_fixture(tmp_path / "ask.json")
    run_dir = runner_mod.run(compose(*_overrides(tmp_path, cache_dir, data, "bm25", "both")), [])
    run = load_run(run_dir)
    table = compute([run], ["bm25"])
    f1 = table[table["metric"] == "F1"].set_index(["ask", "distance", "bin"])
    # by hand (SINCE): after_evidence q0, q1 at 1 turn / 0 sessions; end q0 at 5 turns / 2 sessions, q1 at 3 / 1;
    # q2 matched no evidence and is in no bin
    assert f1["n"].to_dict() == {
        ("after_evidence", "turns", "1-9"): 2, ("after_evidence", "sessions", "0"): 2,
        ("end", "turns", "1-9"): 2, ("end", "sessions", "1"): 1, ("end", "sessions", "2-3"): 1,
    }  # fmt: skip
    from allmem.metrics import item_scores

    records = run.records()
    scores = {(r["question_id"], r["ask"]): s for r, s in zip(records, item_scores(records), strict=True)}
    q0, q1 = (
        next(r["question_id"] for r in records if r["question_id"].endswith(f"q000{n}")) for n in (0, 1)
    )
    both_after = (scores[q0, "after_evidence"]["f1"] + scores[q1, "after_evidence"]["f1"]) / 2
    assert f1.loc[("after_evidence", "sessions", "0"), "mean"] == pytest.approx(100 * both_after)
    assert f1.loc[("end", "sessions", "2-3"), "mean"] == pytest.approx(100 * scores[q0, "end"]["f1"])
    r5 = table[table["metric"] == "R@5"].set_index(["ask", "distance", "bin"])
    assert r5.loc[("end", "sessions", "1"), "mean"] == pytest.approx(100 * scores[q1, "end"]["R@5"])


def test_judge_again_keeps_a_verdict_per_ask_point(tmp_path, cache_dir, monkeypatch, stub):
    from allmem.report.runs import with_judge
    from allmem.run.rejudge import VERDICTS, judge_run
    from tests.llm_stub import default_verdict

    monkeypatch.setenv("ALLMEM_ASK_KEY", "sk-test")
    data = _write_fixture(tmp_path / "ask.json")
    run_dir = runner_mod.run(compose(*_overrides(tmp_path, cache_dir, data, "bm25", "both")), [])
    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    folder = judge_run(run_dir, ["llm=openai", f"llm.base_url={stub.base_url}", "llm.api_key_env=ALLMEM_ASK_KEY",
                                 "llm.backoff_base_s=0.01", "llm.rpm=null", "llm.tpm=null"])  # fmt: skip
    verdicts = files.read_jsonl(folder / VERDICTS)
    assert sorted((v["question_id"], v["ask"]) for v in verdicts) == sorted(
        (r["question_id"], r["ask"]) for r in records
    )
    frame = item_frame(with_judge(load_run(run_dir), folder.name))
    want = {(r["question_id"], r["ask"]): float(default_verdict(r["question"], r["gold"], r["prediction"]))
            for r in records}  # fmt: skip
    assert {
        (q, a): j for q, a, j in zip(frame["question_id"], frame["ask"], frame["judge"], strict=True)
    } == want


def test_longmemeval_is_binned_by_sessions_only(tmp_path, cache_dir):
    run = load_run(
        compose_and_run(
            tmp_path, "dataset=longmemeval_s", "method=bm25", "protocol.ask=both", cache=cache_dir
        )
    )
    table = compute([run])
    assert set(table["distance"]) == {"sessions"} and set(table["ask"]) == {"after_evidence", "end"}
    # after its evidence's session a question has 0 sessions since; n counts every question with evidence
    after = table[(table["ask"] == "after_evidence") & (table["metric"] == "F1")]
    with_since = [r for r in run.records() if r["ask"] == "after_evidence" and r.get("since") is not None]
    assert list(after["bin"]) == ["0"] and after["n"].item() == len(with_since) > 0


def test_after_evidence_alone_asks_each_question_once(tmp_path, cache_dir):
    data = _write_fixture(tmp_path / "ask.json")
    run_dir = runner_mod.run(compose(*_overrides(tmp_path, cache_dir, data, "bm25", "after_evidence")), [])
    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    # in ask order: q0 after session 1, q1 after session 2, q2 (no matched evidence) at the end
    assert [(r["question_id"][-1], r["ask"], r.get("since")) for r in records] == [
        (str(n), "after_evidence", SINCE[n, "after_evidence"]) for n in range(3)
    ]
    metrics = json.loads((run_dir / files.METRICS).read_text())
    assert "by_ask" not in metrics and metrics["overall"]["count"] == len(QA)


def test_paired_test_joins_on_the_ask_point():
    import pandas as pd

    from allmem.report.compare import compare

    def frame(rows):
        return pd.DataFrame([{"dialogue_id": "d", "question_id": q, "ask": a, "group": "4", "included": True,
                              "f1": f} for q, a, f in rows])  # fmt: skip

    both = frame(
        [("q0", "after_evidence", 1.0), ("q0", "end", 0.0), ("q1", "after_evidence", 1.0), ("q1", "end", 1.0)]
    )
    end = frame([("q0", "end", 0.0), ("q1", "end", 1.0)])
    rows = compare({"end": end, "both": both}, ["f1"], reference="end", by_group=False)
    row = rows[rows["label"] == "both"].iloc[0]
    # by hand: the end records pair (0 - 0, 1 - 1): delta 0, p 1; joined on the question alone q0's after_evidence
    # record would pair with the reference too (1 - 0) and make the delta 100 / 3
    assert row["delta"] == 0.0 and row["p"] == 1.0
    assert (
        row["mean"] == pytest.approx(75.0) and row["n"] == 4
    )  # the label's own mean: every record of the run


@pytest.mark.slow  # worker processes (run.workers)
def test_both_with_workers_and_shards_makes_the_single_process_run(tmp_path):
    from allmem.run import compare
    from tests.faultkit import allmem_run, done_dir

    lme = (
        "+debug=default",
        "dataset=longmemeval_s",
        "method=allmem",
        "protocol.ask=both",
    )  # ATC and LLM calls
    cache = tmp_path / "cache"
    one = done_dir(allmem_run(tmp_path, *lme, "run.workers=1", cache=cache))
    (tmp_path / "w2").mkdir()
    two = done_dir(allmem_run(tmp_path / "w2", *lme, "run.workers=2", cache=cache))
    (tmp_path / "sh").mkdir()
    assert allmem_run(tmp_path / "sh", *lme, "run.shard=1/2", cache=cache).rc == 0
    sharded = done_dir(allmem_run(tmp_path / "sh", *lme, "run.shard=2/2", cache=cache))
    assert compare.same_result(one, two) == [] and compare.same_result(one, sharded) == []
    records = files.read_jsonl(one / files.PREDICTIONS)
    assert {r["ask"] for r in records} == {"after_evidence", "end"} and files.read_jsonl(one / files.CALLS)
