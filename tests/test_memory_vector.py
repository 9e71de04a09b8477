"""Vector search backends: exact numpy and faiss flat return identical results; faiss follows the bank."""

from __future__ import annotations

import numpy as np
import pytest

from allmem.memory.bank import MemoryBank
from allmem.memory.vector import SurfaceIndex
from tests.fakes import T0


def _random_bank(n: int, dim: int = 32, seed: int = 0) -> MemoryBank:
    rng = np.random.default_rng(seed)
    bank = MemoryBank(dim=dim)
    for i in range(n):
        bank.create_unit([{"text": f"t{i}", "source_ids": [str(i)]}], "s", [], rng.normal(size=dim), T0)
    for i in rng.choice(n, size=n // 3, replace=False):
        bank.archive(f"u{i:06d}")
    return bank


def _brute_force(bank: MemoryBank, q: np.ndarray, k: int, surface: str) -> list[str]:
    units = [u for u in bank.units() if surface == "full" or u.visible]
    scores = [(float(bank.embedding(u.id) @ q), u.row, u.id) for u in units]
    return [uid for _, _, uid in sorted(scores, key=lambda x: (-x[0], x[1]))[:k]]


@pytest.mark.parametrize("surface", ["visible", "full"])
def test_numpy_and_faiss_flat_are_identical(surface: str) -> None:
    bank = _random_bank(300)
    rng = np.random.default_rng(1)
    np_index = SurfaceIndex(bank, surface=surface, backend="numpy")
    fa_index = SurfaceIndex(bank, surface=surface, backend="faiss", faiss_kind="flat")
    for _ in range(20):
        q = rng.normal(size=32).astype(np.float32)
        q /= np.linalg.norm(q)
        a, b = np_index.search(q, 10), fa_index.search(q, 10)
        assert [u for u, _ in a] == [u for u, _ in b] == _brute_force(bank, q, 10, surface)
        np.testing.assert_allclose([s for _, s in a], [s for _, s in b], rtol=1e-5, atol=1e-6)


def test_faiss_index_follows_appends_archives_and_descriptors() -> None:
    bank = _random_bank(50)
    idx = SurfaceIndex(bank, backend="faiss")
    q = np.random.default_rng(9).normal(size=32).astype(np.float32)
    q /= np.linalg.norm(q)
    assert [u for u, _ in idx.search(q, 3)] == [u for u, _ in SurfaceIndex(bank).search(q, 3)]
    rebuilds = idx.rebuilds
    new = bank.create_unit([{"text": "new"}], "s", [], q * 2, T0)  # same direction as the query
    assert idx.search(q, 1) == [(new, pytest.approx(1.0))]
    assert idx.rebuilds == rebuilds  # an append is added in place
    bank.archive(new)
    assert new not in {u for u, _ in idx.search(q, 60)}
    assert idx.rebuilds == rebuilds + 1  # a swap-removal reorders the surface: rebuilt
    target = bank.visible_ids()[-1]
    bank.set_descriptor(target, "moved", [], q)
    assert idx.search(q, 1) == [(target, pytest.approx(1.0))]


@pytest.mark.parametrize("kind", ["pq", "ivf", "hnsw"])
def test_approximate_faiss_kinds_find_most_true_neighbours(kind: str) -> None:
    bank = _random_bank(1500, dim=16, seed=3)
    idx = SurfaceIndex(bank, backend="faiss", faiss_kind=kind, ivf_nprobe=32, pq_m=8)
    rng = np.random.default_rng(4)
    hits = total = 0
    for _ in range(10):
        q = rng.normal(size=16).astype(np.float32)
        q /= np.linalg.norm(q)
        truth = set(_brute_force(bank, q, 10, "visible"))
        hits += len(truth & {u for u, _ in idx.search(q, 10)})
        total += 10
    assert hits / total >= 0.8


def test_k_larger_than_surface_and_empty_bank() -> None:
    assert SurfaceIndex(MemoryBank(dim=4)).search(np.ones(4, dtype=np.float32), 5) == []
    bank = _random_bank(6, dim=4)
    for backend in ("numpy", "faiss"):
        res = SurfaceIndex(bank, backend=backend).search(np.ones(4, dtype=np.float32) / 2, 50)
        assert len(res) == bank.n_visible


def test_bad_backend_is_named() -> None:
    with pytest.raises(ValueError, match="vector.backend"):
        SurfaceIndex(MemoryBank(dim=4), backend="annoy")


@pytest.mark.parametrize("kind", ["pq", "ivf"])
def test_auto_backend_is_exact_below_the_threshold_and_approximate_above(kind: str) -> None:
    bank = _random_bank(1500, dim=16, seed=5)
    small = SurfaceIndex(bank, backend="auto", approx_from=10_000)
    large = SurfaceIndex(bank, backend="auto", approx_from=500, approx_kind=kind, pq_m=8, ivf_nprobe=64)
    assert not small.uses_faiss() and large.uses_faiss()
    rng = np.random.default_rng(6)
    hits = 0
    for _ in range(10):
        q = rng.normal(size=16).astype(np.float32)
        q /= np.linalg.norm(q)
        truth = _brute_force(bank, q, 10, "visible")
        assert [u for u, _ in small.search(q, 10)] == truth
        hits += len(set(truth) & {u for u, _ in large.search(q, 10)})
    assert large._built_kind == kind and small._faiss is None
    assert hits >= 90  # 1000 visible units: PQ 4-byte codes, the best 100 re-scored; IVF all 25 lists probed
    new = bank.create_unit([{"text": "new"}], "s", [], np.ones(16), T0)
    q = np.ones(16, dtype=np.float32) / 4
    assert large.search(q, 1)[0][0] == new and large.rebuilds == 1  # appended to the trained index in place
    with pytest.raises(ValueError, match="approx_kind"):
        SurfaceIndex(bank, backend="auto", approx_kind="lsh")


def test_pq_returns_exact_cosines_of_what_it_finds_and_follows_appends() -> None:
    """PQ ranks by approximate codes, then re-scores its best refine x k candidates exactly: the scores it
    returns are the true cosines, and with every candidate re-scored (refine x k >= surface) it is exact."""
    bank = _random_bank(1800, dim=32, seed=7)  # 1200 visible: trained (at least 1000)
    idx = SurfaceIndex(bank, backend="faiss", faiss_kind="pq", pq_m=8, refine=4)
    whole = SurfaceIndex(bank, backend="faiss", faiss_kind="pq", pq_m=8, refine=bank.n_visible)
    rng = np.random.default_rng(8)
    for _ in range(10):
        q = rng.normal(size=32).astype(np.float32)
        q /= np.linalg.norm(q)
        for uid, score in idx.search(q, 10):
            assert score == pytest.approx(float(bank.embedding(uid) @ q), abs=1e-5)
        assert [u for u, _ in whole.search(q, 10)] == _brute_force(bank, q, 10, "visible")
    assert idx._built_kind == "pq" and idx._faiss.M == 8
    rebuilds = idx.rebuilds
    new = bank.create_unit([{"text": "new"}], "s", [], q * 3, T0)
    assert idx.search(q, 1) == [(new, pytest.approx(1.0))]
    assert idx.rebuilds == rebuilds  # appended to the trained codes in place


def test_pq_sub_quantisers_default_to_an_eighth_of_the_dimension_and_must_divide_it() -> None:
    assert SurfaceIndex(MemoryBank(dim=384)).pq_m == 48
    assert SurfaceIndex(MemoryBank(dim=16)).pq_m == 2
    assert SurfaceIndex(MemoryBank(dim=4)).pq_m == 1
    assert SurfaceIndex(MemoryBank(dim=100)).pq_m == 10  # 12 does not divide 100: the largest divisor below
    with pytest.raises(ValueError, match="vector.pq_m must divide the embedding dimension 32, got 12"):
        SurfaceIndex(MemoryBank(dim=32), pq_m=12)
    with pytest.raises(ValueError, match="vector.refine"):
        SurfaceIndex(MemoryBank(dim=32), refine=0)
