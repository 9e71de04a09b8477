"""Offline extractive generator: date resolution, span selection and the answer modes on hand-made contexts."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from allmem.defaults import group_node
from allmem.reader import dates, spans
from allmem.reader.extractive import NOT_MENTIONED, ExtractiveGenerator, Sentence, split_sentences, unit_body
from allmem.tokens import count_tokens
from allmem.types import AnswerRequest, Retrieved

D = datetime(2023, 7, 15, 13, 0)


@pytest.mark.parametrize(
    ("text", "when", "expected"),
    [
        ("I went to a support group yesterday.", datetime(2023, 5, 8), "7 May 2023"),
        ("Last night was amazing!", datetime(2023, 8, 14), "13 August 2023"),
        ("Last Friday I went to a council meeting.", D, "The Friday before 15 July 2023"),
        (
            "I joined a new activist group last Tues.",
            datetime(2023, 7, 20),
            "The Tuesday before 20 July 2023",
        ),
        ("I got a puppy two weeks ago!", datetime(2023, 8, 11), "Two weeks before 11 August 2023"),
        ("We went camping two weekends ago.", datetime(2023, 7, 17), "Two weekends before 17 July 2023"),
        ("I went to a pride parade last week.", datetime(2023, 7, 3), "The week before 3 July 2023"),
        ("Last weekend I joined a mentorship program.", D, "The weekend before 15 July 2023"),
        ("We went to a convention last month.", datetime(2023, 4, 18), "March 2023"),
        ("Happy new year! Last month was busy.", datetime(2024, 1, 2), "December 2023"),
        ("A talent show next month.", datetime(2023, 8, 28), "September 2023"),
        ("We had a blast last year at the fest.", datetime(2023, 8, 17), "2022"),
        ("I first watched it around 3 years ago.", datetime(2022, 1, 21), "2019"),
        ("Our camping trip last summer was great.", datetime(2023, 8, 11), "summer 2022"),
        ("A basketball camp last summer.", datetime(2023, 12, 26), "summer 2023"),
        ("See you tomorrow!", datetime(2022, 11, 9), "10 November 2022"),
        ("We met in 2013 at a party.", datetime(2023, 6, 3), "2013"),
    ],
)
def test_relative_dates_resolve(text: str, when: datetime, expected: str) -> None:
    assert dates.resolve(text, when) == (expected, True)


def test_no_expression_gives_the_unit_date() -> None:
    assert dates.resolve("I love painting.", datetime(2023, 5, 8, 13, 56)) == ("8 May 2023", False)
    assert dates.month_year(datetime(2023, 1, 31), -1) == "December 2022"


def test_question_kinds_and_terms() -> None:
    assert spans.question_kind("Who did Maria have dinner with?") == "who"
    assert spans.question_kind("What is the name of John's dog?") == "name"
    assert spans.question_kind("Where did Jon travel?") == "where"
    assert spans.question_kind("How many tournaments has Nate won?") == "count"
    assert spans.question_kind("What does Deborah enjoy?") == "what"
    assert spans.content_terms("The snakes were running!") == {"snake", "run"}


def test_tokenize_marks_clause_boundaries() -> None:
    toks = spans.tokenize('I love "Becoming Nicole", really - it helped.')
    assert [t.core for t in toks] == ["I", "love", "Becoming", "Nicole", "really", "it", "helped"]
    assert [t.boundary_after for t in toks] == [False, False, False, True, True, False, True]
    assert toks[2].quoted and toks[3].quoted and not toks[1].quoted


def test_windows_never_start_or_end_with_stop_or_question_words() -> None:
    question = "What instrument does Melanie play?"
    sents = [Sentence("I play the violin every evening to relax.", 0)]
    texts, owners, feats = spans.span_table(question, sents, np.array([1.0]))
    assert texts and set(owners) == {0} and feats.shape == (len(texts), len(spans.SPAN_FEATURES))
    for t in texts:
        words = t.lower().split()
        for edge in (words[0], words[-1]):
            assert edge not in spans.STOP and spans.stem(edge) not in spans.content_terms(question)
    assert "violin" in texts and "I play the violin" not in texts


def test_best_span_prefers_the_answer_type() -> None:
    one = np.array([1.0])
    assert spans.best_spans(
        "What is the name of John's son?", [Sentence("His name is Kyle, he is so cute!", 0)], one
    ) == ("Kyle")
    count = spans.best_spans(
        "How many tournaments has Nate won?", [Sentence("I have won seven tournaments.", 0)], one
    )
    assert "seven" in count.split()
    # two spans from two different units, comma-joined
    two = [Sentence("I love yoga.", 0), Sentence("Kickboxing is my thing.", 1)]
    joined = spans.best_spans("What exercises does John do?", two, np.array([1.0, 0.9]), n_spans=2)
    assert len(joined.split(", ")) == 2


def test_unit_body_and_sentences() -> None:
    u = Retrieved.of_text("D1:1", "Look at this! So proud.", ("D1:1",), 0.0, D, "Mel", "a photo of a bowl")
    assert unit_body(u) == ("Look at this! So proud.", "a photo of a bowl")
    assert u.text == "Mel: Look at this! So proud. [image: a photo of a bowl]"
    assert split_sentences("Hi there. How are you? Fine!") == ["Hi there.", "How are you?", "Fine!"]


def _unit(uid: str, speaker: str, text: str, when: datetime) -> Retrieved:
    return Retrieved.of_text(uid, text, (uid,), 0.0, when, speaker)


CONTEXT = (
    _unit(
        "D1:1",
        "Caroline",
        "I went to a LGBTQ support group yesterday and it was so powerful.",
        datetime(2023, 5, 8),
    ),
    _unit("D1:2", "Melanie", "That's great! I painted a lake sunrise last year.", datetime(2023, 5, 8)),
    _unit("D2:1", "Caroline", "Guess what? My guitar teacher is named Oscar.", datetime(2023, 5, 25)),
    _unit("D2:2", "Melanie", "I ran a charity race for mental health last Saturday.", datetime(2023, 5, 25)),
    _unit("D2:3", "Caroline", "Oscar moved to Sweden in spring, sadly.", datetime(2023, 5, 25)),
)


def _request(question: str, options: tuple[str, ...] = (), context=CONTEXT) -> AnswerRequest:
    text = "\n".join(u.text for u in context)
    return AnswerRequest("q", question, options=options, context=tuple(context), context_text=text)


@pytest.fixture(scope="module")
def generator(embedder) -> ExtractiveGenerator:
    return ExtractiveGenerator(embedder=embedder, **group_node("generator", "extractive"))


def test_when_questions_resolve_against_the_right_unit(generator) -> None:
    a = generator.answer(_request("When did Caroline go to the LGBTQ support group?"))
    assert a.text == "7 May 2023" and a.extra["mode"] == "when" and a.extra["unit"] == "D1:1"
    assert (
        generator.answer(_request("When did Melanie run a charity race?")).text
        == "The Saturday before 25 May 2023"
    )
    assert generator.answer(_request("When did Melanie paint a sunrise?")).text == "2022"


def test_span_answers_are_short_and_without_speaker(generator) -> None:
    a = generator.answer(_request("What is the name of Caroline's guitar teacher?"))
    assert a.text == "Oscar" and a.extra["mode"] == "span"
    where = generator.answer(_request("Where did Oscar move to?"))
    assert "Sweden" in where.text.split() and len(where.text.split()) <= 3
    assert a.usage["tokens_in"] == count_tokens(_request("x").context_text) and a.usage["tokens_out"] == 1


def test_two_option_questions(generator) -> None:
    supported = generator.answer(_request("What did Caroline paint?", (NOT_MENTIONED, "a lake sunrise")))
    assert supported.text == "a lake sunrise" and supported.extra["mode"] == "option"
    unsupported = generator.answer(_request("What did Caroline bake?", ("chocolate cake", NOT_MENTIONED)))
    assert unsupported.text == NOT_MENTIONED


def test_yes_no_and_empty_context(generator, embedder) -> None:
    assert generator.answer(_request("Did Melanie run a charity race?")).text == "Yes"
    assert ExtractiveGenerator(
        embedder, **group_node("generator", "extractive") | {"yes_no_answer": "Likely no"}
    ).answer(_request("Is Caroline brave?")).text == ("Likely no")
    empty = generator.answer(_request("What did Caroline do?", context=()))
    assert empty.text == NOT_MENTIONED and empty.extra["mode"] == "empty"


def test_bad_config_is_a_clear_error(embedder) -> None:
    with pytest.raises(ValueError, match="embedder"):
        ExtractiveGenerator(embedder=None, **group_node("generator", "extractive"))
    with pytest.raises(ValueError, match="extractive.yaml"):
        ExtractiveGenerator(embedder, **group_node("generator", "extractive") | {"multi_spans": 0})
