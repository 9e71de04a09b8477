"""The errors a run is expected to meet, and the ones ``allmem run`` reports in one line without a traceback.

An expected error is the user's to fix (a config value, a missing file or key, a dataset field, a held lock) or
a run that failed honestly (LLM calls failed after their retries); its message says what happened and what to
do, so a traceback would only bury it. ``HYDRA_FULL_ERROR=1`` shows the traceback anyway.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the key (``llm.base_url``, ``budget.tokens``)."""


class RunLocked(RuntimeError):
    """Another process is running the same run directory."""


class RunFailed(RuntimeError):
    """The run ended with failed questions (or was stopped early); nothing was sealed, a rerun retries them."""


def expected_errors() -> tuple[type[BaseException], ...]:
    """Every error class ``allmem run`` prints as one line (imported here so the CLI need not know where)."""
    from allmem.llm.base import LLMError
    from allmem.paths import DataNotFoundError
    from allmem.types import RecordError
    from benchmarks.errors import DatasetError

    return (ConfigError, RunLocked, RunFailed, LLMError, DataNotFoundError, DatasetError, RecordError)


def one_line(exc: BaseException) -> str:
    """The message on one line (multi-line messages joined with "; ")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return "; ".join(lines) or type(exc).__name__
