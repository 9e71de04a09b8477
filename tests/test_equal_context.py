"""Equal context (budget.fill): the deepening rule by hand, every Table 1 method reaching the size when its memory
holds enough and stopping at what it has when not, the knob in the run's identity but not in the bank cache's
key, and the equal-context table from fixture runs."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from allmem.budget import Filling, context_line, fill, pack
from allmem.errors import ConfigError
from allmem.run import identity, pipeline
from allmem.run import runner as runner_mod
from allmem.tokens import count_tokens
from allmem.types import Dialogue, RetrievalResult, Retrieved, Session, Turn
from tests.runkit import compose, in_folder

REPO = Path(__file__).resolve().parents[1]


def _unit(i: int, words: int) -> Retrieved:
    return Retrieved.of_text(f"u{i}", " ".join(["alpha"] * words), (f"D1:{i}",), 1.0 / (i + 1))


def test_fill_doubles_until_full_or_exhausted():
    # a memory of 40 units of one line each; the method's ranking at factor f is its top 3 f
    units = [_unit(i, 9) for i in range(40)]
    line = count_tokens(context_line(units[0]))  # every line costs the same
    asked: list[int] = []

    def ranking(factor: int) -> RetrievalResult:
        asked.append(factor)
        return RetrievalResult(units=tuple(units[: 3 * factor]))

    # room for exactly 10 lines (9 newlines): factor 1 (3 units), 2 (6), 4 (12: overflows, 10 kept) and stop
    budget = 10 * line + 9
    got = fill(ranking, budget)
    assert asked == [1, 2, 4]
    assert (got.factor, len(got.result.units), len(got.packed.units)) == (4, 12, 10)
    assert got.packed.used_tokens == count_tokens(got.packed.text) <= budget
    assert got.packed.n_dropped == 2

    # the memory holds 5 units: factor 1 (3), 2 (5), 4 (5: nothing new) -> the ranking at factor 2, all packed
    asked.clear()
    few = units[:5]
    got = fill(lambda f: (asked.append(f), RetrievalResult(units=tuple(few[: 3 * f])))[1], budget)
    assert asked == [1, 2, 4]
    assert (got.factor, len(got.packed.units), got.packed.n_dropped) == (2, 5, 0)

    # a ranking that already overflows at factor 1 is never deepened
    asked.clear()
    got = fill(lambda f: (asked.append(f), RetrievalResult(units=tuple(units)))[1], budget)
    assert asked == [1] and len(got.packed.units) == 10


# A dialogue whose memory holds far more than 1024 tokens: sessions of turns that share no content word (made-up
# words from syllables), so no offline role merges two turns into one unit or drops one as a repeat.
SYLLABLES = ["ka", "lo", "mi", "ru", "te", "vo", "zi", "pa", "ne", "shu", "gor", "bel"]


def _word(n: int) -> str:
    a, b, c = n % 12, (n // 12) % 12, (n // 144) % 12
    return SYLLABLES[a] + SYLLABLES[b] + SYLLABLES[c]


def _dialogue(n_sessions: int, per_session: int) -> Dialogue:
    sessions, order = [], 0
    for s in range(n_sessions):
        turns = []
        for j in range(per_session):
            n = s * per_session + j
            w = [_word(5 * n + i) for i in range(5)]
            text = f"Yesterday I visited {w[0]} with {w[1]} and we bought a {w[2]} {w[3]} from {w[4]}."
            turns.append(Turn(f"D{s + 1}:{j + 1}", f"S{s + 1}", ["Ana", "Ben"][n % 2], text,
                              datetime(2023, 5, 1 + s), order, source_id=f"D{s + 1}:{j + 1}"))  # fmt: skip
            order += 1
        sessions.append(Session(f"S{s + 1}", datetime(2023, 5, 1 + s), s, tuple(turns)))
    return Dialogue("conv-fill", tuple(sessions), ())


# Table 1's methods: configs/experiment/table1.yaml's sweep list (the one list; read, not copied)
def _table1_methods() -> list[str]:
    from allmem.report.targets import sweep_points

    return [p[0].split("=", 1)[1] for p in sweep_points("table1", use_cache=False)]


TABLE1 = _table1_methods()


def _system(method: str, tmp_path: Path, cache_dir: Path, *extra: str):
    cfg = compose(f"method={method}", "embedder=hash", *in_folder(tmp_path, cache_dir), "run.progress=false",
                  "llm.max_concurrency=1", *extra)  # fmt: skip
    return pipeline.Services.build(cfg, tmp_path).system


def _ingested(method: str, dialogue: Dialogue, tmp_path: Path, cache_dir: Path, *extra: str):
    system = _system(method, tmp_path, cache_dir, *extra)
    system.reset(dialogue.id)
    pipeline.ingest(system, dialogue, progress=False)
    return system


QUERY = "Who told me about the telescope in Osaka?"
WHEN = datetime(2023, 6, 1)


@pytest.mark.parametrize("size", [512, 2048])
@pytest.mark.parametrize("method", TABLE1)
def test_each_method_reaches_the_size_when_its_memory_holds_enough(method, size, tmp_path, cache_dir):
    system = _ingested(method, _dialogue(3, 40), tmp_path, cache_dir)
    plain = pack(system.retrieve(QUERY, WHEN).units, size)
    ranking = Filling(system, size).retrieve(QUERY, WHEN).units
    packed = pack(ranking, size)
    assert packed.n_dropped > 0, f"{method}: the memory was exhausted at {packed.used_tokens} tokens"
    # full to within one unit: the first unit of the ranking left out did not fit
    first_out = next(u for u in ranking if u not in packed.units)
    assert size - count_tokens(context_line(first_out)) - 1 <= packed.used_tokens <= size, method
    if plain.n_dropped:  # the configured depth already overflowed the size: nothing was deepened
        assert packed.text == plain.text, method
    # the depth is put back: the next plain retrieval is the configured one
    assert pack(system.retrieve(QUERY, WHEN).units, size).text == plain.text


def test_memgpt_pages_further_when_its_main_context_holds_too_little(tmp_path, cache_dir):
    # a 3,000-token window (1,000 for messages): nearly every turn is evicted, so the main context holds too
    # little and filling must page further through the searches the plan made (offline: archival search with the
    # question, pages 0 and 1, and a recall search per content word: "yesterday" is in every turn)
    # archive_min_terms=0: the agent archives only turns with names, dates or numbers, none here, so the extra pages
    # come from the recall search alone
    system = _ingested(
        "memgpt",
        _dialogue(3, 40),
        tmp_path,
        cache_dir,
        "method.context_window=3000",
        "method.archive_min_terms=0",
    )
    query = "What was bought yesterday?"
    plain = system.retrieve(query, WHEN).units
    assert pack(plain, 2048).n_dropped == 0
    system.set_depth(3)  # two more pages of each search, ranked after everything else
    deeper = system.retrieve(query, WHEN).units
    system.set_depth(1)
    assert deeper[: len(plain)] == plain
    extra = deeper[len(plain) :]
    # recall search "yesterday": pages 1 and 2 are turns 6-15 of the recall storage, in stream order
    assert [u.id for u in extra] == [t.id for t in system.recall[5:15]]
    ranking = Filling(system, 2048).retrieve(query, WHEN).units
    packed = pack(ranking, 2048)
    first_out = next(u for u in ranking if u not in packed.units)
    assert 2048 - count_tokens(context_line(first_out)) - 1 <= packed.used_tokens <= 2048


@pytest.mark.parametrize("method", TABLE1)
def test_a_method_whose_memory_holds_less_stops_at_what_it_has(method, tmp_path, cache_dir):
    system = _ingested(method, _dialogue(1, 6), tmp_path, cache_dir)  # 6 short turns: far below 2048 tokens
    ranking = Filling(system, 2048).retrieve(QUERY, WHEN).units
    packed = pack(ranking, 2048)
    assert packed.n_dropped == 0 and packed.used_tokens < 2048
    system.set_depth(1024)  # as deep as it goes: nothing more than what filling returned
    try:
        deepest = system.retrieve(QUERY, WHEN).units
    finally:
        system.set_depth(1)
    assert {u.id for u in deepest} == {u.id for u in ranking}, method


def test_depth_rules_scale_the_configured_values(tmp_path, cache_dir):
    amem = _system("amem", tmp_path, cache_dir)
    amem.set_depth(4)
    assert amem.k == 40  # configs/method/amem.yaml: k 10
    amem.set_depth(1)
    assert amem.k == 10
    allmem = _system("allmem_hybrid", tmp_path, cache_dir)
    allmem.set_depth(2)  # configs/method/allmem_hybrid.yaml: k 5, L 40, K 128, fuse_depth 100; rrf_depth 50
    cfg = allmem.retrieval_cfg
    assert (cfg.k, cfg.L, cfg.K, cfg.fuse_depth, cfg.rrf_depth, cfg.H) == (10, 80, 256, 200, 100, 2)
    allmem.set_depth(1)
    assert (allmem.retrieval_cfg.k, allmem.retrieval_cfg.K) == (5, 128)
    memgpt = _system("memgpt", tmp_path, cache_dir)
    memgpt.set_depth(4)
    assert memgpt.extra_pages == 3
    with pytest.raises(ValueError, match="positive integer"):
        memgpt.set_depth(0)


def test_a_method_without_a_depth_is_refused():
    from allmem.systems import MemorySystem

    class Fixed(MemorySystem):
        name = "fixed"

        def reset(self, dialogue_id: str) -> None: ...

        def ingest(self, turn: Turn) -> None: ...

        def retrieve(self, query, when=None):
            return RetrievalResult(units=())

    with pytest.raises(ConfigError, match="budget.fill: method 'fixed' has no retrieval depth"):
        Filling(Fixed(), 512)


def test_fill_is_in_the_run_identity_and_not_in_the_bank_cache_key(tmp_path, cache_dir):
    base = ["method=allmem_noatc", "embedder=hash", f"paths.cache_dir={cache_dir}"]
    digest = "0" * 64
    plain = compose(*base)
    assert "fill" not in identity.identity(plain)["budget"]  # off: hashes of earlier runs hold
    h = identity.config_hash(plain, digest)
    assert identity.config_hash(compose(*base, "budget.fill=false"), digest) == h
    assert identity.config_hash(compose(*base, "budget.fill=true"), digest) != h
    # the bank cache key of All-Mem: the same whatever the budget and its fill
    keys = set()
    for extra in ([], ["budget.fill=true", "budget.tokens=512"]):
        cfg = compose(*base, *extra, f"run.bank_cache={tmp_path / 'banks'}")
        keys.add(pipeline.Services.build(cfg, tmp_path).system.bank_cache.key)
    assert len(keys) == 1


def test_the_table_from_fixture_runs_by_hand(tmp_path):
    import json

    import pandas as pd
    from report_fixture import write_run

    from allmem import files
    from allmem.report.paper import summarise

    root = tmp_path / "runs"
    point = ["+experiment=equal_context", "dataset=locomo"]
    # naive_rag at 512: questions 0-3 of 8 right (F1 1, evidence ranked first), the rest wrong (F1 0, not ranked);
    # packed 500 + i tokens; questions 0 and 1 full (a unit dropped). At 1024: every question right, 1000 tokens.
    small = write_run(
        root, [*point, "method=naive_rag", "budget.tokens=512"], lambda i: i < 4, lambda i: 500 + i
    )
    lines = files.read_jsonl(small / files.PREDICTIONS)
    for i, rec in enumerate(lines):
        rec["dropped_tokens"] = 40 if i < 2 else 0
    (small / files.PREDICTIONS).write_text("".join(json.dumps(r) + "\n" for r in lines))
    write_run(root, [*point, "method=naive_rag", "budget.tokens=1024"], lambda i: True, lambda i: 1000)
    written = summarise(["equal_context"], root, tmp_path / "out")
    frame = pd.read_csv(tmp_path / "out" / "tables" / "equal_context.csv")
    got = frame.set_index(["label", "size", "metric"])
    # by hand: F1 and R@5 4/8 = 50 at 512 and 100 at 1024; tokens (500 + ... + 507) / 8 = 503.5; full 2/8 = 25%
    assert got.loc[("naive_rag", 512, "F1"), ["n", "tokens", "full", "mean"]].tolist() == [
        8,
        503.5,
        25.0,
        50.0,
    ]
    assert got.loc[("naive_rag", 512, "R@5"), "mean"] == 50.0
    assert got.loc[("naive_rag", 1024, "F1"), ["tokens", "full", "mean", "low", "high"]].tolist() == [
        1000.0, 0.0, 100.0, 100.0, 100.0
    ]  # fmt: skip
    text = (tmp_path / "out" / "tables" / "equal_context.md").read_text()
    assert "| naive_rag | 512 | 8 | 504 | 25.0 |" in text  # 503.5 shown as 504 (round half to even)
    assert (
        "Missing (not run, failed or incomplete) in equal_context on locomo: method=naive_rag budget.tokens=2048"
        in text
    )
    assert {p.name for p in written} >= {"equal_context.md", "equal_context.csv", "equal_context.png"}


def _locomo_file(path: Path, dialogue: Dialogue, questions: list[str]) -> Path:
    import json

    conv: dict = {"speaker_a": "Ana", "speaker_b": "Ben"}
    for i, s in enumerate(dialogue.sessions, 1):
        conv[f"session_{i}_date_time"] = f"1:00 pm on {s.date.day} May, 2023"
        conv[f"session_{i}"] = [{"speaker": t.speaker, "dia_id": t.id, "text": t.text} for t in s.turns]
    qa = [{"question": q, "answer": "x", "evidence": ["D1:1"], "category": 4} for q in questions]
    sample = {"sample_id": "conv-fill", "qa": qa, "conversation": conv, "event_summary": {}, "observation": {},
              "session_summary": {}}  # fmt: skip
    path.write_text(json.dumps([sample]))
    return path


def test_a_filled_run_end_to_end(tmp_path, cache_dir):
    from allmem import files

    data = _locomo_file(
        tmp_path / "fill.json", _dialogue(3, 40), [QUERY, "What did Ben buy?", "Where was Ana?"]
    )
    base = ["method=amem", f"dataset.path={data}", f"run.root={tmp_path / 'runs'}", f"paths.cache_dir={cache_dir}",
            "embedder=hash", "run.progress=false", "budget.tokens=1024", "llm.max_concurrency=2"]  # fmt: skip
    plain = files.read_jsonl(runner_mod.run(compose(*base), []) / files.PREDICTIONS)
    filled_dir = runner_mod.run(compose(*base, "budget.fill=true"), [])
    filled = files.read_jsonl(filled_dir / files.PREDICTIONS)
    # A-Mem's 10 notes and their links hold about 580 tokens of this dialogue: each filled question is full
    assert all(r["context_tokens"] < 900 for r in plain)
    assert all(r["dropped_tokens"] > 0 and r["context_tokens"] > 900 for r in filled)
    contexts = files.read_jsonl(filled_dir / files.CONTEXTS)
    assert [count_tokens(c["text"]) for c in contexts] == [r["context_tokens"] for r in filled]
