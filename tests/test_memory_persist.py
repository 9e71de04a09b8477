"""Persistence: save -> load -> retrieve is identical; evidence tampering is refused; writes are atomic."""

from __future__ import annotations

import json

import numpy as np
import pytest

from allmem.defaults import paper
from allmem.embed import HashEmbedder
from allmem.memory.bank import BankError, MemoryBank
from allmem.memory.persist import EMBEDDINGS, UNITS, load_bank, save_bank
from allmem.memory.retrieve import RetrievalConfig, Retriever
from allmem.memory.write import OnlineWriter, WriteConfig
from tests.fakes import echo_describe, make_turns

TEXTS = [
    "Ann loves hiking in the Alps",
    "Bob bought a red bike",
    "Ann went hiking with her sister in the Alps",
    "Caroline adopted a puppy named Max",
    "Bob rides the red bike to work",
    "Max the puppy chewed Caroline's shoes",
    "Ann wants to climb Mont Blanc",
]
QUERIES = ["hiking in the Alps", "red bike", "puppy Max", "Mont Blanc climb"]


def _built_bank() -> MemoryBank:
    bank = MemoryBank(dim=64, d_sigma=2)
    w = OnlineWriter(bank, HashEmbedder(), None, paper(WriteConfig, sem_threshold=0.1), echo_describe)
    for t in make_turns(TEXTS):
        w.add(t)
    w.flush()
    # lineage links and archived units, as ATC would leave them
    bank.add_link("version", "u000002", "u000000")
    bank.archive("u000000")
    bank.add_link("sibling", "u000004", "u000001")
    bank.archive("u000001")
    bank.set_descriptor(
        "u000003", "Caroline has a puppy Max", ["Max"], HashEmbedder().encode(["puppy Max"])[0]
    )
    return bank


def _answers(
    bank: MemoryBank, surface: str = "visible", stage1: str = "dense"
) -> list[tuple[list[str], list[float]]]:
    cfg = paper(RetrievalConfig, k=3, L=6, K=4, H=2, surface=surface, stage1=stage1)
    r = Retriever(bank, HashEmbedder(), cfg)
    return [(res.ids, res.scores) for res in (r.retrieve(q) for q in QUERIES)]


@pytest.mark.parametrize(("surface", "stage1"), [("visible", "dense"), ("full", "hybrid")])
def test_save_load_retrieve_is_identical(tmp_path, surface: str, stage1: str) -> None:
    bank = _built_bank()
    before = _answers(bank, surface, stage1)
    save_bank(bank, tmp_path / "bank", extra={"last_id": "u000006"})
    loaded, extra = load_bank(tmp_path / "bank")
    assert extra == {"last_id": "u000006"}
    assert _answers(loaded, surface, stage1) == before  # ids and float scores exactly equal
    assert loaded.links() == bank.links()
    assert loaded.visible_ids() == bank.visible_ids()
    assert [u for u in loaded.units()] == [u for u in bank.units()]
    np.testing.assert_array_equal(loaded.full_matrix_view(), bank.full_matrix_view())
    # the loaded bank keeps working: ids continue, the cap still holds
    assert (
        loaded.create_unit([{"text": "x"}], "x", [], np.ones(64), bank.get("u000000").timestamp) == "u000007"
    )
    assert loaded.d_sigma == 2
    loaded.check_invariants()


def test_no_pickle_and_tampered_evidence_is_refused(tmp_path) -> None:
    path = save_bank(_built_bank(), tmp_path / "bank")
    np.load(path / EMBEDDINGS, allow_pickle=False)  # plain array
    lines = (path / UNITS).read_text().splitlines()
    rec = json.loads(lines[3])
    rec["evidence"][0]["text"] = "Caroline adopted a kitten"
    lines[3] = json.dumps(rec)
    (path / UNITS).write_text("\n".join(lines) + "\n")
    with pytest.raises(BankError, match=r"units.jsonl: unit u000003: field 'evidence'"):
        load_bank(path)


def test_save_is_atomic_and_replaces(tmp_path) -> None:
    bank = _built_bank()
    target = tmp_path / "bank"
    save_bank(bank, target)
    bank.archive("u000006")
    save_bank(bank, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bank"]  # no temporary or old folders left
    assert not load_bank(target)[0].is_visible("u000006")
    with pytest.raises(FileNotFoundError, match="meta.json"):
        load_bank(tmp_path / "missing")
