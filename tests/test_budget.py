"""Budget packing: prefix cut in ranking order, chronological rendering, token accounting."""

from __future__ import annotations

from datetime import datetime

import pytest

from allmem.budget import chronological, context_line, pack
from allmem.tokens import count_tokens
from allmem.types import Retrieved, Utterance, format_date

D1 = datetime(2023, 5, 8, 13, 56)
D2 = datetime(2023, 5, 25, 10, 0)


def unit(
    uid: str, text: str, ts: datetime | None, speaker: str | None = "Caroline", caption: str | None = None
) -> Retrieved:
    return Retrieved.of_text(uid, text, (uid,), 0.0, ts, speaker=speaker, caption=caption)


def test_render_line_format() -> None:
    assert format_date(D1) == "8 May 2023"
    assert context_line(unit("D1:1", "hi there", D1)) == "[8 May 2023] Caroline: hi there"
    # the caption is one of the unit's parts, rendered after the text
    u = unit("D1:2", "look", D1, speaker="Mel", caption="a dog")
    assert context_line(u) == "[8 May 2023] Mel: look [image: a dog]"
    assert context_line(unit("x", "multi\nline\n\ntext", None, speaker=None)) == "multi line text"
    # a unit of several utterances (a merged All-Mem unit) stays one line
    merged = Retrieved(
        "m", (Utterance("A", "one."), Utterance("B", "two", "a cat")), ("D1:1", "D1:2"), 0.0, D1
    )
    assert context_line(merged) == "[8 May 2023] A: one. B: two [image: a cat]"


def test_chronological_natural_id_order() -> None:
    units = [unit("D2:1", "c", D2), unit("D1:10", "b", D1), unit("D1:5", "a", D1), unit("u", "z", None)]
    assert [u.id for u in chronological(units)] == ["D1:5", "D1:10", "D2:1", "u"]


def test_prefix_cut_and_accounting() -> None:
    a = unit("D2:1", "" + "apple " * 10, D2)
    big = unit("D1:1", "" + "banana " * 200, D1)
    c = unit("D1:2", "ok", D1)
    la, lbig, lc = (count_tokens(context_line(u)) for u in (a, big, c))
    budget = la + 1 + lc + 5  # room for a and c, not for big
    packed = pack([a, big, c], budget)
    # stop at the first unit that does not fit: c, though small, ranks after big and is dropped too
    assert [u.id for u in packed.units] == ["D2:1"]
    assert packed.n_dropped == 2
    assert packed.dropped_tokens == lbig + lc
    assert packed.used_tokens == la == count_tokens(packed.text)
    assert packed.lines == (context_line(a),)


def test_kept_units_are_rendered_chronologically() -> None:
    units = [unit("D2:1", "later", D2), unit("D1:3", "earlier", D1)]
    packed = pack(units, 1000)
    assert packed.text == "[8 May 2023] Caroline: earlier\n[25 May 2023] Caroline: later"
    assert packed.used_tokens == count_tokens(packed.text) <= 1000
    assert (packed.n_dropped, packed.dropped_tokens) == (0, 0)


def test_exact_fit_and_edges() -> None:
    a, b = unit("D1:1", "one two.", D1), unit("D1:2", "three.", D1)
    full = pack([a, b], 10_000)
    # ".\n" is one o200k token, so the joined text is cheaper than line + newline + line: still must fit
    assert full.used_tokens < count_tokens(full.lines[0]) + 1 + count_tokens(full.lines[1])
    assert pack([a, b], full.used_tokens).n_dropped == 0  # exactly the budget still fits
    assert pack([a, b], full.used_tokens - 1).n_dropped == 1
    empty = pack([a], 0)
    assert (empty.units, empty.text, empty.used_tokens, empty.n_dropped) == ((), "", 0, 1)
    assert pack([], 100).text == ""
    with pytest.raises(ValueError, match="budget.tokens"):
        pack([a], -1)
