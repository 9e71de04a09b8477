"""The example system's own test: the ranking it promises, computed by hand (run: pytest examples/my_memory)."""

from __future__ import annotations

from datetime import datetime

from allmem.types import Turn
from examples.my_memory.system import WordOverlap, words


def _turn(i: int, text: str) -> Turn:
    return Turn(
        id=f"D1:{i}", session_id="S1", speaker="Ana", text=text, timestamp=datetime(2023, 5, 8), order=i
    )


def test_most_shared_words_first_then_most_recent() -> None:
    system = WordOverlap(k=3)
    system.reset("d")
    for i, text in enumerate(["I moved to Lisbon", "Lisbon food is great", "My dog likes food", "Hello"]):
        system.ingest(_turn(i, text))
    ranked = system.retrieve("What food is there in Lisbon?").units
    # query words: what, food, there, lisbon. Turn 1 shares food + lisbon (2); turns 0 and 2 share one each,
    # turn 2 being more recent; k = 3 cuts turn 3.
    assert [u.source_ids for u in ranked] == [("D1:1",), ("D1:2",), ("D1:0",)]
    assert [u.score for u in ranked] == [2.0, 1.0, 1.0]
    assert ranked[0].text == "Ana: Lisbon food is great"


def test_reset_forgets_and_short_words_do_not_count() -> None:
    assert words("I am in Lisbon") == {"lisbon"}
    system = WordOverlap(k=5)
    system.reset("a")
    system.ingest(_turn(0, "Lisbon"))
    system.reset("b")
    assert system.retrieve("Lisbon").units == ()
