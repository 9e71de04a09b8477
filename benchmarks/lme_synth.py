"""A size-true LongMemEval generator: files in the official format with LongMemEval-s's shape, made without an LLM.

Scale work needs haystacks the size of the real ones whose text no cache has seen: the real LongMemEval-s repeats
its distractor sessions across haystacks, and LoCoMo's turns are about 30 tokens where LongMemEval's are about 230.
Every session and turn here is a fresh seeded composition of templates and a built-in vocabulary (no session repeats
within or across haystacks), user turns are shorter than assistant turns (means ``USER_TOKENS`` and
``ASSISTANT_TOKENS``, counted with ``allmem.tokens``), and each question's answer is written into its evidence turns
(``has_answer: true``), so retrieval metrics mean what they do on the real data. The same seed gives the same bytes.
``scripts/make_longmemeval.py`` is the command line.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from os import PathLike
from pathlib import Path
from typing import Any

from allmem.tokens import count_tokens

LME_S_QUESTIONS = 500
LME_S_SESSIONS = 50
USER_TOKENS = 130  # mean tokens of a user turn
ASSISTANT_TOKENS = 330  # mean tokens of an assistant turn: (130 + 330) / 2 = 230, LongMemEval-s's mean turn
TURN_PAIRS = (3, 7)  # user/assistant pairs per session, uniform: ~10 turns, ~2,300 tokens a session
# LongMemEval-s's 500 questions by type (Wu et al., Table 1); 30 of them are abstention (``_abs``) questions.
TYPE_COUNTS = {
    "multi-session": 133,
    "temporal-reasoning": 133,
    "knowledge-update": 78,
    "single-session-user": 70,
    "single-session-assistant": 56,
    "single-session-preference": 30,
}
ABSTENTION_EVERY = 17  # one question in 17 (~30 of 500) is an abstention question (never a preference one)
PREFERENCE_PREFIX = "The user would prefer suggestions involving "
ABSTENTION_PREFIX = "The information provided is not enough. You did not mention "


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# Filler vocabulary. Answer values come from the disjoint pools below, so an answer appears only where it is planted.
NOUNS = _words(
    "schedule budget garden kitchen project routine morning evening weekend recipe playlist notebook jacket bicycle "
    "window balcony printer laptop spreadsheet meeting deadline journey backpack blanket candle ladder mirror "
    "pillow sweater umbrella wallet basket bottle bucket carpet cushion drawer fence hammer helmet kettle lantern "
    "magazine napkin package pencil puzzle ribbon saucepan scissors shovel sponge stapler teapot thermos toaster "
    "towel tripod vase whistle workbench apron battery charger cabinet calendar compass curtain envelope folder "
    "grill hose keyboard lamp monitor needle outlet pan planner radiator router sandal shelf speaker stool suitcase "
    "timer tray tumbler webcam closet pantry hallway attic basement porch driveway"
)
ADJECTIVES = _words(
    "quick simple careful gentle steady practical cheap sturdy quiet bright cozy tidy flexible reliable compact "
    "light heavy warm fresh modern classic rustic minimal colorful spacious portable durable affordable efficient "
    "weekly daily seasonal local homemade organic balanced casual formal detailed rough smooth sharp narrow wide "
    "noisy calm busy lazy early late short long extra"
)
VERBS = _words(
    "organize clean repair compare plan track prepare store measure replace adjust arrange check schedule review "
    "practice improve simplify reduce label sort fold paint assemble install test balance update rotate sketch"
)
TOPICS = _words(
    "cooking budgeting gardening running cycling photography woodworking knitting baking camping painting hiking "
    "journaling meditation swimming studying moving decluttering commuting parenting fishing sewing skating"
)
CONNECTIVES = ("Also", "Besides that", "On top of that", "Honestly", "In any case", "Right now", "Lately")

USER_TEMPLATES = (
    "I have been trying to {verb} my {noun} before the {adj} part of the week starts.",
    "Do you think a {adj} {noun} would help with my {topic} plans?",
    "{conn}, my {noun} keeps getting in the way when I {verb} the {noun2}.",
    "I usually {verb} the {noun} on {day}, but it takes about {num} minutes.",
    "Is it worth buying a {adj} {noun} for {topic}, or should I {verb} the old one?",
    "My {noun} and my {noun2} are both {adj}, so I am not sure which to {verb} first.",
    "Could you give me a {adj} way to {verb} a {noun} without spending more than {num} dollars?",
    "{conn}, I want my {topic} routine to feel less {adj} and more {adj2}.",
)
ASSISTANT_TEMPLATES = (
    "A good first step is to {verb} the {noun} so that the {adj} pieces are easy to reach.",
    "Many people find that a {adj} {noun} makes {topic} noticeably easier within {num} days.",
    "{conn}, try to {verb} your {noun2} once a week; it keeps the {noun} from becoming {adj}.",
    "If the {noun} feels {adj}, you can {verb} it in small steps of about {num} minutes each.",
    "Here is a simple plan: on {day}, {verb} the {noun}, and on the next day look at the {noun2}.",
    "You might compare a {adj} {noun} with a {adj2} one before you decide what to {verb}.",
    "For {topic}, it often helps to keep a {adj} {noun} near the {noun2} and {verb} it regularly.",
    "Keep in mind that a {noun} rarely needs more than {num} minutes of care if you {verb} it early.",
    "{conn}, write down what you {verb} each {day}, so you can see which {noun} habits are {adj2}.",
)
DAYS = _words("Monday Tuesday Wednesday Thursday Friday Saturday Sunday")

# Answer pools (disjoint from the filler vocabulary).
FIRST = _words(
    "Marisol Tobias Anneke Rafferty Ingrid Dashiell Priyanka Leopold Yvette Casimir Odalys Bartholomew Saoirse "
    "Evander Mireille Thaddeus Henrietta Lazaro Ottilie Percival Rosalind Ignatius Wilhelmina Florian Esperanza"
)
LAST = _words(
    "Okafor Lindqvist Castellanos Vukovic Nakamura Delacroix Abernathy Oyelaran Kowalczyk Fairweather Mbeki "
    "Haugland Quintero Szabo Pemberton Achterberg Rosenqvist Valderrama Ferreira Tremblay"
)
ODD = _words(
    "Velvet Copper Juniper Saffron Cobalt Marigold Thistle Obsidian Cardinal Heron Lantern Harbor Meadow Quartz "
    "Willow Ember Falcon Orchid Granite Bramble"
)
THINGS = _words(
    "Teapot Compass Fox Lighthouse Orchard Kite Anchor Sparrow Tavern Almanac Carousel Badger Mill Locket Fiddle"
)
FIELDS = (
    "Marine Biology", "Business Administration", "Industrial Design", "Medieval History", "Structural Engineering",
    "Nutrition Science", "Comparative Literature", "Applied Statistics", "Landscape Architecture", "Astrophysics",
    "Public Health", "Music Theory", "Veterinary Medicine", "Urban Planning", "Cognitive Science",
)  # fmt: skip
CITIES = _words(
    "Tallinn Montevideo Ljubljana Valparaiso Tromso Asheville Halifax Dunedin Bergamo Leuven Kanazawa Cuenca "
    "Galway Plovdiv Tartu Bozeman Oaxaca Aarhus Braga Ghent"
)


def _name(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def _title(rng: random.Random) -> str:
    return f"The {rng.choice(ODD)} {rng.choice(THINGS)}"


# User facts: (statement with {v}, question, answer pool, knowledge-update statement, what an abstention asks for).
USER_FACTS = (
    ("I graduated with a degree in {v} a few years ago", "What degree did I graduate with?", "field",
     "I finally finished a second degree, this time in {v}", "my doctorate"),
    ("my manager at work is called {v}", "What is my manager's name?", "name",
     "my team was reorganised and my new manager is called {v}", "my manager's home town"),
    ("I moved to {v} last spring", "Which city do I live in?", "city",
     "I relocated again and now live in {v}", "my neighbourhood's name"),
    ("my dog is named {v}", "What is my dog's name?", "first",
     "we renamed our dog, and now everyone calls him {v}", "my cat"),
    ("my favourite cafe is {v}", "What is my favourite cafe?", "title",
     "these days my favourite cafe is {v}", "my favourite bakery"),
    ("my book club is reading {v}", "Which book is my book club reading?", "title",
     "my book club switched and is now reading {v}", "the book club's meeting day"),
)  # fmt: skip
MULTI_FACTS = (
    (
        "I signed up for a class with the instructor {v}",
        "Which instructors have I taken classes with?",
        "name",
    ),
    ("I spent a long weekend in {v}", "Which cities did I spend a weekend in?", "city"),
    ("I finished reading {v}", "Which books have I finished reading?", "title"),
)
EVENTS = (
    ("I went to a concert by {v} tonight", "Which concert did I go to first, {a} or {b}?", "title"),
    ("I had dinner with my old friend {v} today", "Whom did I have dinner with first, {a} or {b}?", "name"),
)
ASSISTANT_FACTS = (
    ("a novel for a long train ride", "I'd recommend {v}; it is easy to pick up and put down.",
     "Which novel did you recommend for my long train ride?", "title"),
    ("a mentor in my field", "You could reach out to {v}, who runs an open mentoring program.",
     "Who did you suggest I contact as a mentor?", "name"),
    ("a quiet city for a short holiday", "{v} would suit you; it is calm outside the summer months.",
     "Which city did you suggest for a quiet holiday?", "city"),
)  # fmt: skip
PREFERENCES = (
    ("cooking", "I always prefer recipes built around {v}", "Can you suggest a dinner I could cook this weekend?",
     _words("lentils chickpeas mushrooms eggplant tofu quinoa")),
    ("running", "I only enjoy running when the route passes {v}", "Any ideas for a new running route?",
     ("a river", "old railway bridges", "a botanical garden", "the harbour", "open farmland")),
    ("reading", "the books I like best are {v}", "What should I read next?",
     ("slow mysteries set in small towns", "memoirs by mountaineers", "histories of shipwrecks")),
)  # fmt: skip


def _value(kind: str, rng: random.Random) -> str:
    return {
        "name": _name,
        "title": _title,
        "first": lambda r: r.choice(FIRST),
        "city": lambda r: r.choice(CITIES),
        "field": lambda r: r.choice(FIELDS),
    }[kind](rng)


def _distinct(kind: str, rng: random.Random, n: int) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        v = _value(kind, rng)
        if v not in out:
            out.append(v)
    return out


def _types(n: int) -> list[str]:
    """Question types in LongMemEval-s's proportions, interleaved (smooth weighted round robin), so any prefix of
    the file (``--fraction``, ``limit_dialogues``) has about the same mix."""
    total = sum(TYPE_COUNTS.values())
    current = dict.fromkeys(TYPE_COUNTS, 0)
    out = []
    for _ in range(n):
        for t, w in TYPE_COUNTS.items():
            current[t] += w
        best = max(current, key=lambda t: current[t])
        current[best] -= total
        out.append(best)
    return out


def _date(d: datetime) -> str:
    return d.strftime("%Y/%m/%d (%a) %H:%M")


class _Writer:
    """Seeded text: sentences until a token target is met; remembers every turn so none repeats."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.seen: set[bytes] = set()

    def sentence(self, templates: tuple[str, ...], topic: str) -> str:
        r = self.rng
        nouns, adjs = r.sample(NOUNS, 2), r.sample(ADJECTIVES, 2)
        return r.choice(templates).format(
            noun=nouns[0], noun2=nouns[1], adj=adjs[0], adj2=adjs[1], verb=r.choice(VERBS), topic=topic,
            num=r.randint(2, 95), day=r.choice(DAYS), conn=r.choice(CONNECTIVES),
        )  # fmt: skip

    def turn(self, role: str, topic: str, planted: str | None = None) -> str:
        """A fresh turn of about the role's mean length; ``planted`` (a sentence) goes in at a random place."""
        templates, mean = (
            (USER_TEMPLATES, USER_TOKENS) if role == "user" else (ASSISTANT_TEMPLATES, ASSISTANT_TOKENS)
        )
        while True:
            target = round(mean * self.rng.uniform(0.5, 1.5))
            parts = [] if planted is None else [planted]
            tokens = 0 if planted is None else count_tokens(planted) + 1
            while tokens < target:
                s = self.sentence(templates, topic)
                parts.insert(self.rng.randint(0, len(parts)), s)
                tokens += (
                    count_tokens(s) + 1
                )  # +1: the joining space usually merges into the next word's token
            text = " ".join(parts)
            key = hashlib.blake2b(text.encode(), digest_size=12).digest()
            if key not in self.seen:  # a repeat is astronomically unlikely; it is still never written
                self.seen.add(key)
                return text


def _question(i: int, qtype: str, rng: random.Random) -> dict[str, Any]:
    """What question ``i`` asks and what its evidence sessions must say: a list of (role, planted sentence) per
    evidence session, in date order."""
    abstain = i % ABSTENTION_EVERY == ABSTENTION_EVERY - 1 and qtype != "single-session-preference"
    if abstain:
        stmt, _, kind, _, missing = rng.choice(USER_FACTS)
        v = _value(kind, rng)
        return {"question": f"What can you tell me about {missing}?", "answer": f"{ABSTENTION_PREFIX}{missing}.",
                "evidence": [[("user", stmt.format(v=v))]], "abstain": True}  # fmt: skip
    if qtype == "single-session-user":
        stmt, q, kind, _, _ = rng.choice(USER_FACTS)
        v = _value(kind, rng)
        return {"question": q, "answer": v, "evidence": [[("user", f"By the way, {stmt.format(v=v)}.")]]}
    if qtype == "single-session-assistant":
        ask, reply, q, kind = rng.choice(ASSISTANT_FACTS)
        v = _value(kind, rng)
        return {"question": q, "answer": v,
                "evidence": [[("ask", f"Could you recommend {ask}?"), ("assistant", reply.format(v=v))]]}  # fmt: skip
    if qtype == "single-session-preference":
        _, stmt, q, pool = rng.choice(PREFERENCES)
        v = rng.choice(pool)
        return {"question": q, "answer": f"{PREFERENCE_PREFIX}{v}.",
                "evidence": [[("user", f"For what it's worth, {stmt.format(v=v)}.")]]}  # fmt: skip
    if qtype == "multi-session":
        stmt, q, kind = rng.choice(MULTI_FACTS)
        vs = _distinct(kind, rng, rng.randint(2, 3))
        answer = ", ".join(vs[:-1]) + " and " + vs[-1]
        return {
            "question": q,
            "answer": answer,
            "evidence": [[("user", f"Oh, and {stmt.format(v=v)}.")] for v in vs],
        }
    if qtype == "knowledge-update":
        stmt, q, kind, update, _ = rng.choice(USER_FACTS)
        old, new = _distinct(kind, rng, 2)
        return {"question": q, "answer": new, "evidence": [[("user", f"By the way, {stmt.format(v=old)}.")],
                                                            [("user", f"Quick update: {update.format(v=new)}.")]]}  # fmt: skip
    stmt, q, kind = rng.choice(EVENTS)  # temporal-reasoning: which came first
    first, second = _distinct(kind, rng, 2)
    a, b = (first, second) if rng.random() < 0.5 else (second, first)
    return {"question": q.format(a=a, b=b), "answer": first,
            "evidence": [[("user", f"Guess what, {stmt.format(v=v)}.")] for v in (first, second)]}  # fmt: skip


def _session(w: _Writer, topic: str, plants: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """One session of user/assistant pairs; ``plants`` put evidence sentences into some turns (``has_answer``)."""
    rng = w.rng
    pairs = rng.randint(*TURN_PAIRS)
    at = rng.randrange(pairs)
    turns: list[dict[str, Any]] = []
    for p in range(pairs):
        here = dict(plants) if p == at else {}
        ask = here.get("ask")
        user = w.turn("user", topic, here.get("user") or ask)
        turns.append({"role": "user", "content": user} | ({"has_answer": True} if "user" in here else {}))
        reply = w.turn("assistant", topic, here.get("assistant"))
        turns.append(
            {"role": "assistant", "content": reply} | ({"has_answer": True} if "assistant" in here else {})
        )
    return turns


def iter_records(questions: int, sessions: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """LongMemEval question records, one at a time (``sessions`` per haystack, at least one per evidence)."""
    rng = random.Random(seed)
    w = _Writer(rng)
    used_ids: set[str] = set()
    for i, qtype in enumerate(_types(questions)):
        spec = _question(i, qtype, rng)
        while True:
            qid = f"{rng.getrandbits(32):08x}" + ("_abs" if spec.get("abstain") else "")
            if qid not in used_ids:
                used_ids.add(qid)
                break
        n_ev = len(spec["evidence"])
        n = max(sessions, n_ev)
        ev_slots = sorted(rng.sample(range(n), n_ev))
        start = datetime(2023, 1, 1) + timedelta(days=rng.randrange(365), minutes=rng.randrange(1440))
        dates, ids, haystack, evidence_ids = [], [], [], []
        when = start
        for k in range(n):
            when += timedelta(hours=rng.randint(6, 72), minutes=rng.randrange(60))
            topic = rng.choice(TOPICS)
            if k in ev_slots:
                sid = f"answer_{qid.removesuffix('_abs')}_{ev_slots.index(k) + 1}"
                evidence_ids.append(sid)
                turns = _session(w, topic, spec["evidence"][ev_slots.index(k)])
            else:
                sid = f"{rng.choice(('sharegpt', 'ultrachat'))}_{qid.removesuffix('_abs')}_{k}"
                turns = _session(w, topic, [])
            dates.append(_date(when))
            ids.append(sid)
            haystack.append(turns)
        yield {
            "question_id": qid,
            "question_type": qtype,
            "question": spec["question"],
            "answer": spec["answer"],
            "question_date": _date(when + timedelta(days=rng.randint(1, 30), minutes=rng.randrange(1440))),
            "haystack_dates": dates,
            "haystack_session_ids": ids,
            "haystack_sessions": haystack,
            "answer_session_ids": evidence_ids,
        }


def write_longmemeval(
    path: str | PathLike[str], questions: int = LME_S_QUESTIONS, sessions: int = LME_S_SESSIONS, seed: int = 0
) -> Path:
    """Write a LongMemEval-format file (a JSON list, one record per line) record by record; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    with open(part, "w", encoding="utf-8") as f:
        f.write("[")
        for i, record in enumerate(iter_records(questions, sessions, seed)):
            f.write(("\n" if i == 0 else ",\n") + json.dumps(record))
        f.write("\n]\n")
    part.replace(path)
    return path
