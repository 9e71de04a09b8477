"""One home per setting: a key that had a second name fails in one line naming the key to use, before a run starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from faultkit import allmem_run, run_dirs
from runkit import compose

from allmem.errors import ConfigError
from allmem.run import preflight

TINY = Path(__file__).resolve().parent / "fixtures" / "locomo_tiny.json"


@pytest.mark.slow  # the CLI in a subprocess
@pytest.mark.parametrize(
    ("override", "new"),
    [
        ("method.bank_cache=/tmp/banks", "run.bank_cache"),
        ("+method.probe.queries=4", "run.probe_queries"),
        ("atc.embed_format=ref", "method.write.embed_format"),
    ],
)
def test_an_old_key_on_the_command_line_names_its_new_name(tmp_path: Path, override: str, new: str) -> None:
    result = allmem_run(tmp_path, "method=allmem", f"dataset.path={TINY}", override)
    old = override.split("=")[0].lstrip("+")
    assert result.rc == 1, result.err[-2000:]
    assert result.err_lines == [
        f"allmem run: error: {old} is now {new} (one home per setting): set {new} instead"
    ]
    assert run_dirs(tmp_path) == []


def test_an_old_key_in_a_composed_config_fails_before_the_run() -> None:
    """An experiment or local file that still sets an old key is caught by the pre-run checks."""
    cfg = compose("method=allmem", "+atc.embed_format=ref")
    with pytest.raises(ConfigError, match=r"^atc\.embed_format is now method\.write\.embed_format "):
        preflight.check_config(cfg)
    preflight.check_config(compose("method=allmem"))  # the new keys pass
