"""The LLM judge (the 4o-J column): one verdict dict per prediction record, per protocol.

Protocols (PROTOCOL.md):
- ``allmem``: LongMemEval-style yes/no prompts ending in ``[[yes]]``/``[[no]]``, with type-specific clauses:
  temporal (LoCoMo category 2, LongMemEval temporal-reasoning), knowledge-update, preference (rubric),
  abstention (``_abs`` in the question id). ``[[yes]]`` present → yes; else ``[[no]]`` → no; neither → invalid
  (excluded from the denominator, counted).
- ``mem0``: Mem0's generous CORRECT/WRONG JSON label; categories 1-4 only (category 5 is not judged).
- ``longmemeval``: LongMemEval's official per-type prompts; correct iff the reply contains "yes".
- ``locomo``: LoCoMo's scorer has no judge; the allmem prompts are used so the column is still comparable.

With ``n_votes > 1`` the judge is asked that many times (each vote its own cached call, distinguished by a seed)
and the majority of the decided votes wins; the dict reports every vote and the agreement (share of votes that
match the final verdict). A tie between yes and no is invalid.
The offline backend cannot judge: ``judge_record`` returns None and metrics.json reports 4o-J as null with the
reason; there is never a proxy under that name.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from allmem.llm.base import ChatResult
from allmem.llm.prompts import build_request

JUDGED_PROTOCOLS = ("allmem", "mem0", "longmemeval", "locomo")
_TYPE_VARIANT = {
    "temporal-reasoning": "temporal",
    "knowledge-update": "update",
    "single-session-preference": "preference",
}


def _protocol_name(protocol: Any) -> str:
    name = protocol if isinstance(protocol, str) else getattr(protocol, "name", None)
    if name is None and isinstance(protocol, Mapping):
        name = protocol.get("name")
    if name not in JUDGED_PROTOCOLS:
        raise ValueError(f"judge: unknown protocol {name!r}; choose one of {JUDGED_PROTOCOLS}")
    return str(name)


def judge_variant(record: Mapping[str, Any]) -> str:
    """default | temporal | update | preference | abstention, from the question id, category or type."""
    if "_abs" in str(record.get("question_id", "")):
        return "abstention"
    qtype = record.get("question_type")
    if qtype is not None:
        return _TYPE_VARIANT.get(str(qtype), "default")
    return "temporal" if record.get("category") == 2 else "default"


def judge_template(record: Mapping[str, Any], protocol: Any) -> str:
    name = _protocol_name(protocol)
    if name == "mem0":
        return "judge_mem0"
    prefix = "judge_lme_" if name == "longmemeval" else "judge_allmem_"
    return prefix + judge_variant(record)


def parse_verdict(protocol: Any, res: ChatResult) -> str:
    """yes | no | invalid for one judge reply under ``protocol``'s rule."""
    if res.error is not None:
        return "invalid"
    name = _protocol_name(protocol)
    text = res.text or ""
    if name == "mem0":
        label = str(res.data.get("label", "")) if isinstance(res.data, Mapping) else ""
        if not label:  # tolerate a bare label outside JSON, as the reply format is the model's to break
            found = set(re.findall(r"\b(CORRECT|WRONG)\b", text.upper()))
            label = found.pop() if len(found) == 1 else ""
        return {"CORRECT": "yes", "WRONG": "no"}.get(label.strip().upper(), "invalid")
    if name == "longmemeval":
        return "yes" if "yes" in text.lower() else "no"
    low = text.lower()
    if "[[yes]]" in low:
        return "yes"
    if "[[no]]" in low:
        return "no"
    return "invalid"


def _majority(votes: Sequence[str]) -> tuple[str, float]:
    decided = Counter(v for v in votes if v in ("yes", "no"))
    if not decided:
        return "invalid", 1.0 if all(v == "invalid" for v in votes) else 0.0
    (top, n_top), *rest = decided.most_common()
    if rest and rest[0][1] == n_top:
        return "invalid", 0.0
    return top, n_top / len(votes)


def judge_record(
    llm: Any, record: Mapping[str, Any], protocol: Any, n_votes: int | None = None
) -> dict[str, Any] | None:
    """The ``judge`` dict for one predictions.jsonl record, or None when nothing can be judged here.

    None when: the backend cannot judge (offline; dry run, where the calls are still booked as estimates), the
    judge is disabled in the llm config, or the protocol does not score the record (mem0: category 5).
    """
    name = _protocol_name(protocol)
    if not getattr(llm, "judge_enabled", True):
        return None
    if name == "mem0" and record.get("category") == 5:
        return None
    votes_n = int(n_votes if n_votes is not None else getattr(llm, "judge_votes", 1))
    if votes_n < 1:
        raise ValueError(f"llm.judge.n_votes must be >= 1, got {votes_n}")
    template = judge_template(record, name)
    variables = {
        "question": str(record.get("question", "")),
        "gold": str(record.get("gold", "")),
        "response": str(record.get("prediction", "")),
    }
    if not llm.can_judge:
        if getattr(llm, "dry_run", False):  # book the judge's tokens in the estimate
            for i in range(votes_n):
                llm.chat(build_request(template, variables, sample=i))
        return None
    results = [llm.chat(build_request(template, variables, sample=i)) for i in range(votes_n)]
    votes = [parse_verdict(name, r) for r in results]
    verdict, agreement = _majority(votes) if votes_n > 1 else (votes[0], 1.0)
    out: dict[str, Any] = {
        "verdict": verdict,
        "protocol": name,
        "template": template,
        "model": results[0].model,
        "reply": results[0].text[:500],
        "prompt_hash": results[0].prompt_hash,
        "cached": all(r.cached for r in results),
    }
    if votes_n > 1:
        out["votes"] = votes
        out["agreement"] = agreement
    errors = [r.error for r in results if r.error]
    if errors:
        out["error"] = errors[0]
    return out


def judge_records(
    llm: Any, records: Sequence[Mapping[str, Any]], protocol: Any, n_votes: int | None = None
) -> list[dict[str, Any] | None]:
    """``judge_record`` for each record, concurrently up to the client's ``max_concurrency``; order kept."""
    workers = max(1, int(getattr(llm, "max_concurrency", 1)))
    if workers == 1 or len(records) <= 1:
        return [judge_record(llm, r, protocol, n_votes) for r in records]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(workers, len(records))) as pool:
        return list(pool.map(lambda r: judge_record(llm, r, protocol, n_votes), records))


def agreement_summary(judges: Sequence[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Mean vote agreement and how many verdicts were unanimous (majority-vote runs only)."""
    agree = [float(j["agreement"]) for j in judges if j and "agreement" in j]
    if not agree:
        return {"n": 0, "mean_agreement": None, "unanimous": 0}
    return {
        "n": len(agree),
        "mean_agreement": sum(agree) / len(agree),
        "unanimous": sum(a == 1.0 for a in agree),
    }
