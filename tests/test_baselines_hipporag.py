"""HippoRAG 2's graph and Personalized PageRank, against hand-built expectations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from allmem.systems import Resources
from baselines.hipporag import HippoRAG2, closest_candidate, normalise
from tests.baselines_support import TableEmbedder, feed, scripted, seen, sessions


def _system(rows, embedder, script=None, **kw) -> HippoRAG2:
    """A HippoRAG 2 over one session of ``(id, speaker, text, [[s, p, o], ...])`` rows, triples scripted."""
    llm = scripted(
        {
            "hipporag_ner": [{"named_entities": []} for _ in rows],
            "hipporag_triples": [{"triples": r[3]} for r in rows],
            **(script or {}),
        }
    )
    system = HippoRAG2(resources=Resources(embedder=embedder, llm=llm), **kw)
    feed(system, sessions([r[:3] for r in rows]))
    return system


def _axis(i: int) -> list[float]:
    return [0.0] * i + [1.0]


def test_ppr_equals_the_linear_solve_on_a_three_passage_graph() -> None:
    rows = [
        ("D1:1", "Ana", "Ana adopted Biscuit", [["Ana", "adopted", "Biscuit"]]),
        ("D1:2", "Ben", "Biscuit attends a puppy class", [["Biscuit", "attends", "Puppy class!"]]),
        ("D1:3", "Carl", "Carl runs marathons", [["Carl", "runs", "marathon"]]),
    ]
    pins = {p: _axis(i) for i, p in enumerate(["ana", "biscuit", "puppy class", "carl", "marathon"])}
    system = _system(rows, TableEmbedder(pins))
    assert system.phrases == [
        "ana",
        "biscuit",
        "puppy class",
        "carl",
        "marathon",
    ]  # normalised subjects/objects
    # by hand: subject-object pairs are two parallel edges of weight 1; passage-phrase edges weight 1
    w = np.zeros((8, 8))
    for a, b, x in [
        (0, 1, 2),
        (1, 2, 2),
        (3, 4, 2),
        (5, 0, 1),
        (5, 1, 1),
        (6, 1, 1),
        (6, 2, 1),
        (7, 3, 1),
        (7, 4, 1),
    ]:
        w[a, b] = w[b, a] = x
    reset = np.array([0.7, 0.0, 0.0, 0.1, 0.0, 0.05, 0.02, 0.01])
    d = 0.5
    p = (1 - d) * (reset / reset.sum()) @ np.linalg.inv(np.eye(8) - d * (w / w.sum(axis=1, keepdims=True)))
    assert system.ppr(reset) == pytest.approx(p[5:], abs=1e-6)
    assert system.stats()["edges"] == 12 and "synonym_edges" not in system.stats()


@pytest.mark.parametrize(("cos", "edges"), [(0.81, 2), (0.79, 0)])
def test_synonym_edge_at_0_81_not_at_0_79(cos: float, edges: int) -> None:
    rows = [
        ("D1:1", "Ana", "Ana has a pup", [["Ana", "has", "pup"]]),
        ("D1:2", "Ben", "Ben likes a puppy", [["Ben", "likes", "puppy"]]),
    ]
    pins = {
        "pup": [1, 0, 0, 0],
        "puppy": [cos, math.sqrt(1 - cos**2), 0, 0],
        "ana": _axis(2),
        "ben": _axis(3),
    }
    system = _system(rows, TableEmbedder(pins))
    assert system.tally["synonym_edges"] == edges  # one per direction, as upstream's node_to_node_stats
    pup, puppy = system.phrases.index("pup"), system.phrases.index("puppy")
    assert system.graph.are_adjacent(pup, puppy) is (edges > 0)


TOY = [
    ("D1:1", "Ana", "Ana has a pup", [["Ana", "has", "pup"]]),
    ("D1:2", "Carl", "Carl bakes bread", [["Carl", "bakes", "bread"]]),
    ("D1:3", "Ben", "Ben likes a puppy", [["Ben", "likes", "puppy"]]),
]
QUESTION = "Who likes a puppy?"


def _toy_embedder() -> TableEmbedder:
    pins = {
        "pup": [1, 0], "puppy": [0.85, math.sqrt(1 - 0.85**2)],
        **{p: _axis(i + 2) for i, p in enumerate(["ana", "ben", "carl", "bread"])},
        QUESTION: _axis(6),
        "Ben: Ben likes a puppy": _axis(6),
        "Carl: Carl bakes bread": [0] * 6 + [0.6, 0.8],  # denser than Ana's, in a component no seed reaches
        "Ana: Ana has a pup": _axis(9),  # dense score 0 after min-max
        str(("ben", "likes", "puppy")): [0] * 6 + [0.9, math.sqrt(1 - 0.81)],
        str(("ana", "has", "pup")): _axis(10),
        str(("carl", "bakes", "bread")): _axis(11),
    }  # fmt: skip
    return TableEmbedder(pins)


def test_a_passage_reachable_only_through_a_synonym_outranks_a_denser_unconnected_one() -> None:
    kept = {"hipporag_filter": [{"fact": [["Ben", "likes", "puppy"]]}]}
    system = _system(TOY, _toy_embedder(), kept)
    res = system.retrieve(QUESTION)
    assert [u.id for u in res.units] == ["D1:3", "D1:1", "D1:2"]
    assert [u.score for u in res.units] == sorted((u.score for u in res.units), reverse=True)
    shown = seen(system.llm, "hipporag_filter")[0]
    assert shown.phase == "retrieve" and shown.variables["candidates"][0] == ["ben", "likes", "puppy"]
    assert "dense_fallback" not in system.tally
    # without the synonym edge (cosine 0.85 < 0.9) Ana's passage has no path from the seeds and drops below Carl's
    unlinked = _system(TOY, _toy_embedder(), kept, synonym_threshold=0.9)
    assert [u.id for u in unlinked.retrieve(QUESTION).units] == ["D1:3", "D1:2", "D1:1"]


@pytest.mark.parametrize(
    ("reply", "kw"),
    [
        ({"fact": []}, {}),
        ({"fact": [5]}, {}),
        ("no json", {}),
        ({"fact": [["x", "y", "z"]]}, {"filter_match_cutoff": 0.9}),
    ],
)
def test_empty_or_unknown_filter_result_falls_back_to_dense(reply, kw) -> None:
    system = _system(TOY, _toy_embedder(), {"hipporag_filter": [reply]}, **kw)
    res = system.retrieve(QUESTION)
    assert [u.id for u in res.units] == ["D1:3", "D1:2", "D1:1"]  # dense order
    assert [u.score for u in res.units] == pytest.approx([1.0, 0.6, 0.0], abs=1e-6)
    assert system.tally["dense_fallback"] == 1
    if kw:  # a real triple below the cutoff is skipped and counted
        assert system.tally["skipped_unknown_fact"] == 1


@pytest.mark.parametrize(
    "fact",
    [
        ["Ben", "likes", "puppy"],  # the clean reply
        ["Ben", "is fond of", "puppies"],  # paraphrased predicate and plural object
        ["ben", "likes", "a puppy", "extra"],  # a fourth part
    ],
)
def test_a_paraphrased_filter_fact_maps_to_its_closest_candidate(fact) -> None:
    system = _system(TOY, _toy_embedder(), {"hipporag_filter": [{"fact": [fact]}]})
    assert [u.id for u in system.retrieve(QUESTION).units] == ["D1:3", "D1:1", "D1:2"]  # as the clean reply
    assert "dense_fallback" not in system.tally and "skipped_unknown_fact" not in system.tally


def test_closest_candidate_ratios_by_hand() -> None:
    cands = [("ben", "likes", "puppy"), ("ana", "has", "pup")]
    # "ben is fond of puppies" vs "ben likes puppy": difflib ratio 2*M/T; vs "ana has pup" lower
    assert closest_candidate(["Ben", "is fond of", "puppies"], cands, 0.0) == 0
    assert closest_candidate("ana has a pup", cands, 0.0) == 1
    assert closest_candidate(["zzz"], cands, 0.5) is None and closest_candidate({}, cands, 0.0) is None
    # a tie goes to the higher-ranked candidate
    assert closest_candidate("q", [("a", "b", "c"), ("d", "e", "f")], 0.0) == 0


def test_invalid_triples_are_skipped_and_counted() -> None:
    rows = [
        ("D1:1", "Ana", "Ana has a pup", [["Ana", "has"], ["Ana", "has", "pup"], "x", ["Ana", "", "pup"]])
    ]
    system = _system(rows, TableEmbedder())
    assert system.triples == [[("ana", "has", "pup")]] and system.tally["skipped_invalid_triple"] == 3
    assert normalise("Puppy-Class!  2023") == "puppy class 2023"


# ---------------------------------------------------------------- offline roles (issue 22: equal strength)
from baselines.hipporag import HippoRAGResponder  # noqa: E402


def test_offline_triples_are_made_per_sentence_with_the_sentences_words_as_relation() -> None:
    r = HippoRAGResponder(max_entities=3, relation_words=3, filter_min_overlap=1)
    text = "I went to Paris with Jon. Jon likes jazz."
    got = r.triples(text, "Ana", ["Ana", "Paris", "Jon", "jazz"])
    # by hand: sentence 1 is first person, so Ana is the subject; its entities in order are Paris, Jon; its only
    # content word outside them is "went". Sentence 2 names two entities and no "I": Jon is its subject.
    assert got == [
        ["Ana", "went", "Paris"],
        ["Ana", "went", "Jon"],
        ["Paris", "went", "Jon"],
        ["Jon", "likes", "jazz"],
    ]


def test_offline_triples_cap_objects_drop_nested_entities_and_keep_unplaced_ones_off_the_speaker() -> None:
    r = HippoRAGResponder(max_entities=1, relation_words=0, filter_min_overlap=1)
    # "support group" lies inside "LGBTQ support group": left out; one object per sentence; relation_words 0
    got = r.triples(
        "I joined the LGBTQ support group in May.", "Ana", ["support group", "LGBTQ support group", "May"]
    )
    assert got == [["Ana", "mentions", "LGBTQ support group"]]
    # an entity found in no sentence (a caption's) hangs off the speaker, within the cap
    assert r.triples("Look!", "Ana", ["sunset"]) == [["Ana", "mentions", "sunset"]]
    assert HippoRAGResponder(2, 3, 1).triples("Nice.", "Ana", ["a", "b", "c"]) == [
        ["Ana", "mentions", "a"],
        ["Ana", "mentions", "b"],
    ]


def test_offline_filter_keeps_facts_sharing_a_stemmed_question_word_beside_the_speakers_names() -> None:
    facts = [["ana", "went", "paris"], ["ana", "likes", "jazz"], ["jon", "researched", "adoption agencies"]]
    speakers = ["Ana", "Jon"]
    keep1 = HippoRAGResponder(3, 3, filter_min_overlap=1)
    assert keep1.recognise("What did Ana do in Paris?", facts, speakers) == [facts[0]]
    assert keep1.recognise("What did Jon research?", facts, speakers) == [facts[2]]  # research ~ researched
    assert keep1.recognise("What did Ana say?", facts, speakers) == []  # only a speaker's name in common
    assert (
        HippoRAGResponder(3, 3, filter_min_overlap=0).recognise("What did Ana say?", facts, speakers) == facts
    )


def test_an_offline_filter_that_keeps_nothing_falls_back_to_dense_retrieval() -> None:
    from allmem.embed import HashEmbedder

    system = HippoRAG2(resources=Resources(embedder=HashEmbedder(dim=64)))
    feed(system, sessions([("D1:1", "Ana", "I went to Paris with Jon."), ("D1:2", "Jon", "I love jazz.")]))
    system.retrieve("What about Paris?")
    assert system.tally["dense_fallback"] == 0  # the Paris fact is kept: PPR ranks
    system.retrieve("What did Ana say?")
    assert system.tally["dense_fallback"] == 1
