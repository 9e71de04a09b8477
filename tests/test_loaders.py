"""Loaders, dataset configs and data paths.

Expected numbers for the real LoCoMo come from the published dataset description (docs PROTOCOL.md, "Datasets"):
10 conversations, 5882 turns, 1986 questions in categories 282/321/96/841/446, 9 malformed evidence strings.
Expected values for the tiny fixtures are read off the fixture files by hand.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import zipfile
from datetime import datetime
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from allmem.types import Dialogue
from benchmarks import DatasetError, load_dataset
from benchmarks.locomo import load_locomo, parse_locomo_date, repair_evidence_ids
from benchmarks.longmemeval import load_longmemeval, parse_longmemeval_date


@pytest.fixture(scope="module")
def locomo_real(locomo_path: Path) -> list[Dialogue]:
    return load_locomo(locomo_path)


@pytest.fixture(scope="module")
def locomo_tiny(fixtures_dir: Path) -> list[Dialogue]:
    return load_locomo(fixtures_dir / "locomo_tiny.json")


@pytest.fixture(scope="module")
def lme_tiny(fixtures_dir: Path) -> list[Dialogue]:
    return load_longmemeval(fixtures_dir / "longmemeval_s_tiny.json")


def _check_stream(d: Dialogue) -> None:
    """Invariants every loader promises: chronological sessions, global 0-based order, turns dated by session."""
    dates = [s.date for s in d.sessions]
    assert dates == sorted(dates)
    assert [s.index for s in d.sessions] == list(range(len(d.sessions)))
    turns = d.turns()
    assert [t.order for t in turns] == list(range(len(turns)))
    for s in d.sessions:
        assert all(t.timestamp == s.date and t.session_id == s.id for t in s.turns)
    assert len({t.id for t in turns}) == len(turns)


# --- real LoCoMo ------------------------------------------------------------------------------------------


def test_real_locomo_counts(locomo_real: list[Dialogue]) -> None:
    assert len(locomo_real) == 10
    assert sum(len(d.turns()) for d in locomo_real) == 5882
    questions = [q for d in locomo_real for q in d.questions]
    assert len(questions) == 1986
    cats = collections.Counter(q.category for q in questions)
    assert [cats[c] for c in (1, 2, 3, 4, 5)] == [282, 321, 96, 841, 446]
    assert sum(1 for q in questions if not q.evidence) == 4
    for d in locomo_real:
        _check_stream(d)
    # Finding: in the real file dates already follow session numbers, strictly (no ties), so the date sort
    # changes nothing there; the tiny fixture is what exercises reordering.
    assert sum(len(d.sessions) for d in locomo_real) == 272
    for d in locomo_real:
        assert [s.id for s in d.sessions] == [f"D{i}" for i in range(1, len(d.sessions) + 1)]
        assert all(a.date < b.date for a, b in zip(d.sessions, d.sessions[1:], strict=False))


def test_real_locomo_details(locomo_real: list[Dialogue]) -> None:
    conv26 = locomo_real[0]
    assert [d.id for d in locomo_real][:3] == ["conv-26", "conv-30", "conv-41"]
    assert conv26.speakers == ("Caroline", "Melanie")
    # 35 session_N_date_time keys, only 19 with a session_N list.
    assert len(conv26.sessions) == 19
    first = conv26.sessions[0].turns[0]
    assert (first.id, first.source_id, first.speaker) == ("D1:1", "D1:1", "Caroline")
    assert first.timestamp == datetime(2023, 5, 8, 13, 56)  # "1:56 pm on 8 May, 2023"
    q3 = conv26.questions[3]
    assert (q3.id, q3.text, q3.gold, q3.evidence) == (
        "conv-26:q0003",
        "What did Caroline research?",
        "Adoption agencies",
        ("D2:8",),
    )
    assert conv26.questions[1].gold == "2022"  # an int in the file
    bowl = next(
        q for q in conv26.questions if q.text.startswith("Did Caroline make the black and white bowl")
    )
    assert (bowl.category, bowl.gold) == (5, "Yes")  # adversarial_answer wins over answer ("No")
    captioned = [t for t in conv26.turns() if t.caption]
    assert captioned and all(t.render().endswith(f"[image: {t.caption}]") for t in captioned)


def _unmatched(dialogues: list[Dialogue]) -> list[str]:
    out = []
    for d in dialogues:
        ids = {t.id for t in d.turns()}
        out += [e for q in d.questions for e in q.evidence if e not in ids]
    return out


def test_real_locomo_evidence_raw_and_repaired(
    locomo_path: Path, locomo_real: list[Dialogue], caplog: pytest.LogCaptureFixture
) -> None:
    assert len(_unmatched(locomo_real)) == 9
    with caplog.at_level(logging.INFO, logger="benchmarks.locomo"):
        repaired = load_locomo(locomo_path, repair_evidence=True)
    assert sorted(_unmatched(repaired)) == ["D", "D10:19", "D4:36"]
    by_id = {q.id: q for d in repaired for q in d.questions}
    assert by_id["conv-26:q0037"].evidence == ("D8:6", "D9:17")
    assert by_id["conv-50:q0069"].evidence == ("D30:5",)
    assert "D11:26" in by_id["conv-43:q0018"].evidence
    assert by_id["conv-49:q0031"].evidence == ("D9:1", "D4:4", "D4:6")
    logged = caplog.text
    assert "'D30:05' repaired to 'D30:5'" in logged and "'D:11:26' repaired to 'D11:26'" in logged
    assert "'D8:6; D9:17' split" in logged


def test_real_locomo_zip_matches_json(locomo_path: Path, locomo_real: list[Dialogue]) -> None:
    zipped = load_locomo(locomo_path.with_name("locomo10.zip"))
    assert {d.source for d in zipped} == {str(locomo_path.with_name("locomo10.zip"))}
    assert [dataclasses.replace(d, source="") for d in zipped] == [
        dataclasses.replace(d, source="") for d in locomo_real
    ]


# --- tiny LoCoMo fixture ----------------------------------------------------------------------------------


def test_tiny_locomo_stream(locomo_tiny: list[Dialogue]) -> None:
    assert [d.id for d in locomo_tiny] == ["conv-1", "conv-2"]
    conv1 = locomo_tiny[0]
    # Session 3 is dated 2 June, before session 2 (20 June); session_4_date_time has no session_4.
    assert [s.id for s in conv1.sessions] == ["D1", "D3", "D2"]
    assert [t.id for t in conv1.turns()][4:7] == ["D3:1", "D3:2", "D3:3"]
    assert conv1.sessions[1].date == datetime(2023, 6, 2, 19, 30)
    image = conv1.sessions[0].turns[2]
    assert image.caption == "a photo of a golden retriever puppy sitting on the grass"
    assert conv1.sessions[0].turns[0].caption is None
    for d in locomo_tiny:
        _check_stream(d)
    assert sum(len(d.turns()) for d in locomo_tiny) == 18


def test_tiny_locomo_questions(locomo_tiny: list[Dialogue]) -> None:
    qs = [q for d in locomo_tiny for q in d.questions]
    assert collections.Counter(q.category for q in qs) == {1: 2, 2: 3, 3: 2, 4: 4, 5: 3}
    by_id = {q.id: q for q in qs}
    assert by_id["conv-1:q0005"].gold == "2021" and by_id["conv-1:q0006"].gold == "3"
    assert by_id["conv-1:q0004"].gold == "golden retriever"
    assert by_id["conv-2:q0005"].gold == "Yes"
    assert by_id["conv-2:q0003"].evidence == ("D2:04",)
    assert all(q.date is None and q.question_type is None for q in qs)


def test_tiny_locomo_repair(fixtures_dir: Path) -> None:
    repaired = load_locomo(fixtures_dir / "locomo_tiny.json", repair_evidence=True)
    assert repaired[1].questions[3].evidence == ("D2:4",)


def test_category5_falls_back_to_answer(tmp_path: Path, fixtures_dir: Path) -> None:
    data = json.loads((fixtures_dir / "locomo_tiny.json").read_text())
    data[0]["qa"] = [{"question": "Q?", "answer": "Not mentioned", "evidence": [], "category": 5}]
    f = tmp_path / "fallback.json"
    f.write_text(json.dumps(data))
    assert load_locomo(f)[0].questions[0].gold == "Not mentioned"


def _flat(sample: dict) -> dict:
    """A sample in the official zip's layout: conversation keys at top level, no sample_id."""
    return {**sample["conversation"], "qa": sample["qa"]}


def test_folder_and_zip_layouts(tmp_path: Path, fixtures_dir: Path, locomo_tiny: list[Dialogue]) -> None:
    samples = json.loads((fixtures_dir / "locomo_tiny.json").read_text())
    folder = tmp_path / "locomo10_v2"
    folder.mkdir()
    archive = tmp_path / "tiny.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        # Written in reverse to check numeric ordering ("2.json" after "1.json", like 26 < 30 < 41).
        for sample in reversed(samples):
            name = sample["sample_id"].split("-")[1] + ".json"
            (folder / name).write_text(json.dumps(_flat(sample)))
            zf.writestr(f"data/multimodal_dialog/locomo10_v2/{name}", json.dumps(_flat(sample)))
    expected = [dataclasses.replace(d, source="") for d in locomo_tiny]
    for path in (folder, archive):
        loaded = load_locomo(path)
        assert [dataclasses.replace(d, source="") for d in loaded] == expected


def test_repair_evidence_ids_rules() -> None:
    known = {"D1:1", "D1:2", "D11:26", "D30:5"}
    assert repair_evidence_ids(["D1:1; D1:2"], known) == ("D1:1", "D1:2")
    assert repair_evidence_ids(["D30:05", "D:11:26"], known) == ("D30:5", "D11:26")
    assert repair_evidence_ids(["D", "D9:9", "D1:1", "D1:1"], known) == ("D", "D9:9", "D1:1")
    assert repair_evidence_ids(["D2:05"], known) == ("D2:05",)  # D2:5 does not exist: no guess


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56)),
        ("10:37 am on 27 June, 2023", datetime(2023, 6, 27, 10, 37)),
        ("12:00 am on 1 January, 2024", datetime(2024, 1, 1, 0, 0)),
        ("12:30 pm on 29 February, 2024", datetime(2024, 2, 29, 12, 30)),
    ],
)
def test_parse_locomo_date(text: str, expected: datetime) -> None:
    assert parse_locomo_date(text) == expected


@pytest.mark.parametrize("text", ["yesterday", "13:00 pm on 8 May, 2023", "1:56 pm on 30 February, 2023", ""])
def test_parse_locomo_date_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="cannot parse date"):
        parse_locomo_date(text)


# --- LongMemEval ------------------------------------------------------------------------------------------


def test_tiny_longmemeval(lme_tiny: list[Dialogue]) -> None:
    assert [d.id for d in lme_tiny] == ["7161e7e2", "gpt4_2f8e1c90", "0b6a3f12_abs"]
    for d in lme_tiny:
        _check_stream(d)
        assert len(d.questions) == 1 and d.questions[0].id == d.id == d.questions[0].dialogue_id
        assert d.speakers == ("User", "Assistant")
    first = lme_tiny[0]
    # Listed 20th, 22nd, 21st of May: streamed 20th, 21st, 22nd.
    assert [s.id for s in first.sessions] == ["sharegpt_Qm8Zr1A_0", "ultrachat_118203", "answer_7161e7e2_1"]
    evid = first.sessions[2].turns[0]
    # source_id: the turn id, so every method's units carry turns (the scorer credits them to their sessions)
    assert (evid.id, evid.source_id, evid.session_id, evid.role, evid.speaker) == (
        "answer_7161e7e2_1:0",
        "answer_7161e7e2_1:0",
        "answer_7161e7e2_1",
        "user",
        "User",
    )
    assert first.sessions[2].turns[1].speaker == "Assistant"
    q = first.questions[0]
    assert (q.gold, q.evidence, q.question_type, q.category) == (
        "Business Administration",
        ("answer_7161e7e2_1",),
        "single-session-user",
        None,
    )
    assert q.date == datetime(2023, 5, 30, 23, 40)
    temporal = lme_tiny[1].questions[0]
    assert temporal.gold == "10" and temporal.evidence == ("answer_2f8e1c90_1", "answer_2f8e1c90_2")
    assert [q.id.endswith("_abs") for d in lme_tiny for q in d.questions] == [False, False, True]


def test_parse_longmemeval_date() -> None:
    assert parse_longmemeval_date("2023/05/30 (Tue) 23:40") == datetime(2023, 5, 30, 23, 40)
    with pytest.raises(ValueError, match="cannot parse date"):
        parse_longmemeval_date("2023-05-30 23:40")


# --- malformed input --------------------------------------------------------------------------------------

MALFORMED = [
    ("locomo_bad_date.json", "conv-26", "conversation.session_3_date_time", "cannot parse date 'yesterday'"),
    ("locomo_missing_speaker.json", "conv-30", "conversation.session_1[1].speaker", "missing"),
    ("locomo_bad_category.json", "conv-41", "qa[1].category", "expected integer, got str"),
    ("locomo_evidence_not_list.json", "conv-42", "qa[0].evidence", "expected list, got str"),
    ("locomo_missing_answer.json", "conv-43", "qa[0].answer", "missing"),
    ("locomo_session_without_date.json", "conv-44", "conversation.session_2_date_time", "missing"),
    (
        "locomo_duplicate_dia_id.json",
        "conv-47",
        "conversation.session_1[1].dia_id",
        "duplicate dia_id 'D1:1'",
    ),
    ("locomo_missing_sample_id.json", "#0", "sample_id", "missing"),
    ("locomo_truncated.json", None, None, "invalid JSON"),
    ("locomo_not_samples.json", None, None, "expected a list of LoCoMo samples"),
    ("longmemeval_bad_date.json", "e47becba", "haystack_dates[1]", "cannot parse date 'May 22nd'"),
    ("longmemeval_bad_question_date.json", "gpt4_59c863d7", "question_date", "cannot parse date"),
    ("longmemeval_length_mismatch.json", "51a45a95", "haystack_sessions", "lengths differ"),
    ("longmemeval_bad_role.json", "0a995998", "haystack_sessions[0][1].role", "got 'system'"),
    ("longmemeval_missing_question.json", "6a1eabeb_abs", "question", "missing"),
    ("longmemeval_not_list.json", None, None, "expected a JSON list of question records"),
]


@pytest.mark.parametrize(("name", "sample", "field", "problem"), MALFORMED)
def test_malformed_fixture(
    fixtures_dir: Path, name: str, sample: str | None, field: str | None, problem: str
) -> None:
    path = fixtures_dir / "malformed" / name
    loader = load_locomo if name.startswith("locomo") else load_longmemeval
    with pytest.raises(DatasetError) as info:
        loader(path)
    err, msg = info.value, str(info.value)
    assert err.file == str(path) and msg.startswith(f"{path}: ")
    assert problem in msg
    assert err.sample == sample and err.field == field
    if sample is not None:
        assert f"sample {sample}: " in msg
    if field is not None:
        assert f"field '{field}': " in msg


def test_every_malformed_fixture_is_tested(fixtures_dir: Path) -> None:
    assert sorted(p.name for p in (fixtures_dir / "malformed").iterdir()) == sorted(m[0] for m in MALFORMED)


def test_malformed_zip_member_is_named(tmp_path: Path) -> None:
    archive = tmp_path / "locomo10.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("data/26.json", json.dumps({"speaker_a": "A", "speaker_b": "B", "qa": []}))
    with pytest.raises(DatasetError, match=r"locomo10\.zip:data/26\.json: sample conv-26: .*no session_N"):
        load_locomo(archive)


def test_longmemeval_dict_file_rejected_with_type(tmp_path: Path) -> None:
    f = tmp_path / "lme.json"
    f.write_text('"just a string"')
    with pytest.raises(DatasetError, match="lme.json: expected a JSON list of question records, got str"):
        load_longmemeval(f)


# --- configs and load_dataset -----------------------------------------------------------------------------


def _dataset_cfg(repo_root: Path, name: str, **overrides: object) -> object:
    cfg = OmegaConf.load(repo_root / "configs" / "dataset" / f"{name}.yaml")
    for k, v in overrides.items():
        OmegaConf.update(cfg, k, v)
    return cfg


def test_dataset_configs_have_contract_keys(repo_root: Path) -> None:
    for name, target in (
        ("locomo", "benchmarks.locomo.load_locomo"),
        ("longmemeval_s", "benchmarks.longmemeval.load_longmemeval"),
    ):
        cfg = OmegaConf.to_container(_dataset_cfg(repo_root, name))
        assert cfg["name"] == name and cfg["_target_"] == target
        assert cfg["path"] is None and cfg["limit_dialogues"] is None and cfg["limit_questions"] is None
    assert OmegaConf.load(repo_root / "configs/dataset/locomo.yaml").repair_evidence is False


def test_load_dataset_limits(repo_root: Path, fixtures_dir: Path) -> None:
    tiny = str(fixtures_dir / "locomo_tiny.json")
    full = load_dataset(_dataset_cfg(repo_root, "locomo", path=tiny))
    assert [len(d.questions) for d in full] == [8, 6]
    cut = load_dataset(_dataset_cfg(repo_root, "locomo", path=tiny, limit_dialogues=1, limit_questions=2))
    assert [d.id for d in cut] == ["conv-1"]
    assert [q.id for q in cut[0].questions] == ["conv-1:q0000", "conv-1:q0001"]
    assert cut[0].sessions == full[0].sessions
    repaired = load_dataset(_dataset_cfg(repo_root, "locomo", path=tiny, repair_evidence=True))
    assert repaired[1].questions[3].evidence == ("D2:4",)
    lme = load_dataset(
        _dataset_cfg(
            repo_root, "longmemeval_s", path=str(fixtures_dir / "longmemeval_s_tiny.json"), limit_dialogues=2
        )
    )
    assert [d.id for d in lme] == ["7161e7e2", "gpt4_2f8e1c90"]


def test_limit_sessions_keeps_the_first_sessions_and_the_questions_they_answer(
    repo_root: Path, fixtures_dir: Path
) -> None:
    tiny = str(fixtures_dir / "locomo_tiny.json")
    cut = load_dataset(_dataset_cfg(repo_root, "locomo", path=tiny, limit_sessions=2))
    # conv-1's sessions in date order are D1, D3, D2: D2 goes, and with it every question with evidence in D2
    assert [s.id for s in cut[0].sessions] == ["D1", "D3"]
    assert [q.id for q in cut[0].questions] == [f"conv-1:q000{i}" for i in (0, 1, 4, 5, 7)]
    # conv-2 has two sessions: kept whole, its unmatched-evidence question (D2:04) too
    assert len(cut[1].sessions) == 2 and len(cut[1].questions) == 6
    none = load_dataset(_dataset_cfg(repo_root, "locomo", path=tiny, limit_sessions=0))
    assert [(d.sessions, d.questions) for d in none] == [((), ())] * 2


def test_limit_sessions_on_the_real_locomo(repo_root: Path) -> None:
    """conv-26's first session holds 18 turns, and 4 of its questions cite evidence only from it (D1:*), counted
    from the raw file here."""
    import json
    import re

    from allmem.paths import resolve_data_path

    raw = json.loads(resolve_data_path("locomo", None).read_text(encoding="utf-8"))[0]
    by_hand = [
        qa
        for qa in raw["qa"]
        if qa.get("evidence") and all(re.fullmatch(r"D1:\d+", e) for e in qa["evidence"])
    ]
    (conv,) = load_dataset(_dataset_cfg(repo_root, "locomo", limit_dialogues=1, limit_sessions=1))
    assert sum(len(s.turns) for s in conv.sessions) == len(raw["conversation"]["session_1"]) == 18
    assert [q.text for q in conv.questions] == [qa["question"] for qa in by_hand] and len(by_hand) == 4


def test_load_dataset_real_locomo_by_default(repo_root: Path) -> None:
    """With path null the resolver finds data/ or ../shared (CI has the latter)."""
    dialogues = load_dataset(_dataset_cfg(repo_root, "locomo", limit_dialogues=1, limit_questions=1))
    assert [(d.id, len(d.questions)) for d in dialogues] == [("conv-26", 1)]


def test_load_dataset_rejects_bad_limit(fixtures_dir: Path) -> None:
    cfg = {
        "name": "locomo",
        "_target_": "benchmarks.locomo.load_locomo",
        "path": str(fixtures_dir / "locomo_tiny.json"),
        "limit_dialogues": -1,
    }
    with pytest.raises(ValueError, match="limit_dialogues"):
        load_dataset(cfg)
