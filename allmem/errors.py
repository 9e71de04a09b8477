"""The errors a run is expected to meet, and the ones ``allmem run`` reports in one line without a traceback.

An expected error is the user's to fix (a config value, a missing file or key, a dataset field, a held lock) or
a run that failed honestly (LLM calls failed after their retries); its message says what happened and what to
do, so a traceback would only bury it. ``HYDRA_FULL_ERROR=1`` shows the traceback anyway.
"""

from __future__ import annotations

import errno


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the key (``llm.base_url``, ``budget.tokens``)."""


class LLMError(RuntimeError):
    """A configuration or usage error of the LLM layer that must stop the run (bad config, missing key, replay
    miss); raised by ``allmem/llm/`` and the methods calling it."""


class RunLocked(RuntimeError):
    """Another process is running the same run directory."""


class RunFailed(RuntimeError):
    """The run ended with failed questions (or was stopped early); nothing was sealed, a rerun retries them."""


class RunCorrupt(RuntimeError):
    """A record file of a run directory holds a line allmem cannot have written (it writes whole lines and cuts
    a torn last one); the message names the file and line and how to mend it. A rerun refuses rather than guess
    what the line held: something outside allmem changed the file, and the user should look."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached ``allmem run``: handled as Ctrl-C everywhere (the attempt is recorded as
    interrupted, the lock released, nothing sealed); ``signum`` gives the conventional exit status 128 + N."""

    def __init__(self, signum: int) -> None:
        import signal

        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# OS errors the user's environment causes (a full disk, a read-only folder, a path through a file, or a
# symlink loop): reported in one line naming the path, like the classes above; any other OSError is a bug.
ENVIRONMENT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("ENOSPC", "EDQUOT", "EFBIG", "EROFS", "EACCES", "EPERM", "ENOTDIR", "EISDIR", "ELOOP",
                 "ENAMETOOLONG", "EIO")
    if hasattr(errno, name)
)  # fmt: skip


def is_environment_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in ENVIRONMENT_ERRNOS


def expected_errors() -> tuple[type[BaseException], ...]:
    """Every error class ``allmem run`` prints as one line (imported here so the CLI need not know where)."""
    from allmem.paths import DataNotFoundError
    from allmem.types import RecordError
    from benchmarks.errors import DatasetError

    return (
        ConfigError,
        RunLocked,
        RunFailed,
        RunCorrupt,
        LLMError,
        DataNotFoundError,
        DatasetError,
        RecordError,
    )


def one_line(exc: BaseException) -> str:
    """The message on one line (multi-line messages joined with "; "); an OS error names its path first."""
    if isinstance(exc, OSError) and exc.filename is not None:
        where = f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 is not None else "")
        return f"{where}: {exc.strerror or type(exc).__name__} (errno {exc.errno})"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return "; ".join(lines) or type(exc).__name__
