"""Write a synthetic LongMemEval-format file with LongMemEval-s's shape (logic: ``benchmarks/lme_synth.py``).

.venv/bin/python scripts/make_longmemeval.py data/synthetic/lme_s.json             # full LongMemEval-s size
.venv/bin/python scripts/make_longmemeval.py /tmp/lme_tenth.json --fraction 0.1    # 50 questions
.venv/bin/python scripts/make_longmemeval.py /tmp/tiny.json --questions 3 --sessions 4
allmem run dataset=longmemeval_s dataset.path=data/synthetic/lme_s.json method=naive_rag
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from benchmarks.download import sha256_file
from benchmarks.lme_synth import (
    ASSISTANT_TOKENS,
    LME_S_QUESTIONS,
    LME_S_SESSIONS,
    USER_TOKENS,
    write_longmemeval,
)

EPILOG = f"""
Every session and turn is fresh seeded text (templates + a built-in vocabulary, no LLM): no session repeats within
or across haystacks, so no cache has seen it. Turns average about 230 tokens (user ~{USER_TOKENS}, assistant
~{ASSISTANT_TOKENS}; allmem.tokens), ~10 turns a session; dates, distractor sessions, evidence sessions with
has_answer turns that contain the answer, answer_session_ids, LongMemEval's six question types in its proportions
and one abstention (_abs) question in 17. The same --seed gives the same file. Full size (500 x 50) is ~280 MB and
takes 2-3 minutes on one core (about 0.3 s a question).
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="make_longmemeval.py",
        description="Write a LongMemEval-format file of synthetic questions with LongMemEval-s's shape.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("output", help="the JSON file to write (its folder is created)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--questions", type=int, default=None, help=f"questions (default {LME_S_QUESTIONS})")
    size.add_argument(
        "--fraction",
        type=float,
        default=None,
        help=f"a fraction of LongMemEval-s's {LME_S_QUESTIONS} questions",
    )
    parser.add_argument(
        "--sessions",
        type=int,
        default=LME_S_SESSIONS,
        help=f"sessions per haystack (default {LME_S_SESSIONS})",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    if args.fraction is not None and not 0 < args.fraction <= 1:
        parser.error(f"--fraction must be in (0, 1], got {args.fraction}")
    questions = (
        args.questions if args.questions is not None else round(LME_S_QUESTIONS * (args.fraction or 1))
    )
    if questions < 1 or args.sessions < 1:
        parser.error("--questions (or the fraction) and --sessions must give at least 1")
    start = time.monotonic()
    path = write_longmemeval(args.output, questions, args.sessions, args.seed)
    print(f"{path}: {questions} questions x {args.sessions} sessions, seed {args.seed}, "
          f"{time.monotonic() - start:.1f} s")  # fmt: skip
    print(f"sha256 {sha256_file(path)}  {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
