"""Reruns agree (issue 17, item 11): a text's vector is a function of the text alone, and tied scores rank the same.

The tie is a real one: MiniLM is uncased, so "Thanks, Caroline!" and "THANKS, caroline!" are distinct strings (distinct
cache keys) with the same tokens. Before the fix the first one's vector depended on its batch partners (padded to a
longer turn it came out up to ~1e-7 away from the second embedded alone), so which of the two ranked first, and what
the cache held, depended on the job schedule.
"""

from __future__ import annotations

import numpy as np
import pytest

from allmem.embed import Embedder
from allmem.memory.bank import MemoryBank
from allmem.memory.vector import SurfaceIndex
from baselines._common import VectorIndex
from tests.fakes import T0

# LoCoMo turns (conv-26, session 1) as batch partners of different token lengths
PARTNERS = [
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "Melanie: Wow, that's cool, Caroline! What happened that was so awesome? Did you hear any inspiring stories?",
    "Caroline: The transgender stories were so inspiring! I was so happy and thankful for all the support.",
    "Melanie: Yeah, I painted that lake sunrise last year! It's special to me.",
]
TIE = [
    "Thanks, Caroline!",
    "THANKS, caroline!",
    "thanks, CAROLINE!",
    "Thanks, CaRoLiNe!",
]  # one token sequence
RELATED = "Caroline: Thanks, Melanie! That's really sweet."
OTHER = "The weather is nice today."


def _bits(vecs: np.ndarray) -> list[bytes]:
    return [row.tobytes() for row in np.asarray(vecs, dtype=np.float32)]


@pytest.mark.slow
def test_vector_is_the_same_whatever_the_batch_threads_and_cache(tmp_path) -> None:
    import torch

    alone = Embedder(cache_dir=tmp_path / "alone")
    reference = _bits(alone.encode([TIE[1]]))[0]  # one text, one forward pass

    batched = Embedder(cache_dir=tmp_path / "batched")
    got = _bits(batched.encode([*PARTNERS, TIE[0], *reversed(PARTNERS), TIE[2]]))
    assert got[len(PARTNERS)] == reference and got[-1] == reference  # padded to a partner before the fix

    small = Embedder(cache_dir=tmp_path / "small")
    assert _bits(small.encode([TIE[3], *PARTNERS]))[0] == reference
    # each partner alone gives what it gave among the others (batches of equal length differed on some CPUs)
    assert [_bits(small.encode([p]))[0] for p in PARTNERS] == _bits(batched.encode(PARTNERS))

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        two = Embedder(cache_dir=tmp_path / "two")
        assert _bits(two.encode([*PARTNERS, *TIE])) == _bits(batched.encode([*PARTNERS, *TIE]))
        assert torch.get_num_threads() == 2  # the caller's setting is restored
    finally:
        torch.set_num_threads(threads)

    # a rerun served by the cache one schedule filled gives the bytes another schedule computes
    rerun = Embedder(cache_dir=tmp_path / "batched")
    assert _bits(rerun.encode(TIE)) == [reference] * 4 and rerun.misses == 0


def _tied_scores(embedder: Embedder) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """37 rows whose cosines to the query follow a pattern on which ``argpartition`` keeps a later tied row at
    the top-7 cut (position 14 instead of 10): the 17 tied rows are the TIE texts' vectors, bitwise equal."""
    level = [
        0,
        0,
        2,
        2,
        2,
        2,
        2,
        2,
        0,
        0,
        2,
        0,
        2,
        2,
        2,
        1,
        0,
        1,
        2,
        1,
        2,
        1,
        2,
        0,
        1,
        0,
        0,
        2,
        2,
        0,
        2,
        2,
        0,
        1,
        1,
        1,
        1,
    ]
    tie = embedder.encode(TIE)
    assert len(set(_bits(tie))) == 1  # the real tie: four strings, one vector
    related, other = embedder.encode([RELATED, OTHER])
    query = tie[0]
    assert float(related @ query) > float(other @ query)
    rows = {2: [tie[i % 4] for i in range(37)], 1: [related] * 37, 0: [other] * 37}
    mat = np.stack([rows[lv][i] for i, lv in enumerate(level)])
    best = [i for i, lv in enumerate(level) if lv == 2][:7]  # ties by position
    return mat, query, best


@pytest.mark.slow
def test_tied_scores_rank_by_position(embedder: Embedder) -> None:
    mat, query, best = _tied_scores(embedder)
    assert best == [2, 3, 4, 5, 6, 7, 10]

    baseline = VectorIndex(mat.shape[1])  # naive RAG's, mem0's, A-Mem's, ... index
    for i, vec in enumerate(mat):
        baseline.add(f"m{i}", vec)
    assert [key for key, _ in baseline.search(query, 7)] == [f"m{i}" for i in best]

    bank = MemoryBank(dim=mat.shape[1])  # All-Mem's exact search
    for i, vec in enumerate(mat):
        bank.create_unit([{"text": f"t{i}", "source_ids": [str(i)]}], "s", [], vec, T0)
    rows, _ = SurfaceIndex(bank, backend="numpy").search_rows(query, 7)
    assert rows.tolist() == best
