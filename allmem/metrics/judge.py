"""The LLM judge (the 4o-J column): one verdict dict per prediction record, under the run's protocol.

The protocol (``allmem.metrics.protocols``) decides everything protocol-specific: whether a record is judged
(``judges``: mem0 skips category 5), the prompt (``judge_template``: the allmem yes/no prompts with temporal,
update, preference and abstention clauses; Mem0's CORRECT/WRONG label; LongMemEval's official prompts; the
``locomo`` protocol has no judge of its own and uses the allmem prompts) and how a reply reads
(``parse_verdict``). This module only asks and counts votes.

With ``n_votes > 1`` the judge is asked that many times (each vote its own cached call, distinguished by a seed)
and the majority of the decided votes wins; the dict reports every vote and the agreement (share of votes that
match the final verdict). A tie between yes and no is invalid.
The offline backend cannot judge: ``judge_record`` returns None and metrics.json reports 4o-J as null with the
reason; there is never a proxy under that name. A judge call that failed after its retries is not a verdict:
the dict carries ``error`` and the runner records the question as failed (it is asked again on the next run).
A reply that arrived but reads as neither yes nor no is an invalid verdict: left out of 4o-J's denominator, so
many of them would quietly change what the column measures; above ``INVALID_WARN_RATE`` of a run's verdicts
the run warns (``invalid_warning``) and the report's footer flags the run (``invalid_note``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Mapping, Sequence
from typing import Any, TypeVar

from allmem.llm.base import ChatResult
from allmem.llm.prompts import build_request
from allmem.metrics.protocols import Protocol, as_protocol

T = TypeVar("T")

#: Share of a run's verdicts that may be invalid before the run warns and the tables flag it.
INVALID_WARN_RATE = 0.02


def _invalid(metrics: Mapping[str, Any]) -> tuple[int, int, float] | None:
    """(invalid, judged, rate) of a metrics.json summary, or None when nothing was judged."""
    overall = metrics.get("overall") or {}
    counts = overall.get("judge_counts") or {}
    judged = sum(int(counts.get(v, 0)) for v in ("yes", "no", "invalid"))
    if not judged:
        return None
    invalid = int(counts.get("invalid", 0))
    return invalid, judged, invalid / judged


def invalid_warning(metrics: Mapping[str, Any], where: str = "") -> str | None:
    """The one warning line for a run whose invalid verdicts exceed ``INVALID_WARN_RATE``, else None."""
    got = _invalid(metrics)
    if got is None or got[2] <= INVALID_WARN_RATE:
        return None
    invalid, judged, rate = got
    return (
        f"judge: {invalid} of {judged} verdicts invalid ({100 * rate:.1f}% > {100 * INVALID_WARN_RATE:g}%)"
        f"{' in ' + where if where else ''}; 4o-J leaves them out of its denominator, read it with care"
    )


def invalid_note(runs: Sequence[Any]) -> str:
    """A footer line counting invalid verdicts per run that has any (``runs``: objects with ``label`` and
    ``metrics``), flagging those above ``INVALID_WARN_RATE``; empty when no run has one."""
    parts = []
    for run in runs:
        got = _invalid(run.metrics)
        if got is not None and got[0]:
            flag = f" FLAGGED: above {100 * INVALID_WARN_RATE:g}%" if got[2] > INVALID_WARN_RATE else ""
            parts.append(f"{run.label} {got[0]}/{got[1]} ({100 * got[2]:.1f}%{flag})")
    return f"4o-J invalid verdicts (not in its denominator): {'; '.join(parts)}." if parts else ""


def judge_template(record: Mapping[str, Any], protocol: str | Protocol) -> str:
    return as_protocol(protocol).judge_template(record)


def parse_verdict(protocol: str | Protocol, res: ChatResult) -> str:
    """yes | no | invalid for one judge reply under ``protocol``'s rule."""
    return as_protocol(protocol).parse_verdict(res)


def majority(votes: Sequence[T], undecided: Container[Any] = ("invalid",)) -> T | None:
    """The one vote rule of every judge (4o-J, ``allmem judge --graded``, Table 8's labels): the most common of
    the decided votes (those not in ``undecided``); None when no vote is decided or the top two tie."""
    decided = Counter(v for v in votes if v not in undecided)
    if not decided:
        return None
    (top, n_top), *rest = decided.most_common()
    return None if rest and rest[0][1] == n_top else top


def _majority(votes: Sequence[str]) -> tuple[str, float]:
    top = majority(votes)
    if top is None:  # nothing decided, or a tie
        return "invalid", 1.0 if all(v == "invalid" for v in votes) else 0.0
    return top, sum(v == top for v in votes) / len(votes)


def judge_record(
    llm: Any, record: Mapping[str, Any], protocol: Any, n_votes: int | None = None
) -> dict[str, Any] | None:
    """The ``judge`` dict for one predictions.jsonl record, or None when nothing can be judged here.

    None when: the backend cannot judge (offline; dry run, where the calls are still booked as estimates), the
    judge is disabled in the llm config, or the protocol does not score the record (mem0: category 5).
    """
    proto = as_protocol(protocol)
    if not getattr(llm, "judge_enabled", True):
        return None
    if not proto.judges(record):
        return None
    votes_n = int(n_votes if n_votes is not None else getattr(llm, "judge_votes", 1))
    if votes_n < 1:
        raise ValueError(f"llm.judge.n_votes must be >= 1, got {votes_n}")
    template = proto.judge_template(record)
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
    requests = [build_request(template, variables, sample=i) for i in range(votes_n)]
    results = [llm.chat(req) for req in requests]
    votes = [proto.parse_verdict(r) for r in results]
    for i, req in enumerate(
        requests
    ):  # a reply with no verdict is asked again (llm.repair_retries), then invalid
        while votes[i] == "invalid" and (fixed := _repair(llm, req, results[i])) is not None:
            req, results[i] = fixed
            votes[i] = proto.parse_verdict(results[i])
    verdict, agreement = _majority(votes) if votes_n > 1 else (votes[0], 1.0)
    out: dict[str, Any] = {
        "verdict": verdict,
        "protocol": proto.name,
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
    if errors:  # a failed call is no verdict: the runner records the question as failed
        out["error"] = errors[0]
    return out


VERDICT_PROBLEM = "it gives no verdict in the form the instructions ask for"


def _repair(llm: Any, req: Any, res: Any) -> tuple[Any, Any] | None:
    """The repair request and its result after ``res`` gave no verdict, or None when none is left."""
    repair = getattr(llm, "repair", None)  # test doubles without one get no repair
    return repair(req, res, VERDICT_PROBLEM) if repair is not None else None


def judge_records(
    llm: Any, records: Sequence[Mapping[str, Any]], protocol: Any, n_votes: int | None = None
) -> list[dict[str, Any] | None]:
    """``judge_record`` for each record, concurrently up to the client's ``max_concurrency``; order kept
    (``allmem judge`` judges a finished run's saved answers this way)."""
    workers = max(1, int(getattr(llm, "max_concurrency", 1)))
    if workers == 1 or len(records) <= 1:
        return [judge_record(llm, r, protocol, n_votes) for r in records]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(workers, len(records))) as pool:
        return list(pool.map(lambda r: judge_record(llm, r, protocol, n_votes), records))
