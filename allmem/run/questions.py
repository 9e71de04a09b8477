"""One dialogue's questions answered concurrently, up to the LLM client's ``max_concurrency`` at once.

Why: online, a question mostly waits on its model calls (the answer, the judge), and questions do not depend on
each other, so ``llm.max_concurrency`` of them can wait at once. Offline (``max_concurrency`` 1) they are answered
one by one in the calling thread, as before. What stays serial, and in question order: the memory system's
``retrieve`` (systems are not written for concurrent queries, some keep state across them, and a retrieval is local
work) and a generator that does not say it may be called from several threads (``concurrent = True``; the
extractive reader embeds, and the embedder is one model): each question calls them only after every earlier
question has called them (or ended). Predictions come back in question order, each once it and those before it
are done, so the run writes the same ``predictions.jsonl`` whatever the concurrency. Each question books its calls under its own ids
(``Ledger.local_scope``), and a call that failed inside it (after its retries) marks that question failed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import replace
from functools import partial
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

    If one raises (``CircuitOpen``), the ones before it have been yielded, questions not yet started never start,
    and the error propagates at once (a call still in flight ends in its own thread).
    """
    ledger = getattr(llm, "ledger", None)
    workers = min(int(getattr(llm, "max_concurrency", 1) or 1), len(questions))
    if workers <= 1:
        for question in questions:
            yield _one(question, answer, system, generator, ledger)
        return
    retrieving = _InOrder(system, "retrieve")
    answering = None if getattr(generator, "concurrent", False) else _InOrder(generator, "answer")

    def task(i: int, question: Question) -> Prediction:
        try:
            return _one(
                question, answer, retrieving.view(i), answering.view(i) if answering else generator, ledger
            )
        finally:  # a question that ended early (an error) no longer holds up the ones after it
            retrieving.done(i)
            if answering is not None:
                answering.done(i)

    futures, stop = _start(workers, [partial(task, i, q) for i, q in enumerate(questions)])
    try:
        for future in futures:
            yield future.result()
    finally:  # on an error or Ctrl-C: nothing new starts; a call in flight ends in its daemon thread
        stop.set()


def _start(workers: int, tasks: list[Callable[[], Prediction]]) -> tuple[list[Future], threading.Event]:
    """Run ``tasks`` in order on ``workers`` daemon threads; their futures, and an event that stops new starts.

    Daemon threads, not a ``ThreadPoolExecutor``: the executor's threads are joined when the interpreter exits,
    so Ctrl-C or SIGTERM during a question would wait for its hanging model call (up to ``llm.timeout_s``)."""
    futures: list[Future] = [Future() for _ in tasks]
    todo = iter(range(len(tasks)))
    take, stop = threading.Lock(), threading.Event()

    def work() -> None:
        while not stop.is_set():
            with take:
                i = next(todo, None)
            if i is None:
                return
            if futures[i].set_running_or_notify_cancel():
                try:
                    futures[i].set_result(tasks[i]())
                except BaseException as exc:  # handed to the caller, which raises it in the run's thread
                    futures[i].set_exception(exc)

    for k in range(workers):
        threading.Thread(target=work, name=f"question-{k}", daemon=True).start()
    return futures, stop


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


class _InOrder:
    """``target.<name>`` called one at a time, question ``i`` only once questions ``0..i-1`` have called it or
    ended: the order of a one-at-a-time run. ``view(i)`` is the target as question ``i`` sees it."""

    def __init__(self, target: Any, name: str) -> None:
        self.target, self.name = target, name
        self._turn = threading.Condition()
        self._next = 0  # the first question that has neither called nor ended
        self._finished: set[int] = set()
        self._lock = threading.Lock()

    def done(self, i: int) -> None:
        with self._turn:
            if i >= self._next:
                self._finished.add(i)
            while self._next in self._finished:
                self._finished.discard(self._next)
                self._next += 1
            self._turn.notify_all()

    def call(self, i: int, *args: Any, **kwargs: Any) -> Any:
        with self._turn:
            self._turn.wait_for(lambda: self._next >= i)
        try:
            with self._lock:
                return getattr(self.target, self.name)(*args, **kwargs)
        finally:
            self.done(i)

    def view(self, i: int) -> Any:
        return _View(self, i)


class _View:
    """The target of an ``_InOrder`` with its method run through it for question ``i``; other attributes pass."""

    def __init__(self, order: _InOrder, i: int) -> None:
        self._order, self._i = order, i

    def __getattr__(self, attr: str) -> Any:
        if attr != self._order.name:
            return getattr(self._order.target, attr)
        return lambda *args, **kwargs: self._order.call(self._i, *args, **kwargs)
