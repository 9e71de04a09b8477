"""allmem.threads: a one-thread section sets every pool of the API to one thread and restores each after."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import ThreadpoolController, threadpool_limits

from allmem import threads
from allmem.threads import one_thread


def _sizes(user_api: str) -> list[int]:
    return [lib.num_threads for lib in ThreadpoolController().select(user_api=user_api).lib_controllers]


@pytest.mark.parametrize("user_api", ["blas", "openmp"])
def test_one_thread_section_then_restore(user_api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import igraph  # noqa: F401 - loads igraph's OpenMP runtime (the pool HippoRAG's PageRank uses)

    # pools are looked up on first use; earlier tests may have done that before every library here was loaded
    monkeypatch.setattr(threads, "_POOLS", {})

    np.ones((4, 4)) @ np.ones(4)
    if not _sizes(user_api):
        pytest.skip(f"no {user_api} pool loaded in this environment")
    # two threads first, so the section has something to change
    with threadpool_limits(limits=2, user_api=user_api):
        before = _sizes(user_api)
        assert max(before) == 2
        with one_thread(user_api):
            assert _sizes(user_api) == [1] * len(before)
        assert _sizes(user_api) == before
