"""How far a judge can be trusted, on the run's own questions: it judges answers known to be wrong (another
question's gold answer) and answers known to be right (the question's own gold answer). A judge worth its
column accepts almost none of the first and almost all of the second; a small local model may accept both
(``make table1-llm`` prints the two rates beside its judge column).

``allmem judge RUN_DIR llm=local --sanity`` writes ``<run>/judges/<key>-sanity/sanity.json``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from allmem.metrics.judge import judge_records
from allmem.metrics.qa import set_f1

KINDS = ("known_wrong", "known_right")
SANITY = "sanity.json"  # the file in the judge folder; its home is here (the report reads it by this name)


def probes(records: Sequence[Mapping[str, Any]], protocol: Any) -> list[tuple[str, dict[str, Any]]]:
    """``(kind, record)`` pairs for every judged record: its gold as the answer (known right), and the gold of
    the next judged question of the same dialogue whose gold shares no word with it (token F1 0: known wrong;
    none when the dialogue has no such question). Order is the records' order, so the probes are the same on every run."""
    judged = [r for r in records if protocol.judges(r)]
    out: list[tuple[str, dict[str, Any]]] = []
    for i, rec in enumerate(judged):
        gold = str(rec.get("gold", ""))
        out.append(("known_right", dict(rec) | {"prediction": gold}))
        later = [*judged[i + 1 :], *judged[:i]]
        other = next(
            (o for o in later if o.get("dialogue_id") == rec.get("dialogue_id")
             and set_f1(str(o.get("gold", "")), gold) == 0.0),
            None,
        )  # fmt: skip
        if other is not None:
            out.append(("known_wrong", dict(rec) | {"prediction": str(other.get("gold", ""))}))
    return out


def sanity(llm: Any, records: Sequence[Mapping[str, Any]], protocol: Any) -> dict[str, Any]:
    """Per kind: ``n`` probes, ``accepted`` (yes), ``rejected`` (no), ``invalid``, and ``accept_rate``
    (×100 over the decided ones; None when none was decided); ``failed`` counts calls with no reply."""
    pairs = probes(records, protocol)
    verdicts = judge_records(llm, [r for _, r in pairs], protocol)
    out: dict[str, Any] = {k: {"n": 0, "accepted": 0, "rejected": 0, "invalid": 0} for k in KINDS}
    out["failed"] = 0
    for (kind, _), verdict in zip(pairs, verdicts, strict=True):
        if verdict is None:
            continue
        if verdict.get("error"):
            out["failed"] += 1
            continue
        block = out[kind]
        block["n"] += 1
        block[{"yes": "accepted", "no": "rejected"}.get(verdict["verdict"], "invalid")] += 1
    for kind in KINDS:
        block = out[kind]
        decided = block["accepted"] + block["rejected"]
        block["accept_rate"] = 100.0 * block["accepted"] / decided if decided else None
    return out
