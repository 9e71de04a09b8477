"""The offline diagnoser's features and confidence mapping, on hand-built cases with hand-computed confidences.

Embeddings are set by hand (unit vectors at chosen angles) so each expected p follows from the documented
mapping: ramp(x) = 0.5 + 0.4 (x - lo) / (hi - lo), clipped to [0, 0.99], minimum over features, then vetoes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from allmem.memory.atc import cues as tx
from allmem.memory.atc.drift import (
    Calibration,
    UnitView,
    diagnose,
    merge_confidence,
    ramp,
    segment,
    split_confidence,
    split_sentences_to_embed,
    update_confidence,
)

CAL = Calibration(names=frozenset({"ann", "bob"}))


def vec(cos: float) -> np.ndarray:
    """A unit vector with the given cosine to e1."""
    return np.array([cos, math.sqrt(max(0.0, 1 - cos * cos)), 0.0])


E1 = vec(1.0)


def unit(uid: str, text: str, order: int, z: np.ndarray = E1, speaker: str = "Ann") -> UnitView:
    return UnitView(uid, text, speaker, order, z)


# ---------------------------------------------------------------- mapping


def test_ramp_hits_its_anchors_and_clips() -> None:
    assert ramp(0.75, (0.75, 0.9)) == 0.5
    assert ramp(0.9, (0.75, 0.9)) == 0.9
    assert ramp(0.825, (0.75, 0.9)) == pytest.approx(0.7)
    assert ramp(5.0, (0.75, 0.9)) == 0.99 and ramp(-5.0, (0.75, 0.9)) == 0.0
    assert ramp(0.15, (0.35, 0.15)) == 0.9  # falling anchors (split separation)
    with pytest.raises(ValueError, match="anchors"):
        ramp(0.1, (0.2, 0.2))


# ---------------------------------------------------------------- text features


def test_text_features() -> None:
    assert tx.change_cues("Was it hard to get used to?") == ([], [])
    assert tx.change_cues("I used to live in Boston")[0] == ["used to"]
    assert "no longer" in tx.change_cues("I no longer smoke")[0]
    assert tx.holders("My sister drives a Tesla.") == {"sister"}
    assert tx.holders("My car is a Tesla.") == {"self"}
    assert tx.is_phatic("Thanks, Mel!", frozenset({"melanie"}))
    assert not tx.is_phatic("Thanks for the pottery tips!")
    assert tx.value_tokens("Hey Ann, I met Zoe in Paris at 5.", frozenset({"ann"})) == {"zoe", "paris", "5"}
    assert tx.sentences("Hi there! I moved.  New job too?") == ["Hi there!", "I moved.", "New job too?"]
    assert tx.is_grounded("I  moved.\nNew job", "Hi there! I moved. New job too?")
    assert not tx.is_grounded("I moved to Paris.", "Hi there! I moved. New job too?")


# ---------------------------------------------------------------- merge


def test_merge_restatement_is_confident() -> None:
    a = unit("a", "I adopted a dog named Max.", 1)
    b = unit("b", "As I mentioned, I adopted a dog named Max.", 9, vec(0.95))
    p, _ = merge_confidence(a, b, CAL)
    # sim 0.95 -> 0.99; jaccard 4/5 -> 0.99; containment 4/4 -> 0.99
    assert p == 0.99


def test_merge_vetoes() -> None:
    a = unit("a", "I adopted a dog named Max.", 1)
    assert merge_confidence(a, unit("b", "I adopted a dog named Max.", 2, speaker="Bob"), CAL)[0] == 0.0
    # jaccard 3/5 -> 0.98, containment 3/4 -> 0.74, sim .95 -> .99: 0.74, then the value conflict caps at 0.4
    p, why = merge_confidence(a, unit("b", "I adopted a dog named Rex.", 2, vec(0.95)), CAL)
    assert p == 0.4 and "conflicting values" in why
    p, why = merge_confidence(
        unit("a", "I live in Boston.", 1), unit("b", "My sister lives in Boston.", 2), CAL
    )
    assert p == 0.4 and "different people" in why
    p, why = merge_confidence(unit("a", "I eat meat.", 1), unit("b", "I don't eat meat.", 2), CAL)
    assert p == 0.4 and "negation" in why


def test_phatic_pairs_merge_on_similarity_only() -> None:
    a = unit("a", "Thanks!", 1)
    b = unit("b", "Thank you so much!", 5, vec(0.8))
    assert merge_confidence(a, b, CAL)[0] == 0.9  # ramp(0.8; 0.6, 0.8)
    off = Calibration(names=CAL.names, merge_phatic=False)
    assert merge_confidence(a, b, off)[0] == 0.0
    assert merge_confidence(a, unit("c", "I adopted a dog.", 6), CAL)[0] == 0.0  # phatic vs factual


# ---------------------------------------------------------------- update


def test_update_with_a_change_cue() -> None:
    old = unit("o", "I live in Boston.", 1)
    cur = unit("c", "I no longer live in Boston; I live in Denver now.", 5, vec(0.8))
    p, why = update_confidence(cur, old, CAL)
    # sim .8 -> .99; containment of {live, boston} in the cue-free new text = 1 -> .99; strong cue -> .97
    assert p == 0.97 and "no longer" in why
    assert update_confidence(old, cur, CAL)[0] == 0.0  # the superseded unit must be older


def test_update_substitution_in_a_state() -> None:
    old = unit("o", "My favorite food is sushi.", 1)
    cur = unit("c", "My favorite food is pizza.", 5, vec(0.7))
    # containment {favorit, food} 2/3 -> .99 ; sim .7 -> .99 ; one-word swap in a state ("is") -> 0.9
    assert update_confidence(cur, old, CAL)[0] == 0.9


def test_update_look_alikes_stay_below_theta() -> None:
    hike1 = unit("o", "I went hiking at Zion on Saturday.", 1)
    hike2 = unit("c", "I went hiking at Yosemite on Sunday.", 5, vec(0.8))
    assert update_confidence(hike2, hike1, CAL)[0] == 0.6  # events accumulate
    pet1 = unit("o", "I have a dog named Max.", 1)
    pet2 = unit("c", "I also have a cat named Luna.", 5, vec(0.8))
    assert update_confidence(pet2, pet1, CAL)[0] <= 0.5  # a complement, not a replacement
    q = unit("c", "Do you still live in Boston?", 5)
    assert update_confidence(q, unit("o", "I live in Boston.", 1), CAL)[0] == 0.0
    sis = unit("c", "My sister lives in Denver now.", 5, vec(0.8))
    assert update_confidence(sis, unit("o", "I live in Boston.", 1), CAL)[0] <= 0.5
    same = unit("c", "I live in Boston now.", 5)
    assert update_confidence(same, unit("o", "I live in Boston.", 1), CAL)[0] == 0.0  # nothing changed


# ---------------------------------------------------------------- split


def topic_embed(topics: dict[str, list[float]]):
    def embed(texts: list[str]) -> np.ndarray:
        return np.array([topics[t] for t in texts], dtype=np.float64)

    return embed


def test_split_separates_unrelated_sentences_and_keeps_greetings_attached() -> None:
    text = "Hey Bob! I went hiking at Zion on Saturday. My sister works as a nurse."
    hike, nurse = "I went hiking at Zion on Saturday.", "My sister works as a nurse."
    embed = topic_embed({"Hey Bob!": [0.0, 0.0, 1.0], hike: [1.0, 0.0, 0.0], nurse: [0.0, 1.0, 0.0]})
    segs, sep = segment(text, embed, CAL)
    # "Hey Bob!" has no content word (Bob is a speaker): it joins the next sentence instead of standing alone
    assert segs == ["Hey Bob! " + hike, nurse]
    assert all(tx.is_grounded(s, text) for s in segs)
    assert sep == pytest.approx(0.0)  # centroids (0.5, 0, 0.5) and (0, 1, 0) are orthogonal
    p, _, _ = split_confidence(unit("u", text, 1), embed, CAL)
    assert p == 0.99
    # a second sentence that leans on the first's topic: centroid cosine 0.6 >= split_join -> one segment
    embed = topic_embed({"Hey Bob!": [0.0, 0.0, 1.0], hike: [1.0, 0.0, 0.0], nurse: [0.6, 0.8, 0.0]})
    p, why, segs = split_confidence(unit("u", hike + " " + nurse, 1), embed, CAL)
    assert p == 0.0 and segs == [hike + " " + nurse]


def test_split_keeps_a_coherent_story_whole() -> None:
    s = ["I adopted a dog named Max.", "Max is a playful golden retriever.", "I walk Max every morning."]
    embed = topic_embed({s[0]: [1.0, 0.1], s[1]: [0.9, 0.3], s[2]: [1.0, 0.2]})
    p, why, segs = split_confidence(unit("u", " ".join(s), 1), embed, CAL)
    assert p == 0.0 and segs == [" ".join(s)] and why == "one topic"


def test_split_embeds_only_sentences_that_form_two_groups() -> None:
    """A greeting plus a question leans into one group before any similarity: nothing is embedded and the text is
    one segment, as before (when its sentences were embedded and then not used); two facts are embedded once."""
    calls: list[list[str]] = []

    def spy(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        return np.eye(len(texts), dtype=np.float64)

    text = "Hey Bob! How was the trip?"
    assert split_sentences_to_embed(unit("u", text, 1), ("split",), CAL) == []
    assert segment(text, spy, CAL) == ([text], 1.0) and calls == []
    two = "I went hiking at Zion on Saturday. My sister works as a nurse."
    sents = ["I went hiking at Zion on Saturday.", "My sister works as a nurse."]
    assert split_sentences_to_embed(unit("u", two, 1), ("split",), CAL) == sents
    assert split_sentences_to_embed(unit("u", two, 1), ("merge",), CAL) == []  # Split off: nothing to embed
    segment(two, spy, CAL)
    assert calls == [sents]


# Six unrelated facts: six standalone groups, one more than ``Calibration.split_max_groups``.
SIX_FACTS = [
    "I went hiking at Zion on Saturday.",
    "My sister works as a nurse.",
    "Our kitchen sink started leaking yesterday.",
    "Melanie adopted a grey kitten.",
    "The pottery class moved to Thursdays.",
    "My brother bought a used pickup truck.",
]


def test_split_leaves_units_of_more_than_max_groups_unembedded() -> None:
    """Five unrelated facts form five standalone groups and are segmented; a sixth makes the unit too many groups
    for Split (``split_max_groups`` = 5): nothing is embedded and the text stays one segment."""
    facts = SIX_FACTS
    calls: list[list[str]] = []

    def spy(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        return np.eye(8, dtype=np.float64)[: len(texts)]  # orthogonal: every pair of segments has cosine 0

    assert CAL.split_max_groups == 5
    five, six = " ".join(facts[:5]), " ".join(facts)
    assert split_sentences_to_embed(unit("u", five, 1), ("split",), CAL) == facts[:5]
    p, why, segs = split_confidence(unit("u", five, 1), spy, CAL)
    assert (p, segs, calls) == (0.99, facts[:5], [facts[:5]])
    calls.clear()
    assert split_sentences_to_embed(unit("u", six, 1), ("split",), CAL) == []
    assert split_confidence(unit("u", six, 1), spy, CAL) == (0.0, "one topic", [six]) and calls == []
    wider = Calibration(names=CAL.names, split_max_groups=6)
    assert split_confidence(unit("u", six, 1), spy, wider)[2] == facts and calls == [facts]


# ---------------------------------------------------------------- diagnose


def test_diagnose_builds_a_merge_clique_and_respects_ops() -> None:
    focal = unit("f", "As I said, I drive a Honda Civic.", 10)
    dup = unit("d", "I drive a Honda Civic.", 2, vec(0.97))
    dup2 = unit("e", "Just so you know, I drive a Honda Civic.", 5, vec(0.96))
    other = unit("o", "I drive a Tesla.", 3, vec(0.9))
    props = diagnose(focal, [dup, dup2, other], None, CAL, ops=("merge",))
    # f-d: sim .97, jaccard 3/4, containment 1 -> 0.99.  f-e: containment 3/4 ("know" vs "said") -> 0.74.
    # f-o: jaccard 1/5 and containment 1/2 -> 0.34 (and a value conflict, cap 0.4). Largest set first.
    assert [(p.op, set(p.target), p.p) for p in props] == [
        ("merge", {"f", "d", "e", "o"}, 0.34),
        ("merge", {"f", "d", "e"}, 0.74),
        ("merge", {"f", "d"}, 0.99),
    ]
    props = diagnose(focal, [dup, dup2, other], None, CAL, ops=("update",))
    assert all(p.op == "update" for p in props)
    assert diagnose(focal, [dup], None, CAL, ops=()) == []


def test_the_group_cap_fit_keeps_every_split_that_reaches_theta(capsys) -> None:
    """``scripts/fit_split_groups.py``'s rule on two hand-built candidates: a two-group unit of orthogonal facts
    (p = 0.99) and a six-group one. When the six facts are orthogonal too, its Split reaches theta and the cap must
    be 6; when every sentence embeds alike, both units join into one segment (p = 0): no candidate reaches theta and
    there is no cap to fit."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "fit_split_groups.py"
    spec = importlib.util.spec_from_file_location("fit_split_groups", path)
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    texts = [(" ".join(SIX_FACTS[:2]), CAL.names), (" ".join(SIX_FACTS), CAL.names)]

    def orthogonal(ts: list[str]) -> np.ndarray:
        return np.eye(8, dtype=np.float32)[: len(ts)]

    def alike(ts: list[str]) -> np.ndarray:
        return np.ones((len(ts), 8), dtype=np.float32)

    assert fit.table("orthogonal", texts, orthogonal, (0.6, 0.9)) == 6
    assert fit.table("alike", texts, alike, (0.6, 0.9)) is None
    out = capsys.readouterr().out
    assert "theta 0.9: every p >= 0.9 kept by a cap of 6" in out
    assert "sentences above a cap of 6: 0 (0%)" in out
    assert "theta 0.9: no candidate reaches it" in out
    assert fit.needed_cap({2: [0.95, 0.1], 3: [0.7], 7: [0.2]}, 0.6) == 3  # worked out by hand
