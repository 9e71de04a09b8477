"""ATC: offline topology consolidation (paper, Algorithm 1; docs/METHOD.md).

``build_consolidator(bank=, llm=, embedder=, cfg=<atc node>, run_dir=)`` returns the hook object ``AllMemSystem``
drives; ``summary.summarise_run_dir`` turns a run's ``atc_events.jsonl`` into the Table 2/3 figures.
Submodules: ``config`` (the atc node), ``roles`` (the diagnosis and planner prompts), ``drift`` + ``cues``
(offline diagnoser), ``offline_roles``, ``gate`` (gating + Norm), ``executor`` (operators), ``consolidator``
(triggers, runs), ``summary``. The synthetic drift corpus with known truth is a dataset:
``benchmarks/synthetic_drift.py``.
"""

from __future__ import annotations

from typing import Any


def build_consolidator(**kwargs: Any) -> Any:
    """See :func:`allmem.memory.atc.consolidator.build_consolidator` (imported lazily: no import-time cost)."""
    from allmem.memory.atc.consolidator import build_consolidator as build

    return build(**kwargs)


__all__ = ["build_consolidator"]
