"""One home per setting: a key that had a second name is refused like any unknown key, before a run starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from faultkit import allmem_run, run_dirs

TINY = Path(__file__).resolve().parent / "fixtures" / "locomo_tiny.json"


@pytest.mark.slow  # the CLI in a subprocess
@pytest.mark.parametrize("override", ["method.bank_cache=/tmp/banks", "atc.embed_format=ref"])
def test_a_former_second_name_is_an_unknown_key(tmp_path: Path, override: str) -> None:
    """Each setting has one key; a former second name is refused like any unknown key, before a run exists."""
    result = allmem_run(tmp_path, "method=allmem", f"dataset.path={TINY}", override)
    assert result.rc == 1, result.err[-2000:]
    assert f"Could not override '{override.split('=')[0]}'" in result.err
    assert run_dirs(tmp_path) == []
