"""How a question is put to a reader: the two-option framing of LoCoMo category 5 and the answer template.

Below the readers and the protocols: a reader needs the declining option and a template without importing the
evaluation (``allmem.metrics``), and a protocol (``allmem.metrics.protocols.Protocol``) asks these rules for its
``options`` and ``answer_template``, so they are written once.
"""

from __future__ import annotations

import random
from typing import Any

# The declining option of a two-option question, and what the offline reader answers when nothing supports an
# answer (LoCoMo's evaluation code; PROTOCOL.md).
NOT_MENTIONED = "Not mentioned in the conversation"
# LoCoMo categories asked as a two-option question (LoCoMo's own code asks category 5 so too).
OPTION_CATEGORIES: tuple[int, ...] = (5,)


def two_options(question_id: str, gold: str, seed: int) -> tuple[str, str]:
    """ "Not mentioned" and the gold, in an order fixed by ``seed`` and the question id (never by the gold's
    position, which a reader could learn)."""
    options = [NOT_MENTIONED, gold]
    random.Random(f"{seed}:{question_id}").shuffle(options)
    return options[0], options[1]


def answer_template(request: Any) -> str:
    """The answer prompt for an ``AnswerRequest``: the two-option prompt when it has options, the LongMemEval
    prompt (question date as the current time) for LongMemEval items, else the LoCoMo one."""
    if request.options:
        return "answer_locomo_options"
    if request.question_type is not None or (request.date is not None and request.category is None):
        return "answer_longmemeval"
    return "answer_locomo"
