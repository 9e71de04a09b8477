"""Answer metrics against values worked out by hand from the published definitions (docs/PROTOCOL.md)."""

from __future__ import annotations

import math

import pytest

from allmem.metrics import qa

# ------------------------------------------------------------------ allmem tokenizer and set F1


def test_simple_tokenize_replaces_only_four_marks() -> None:
    # lowercase; . , ! ? become spaces; the apostrophe stays: "hello world it's 7 5"
    assert qa.simple_tokenize("Hello, World! It's 7.5?") == ["hello", "world", "it's", "7", "5"]


def test_set_f1_counts_unique_tokens() -> None:
    # pred {the, cat, sat}, gold {the, cat, dog}: common 2, P = R = 2/3, F1 = 2/3
    assert qa.set_f1("the cat sat", "the cat the dog") == pytest.approx(2 / 3)
    # repeats collapse: pred {cat}, gold {cat, dog}: P = 1, R = 1/2, F1 = 2*(1/2)/(3/2) = 2/3
    assert qa.set_f1("cat cat cat", "cat dog") == pytest.approx(2 / 3)


def test_set_f1_no_stemming_no_article_removal() -> None:
    # "running" vs "run" share nothing without stemming
    assert qa.set_f1("running", "run") == 0.0
    # "a" is a token: pred {a, dog}, gold {dog}: P = 1/2, R = 1, F1 = 2/3
    assert qa.set_f1("a dog", "dog") == pytest.approx(2 / 3)


def test_empty_prediction_scores_zero_everywhere() -> None:
    assert qa.set_f1("", "Paris") == 0.0
    assert qa.bleu1("", "Paris") == 0.0
    assert qa.rouge_l("", "Paris") == 0.0
    assert qa.mem0_bleu1("", "Paris") == 0.0
    assert qa.locomo_f1("", "Paris") == 0.0
    # punctuation only tokenizes to nothing under the allmem tokenizer
    assert qa.set_f1("?!.", "Paris") == 0.0
    assert qa.bleu1("?!.", "Paris") == 0.0


def test_integer_answers_are_cast_to_text() -> None:
    # six LoCoMo golds are ints: gold 2022 vs prediction "2022" is a perfect match under every metric
    assert qa.set_f1("2022", 2022) == 1.0
    assert qa.bleu1("2022", 2022) == 1.0
    assert qa.rouge_l("2022", 2022) == 1.0
    assert qa.mem0_bleu1("2022", 2022) == 1.0
    assert qa.locomo_score("2022", 2022, 2) == 1.0


def test_case_and_trailing_punctuation_do_not_matter() -> None:
    assert qa.set_f1("Paris.", "paris") == 1.0


# ------------------------------------------------------------------ BLEU-1


def test_bleu1_includes_brevity_penalty() -> None:
    # pred [a, x] vs gold [a, b, c]: p1 = 1/2; c = 2 < r = 3 so BP = exp(1 - 3/2); BLEU-1 = 0.5 * e^-0.5
    assert qa.bleu1("a x", "a b c") == pytest.approx(0.5 * math.exp(-0.5))


def test_bleu1_clips_counts_and_no_penalty_when_longer() -> None:
    # pred [a, b, c, d] vs gold [a, b]: p1 = 2/4, c > r so BP = 1
    assert qa.bleu1("a b c d", "a b") == pytest.approx(0.5)
    # pred [a, a, a] vs gold [a, b, c]: "a" clipped to 1 match, p1 = 1/3, c = r so BP = 1
    assert qa.bleu1("a a a", "a b c") == pytest.approx(1 / 3)


def test_mem0_bleu1_uses_nltk_word_tokens() -> None:
    # NLTK splits "it's" -> it 's and the final "." off: pred [it, 's, 7, may, .], gold [it, 's, 7, may]
    # p1 = 4/5, c = 5 > r = 4 so BP = 1: 0.8. The allmem tokenizer sees [it's, 7, may] twice: 1.0.
    assert qa.nltk_tokenize("It's 7 May.") == ["it", "'s", "7", "may", "."]
    assert qa.mem0_bleu1("It's 7 May.", "it's 7 may") == pytest.approx(0.8)
    assert qa.bleu1("It's 7 May.", "it's 7 may") == pytest.approx(1.0)


# ------------------------------------------------------------------ ROUGE-L


def test_rouge_l_stems_and_uses_lcs() -> None:
    # reference [she, went, run(ning)], prediction [she, run(s)]: LCS 2, P = 1, R = 2/3, F = 0.8
    assert qa.rouge_l("she runs", "She went running") == pytest.approx(0.8)
    # order matters for LCS: [b, a] vs [a, b]: LCS 1, P = R = 1/2, F = 1/2 (set F1 would give 1)
    assert qa.rouge_l("b a", "a b") == pytest.approx(0.5)
    assert qa.set_f1("b a", "a b") == 1.0


# ------------------------------------------------------------------ official LoCoMo scorer


def test_locomo_normalize_official_order() -> None:
    # commas dropped, lowercased, punctuation stripped, a/an/the/and dropped
    assert qa.locomo_normalize("The cat, and a Dog!") == "cat dog"


def test_locomo_f1_is_stemmed_multiset() -> None:
    # pred [run, run] vs gold [run]: common min(2, 1) = 1, P = 1/2, R = 1, F1 = 2/3
    assert qa.locomo_f1("running running", "run") == pytest.approx(2 / 3)
    # articles removed and "dogs" stems to "dog"
    assert qa.locomo_f1("The dogs", "dog") == 1.0


def test_locomo_category1_multi_part_best_match_average() -> None:
    # gold parts: painting (best 1), hiking (best 1), swimming (best 0): mean 2/3
    assert qa.locomo_score("hiking, painting", "painting, hiking, swimming", 1) == pytest.approx(2 / 3)
    # one prediction part [paint, hike] ("and" dropped) against gold parts [paint] and [hike]:
    # each P = 1/2, R = 1, F1 = 2/3; mean 2/3
    assert qa.locomo_score("painting and hiking", "painting, hiking", 1) == pytest.approx(2 / 3)


def test_locomo_category3_cuts_gold_at_semicolon() -> None:
    # gold -> "Likely yes" -> [like, ye]; pred [ye]: P = 1, R = 1/2, F1 = 2/3
    assert qa.locomo_score("yes", "Likely yes; she mentioned it", 3) == pytest.approx(2 / 3)
    # without the cut the gold has 5 tokens: R = 1/5, F1 = 2*(1/5)/(6/5) = 1/3
    assert qa.locomo_f1("yes", "Likely yes; she mentioned it") == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    ("prediction", "expected"),
    [
        ("Not mentioned in the conversation", 1.0),
        ("No information available.", 1.0),
        ("It was NOT MENTIONED anywhere", 1.0),
        ("She never mentioned it", 0.0),  # "never mentioned" is not an official phrase
        ("Blue", 0.0),
        ("", 0.0),
    ],
)
def test_locomo_category5_phrases(prediction: str, expected: float) -> None:
    assert qa.locomo_score(prediction, "whatever the adversarial answer is", 5) == expected


def test_locomo_rejects_unknown_category() -> None:
    with pytest.raises(ValueError, match="category"):
        qa.locomo_score("a", "a", 6)
