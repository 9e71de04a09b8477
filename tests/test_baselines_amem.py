"""A-Mem's evolution: strengthen links, update_neighbor rewrites a neighbour, the index lags until the rebuild."""

from __future__ import annotations

import numpy as np

from allmem.systems import Resources
from baselines._common import sentences
from baselines.amem import AMem, offline_analysis
from tests.baselines_support import TableEmbedder, add_session, feed, scripted, seen, sessions

DIALOGUE = sessions(
    [("D1:1", "Ana", "I adopted a puppy named Biscuit."), ("D1:2", "Ben", "I train for half marathons.")],
    [("D2:1", "Ana", "Biscuit loves the park.")],
)


def analysis(context: str, *kws: str) -> dict:
    return {"keywords": list(kws), "context": context, "tags": ["life", "news", "chat"]}


EVOLVE = {
    "should_evolve": True,
    "actions": ["strengthen", "update_neighbor"],
    "suggested_connections": [0, 9, "x"],  # 9 and "x" are no note index
    "tags_to_update": ["running", "sport"],
    "new_context_neighborhood": ["Ana talks about her new dog"],
    "new_tags_neighborhood": [["dog", "pet"]],
}
NOOP = {
    "should_evolve": True, "actions": [], "suggested_connections": [], "tags_to_update": [],
    "new_context_neighborhood": [], "new_tags_neighborhood": [],
}  # fmt: skip


def test_evolution_links_rewrites_neighbour_and_index_lags_until_rebuild() -> None:
    llm = scripted(
        {
            "amem_analyze": [
                analysis("Ana has a new puppy", "puppy", "Biscuit", "adoption"),
                analysis("Ben trains for races", "half marathon", "training", "running"),
                analysis("Ana's dog enjoys the park", "park", "dog", "walks"),
            ],
            "amem_evolve": [EVOLVE, NOOP],
        }
    )
    emb = TableEmbedder()
    system = AMem(evo_threshold=2, resources=Resources(embedder=emb, llm=llm))
    feed(system, DIALOGUE[:1], end=False)
    first, second = system.notes
    assert len(seen(llm, "amem_evolve")) == 1  # the first note had no neighbour to show
    shown = seen(llm, "amem_evolve")[0].variables["neighbours"]
    assert shown.startswith("memory index:0\t") and "memory content: Ana: I adopted a puppy" in shown

    assert second.links == [0]
    assert system.tally["skipped_invalid_link"] == 2
    assert second.tags == ["running", "sport"]
    assert first.context == "Ana talks about her new dog" and first.tags == ["dog", "pet"]
    # evolved metadata is not searchable yet: note 0 is still indexed by the document it was stored with
    stored = emb.encode(["Ana has a new puppy keywords: puppy, Biscuit, adoption"])[0]
    assert np.allclose(system.index.vector("0"), stored)
    assert system.evo_cnt == 1 and "consolidations" not in system.tally

    add_session(system, DIALOGUE[1], 1)  # the second evolution: every evo_threshold-th one rebuilds the index
    assert system.evo_cnt == 2 and system.tally["consolidations"] == 1
    rebuilt = emb.encode([first.full_doc()])[0]
    assert "Ana talks about her new dog" in first.full_doc() and "dog pet" in first.full_doc()
    assert np.allclose(system.index.vector("0"), rebuilt)


def test_a_hit_is_followed_by_its_link() -> None:
    llm = scripted(
        {
            "amem_analyze": [analysis("puppy", "puppy"), analysis("running", "running")],
            "amem_evolve": [{**EVOLVE, "actions": ["strengthen"], "suggested_connections": [0]}],
            "amem_query": [{"keywords": "running keywords: running"}],
        }
    )
    emb = TableEmbedder()
    system = AMem(k=1, resources=Resources(embedder=emb, llm=llm))
    feed(system, DIALOGUE[:1])
    res = system.retrieve("What does Ben train for?")
    assert [u.id for u in res.units] == ["n1", "n0"]  # the hit, then its linked note
    assert res.units[0].source_ids == ("D1:2",) and res.units[1].source_ids == ("D1:1",)
    assert res.units[0].score > res.units[1].score
    assert res.units[0].text == "Ben: I train for half marathons."
    assert seen(llm, "amem_query")[0].phase == "retrieve"


def test_failed_replies_are_counted_not_raised() -> None:
    llm = scripted({"amem_analyze": ["nonsense", '{"keywords": [}'], "amem_evolve": ["[]"]})
    system = AMem(resources=Resources(embedder=TableEmbedder(), llm=llm))
    feed(system, DIALOGUE[:1])
    stats = system.stats()
    assert stats["notes"] == 2 and system.notes[0].keywords == [] and system.notes[0].context == "General"
    assert stats["failed_amem_analyze_no_json"] == 1 and stats["failed_amem_analyze_invalid_json"] == 1
    assert stats["failed_amem_evolve_schema"] == 1


def test_offline_analysis_has_no_speaker_and_three_keywords() -> None:
    a = offline_analysis(
        "Caroline",
        "Caroline, I went to the LGBTQ support group yesterday with Melanie.",
        context_words=40,
        min_keywords=3,
    )
    assert len(a["keywords"]) >= 3 and "Caroline" not in a["keywords"]
    assert a["context"].startswith("Caroline said: ")
    assert len(a["tags"]) >= 1


PUPPY = "I adopted a puppy! His name is Biscuit. Do you like dogs?"


def test_offline_context_is_the_whole_turn_as_one_sentence_cut_at_context_words() -> None:
    whole = offline_analysis("Ana", PUPPY, context_words=40, min_keywords=3)["context"]
    assert whole == "Ana said: I adopted a puppy; His name is Biscuit; Do you like dogs."
    assert sentences(whole) == [whole]  # one sentence to the splitter that cut the turn into three
    # 8 words of the turn end on "Biscuit;": the dangling separator goes, the full stop closes the sentence
    cut = offline_analysis("Ana", PUPPY, context_words=8, min_keywords=3)["context"]
    assert cut == "Ana said: I adopted a puppy; His name is Biscuit."


def test_offline_keywords_are_topped_up_to_min_keywords() -> None:
    few = offline_analysis("Ana", PUPPY, context_words=40, min_keywords=3)["keywords"]
    assert few == ["puppy", "Biscuit", "adopted", "dogs"]  # YAKE's phrases and the name already make four
    more = offline_analysis("Ana", PUPPY, context_words=40, min_keywords=6)["keywords"]
    assert more == [*few, "name", "like"]  # the content words not yet in a keyword, longest first


ROAD_TRIP = sessions(
    [
        (
            "D1:1",
            "Ana",
            "Our family road trip along the coast took nine days and we stopped at every little fishing village. "
            "My daughter adopted a kitten. The car broke down twice near the mountains, which was stressful.",
        ),
        ("D1:2", "Ben", "I want a kitten someday, but my landlord says no pets."),
        ("D1:3", "Ana", "My daughter started school last week and loves her teacher."),
    ]
)


def test_a_question_about_a_later_sentence_finds_its_turn() -> None:
    """The index document is context and keywords only; "kitten" is in the second sentence of Ana's first turn
    and in none of its keywords, so only a context covering the whole turn lets the question reach it."""

    def top(context_words: int) -> tuple[str, str]:
        system = AMem(k=1, context_words=context_words, resources=Resources(embedder=TableEmbedder(), llm=scripted({})))  # fmt: skip
        feed(system, ROAD_TRIP)
        assert "kitten" not in " ".join(system.notes[0].keywords)
        return system.retrieve("Who adopted a kitten?").units[0].id, system.notes[0].context

    hit, context = top(40)
    assert hit == "n0" and "My daughter adopted a kitten;" in context
    # cut after the first sentence's 18 words (the old first-sentence context), Ben's turn is the nearest
    hit, context = top(18)
    assert hit == "n1" and context.endswith("every little fishing village.")
