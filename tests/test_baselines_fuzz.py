"""Fuzzing the reply handling of every baseline template: each template's clean reply (its offline role's) is
sent in variants a real model produces. "Applied" variants must leave the memory exactly as the clean reply does;
invalid ones must be counted in the system's tally; none may raise."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from allmem.llm.offline import offline_reply
from allmem.systems import Resources
from baselines.amem import AMem
from baselines.hipporag import HippoRAG2
from baselines.lightmem import LightMem
from baselines.mem0 import Mem0
from baselines.memgpt import MemGPT
from tests.baselines_support import TableEmbedder, feed, scripted, sessions

SYSTEMS: dict[str, tuple[Callable[..., Any], dict[str, Any], tuple[str, ...]]] = {
    "mem0": (Mem0, {}, ("mem0_extract", "mem0_update")),
    "amem": (AMem, {}, ("amem_analyze", "amem_evolve", "amem_query")),
    "lightmem": (LightMem, {"short_term_tokens": 40, "update_threshold": 0.5}, ("lightmem_extract", "lightmem_update")),
    "hipporag": (HippoRAG2, {}, ("hipporag_ner", "hipporag_triples", "hipporag_filter")),
    "memgpt": (MemGPT, {"context_window": 2250, "system_tokens": 2000}, ("memgpt_pressure", "memgpt_summarize", "memgpt_search")),
}  # fmt: skip
TEXTS = [
    "I adopted a dog named Biscuit last week.", "That is lovely, I have a cat called Miso.",
    "Biscuit now goes to a puppy class on Mondays.", "I started painting landscapes in March.",
    "My sister Lena moved to Lisbon in 2021.", "I no longer have the cat, Miso lives with Lena.",
    "We went hiking near Sintra with Biscuit.", "I bought a new easel for the landscapes.",
] * 3  # fmt: skip
QUESTIONS = ["Who adopted a dog?", "Where did Lena move?", "What does Ana paint?"]


def _swap_ids(x: Any, key: str = "") -> Any:
    """Integers as strings and digit strings as integers, in id-like fields."""
    if isinstance(x, dict):
        return {k: _swap_ids(v, k) for k, v in x.items()}
    if isinstance(x, list):
        return [_swap_ids(v, key) for v in x]
    if key in ("id", "source_id", "suggested_connections", "page"):
        if isinstance(x, bool):
            return x
        if isinstance(x, int):
            return str(x)
        if isinstance(x, str) and x.isdigit():
            return int(x)
    return x


def _obj(fn: Callable[[dict[str, Any]], Any]) -> Callable[[str], str]:
    return lambda clean: json.dumps(fn(json.loads(clean)))


APPLIED: dict[str, Callable[[str], str]] = {
    "code_fence": lambda clean: f"```json\n{clean}\n```",
    "prose_around": lambda clean: (
        f"Sure, here is the JSON you asked for:\n{clean}\nLet me know if anything is off."
    ),
    "unknown_extra_key": _obj(lambda o: {**o, "reasoning": "not asked for", "confidence": 0.9}),
    "ids_int_or_string": _obj(_swap_ids),
}
COUNTED: dict[str, Callable[[str], str]] = {
    "wrong_value_types": _obj(lambda o: {k: 42 for k in o}),
    "not_json": lambda clean: "I could not decide.",
}
SURVIVED: dict[str, Callable[[str], str]] = {  # applied or counted: the memory may differ, nothing may raise
    "empty_lists": _obj(lambda o: {k: ([] if isinstance(v, list) else v) for k, v in o.items()}),
    "missing_optional_fields": _obj(lambda o: _drop_optional(o)),
}


def _drop_optional(o: Any) -> Any:
    optional = {"old_memory", "new_memory", "tags_to_update", "sources", "page", "request_heartbeat"}
    if isinstance(o, dict):
        return {k: _drop_optional(v) for k, v in o.items() if k not in optional}
    if isinstance(o, list):
        return [_drop_optional(v) for v in o]
    return o


def _run(name: str, template: str | None = None, variant: Callable[[str], str] | None = None):
    cls, kw, _ = SYSTEMS[name]
    script = {}
    if template is not None and variant is not None:
        script[template] = lambda req: variant(offline_reply(req))
    llm = scripted(script)
    system = cls(resources=Resources(embedder=TableEmbedder(), llm=llm), **kw)
    rows = [(f"D{1 + i // 4}:{i % 4 + 1}", "Ana" if i % 2 == 0 else "Ben", t) for i, t in enumerate(TEXTS)]
    feed(system, sessions(*[rows[i : i + 4] for i in range(0, len(rows), 4)]))
    snapshot = [
        [
            (u.id, json.dumps(u.parts, default=str, sort_keys=True), tuple(u.source_ids))
            for u in system.retrieve(q).units
        ]
        for q in QUESTIONS
    ]
    calls = sum(1 for r in llm.backend.seen if r.template == template)
    return snapshot, dict(system.tally), calls


FREE_TEXT = {"memgpt_summarize"}  # a plain-text reply (the summary itself): no JSON to vary
CASES = [(name, t) for name, (_, _, templates) in SYSTEMS.items() for t in templates if t not in FREE_TEXT]


@pytest.fixture(scope="module")
def clean() -> dict[str, Any]:
    return {name: _run(name) for name in SYSTEMS}


@pytest.mark.parametrize(("name", "template"), CASES)
@pytest.mark.parametrize("variant", sorted(APPLIED))
def test_applied_variants_change_memory_as_the_clean_reply(clean, name, template, variant) -> None:
    snapshot, tally, calls = _run(name, template, APPLIED[variant])
    assert calls > 0, f"{template} was never called: the fixture does not exercise it"
    assert not [k for k in tally if k.startswith(f"failed_{template}")], tally
    assert snapshot == clean[name][0]


@pytest.mark.parametrize(
    ("name", "template"), [("mem0", "mem0_update"), ("lightmem", "lightmem_extract"), ("amem", "amem_evolve")]
)
def test_the_id_variant_really_changes_the_reply(name, template) -> None:
    changed = []

    def spy(clean: str) -> str:
        obj = json.loads(clean)
        changed.append(_swap_ids(obj) != obj)
        return clean

    _run(name, template, spy)
    assert any(changed)


@pytest.mark.parametrize(("name", "template"), CASES)
@pytest.mark.parametrize("variant", sorted(COUNTED))
def test_invalid_variants_are_counted(name, template, variant) -> None:
    _, tally, calls = _run(name, template, COUNTED[variant])
    failed = sum(v for k, v in tally.items() if k.startswith(f"failed_{template}_"))
    assert calls > 0 and failed == calls, tally  # every call of the template failed, and each was counted


@pytest.mark.parametrize(("name", "template"), CASES)
@pytest.mark.parametrize("variant", sorted(SURVIVED))
def test_other_variants_never_raise(name, template, variant) -> None:
    _, _, calls = _run(name, template, SURVIVED[variant])
    assert calls > 0
