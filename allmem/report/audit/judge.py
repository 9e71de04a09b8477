"""Table 8's LLM labeler: one versioned template per operator (``allmem/llm/prompts/audit_<op>.txt``) asks the
judge model (``llm.judge.model``, 4o-J) whether an executed edit is valid and whether it is harmful, as JSON with
a reason. Votes as for 4o-J (``llm.judge.n_votes``: that many calls, each its own cached call; the majority of the
decided votes per label, a tie is undecided). Replies are cached, so ``llm=replay`` labels again with no request;
with ``llm.dry_run=true`` no model is called and the calls are booked with estimated tokens (``estimate``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from allmem.llm.prompts import build_request
from allmem.metrics.judge import majority
from allmem.report.audit import Edit, Label
from allmem.report.audit.sheet import unit_text


def variables(edit: Edit) -> dict[str, str]:
    ev = edit.event
    links = ", ".join(f"{t}: {s} -> {d}" for t, s, d in ev.get("links", [])) or "none"
    return {
        "before": "\n".join(unit_text(u) for u in ev.get("before", [])),
        "after": "\n".join(unit_text(u) for u in ev.get("after", [])),
        "links": links,
    }


class Judge:
    """``label(edits)``: the judge's labels (None where every vote failed, tied, or in a dry run)."""

    def __init__(self, llm: Any, n_votes: int | None = None) -> None:
        self.llm = llm
        self.n_votes = int(n_votes if n_votes is not None else getattr(llm, "judge_votes", 1))
        self.name = f"LLM judge ({llm.judge_model}, {self.n_votes} vote{'s' if self.n_votes > 1 else ''})"

    @classmethod
    def for_run(cls, run: Any, ledger_dir: Path | None = None) -> Judge:
        """The judge of a run's own LLM config (its stored ``config.yaml``), booking into ``ledger_dir``."""
        from allmem.llm import build_llm

        return cls(build_llm(run.cfg.llm, run_dir=ledger_dir))

    def label(self, edits: Sequence[Edit]) -> list[Label]:
        out = []
        for e in edits:
            template = f"audit_{e.op}"
            results = [
                self.llm.chat(build_request(template, variables(e), sample=i)) for i in range(self.n_votes)
            ]
            if not self.llm.can_judge:  # a dry run: booked, not judged
                out.append(Label(None, None, reason="dry run: no model was called"))
                continue
            data = [r.data if r.error is None and isinstance(r.data, Mapping) else None for r in results]
            valid = majority([d.get("valid") if d else None for d in data], undecided=(None,))
            harmful = majority([d.get("harmful") if d else None for d in data], undecided=(None,))
            reason = next(
                (str(d.get("reason", "")) for d in data if d), results[0].error or "no usable reply"
            )
            out.append(Label(valid, harmful, reason=reason))
        return out

    def estimate(self) -> dict[str, Any]:
        """Calls and tokens booked for the judge phase (estimated in a dry run)."""
        return dict(self.llm.totals().get("judge", {}))
