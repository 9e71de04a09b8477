"""A synthetic drift corpus: dialogues with planted duplicates, supersessions and conflations, plus look-alikes.

Why: LoCoMo has no labels for structural drift, so ATC's edit precision can only be measured where the truth is
known by construction. Every turn carries the set of facts it states, as keys ``(speaker, holder, attribute,
value)``; the gold for each operator follows from the keys alone (see :func:`edit_is_valid`):

- Merge is valid when every member states the same fact set (restatements, or phatic turns of one speaker:
  they carry no facts, and merging them is the documented choice).
- Update is valid when the current unit states a state attribute with a new value for a holder the superseded
  unit gave another value for, and the current unit is newer.
- Split is valid when the unit states two or more facts (a planted conflation).

Look-alike distractors are the harmful patterns the paper names: the same template for another person or the
other speaker, another attribute with the same shape, repeated events with different values (events accumulate;
they do not supersede), complements ("I also have a cat"), and coherent multi-sentence turns about one fact.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from allmem.types import Dialogue, Question, Session, Turn

Key = tuple[str, str, str, str]  # (speaker, holder, attribute, value)

# attribute -> (values, statement templates, supersession templates). {v} new value, {o} old value.
STATES: dict[str, tuple[list[str], list[str], list[str]]] = {
    "city": (
        ["Boston", "Denver", "Seattle", "Austin", "Chicago", "Portland", "Miami", "Atlanta"],
        [
            "I live in {v}.",
            "My home is in {v}, in a small apartment downtown.",
            "I'm living in {v} at the moment.",
        ],
        [
            "I moved to {v} last month, so I live there now.",
            "I no longer live in {o}; I live in {v} now.",
            "I live in {v} now.",
            "These days I live in {v}.",
        ],
    ),
    "job": (
        ["nurse", "teacher", "accountant", "chef", "architect", "pharmacist", "librarian", "electrician"],
        ["I work as a {v}.", "My job is being a {v} at the local clinic.", "I'm a {v} by profession."],
        [
            "I switched careers and I work as a {v} now.",
            "I'm not a {o} anymore, I work as a {v}.",
            "I work as a {v} now.",
            "I quit being a {o} and became a {v}.",
        ],
    ),
    "food": (
        ["sushi", "pizza", "ramen", "tacos", "lasagna", "curry", "paella", "dumplings"],
        [
            "My favorite food is {v}.",
            "I love {v} more than any other food, it's my favorite.",
            "{V} is my favorite thing to eat.",
        ],
        [
            "My favorite food is {v} now.",
            "These days my favorite food is {v}, not {o}.",
            "I changed my mind, my favorite food is {v}.",
        ],
    ),
    "car": (
        ["Honda Civic", "Toyota Prius", "Ford Focus", "Tesla Model 3", "Subaru Outback", "Mazda Miata"],
        ["I drive a {v}.", "My car is a {v}.", "I drive a {v} to work every day."],
        [
            "I sold the {o} and I drive a {v} now.",
            "I drive a {v} now instead of the {o}.",
            "I switched to a {v}.",
        ],
    ),
    "sport": (
        ["tennis", "basketball", "volleyball", "soccer", "badminton", "golf", "squash"],
        ["I play {v} every weekend.", "I play {v} with my friends.", "My weekly sport is {v}."],
        [
            "I stopped playing {o}; I play {v} now.",
            "I play {v} every weekend now instead of {o}.",
            "I gave up {o} and switched to {v}.",
        ],
    ),
    "gym": (
        ["two", "three", "four", "five"],
        ["I go to the gym {v} times a week.", "I work out at the gym {v} times every week."],
        ["I go to the gym {v} times a week now.", "I changed my routine and go to the gym {v} times a week."],
    ),
}
# Relatives' states: the same shapes with another holder; never superseded by the speaker's own statements.
RELATIVE = {
    "city": ["My {h} lives in {v}.", "My {h} is living in {v} these past few years."],
    "job": ["My {h} works as a {v}.", "My {h} is a {v} at the hospital."],
    "car": ["My {h} drives a {v}."],
}
HOLDERS = ["sister", "brother", "mother", "father", "cousin"]
# Events accumulate: two of them with different values are two facts.
EVENTS = [
    (
        ["Mount Tam", "Yosemite", "Lake Tahoe", "Big Sur", "Zion"],
        ["Saturday", "Sunday", "Friday"],
        "I went hiking at {v} on {d}.",
    ),
    (
        ["Inception", "Arrival", "Dune", "Up", "Coco"],
        ["Monday", "Tuesday", "Thursday"],
        "I watched {v} at the cinema on {d}.",
    ),
    (
        ["banana bread", "apple pie", "carrot cake", "brownies"],
        ["Saturday", "Wednesday"],
        "I baked {v} for my neighbors on {d}.",
    ),
    (
        ["the art museum", "the aquarium", "the botanical garden", "the science center"],
        ["Sunday", "Friday"],
        "I visited {v} with my kids on {d}.",
    ),
]
PETS = (["dog", "cat", "rabbit", "parrot"], ["Max", "Luna", "Charlie", "Bella", "Milo", "Daisy"])
COHERENT = [  # one fact told in several sentences: splitting it would be harmful
    "I adopted a {k} named {n} last week. {N2} is very playful and sleeps on my bed. I already love {n} so much.",
    "I started learning the piano this spring. I practice the piano every evening after dinner. "
    "My piano teacher says I'm improving quickly.",
    "My garden is finally blooming. The roses in my garden are bright red this year. "
    "I water the garden every morning before work.",
]
FILLERS = [
    "How was your week?",
    "What have you been up to lately?",
    "That sounds lovely, how did it go?",
    "Oh nice, tell me more about it!",
    "What made you decide that?",
    "How is everything else going?",
    "Did you enjoy it?",
    "Was it hard to get used to?",
    "What are your plans for the weekend?",
    "How are the kids doing?",
    "Is the weather nice over there?",
    "Have you read any good books recently?",
]
# Replies in SOCIAL carry no fact (labelled by hand): they count as phatic in the gold.
SOCIAL = frozenset(
    ["That sounds lovely, how did it go?", "Oh nice, tell me more about it!", "Did you enjoy it?",
     "How is everything else going?", "What have you been up to lately?"]
)  # fmt: skip
PHATIC = ["Thanks!", "Bye! Talk soon.", "Thank you so much!", "Take care, bye!", "Hi! Good to see you!"]


@dataclass
class DriftCorpus:
    """Dialogues and the gold fact keys of every turn (by turn id, per dialogue)."""

    dialogues: list[Dialogue]
    keys: dict[str, dict[str, frozenset[Key]]]  # dialogue id -> turn id -> fact keys
    planted: dict[str, dict[str, list[tuple[str, ...]]]] = field(default_factory=dict)  # dlg -> op -> targets
    segments: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # dlg -> turn -> planted segments
    segment_keys: dict[str, dict[str, list[Key]]] = field(default_factory=dict)  # aligned with ``segments``

    def unit_keys(self, dialogue: str, records: list[tuple[str, str]]) -> frozenset[Key]:
        """Fact keys of a unit from its evidence records ``(source id, text)``: a split sibling holds only the
        facts of its own segment, every other record all the facts of its turn."""
        out: set[Key] = set()
        for sid, text in records:
            segs = self.segments.get(dialogue, {}).get(sid, [])
            if text in segs:
                out.add(self.segment_keys[dialogue][sid][segs.index(text)])
            else:
                out |= self.keys[dialogue][sid]
        return frozenset(out)


def _fill(t: str, v: str, o: str = "", h: str = "", d: str = "") -> str:
    if v[:1].lower() in "aeiou":  # "a electrician" -> "an electrician"
        t = t.replace("a {v}", "an {v}")
    return t.replace("{v}", v).replace("{V}", v[:1].upper() + v[1:]).replace("{o}", o).replace(
        "{h}", h).replace("{d}", d)  # fmt: skip


def _dialogue(rng: random.Random, did: str, n_sessions: int) -> tuple[Dialogue, dict, dict, dict, dict]:
    speakers = rng.sample(["Ana", "Ben", "Chloe", "Dev", "Emma", "Farid"], 2)
    state: dict[tuple[str, str], str] = {}  # (speaker, attribute) -> current value
    plan: list[list[tuple[str, str, frozenset[Key], str]]] = [
        [] for _ in range(n_sessions)
    ]  # (speaker, text, keys, kind)
    planted: dict[str, list[tuple[str, ...]]] = {"merge": [], "update": [], "split": []}
    segs: dict[str, list[str]] = {}
    seg_keys: dict[str, list[Key]] = {}
    said: list[
        tuple[int, str, str, frozenset[Key], list[str]]
    ] = []  # (session, speaker, text, keys, rewordings)
    conflated: dict[str, list[tuple[str, Key]]] = {}  # text -> its planted segments and their facts
    relatives: dict[tuple[str, str, str], str] = {}  # (speaker, relative, attribute) -> its one value

    def relative_value(spk: str, h: str, attr: str) -> str:
        """A relative's state never changes in this corpus: supersessions are planted for the speaker only."""
        return relatives.setdefault((spk, h, attr), rng.choice(STATES[attr][0]))

    def say(s: int, spk: str, text: str, keys: frozenset[Key], kind: str) -> None:
        plan[s].append((spk, text, keys, kind))

    for spk in speakers:
        attrs = rng.sample(sorted(STATES), 4)
        for attr in attrs:
            vals, stmts, sups = STATES[attr]
            v0 = rng.choice(vals)
            s0 = rng.randrange(0, max(1, n_sessions - 2))
            state[(spk, attr)] = v0
            keys = frozenset({(spk, "self", attr, v0)})
            text = _fill(rng.choice(stmts), v0)
            say(s0, spk, text, keys, "state")
            if attr not in attrs[:2]:  # restating a value that is later superseded would plant a conflict
                said.append((s0, spk, text, keys, [_fill(t, v0) for t in stmts]))
            if attr in attrs[:2]:  # planted supersession in a later session
                v1 = rng.choice([x for x in vals if x != v0])
                s1 = rng.randrange(s0 + 1, n_sessions)
                say(
                    s1, spk, _fill(rng.choice(sups), v1, o=v0), frozenset({(spk, "self", attr, v1)}), "update"
                )
        for attr, tpls in RELATIVE.items():  # look-alikes: a relative's state in the same shape
            h = rng.choice(HOLDERS)
            v = relative_value(spk, h, attr)
            say(rng.randrange(n_sessions), spk, _fill(rng.choice(tpls), v, h=h),
                frozenset({(spk, "relative:" + h, attr, v)}), "relative")  # fmt: skip
        for places, days, tpl in rng.sample(EVENTS, 2):  # look-alikes: repeated events with other values
            for v, d in zip(rng.sample(places, 2), rng.sample(days, 2), strict=True):
                say(rng.randrange(n_sessions), spk, _fill(tpl, v, d=d), frozenset({(spk, "event", tpl, v + d)}),
                    "event")  # fmt: skip
        kinds, names = PETS
        k0, k1 = rng.sample(kinds, 2)
        n0, n1 = rng.sample(names, 2)
        sp = rng.randrange(0, n_sessions - 1)
        say(sp, spk, f"I have a {k0} named {n0}.", frozenset({(spk, "self", "pet", k0)}), "state")
        said.append((sp, spk, f"I have a {k0} named {n0}.", frozenset({(spk, "self", "pet", k0)}),
                     [f"I have a {k0} named {n0}.", f"{n0} is my {k0}.", f"My {k0} is called {n0}."]))  # fmt: skip
        say(rng.randrange(sp + 1, n_sessions), spk, f"I also have a {k1} named {n1}.",
            frozenset({(spk, "self", "pet2", k1)}), "complement")  # fmt: skip
        tpl = rng.choice(COHERENT)
        k, n = rng.choice(kinds), rng.choice(names)
        say(rng.randrange(n_sessions), spk, tpl.replace("{k}", k).replace("{n}", n).replace("{N2}", n),
            frozenset({(spk, "self", "story", tpl[:20])}), "coherent")  # fmt: skip
    # Restatements of earlier facts (planted merges) and conflations (planted splits).
    for s_prev, spk, text, keys, rewordings in rng.sample(said, min(6, len(said))):
        if s_prev + 1 < n_sessions:
            if rng.random() < 0.5:  # a paraphrase: the same fact in another of its templates
                text = rng.choice(rewordings)
            lead = rng.choice(["", "Like I said before, ", "Just so you know, ", "As I mentioned, "])
            body = text if text.startswith(("I ", "I'")) else text[:1].lower() + text[1:]
            say(rng.randrange(s_prev + 1, n_sessions), spk, lead + body if lead else text, keys, "restate")
    for spk in speakers:
        for _ in range(2):
            pl, dl, tpl = rng.choice(EVENTS)
            v, d = rng.choice(pl), rng.choice(dl)
            a = _fill(tpl, v, d=d)
            b_attr = rng.choice(["city", "job", "car"])
            h = rng.choice(HOLDERS)
            bv = relative_value(spk, h, b_attr)
            b = _fill(rng.choice(RELATIVE[b_attr]), bv, h=h)
            ka, kb = (spk, "event", tpl, v + d), (spk, "relative:" + h, b_attr, bv)
            say(rng.randrange(n_sessions), spk, f"{a} {b}", frozenset({ka, kb}), "conflation")
            conflated[f"{a} {b}"] = [(a, ka), (b, kb)]
    sessions: list[Session] = []
    keys_by_turn: dict[str, frozenset[Key]] = {}
    start = datetime(2023, 1, 2, 10, 0) + timedelta(days=rng.randrange(300))
    order = 0
    for s in range(n_sessions):
        items = plan[s]
        rng.shuffle(items)
        turns: list[Turn] = []
        date = start + timedelta(days=9 * s)
        lines: list[tuple[str, str, frozenset[Key], str]] = []
        for spk, text, keys, kind in items:
            other = speakers[1 - speakers.index(spk)]
            lines.append((spk, text, keys, kind))
            filler = rng.choice(
                FILLERS
            )  # the same question twice by one speaker is one (fact-free) utterance
            key = (other, "phatic", "", "") if filler in SOCIAL else (other, "filler", filler, "")
            lines.append((other, filler, frozenset({key}), "filler"))
        if s > 0 and lines:
            p = rng.choice(PHATIC)
            lines.insert(0, (speakers[0], p, frozenset({(speakers[0], "phatic", "", "")}), "phatic"))
        for i, (spk, text, keys, kind) in enumerate(lines):
            tid = f"D{s + 1}:{i + 1}"
            turns.append(Turn(tid, f"S{s + 1}", spk, text, date + timedelta(minutes=i), order, source_id=tid))
            order += 1
            if kind == "conflation":
                segs[tid] = [x for x, _ in conflated[text]]
                seg_keys[tid] = [k for _, k in conflated[text]]
                planted["split"].append((tid,))
            elif kind == "restate":  # pair with the first turn that stated the same facts
                planted["merge"].append((next(t for t, k in keys_by_turn.items() if k == keys), tid))
            elif kind == "update":  # (current, superseded): the latest earlier value of this attribute
                ((_, _, attr, _v),) = keys
                olds = [
                    t
                    for t, k in keys_by_turn.items()
                    for c in k
                    if c[:3] == (spk, "self", attr) and c[3] != _v
                ]
                planted["update"].append((tid, olds[-1]))
            keys_by_turn[tid] = keys
        sessions.append(Session(f"S{s + 1}", date, s, tuple(turns)))
    dlg = Dialogue(did, tuple(sessions), (), tuple(speakers), source="synthetic")
    return dlg, keys_by_turn, planted, segs, seg_keys


def make_corpus(seed: int, n_dialogues: int = 4, n_sessions: int = 6) -> DriftCorpus:
    """``n_dialogues`` dialogues from one seed; seed 0 is the calibration corpus, tests use other seeds."""
    rng = random.Random(seed)
    corpus = DriftCorpus([], {})
    for i in range(n_dialogues):
        dlg, keys, planted, segs, seg_keys = _dialogue(rng, f"syn-{seed}-{i}", n_sessions)
        corpus.dialogues.append(dlg)
        corpus.keys[dlg.id] = keys
        corpus.planted[dlg.id] = planted
        corpus.segments[dlg.id] = segs
        corpus.segment_keys[dlg.id] = seg_keys
    return corpus


STATE_ATTRS = frozenset(STATES)


def edit_is_valid(op: str, members: list[frozenset[Key]]) -> bool:
    """The gold verdict for one edit, from the fact keys of its units (Merge: all; Update: current, old)."""
    if op == "merge":
        return len(members) >= 2 and all(m == members[0] for m in members) and bool(members[0])
    if op == "update":
        cur, old = members
        return any(
            c[0] == o[0] and c[1] == o[1] == "self" and c[2] == o[2] and c[2] in STATE_ATTRS and c[3] != o[3]
            for c in cur
            for o in old
        )
    if op == "split":
        return len(members[0]) >= 2
    raise ValueError(f"edit_is_valid: unknown op {op!r}")


# ---------------------------------------------------------------- harm (Table 8)
# Harmful = likely to degrade future retrieval (paper, Table 8), decided from the fact keys alone. What is not a
# fact: phatic turns and filler questions (they state nothing a question can ask about).
NOT_FACTS = frozenset({"phatic", "filler"})


def facts(keys: frozenset[Key]) -> frozenset[Key]:
    """The keys that state something a question could ask about."""
    return frozenset(k for k in keys if k[1] not in NOT_FACTS)


def _supersedes(cur: frozenset[Key], old: Key) -> bool:
    """``old`` is a state of the speaker that ``cur`` gives a new value for (a genuine supersession)."""
    return any(
        c[:3] == old[:3] and old[1] == "self" and old[2] in STATE_ATTRS and c[3] != old[3] for c in cur
    )


def harm_of(op: str, members: list[frozenset[Key]]) -> str | None:
    """The harmful pattern of one edit, or None when it takes nothing retrievable away (members as in
    :func:`edit_is_valid`). An invalid edit over fact-free units (fillers, greetings) is not harmful.

    - Merge: two members hold different facts (``merged different values of one attribute`` when they share the
      holder and attribute or event: the look-alikes; else ``merged different facts``).
    - Update: the archived unit holds a fact the current one neither restates nor supersedes (``another holder's
      state``, ``an earlier event`` (events accumulate), ``a complementary detail`` or ``another attribute``).
    - Split: the unit holds one fact only (``split a coherent memory``: a several-sentence story or one fact).
    """
    if op == "merge":
        held = [facts(m) for m in members if facts(m)]
        if len(set(held)) <= 1:
            return None
        pairs = [(a, b) for i, x in enumerate(held) for y in held[i + 1 :] for a in x for b in y if a != b]
        same = any(a[:3] == b[:3] or (a[1] == b[1] == "event" and a[2] == b[2]) for a, b in pairs)
        return "merged different values of one attribute" if same else "merged different facts"
    if op == "update":
        cur, old = members
        hidden = sorted(o for o in facts(old) if o not in cur and not _supersedes(cur, o))
        if not hidden:
            return None
        o = hidden[0]
        if o[1].startswith("relative:"):
            return "archived another holder's state"
        if o[1] == "event":
            return "archived an earlier event (events accumulate)"
        if o[2] in STATE_ATTRS:
            return "archived another attribute"
        return "archived a complementary detail"
    if op == "split":
        return "split a coherent memory" if len(facts(members[0])) == 1 else None
    raise ValueError(f"harm_of: unknown op {op!r}")


# A question about the current value of each state attribute (Fig. 7's fallback asks the one an Update answers).
QUESTIONS = {
    "city": "Where does {s} live?",
    "job": "What is {s}'s job?",
    "food": "What is {s}'s favorite food?",
    "car": "What car does {s} drive?",
    "sport": "What sport does {s} play?",
    "gym": "How many times a week does {s} go to the gym?",
}


def question_for(keys: frozenset[Key]) -> tuple[str, str] | None:
    """(question, gold) about the first of ``keys`` that is a speaker's state (sorted order), or None."""
    for spk, holder, attr, value in sorted(keys):
        if holder == "self" and attr in QUESTIONS:
            return QUESTIONS[attr].format(s=spk), value
    return None


# ---------------------------------------------------------------- the corpus as a dataset (configs/dataset/synthetic_drift.yaml)
SPEC_KEYS = ("seeds", "n_dialogues", "n_sessions")


def questions_of(corpus: DriftCorpus, dialogue: Dialogue) -> tuple[Question, ...]:
    """One question per speaker and state attribute they stated (``QUESTIONS``), asked after the last session:
    the gold is the latest value, the evidence the latest turn stating it. ``knowledge-update`` when the value
    changed in the dialogue (a planted Update), else ``single-fact``."""
    latest: dict[tuple[str, str], tuple[str, str]] = {}  # (speaker, attribute) -> (turn id, value)
    changed: set[tuple[str, str]] = set()
    for t in dialogue.turns():
        for spk, holder, attr, value in sorted(corpus.keys[dialogue.id][t.id]):
            if holder == "self" and attr in QUESTIONS:
                if (spk, attr) in latest and latest[(spk, attr)][1] != value:
                    changed.add((spk, attr))
                latest[(spk, attr)] = (t.id, value)
    when = dialogue.sessions[-1].date + timedelta(days=1)
    return tuple(
        Question(f"{dialogue.id}:q{i}", dialogue.id, QUESTIONS[attr].format(s=spk), value, (tid,),
                 question_type="knowledge-update" if (spk, attr) in changed else "single-fact", date=when)
        for i, ((spk, attr), (tid, value)) in enumerate(sorted(latest.items()))
    )  # fmt: skip


def read_spec(path: str | Path) -> dict[str, Any]:
    """The corpus's data file: a JSON object ``{"seeds": [...], "n_dialogues": N, "n_sessions": N}``."""
    import json

    from benchmarks.errors import DatasetError

    p = Path(path)
    try:
        spec = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DatasetError(str(p), f"not a readable JSON file ({exc})") from None
    if not isinstance(spec, dict) or sorted(spec) != sorted(SPEC_KEYS):
        raise DatasetError(str(p), f"must be a JSON object with exactly the keys {', '.join(SPEC_KEYS)}")
    seeds = spec["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and s >= 0 for s in seeds):
        raise DatasetError(str(p), "must be a non-empty list of seeds (integers >= 0)", field="seeds")
    for key in ("n_dialogues", "n_sessions"):
        if (
            not isinstance(spec[key], int)
            or isinstance(spec[key], bool)
            or spec[key] < (1 if key == "n_dialogues" else 3)
        ):
            raise DatasetError(str(p), "must be an integer (dialogues >= 1, sessions >= 3)", field=key)
    return spec


def load_drift(path: str | Path) -> list[Dialogue]:
    """The loader of ``configs/dataset/synthetic_drift.yaml``: every seed's dialogues (``make_corpus``), each with
    ``questions_of``. The data file holds the seeds and sizes; the dialogues follow from them and this module."""
    spec = read_spec(path)
    out: list[Dialogue] = []
    for seed in spec["seeds"]:
        corpus = make_corpus(seed, spec["n_dialogues"], spec["n_sessions"])
        out += [replace(d, questions=questions_of(corpus, d), source=str(path)) for d in corpus.dialogues]
    return out
