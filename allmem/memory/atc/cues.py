"""Lexical features the offline diagnoser reads: content words, values, negation, change cues, sentences.

Why a hand-made layer instead of a tagger: the offline backend must run with no model hub and no NLTK data, and
its decisions must be explainable in a sentence (every proposal carries a ``reason`` built from these features).
All functions are pure and deterministic.
"""

from __future__ import annotations

import re
from functools import lru_cache

from nltk.stem import PorterStemmer

from allmem.text import NUMBER_WORDS, is_stop_token
from allmem.text import tokens as words  # word and number tokens, original casing

# Sentence boundary: terminal punctuation (optionally closing quote/bracket) then whitespace.
_SENT_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+")

# The diagnoser's stop words are the shared list (``allmem.text``, read over whole tokens: "it'll" is one) with
# two named changes. READ_FOR_MEANING: shared stop words the diagnoser reads (negations, also in NEGATIONS; the
# change cue "now"; the future "will"), so they stay content words. CHAT_WORDS: chat verbs and quantifiers that
# carry no fact in a dialogue ("really", "gonna", "a lot of things").
READ_FOR_MEANING = frozenset("no not now will".split())
CHAT_WORDS = frozenset(
    "really much many lot lots thing things get got gonna going go one ones well like ought".split()
)
# Words that make an utterance social rather than factual ("Thanks!", "Bye, take care!").
PHATIC = frozenset(
    """hi hey hello hiya bye goodbye goodnight night morning evening thanks thank thx ty welcome ok okay yes yeah
    yep sure cool great awesome nice wow lol haha hahaha glad see later soon talk take care good bad sorry hear
    chat catch definitely absolutely totally agree true right amazing wonderful fantastic love appreciate cheers
    congrats congratulations happy fun exciting excited oh ah hmm mm enjoy sounds sound""".split()
)
# Conversational formulae that only make an utterance social in combination ("Long time no talk!", "Keep me
# posted", "Can't wait to hear about it"): allowed in phatic utterances, but still content words elsewhere.
FORMULAE = frozenset(
    """long time talk talked talking since miss missed lately anything new spill beans wait keep posted stay safe
    hear heard fun day catching caught touch soon meantime guys ya yall y'all chatting hope hoping doing
    going feel feeling""".split()
)
NEGATIONS = frozenset("not no never n't none nobody nothing neither nor without anymore".split())
# Phrases that announce a changed state. Strong cues rarely occur without a change; weak ones often do.
STRONG_CUES = (
    "no longer",
    "not anymore",
    "anymore",
    "any more",
    "switched",
    "switch to",
    "moved to",
    "moved out",
    "changed",
    "instead",
    "quit",
    "stopped",
    "nowadays",
    "these days",
    "used to",  # not after get/got/be: "get used to" is not a change
    "not any longer",
    "replaced",
    "gave up",
    "sold",
    "no more",
)
WEAK_CUES = ("now", "recently", "new", "actually", "currently", "since", "lately")
# Verbs and nouns that mark an enduring state (which a newer statement can supersede) rather than an event
# (which accumulates: two hikes are two facts).
STATE_MARKERS = frozenset(
    """is am are 's live lives living work works working job have has own owns like likes love loves prefer
    prefers favorite favourite favourites favorites use uses drive drives play plays study studies eat eats
    drink drinks current currently usually always every weekly daily times""".split()
)

_stemmer = PorterStemmer()


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """Porter stem of a lower-cased word; cached because the same words recur across every context."""
    return _stemmer.stem(word.lower())


def is_stop(word: str) -> bool:
    """A stop word for the diagnoser: the shared list with its two named changes (see ``READ_FOR_MEANING``)."""
    low = word.lower()
    return low not in READ_FOR_MEANING and (low in CHAT_WORDS or is_stop_token(low))


def content_stems(text: str, names: frozenset[str] = frozenset()) -> frozenset[str]:
    """Stems of the words that carry meaning: no stopwords, no phatic words, no known names (addressees)."""
    out = set()
    for w in words(text):
        lw = w.lower()
        if is_stop(lw) or lw in PHATIC or lw in NEGATIONS or _is_name(w, names):
            continue
        out.add(stem(lw))
    return frozenset(out)


def _is_name(word: str, names: frozenset[str]) -> bool:
    """A known (lower-cased) name, or a capitalised short form of one ("Mel" for Melanie, not "car")."""
    low = word.lower()
    if low in names:
        return True
    return word[:1].isupper() and len(low) >= 3 and any(n.startswith(low) for n in names)


def value_tokens(text: str, ignore: frozenset[str] = frozenset()) -> frozenset[str]:
    """Tokens that name a specific value: numbers, number words, and capitalised words inside a sentence.

    Sentence-initial capitals and ``I`` are not values. ``ignore`` drops known names (the speakers), which occur
    as addressees ("Thanks, Mel!") and say nothing about the fact.
    """
    out = set()
    for sent in sentences(text):
        toks = words(sent)
        for i, w in enumerate(toks):
            lw = w.lower()
            if _is_name(w, ignore):
                continue
            if w[0].isdigit() or lw in NUMBER_WORDS:
                out.add(lw)
            elif i > 0 and w[0].isupper() and w != "I" and not w.startswith("I'") and not is_stop(lw):
                out.add(lw)
    return frozenset(out)


# Negated set phrases that deny nothing about a fact ("can't wait", "no worries"): not negations here.
NEG_IDIOMS = (
    "can't wait", "cannot wait", "can't beat", "can't believe", "can't agree more", "couldn't agree",
    "can't thank", "couldn't be happier", "can't get enough", "no problem", "no worries", "not bad", "not sure",
    "no way", "no talk", "not-so", "not so", "don't worry", "never mind", "no doubt", "not only", "no matter",
    "nothing like", "can't stop", "never forget", "won't forget", "don't forget", "not just",
)  # fmt: skip


def is_negation(word: str) -> bool:
    w = word.lower()
    return w in NEGATIONS or w.endswith("n't")


def has_negation(text: str) -> bool:
    """A negation that bears on the statement (idioms such as "can't wait" excluded)."""
    low = text.lower().replace("’", "'")
    for idiom in NEG_IDIOMS:
        low = low.replace(idiom, " ")
    return any(is_negation(w) for w in words(low)) or "no longer" in low


def _phrase_re(phrase: str) -> re.Pattern[str]:
    pat = r"(?<![A-Za-z])" + re.escape(phrase) + r"(?![A-Za-z])"
    if phrase == "used to":  # "I used to ..." announces a change; "get used to" does not
        pat = (
            r"(?<!get )(?<!got )(?<!getting )(?<!be )(?<!been )(?<!am )(?<!is )(?<!are )(?<!was )(?<!were )"
            + pat
        )
    return re.compile(pat)


_PHRASES = {p: _phrase_re(p) for p in (*STRONG_CUES, *WEAK_CUES)}


def _has_phrase(text: str, phrase: str) -> bool:
    rx = _PHRASES.get(phrase) or _phrase_re(phrase)
    return rx.search(text.lower()) is not None


def _asserted(text: str, phrase: str) -> bool:
    """The cue occurs outside a question and not under a negation ("I won't quit", "don't quit")."""
    for sent in sentences(text):
        if is_question(sent):
            continue
        low = sent.lower().replace("’", "'")
        for m in _PHRASES[phrase].finditer(low):
            before = words(low[: m.start()])[-3:]
            if phrase in _NEGATIVE_CUES or not any(is_negation(w) for w in before):
                return True
    return False


_NEGATIVE_CUES = frozenset({"anymore", "any more", "no longer", "not anymore", "not any longer", "no more"})


def change_cues(text: str) -> tuple[list[str], list[str]]:
    """(strong, weak) change cues asserted in ``text`` (see :func:`_asserted`)."""
    strong = [c for c in STRONG_CUES if _has_phrase(text, c) and _asserted(text, c)]
    weak = [c for c in WEAK_CUES if _has_phrase(text, c) and _asserted(text, c)]
    return strong, weak


def strip_cues(text: str) -> str:
    """``text`` without its change cues, so that cue words do not count as a changed subject."""
    low = text.lower()
    for c in (*STRONG_CUES, *WEAK_CUES):
        low = _PHRASES[c].sub(" ", low)
    return low


# People a fact can be about other than the speaker: "my sister lives in Boston" is not the speaker's home.
RELATIONS = frozenset(
    """sister sisters brother brothers mother mom mum father dad parents son sons daughter daughters wife husband
    partner boyfriend girlfriend fiance fiancee friend friends cousin cousins aunt uncle grandma grandpa
    grandmother grandfather grandparents boss coworker colleague neighbor neighbour roommate kid kids child
    children baby nephew niece family""".split()
)


_PREPOSITIONS = frozenset("with to for at from about of by near visiting visited and".split())


def holders(text: str) -> frozenset[str]:
    """Who the statement is about: relation nouns after a possessive ("my sister lives"), else the speaker.

    A relation inside a prepositional phrase ("I play with my friends") does not make it the subject.
    """
    toks = [w.lower() for w in words(text)]
    out = {
        toks[i + 1]
        for i in range(len(toks) - 1)
        if toks[i] in ("my", "our", "his", "her")
        and toks[i + 1] in RELATIONS
        and (i == 0 or toks[i - 1] not in _PREPOSITIONS)
    }
    return frozenset(out) if out else frozenset({"self"})


def is_question(text: str) -> bool:
    return text.rstrip().rstrip("!.\"' ").endswith("?")


def is_state_like(text: str) -> bool:
    """Does the text describe an enduring state (live, work, favourite, own, ...)?"""
    return any(w.lower() in STATE_MARKERS for w in words(text))


def is_phatic(text: str, ignore: frozenset[str] = frozenset()) -> bool:
    """A social utterance with no fact in it: no content words once phatic words and known names are removed."""
    toks = words(text)
    if not toks or len(toks) > 16:
        return False
    return all(
        is_stop(t) or t.lower() in PHATIC or t.lower() in FORMULAE or is_negation(t) or _is_name(t, ignore)
        for t in toks
    )


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def sentences(text: str) -> list[str]:
    """Verbatim sentences of ``text`` (no rewriting), so that groups of them stay grounded spans."""
    parts = [p.strip() for p in _SENT_END.split(text.strip())]
    return [p for p in parts if p]


def normalise_ws(text: str) -> str:
    return " ".join(text.split())


def is_grounded(segment: str, evidence: str) -> bool:
    """A segment is grounded when it is a verbatim span of the evidence, whitespace-normalised."""
    seg = normalise_ws(segment)
    return bool(seg) and seg in normalise_ws(evidence)
