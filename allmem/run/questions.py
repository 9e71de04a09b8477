"""One dialogue's questions answered concurrently, up to the LLM client's ``max_concurrency`` at once.

Why: online, a question mostly waits on its model calls (the answer, the judge), and questions do not depend on
each other, so ``llm.max_concurrency`` of them can wait at once. Offline (``max_concurrency`` 1) they are answered
one by one in the calling thread, as before. What stays serial: the memory system's ``retrieve`` (systems are not
written for concurrent queries; a retrieval is local work) and a generator that does not say it may be called from
several threads (``concurrent = True``; the extractive reader embeds, and the embedder is one model). Predictions
come back in question order, each once it and those before it are done, so the run writes the same
``predictions.jsonl`` whatever the concurrency. Each question books its calls under its own ids
(``Ledger.local_scope``), and a call that failed inside it (after its retries) marks that question failed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from allmem.types import Prediction, Question

#: ``answer(question, system, generator)``: one question's prediction (the runner's ``answer_question``).
Answer = Callable[[Question, Any, Any], Prediction]


def failure_line(failed: Mapping[str, int], last_error: str | None) -> str | None:
    """``"LLM calls failed after their retries (1 generate, 2 write); last: ..."``, or None when none failed."""
    counts = {phase: n for phase, n in failed.items() if n > 0}
    if not counts:
        return None
    parts = ", ".join(f"{n} {phase}" for phase, n in sorted(counts.items()))
    return f"LLM calls failed after their retries ({parts}); last: {last_error}"


def answer_questions(
    questions: Sequence[Question], answer: Answer, *, system: Any, generator: Any, llm: Any
) -> Iterator[Prediction]:
    """Yield each question's prediction in question order, answering up to ``llm.max_concurrency`` at once.

    If one raises (``CircuitOpen``), the ones before it have been yielded, questions not yet started are
    cancelled, and the error propagates once the running ones end.
    """
    ledger = getattr(llm, "ledger", None)
    workers = min(int(getattr(llm, "max_concurrency", 1) or 1), len(questions))
    if workers <= 1:
        for question in questions:
            yield _one(question, answer, system, generator, ledger)
        return
    lock = threading.Lock()
    system = _Serial(system, "retrieve", lock)
    if not getattr(generator, "concurrent", False):
        generator = _Serial(generator, "answer", lock)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="question")
    try:
        futures = [pool.submit(_one, q, answer, system, generator, ledger) for q in questions]
        for future in futures:
            yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _one(question: Question, answer: Answer, system: Any, generator: Any, ledger: Any) -> Prediction:
    """One question under its own ledger scope; failed calls booked inside it make it a failed record."""
    if ledger is None:
        return answer(question, system, generator)
    with ledger.local_scope(dialogue_id=question.dialogue_id, question_id=question.id) as scope:
        pred = answer(question, system, generator)
    lost = failure_line(scope.failed, scope.last_error)
    if lost and pred.error is None:  # e.g. a retrieval-phase call of the memory system
        pred = replace(pred, error=lost)
    return pred


class _Serial:
    """``target`` with its method ``name`` run under ``lock`` (shared by the question threads); every other
    attribute is the target's own."""

    def __init__(self, target: Any, name: str, lock: threading.Lock) -> None:
        self._target, self._name, self._lock = target, name, lock

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        if attr != self._name:
            return value

        def serial(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return value(*args, **kwargs)

        return serial
