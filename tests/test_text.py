"""The shared word lists and tokenisers (allmem.text) and the named extensions components build on them."""

from __future__ import annotations

from datetime import datetime

from allmem.memory.atc import cues
from allmem.reader import dates, spans
from allmem.text import (
    CARDINALS,
    CLITIC_FRAGMENTS,
    NEGATED_AUXILIARIES,
    NUMBER_WORDS,
    STOP_WORDS,
    content_words,
    is_stop_token,
    tokens,
    words,
)


def test_the_two_tokenisers() -> None:
    text = "I didn't pay $3.50 for Mel's O'Brien book"
    assert words(text) == ["i", "didn", "t", "pay", "3", "50", "for", "mel", "s", "o", "brien", "book"]
    assert tokens(text) == ["I", "didn't", "pay", "3.50", "for", "Mel's", "O'Brien", "book"]
    assert content_words(text) == ["pay", "3", "50", "mel", "brien", "book"]


def test_a_whole_token_is_a_stop_word_when_its_parts_are() -> None:
    assert all(is_stop_token(t) for t in ("it'll", "didn't", "I'm", "let's", "The", "won't"))
    # Clitic pieces are stop words only as pieces: alone they are other words ("I won", "Don").
    assert CLITIC_FRAGMENTS <= STOP_WORDS and NEGATED_AUXILIARIES <= CLITIC_FRAGMENTS
    assert not any(is_stop_token(t) for t in ("won", "Don", "o'clock", "pottery"))


def test_number_words_are_cardinals_and_ordinals() -> None:
    assert NUMBER_WORDS == set(CARDINALS) | {"first", "second", "third", "fourth", "fifth"}
    assert (CARDINALS["fourteen"], CARDINALS["forty"], CARDINALS["thousand"]) == (14, 40, 1000)


def test_components_extend_the_shared_lists_by_name() -> None:
    assert spans.STOP == (STOP_WORDS - NEGATED_AUXILIARIES) | spans.CHAT_FILLERS
    assert "didn" not in spans.STOP and "yeah" in spans.STOP
    assert spans.COUNT_WORDS == NUMBER_WORDS | {"once", "twice", "several"}
    # The diagnoser reads negations, "now" and "will" (shared stop words) and drops chat words (not shared ones).
    assert cues.READ_FOR_MEANING <= STOP_WORDS and not cues.CHAT_WORDS & STOP_WORDS
    assert not any(cues.is_stop(w) for w in ("now", "will", "not", "won", "pottery"))
    assert all(cues.is_stop(w) for w in ("really", "gonna", "us", "it'll", "She'll"))
    assert cues.content_stems("We will paint it now, really") == frozenset({"will", "paint", "now"})


def test_relative_counts_use_the_shared_cardinals() -> None:
    said = datetime(2023, 5, 20)
    assert dates.resolve("I moved here fourteen days ago", said) == ("6 May 2023", True)
    assert dates.resolve("we met a couple of weeks ago", said) == (
        "A couple of weeks before 20 May 2023",
        True,
    )
    assert dates.resolve("she started twenty years ago", said) == ("2003", True)


def test_keyword_number_phrases_use_the_shared_number_words() -> None:
    from allmem.text.keywords import _NUMBER_RE

    text = "I counted fourteen cousins, a dozen eggs and 3 kids on the fourth day"
    assert [m.group(0) for m in _NUMBER_RE.finditer(text)] == [
        "fourteen cousins", "dozen eggs", "3 kids", "fourth day"
    ]  # fmt: skip
