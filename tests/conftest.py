"""Shared fixtures. Heavy objects (the embedding model) are built once per session, lazily."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def locomo_path() -> Path:
    """The real LoCoMo file (shared/, beside the checkout). Tests needing it skip nowhere: CI has it."""
    for cand in (
        REPO / "data" / "locomo" / "locomo10.json",
        REPO.parent / "shared" / "data" / "locomo" / "locomo10.json",
    ):
        if cand.exists():
            return cand
    raise FileNotFoundError(
        "LoCoMo not found under data/locomo/ or ../shared/data/locomo/: run `allmem download locomo` "
        "or put the shared data folder beside the checkout (as CI does)"
    )


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """A per-test-session cache folder, so tests never depend on a developer's warm cache."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def embedder(cache_dir):
    """The real local MiniLM embedder (one instance for the whole test session)."""
    import torch

    from allmem.embed import Embedder

    torch.set_num_threads(1)
    return Embedder(cache_dir=cache_dir / "embeddings")
