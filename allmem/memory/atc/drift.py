"""The offline diagnoser: finds the three drift patterns from plain inputs, with calibrated confidences.

Why rules and not a model: the offline backend must reproduce the paper's pipeline with no LLM, so this module
stands in for the diagnosis prompt. It sees exactly what the prompt sees (a focal unit, its top-k visible
neighbours and its temporal predecessor) plus the unit embeddings, and returns ``(op, target, p)`` proposals.

Confidence mapping (why theta means something). Every feature goes through :func:`ramp`, a line through two
anchors: the feature value at which the evidence is "even" (p = 0.5) and the value at which an edit is safe
(p = 0.9); it is clipped to [0, 0.99]. A proposal's p is the minimum over its features (all must hold), then
capped by vetoes. So p >= 0.9 means every feature reached its "safe" anchor and no veto fired; theta = 0.7 means
every feature is at least halfway between "even" and "safe". The anchors live in :class:`Calibration`; they were
set on the synthetic drift corpus (``benchmarks.synthetic_drift``, calibration seed 0, never the test seeds)
and on LoCoMo's fit conversations only (``fit_dialogues`` of ``configs/dataset/locomo.yaml``); ``split_max_groups``
also on a generated LongMemEval-format file (``scripts/fit_split_groups.py``). Vetoes and their caps:

- Merge: different speakers -> 0; conflicting values (each side names a number or name the other lacks), a
  negation on one side only, or a strong change cue in the newer unit -> 0.4 (that is an Update, not a copy).
  Phatic units ("Thanks!", "Bye, take care!") carry no facts: two phatic units of the same speaker merge on
  embedding similarity alone when ``merge_phatic`` is on (default): they are true redundancy and only crowd
  the visible surface. A phatic unit never merges with a factual one.
- Update: different speakers -> 0.5; the newer unit adds rather than replaces ("also", "another") -> 0.5; a
  change needs evidence: a strong cue ("no longer", "switched", "moved to", ...) or a negation flip (two single
  statements that differ only where one negates; idioms such as "can't wait" are no negation) (0.97),
  a substituted value between two one-sentence state-like statements ("lives", "works", "favourite") with a
  weak cue ("now", 0.95) or, without any cue, in one contiguous stretch of words (0.9), else 0.6 (two events
  with different values are two facts, not a supersession; paraphrases differ in several places). Without a
  strong cue, two statements naming the same values (names, numbers) are a rewording, never an Update.
- Split: a segment with fewer than ``split_min_content`` content words is attached to its neighbour, never
  split off; p falls as the most similar pair of segments gets closer (max centroid cosine between segments).
  A unit of more than ``split_max_groups`` such groups is not segmented (it is not embedded either).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from functools import lru_cache

import numpy as np

from allmem.memory.atc import cues as tx

Embed = Callable[[list[str]], np.ndarray]
# Words that open a sentence continuing the previous one (it refers back or connects).
CONTINUATIONS = frozenset(
    """it it's its this that that's these those they they're them their there there's he she his her him so and
    but plus also which then makes made started because though although yet or anyway besides still""".split()
)
MIN_REPORTED = 0.3  # proposals below this are never useful at any sensible theta: not reported


@dataclass(frozen=True)
class UnitView:
    """What the diagnoser knows of one unit. ``order`` grows with time (newer units have larger order)."""

    id: str
    text: str
    speaker: str
    order: int
    z: np.ndarray
    summary: str = ""
    keywords: tuple[str, ...] = ()
    visible: bool = True
    n_records: int = 1  # merged units hold several records; only single-record units are split candidates


@dataclass(frozen=True)
class Proposal:
    """One diagnosis proposal. ``target``: (v,) for Split, a set for Merge, (current, superseded) for Update."""

    op: str
    target: tuple[str, ...]
    p: float
    reason: str = ""


@dataclass(frozen=True)
class Calibration:
    """Anchors of the confidence mapping: (feature at p = 0.5, feature at p = 0.9). See the module docstring."""

    merge_sim: tuple[float, float] = (0.75, 0.90)
    merge_jaccard: tuple[float, float] = (0.30, 0.55)
    merge_containment: tuple[float, float] = (0.60, 0.85)
    phatic_sim: tuple[float, float] = (0.60, 0.80)
    merge_phatic: bool = True
    update_sim: tuple[float, float] = (0.45, 0.65)
    update_containment: tuple[float, float] = (0.34, 0.5)
    update_containment_cued: tuple[float, float] = (0.2, 0.33)  # with a strong change cue
    update_max_swap: int = 3  # at most this many replaced content words per side for a "substitution"
    split_sep: tuple[float, float] = (0.35, 0.15)  # max between-segment cosine: lower is more separable
    split_join: float = 0.35  # adjacent segments at least this similar are one topic
    split_min_content: int = 3
    split_max_groups: int = 5  # more standalone groups: not segmented (see after SEGMENT_MAX_SENTENCES)
    names: frozenset[str] = field(default_factory=frozenset)  # lower-cased speaker names (addressees)


def ramp(x: float, anchors: tuple[float, float]) -> float:
    """Line through (anchors[0], 0.5) and (anchors[1], 0.9), clipped to [0, 0.99]; works for falling anchors."""
    lo, hi = anchors
    if hi == lo:
        raise ValueError(f"ramp anchors must differ, got {anchors}")
    # Rounded so that a feature exactly at an anchor maps exactly to 0.5 / 0.9 (no float-edge misses).
    return round(float(min(0.99, max(0.0, 0.5 + 0.4 * (x - lo) / (hi - lo)))), 6)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


@dataclass(frozen=True)
class _Lex:
    content: frozenset[str]
    values: frozenset[str]
    negated: bool
    strong: tuple[str, ...]
    weak: tuple[str, ...]
    state: bool
    phatic: bool
    complement: bool
    holders: frozenset[str]
    question: bool
    core: frozenset[str]  # content stems without change cues: the subject and its value
    single: bool  # one sentence: a cue-less substitution is trusted only between two single statements


_COMPLEMENT = ("also", "another", "as well", "too", "second", "in addition", "besides")


@lru_cache(maxsize=32768)
def _lex(text: str, names: frozenset[str]) -> _Lex:
    """Lexical features of one text (cached: each unit meets every neighbour in several local contexts)."""
    strong, weak = tx.change_cues(text)
    low = f" {text.lower()} "
    return _Lex(
        content=tx.content_stems(text, names),
        values=tx.value_tokens(text, ignore=names),
        negated=tx.has_negation(text),
        strong=tuple(strong),
        weak=tuple(weak),
        state=tx.is_state_like(text),
        phatic=tx.is_phatic(text, ignore=names),
        complement=any(tx._has_phrase(low, c) for c in _COMPLEMENT),
        holders=tx.holders(text),
        question=tx.is_question(text),
        core=tx.content_stems(tx.strip_cues(text), names),
        single=len(tx.sentences(text)) == 1,
    )


def merge_confidence(a: UnitView, b: UnitView, cal: Calibration) -> tuple[float, str]:
    """Confidence that ``a`` and ``b`` are redundant copies of one fact (symmetric)."""
    if a.speaker != b.speaker:
        return 0.0, "different speakers"
    la, lb = _lex(a.text, cal.names), _lex(b.text, cal.names)
    sim = _cos(a.z, b.z)
    if la.phatic or lb.phatic:
        if not (la.phatic and lb.phatic and cal.merge_phatic):
            return 0.0, "phatic vs factual" if la.phatic != lb.phatic else "phatic merges off"
        return ramp(sim, cal.phatic_sim), f"phatic pair sim={sim:.2f}"
    inter = la.content & lb.content
    jac = tx.jaccard(la.content, lb.content)
    small = min(len(la.content), len(lb.content))
    cont = len(inter) / small if small else 0.0
    p = min(ramp(sim, cal.merge_sim), ramp(jac, cal.merge_jaccard), ramp(cont, cal.merge_containment))
    reason = f"sim={sim:.2f} jaccard={jac:.2f} containment={cont:.2f}"
    newer = a if a.order > b.order else b
    ln = la if newer is a else lb
    if (la.values - lb.values) and (lb.values - la.values):
        return min(p, 0.4), reason + f"; conflicting values {sorted(la.values ^ lb.values)}"
    if la.holders != lb.holders:
        return min(p, 0.4), reason + f"; about different people {sorted(la.holders ^ lb.holders)}"
    if la.negated != lb.negated:
        return min(p, 0.4), reason + "; negation on one side"
    if ln.strong:
        return min(p, 0.4), reason + f"; change cue {ln.strong[0]!r}"
    return p, reason


_ADJUNCT_START = frozenset(
    "with without every each at on in to for from after before during since until by near about around".split()
)


def _one_span(a: UnitView, b: UnitView) -> bool:
    """The two statements differ in one short stretch of words: the value slot of one sentence frame.

    Without any change cue, "My sister works as an architect" vs "My sister is an architect at the hospital"
    (two differences, same value) is no substitution, nor is "I play squash every weekend" vs "I play squash
    with my friends" (the replaced stretches are adjuncts: they start with a preposition or "every" and can
    both be true); "My favorite food is sushi" vs "... pizza" is.
    """
    wa = [w.lower() for w in tx.words(tx.strip_cues(a.text))]
    wb = [w.lower() for w in tx.words(tx.strip_cues(b.text))]
    ops = [op for op in SequenceMatcher(None, wa, wb, autojunk=False).get_opcodes() if op[0] != "equal"]
    if len(ops) != 1 or ops[0][0] != "replace":
        return False
    _, i1, i2, j1, j2 = ops[0]
    spans = (wa[i1:i2], wb[j1:j2])
    return all(0 < len(sp) <= 3 and sp[0] not in _ADJUNCT_START for sp in spans)


def _negation_only(a: UnitView, b: UnitView) -> bool:
    """The statements differ only where one of them negates: "I eat meat" vs "I don't eat meat (anymore)"."""
    wa = [w.lower() for w in tx.words(tx.strip_cues(a.text))]
    wb = [w.lower() for w in tx.words(tx.strip_cues(b.text))]
    ops = [op for op in SequenceMatcher(None, wa, wb, autojunk=False).get_opcodes() if op[0] != "equal"]
    return 0 < len(ops) <= 2 and all(
        any(tx.is_negation(w) for w in wa[i1:i2] + wb[j1:j2]) for _, i1, i2, j1, j2 in ops
    )


def update_confidence(cur: UnitView, old: UnitView, cal: Calibration) -> tuple[float, str]:
    """Confidence that ``cur`` (newer) supersedes ``old`` about the same subject."""
    if cur.order <= old.order:
        return 0.0, "not newer"
    lc, lo = _lex(cur.text, cal.names), _lex(old.text, cal.names)
    if lc.phatic or lo.phatic or lc.question or lo.question:
        return 0.0, "no statement"
    sim = _cos(cur.z, old.z)
    small = min(len(lc.core), len(lo.core))
    cont = len(lc.core & lo.core) / small if small else 0.0
    cues = [c for c in lc.strong if c not in lo.strong]  # a cue both share announces no change between them
    # A strong cue in the newer unit is itself evidence of a subject in common: less overlap is needed.
    # (Only between two single statements: in long utterances a few shared words say little.)
    cont_anchors = cal.update_containment_cued if cues and lc.single and lo.single else cal.update_containment
    subject = min(ramp(sim, cal.update_sim), ramp(cont, cont_anchors))
    new_only, old_only = lc.core - lo.core, lo.core - lc.core
    vals_new, vals_old = lc.values - lo.values, lo.values - lc.values
    swapped = bool(new_only and old_only) and max(len(new_only), len(old_only)) <= cal.update_max_swap
    value_swap = bool(vals_new and vals_old)
    if not (new_only or old_only or lc.negated != lo.negated):
        change, why = 0.0, "same content"
    elif cues and (new_only or lc.negated != lo.negated):
        change, why = 0.97, f"cue {cues[0]!r}"
    elif lc.negated != lo.negated and lc.single and lo.single and _negation_only(cur, old):
        change, why = 0.97, "negation flip"
    elif lc.values and lc.values == lo.values:
        change, why = 0.0, f"same named value {sorted(lc.values & lo.values)}: a rewording"
    elif (swapped or value_swap) and lc.state and lo.state and lc.single and lo.single and lc.weak:
        change, why = 0.95, f"substituted value in a state, cue {lc.weak[0]!r}"
    elif (
        (swapped or value_swap) and lc.state and lo.state and lc.single and lo.single and _one_span(cur, old)
    ):
        change, why = 0.9, "substituted value in a state"
    elif swapped or value_swap:
        change, why = 0.6, "substituted value in an event"
    else:
        change, why = 0.0, "no change"
    p = min(subject, change)
    reason = f"sim={sim:.2f} containment={cont:.2f}; {why}"
    if cur.speaker != old.speaker:
        return min(p, 0.5), reason + "; different speakers"
    if lc.holders != lo.holders:
        return min(p, 0.5), reason + f"; about different people {sorted(lc.holders ^ lo.holders)}"
    if lc.complement and not cues:
        return min(p, 0.5), reason + "; adds rather than replaces"
    return p, reason


# Longer units are not segmented offline: joining groups is quadratic in sentences (a 1 MB turn, ~10k sentences,
# took minutes), and no dialogue turn or merged unit comes near (LoCoMo's longest unit has a few dozen).
SEGMENT_MAX_SENTENCES = 256
# Nor are units of more than ``Calibration.split_max_groups`` standalone groups, counted before anything is embedded.
# Split's p needs every pair of segments far apart (the max pairwise centroid cosine), and the pairs grow with the
# square of the segments, so a unit of many groups seldom reaches theta; yet their sentences were most of the offline
# write path's embedding time on LongMemEval-length turns. ``scripts/fit_split_groups.py`` segments every candidate
# with no cap, on LoCoMo's fit conversations and on a generated LongMemEval-format file, and takes the smallest cap
# that keeps every candidate reaching the default theta on both (its output: results/fits/fit_split_groups.log).
# Limits: the long turns are template text, not LongMemEval-s; at Fig. 4's lowest theta a few generated units above
# the cap would have passed (the log's other column). On LoCoMo (all ten conversations) one turn has more groups,
# proposed at p far below any theta swept, so no LoCoMo prediction or score depends on the cap.


def _standalone_groups(sents: list[str], cal: Calibration) -> list[list[int]]:
    """Sentences that cannot stand alone joined to a neighbour, before any similarity is measured: a question or a
    sentence opening with an anaphor or connective ("It was...", "Plus...", "Makes me...") continues the one
    before; a thin group (a greeting, "Wow!") joins the one after it, or the one before at the end."""

    def content(g: list[int]) -> int:
        return len(tx.content_stems(" ".join(sents[i] for i in g), cal.names))

    groups = [[0]]
    for i in range(1, len(sents)):
        first = tx.words(sents[i])[:1]
        leans_back = tx.is_question(sents[i]) or (bool(first) and first[0].lower() in CONTINUATIONS)
        if leans_back or content(groups[-1]) < cal.split_min_content:
            groups[-1].append(i)
        else:
            groups.append([i])
    if len(groups) > 1 and content(groups[-1]) < cal.split_min_content:
        groups[-2:] = [groups[-2] + groups[-1]]
    return groups


@lru_cache(maxsize=8192)
def _segment_plan(text: str, cal: Calibration) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """``text``'s sentences and their standalone groups, or two empty tuples when there is nothing to segment (one
    sentence, more than ``SEGMENT_MAX_SENTENCES``, one group or more than ``split_max_groups``). Cached: a pure
    function of its arguments, asked for each focal unit by the consolidator's prefetch, by ``diagnose`` and by
    ``segment`` (the grouping re-reads the content words of every growing group, most of the offline diagnosis's
    own CPU)."""
    sents = tx.sentences(text)
    if not 2 <= len(sents) <= SEGMENT_MAX_SENTENCES:
        return (), ()
    groups = _standalone_groups(sents, cal)
    if not 2 <= len(groups) <= cal.split_max_groups:
        return (), ()
    return tuple(sents), tuple(tuple(g) for g in groups)


def segment_sentences(text: str, cal: Calibration) -> list[str]:
    """The sentences ``segment`` embeds for ``text``: none when it has one sentence or more than
    ``SEGMENT_MAX_SENTENCES``, or when its sentences form one group (or more than ``split_max_groups``) before any
    similarity is measured."""
    return list(_segment_plan(text, cal)[0])


def split_sentences_to_embed(focal: UnitView, ops: Sequence[str], cal: Calibration) -> list[str]:
    """The sentences ``diagnose`` embeds for ``focal`` (Split of a single-record unit), in order."""
    return segment_sentences(focal.text, cal) if "split" in ops and focal.n_records == 1 else []


def segment(text: str, embed: Embed, cal: Calibration) -> tuple[list[str], float]:
    """Contiguous topic segments of ``text`` (verbatim sentence groups) and the max between-segment cosine.

    Sentences that cannot stand alone join a neighbour first (``_standalone_groups``); then adjacent groups whose
    centroids are at least ``split_join`` similar are joined, most similar pair first, until no pair qualifies.
    Sentences are embedded only when there are 2 to ``split_max_groups`` groups (``segment_sentences``).
    """
    plan_sents, plan_groups = _segment_plan(text, cal)
    if not plan_sents:
        return [text.strip()], 1.0
    sents, groups = list(plan_sents), [list(g) for g in plan_groups]
    vecs = np.asarray(embed(sents), dtype=np.float64)

    def centroid(g: list[int]) -> np.ndarray:
        return vecs[g].mean(axis=0)

    while len(groups) > 1:
        sims = [_cos(centroid(groups[k]), centroid(groups[k + 1])) for k in range(len(groups) - 1)]
        k = int(np.argmax(sims))
        if sims[k] < cal.split_join:
            break
        groups[k : k + 2] = [groups[k] + groups[k + 1]]
    if len(groups) < 2:
        return [text.strip()], 1.0
    cents = [centroid(g) for g in groups]
    sep = max(_cos(cents[x], cents[y]) for x in range(len(cents)) for y in range(x + 1, len(cents)))
    return [" ".join(sents[i] for i in g) for g in groups], sep


def split_confidence(unit: UnitView, embed: Embed, cal: Calibration) -> tuple[float, str, list[str]]:
    """Confidence that ``unit`` conflates separable facts, with the segments that separate them."""
    segs, sep = segment(unit.text, embed, cal)
    if len(segs) < 2:
        return 0.0, "one topic", segs
    return ramp(sep, cal.split_sep), f"{len(segs)} segments, max between-segment cos={sep:.2f}", segs


def diagnose(
    focal: UnitView,
    context: Sequence[UnitView],
    embed: Embed | None,
    cal: Calibration,
    ops: Sequence[str] = ("split", "merge", "update"),
) -> list[Proposal]:
    """All proposals for one local context, in a fixed order (split, merge, update; context order within)."""
    out: list[Proposal] = []
    ctx = [c for c in context if c.id != focal.id]
    if embed is not None and split_sentences_to_embed(focal, ops, cal):
        p, why, _ = split_confidence(focal, embed, cal)
        if p > 0.0:
            out.append(Proposal("split", (focal.id,), p, why))
    if "merge" in ops:
        scored = [(c, *merge_confidence(focal, c, cal)) for c in ctx if c.visible]
        scored = [s for s in scored if s[1] > 0.0]
        scored.sort(key=lambda s: -s[1])
        # Grow the set in order of confidence; a member's set confidence is its weakest pair with any member
        # already in (redundancy is not transitive for free). Sets form a chain S1 < S2 < ... with falling p.
        members: list[UnitView] = [focal]
        levels: list[tuple[int, float, str]] = []  # (set size, p, reason)
        p_set = 1.0
        for c, p, why in scored:
            p_new = min([p_set, p] + [merge_confidence(m, c, cal)[0] for m in members[1:]])
            if p_new < MIN_REPORTED:
                continue
            members.append(c)
            if levels and levels[-1][1] == p_new:
                levels[-1] = (len(members), p_new, levels[-1][2] + f"; {c.id}: {why}")
            else:
                levels.append(
                    (len(members), p_new, (levels[-1][2] + "; " if levels else "") + f"{c.id}: {why}")
                )
            p_set = p_new
        # The largest set first: gating drops the sets below theta, and after the largest passing set is
        # executed its subsets are stale.
        for size, p, why in reversed(levels):
            out.append(Proposal("merge", tuple(m.id for m in members[:size]), p, why))
    if "update" in ops:
        for c in ctx:
            if not c.visible:
                continue
            cur, old = (focal, c) if focal.order > c.order else (c, focal)
            p, why = update_confidence(cur, old, cal)
            if p > 0.0:
                out.append(Proposal("update", (cur.id, old.id), p, why))
    return out
