"""Embedder: shape/dtype/norm, determinism, the on-disk cache (counted, not timed); the model-free HashEmbedder."""

from __future__ import annotations

import numpy as np
import pytest

from allmem.embed import Embedder, HashEmbedder, model_fingerprint, text_key

TEXTS = [
    "Caroline: I went to a LGBTQ support group yesterday.",
    "Melanie: I painted a lake sunrise last year.",
    "The weather is nice today.",
]


def test_shape_dtype_norm(embedder: Embedder) -> None:
    vecs = embedder.encode(TEXTS)
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    one = embedder.encode_one(TEXTS[0])
    assert one.shape == (384,) and one.dtype == np.float32
    np.testing.assert_allclose(one, vecs[0], atol=1e-6)
    assert embedder.dim == 384 and embedder.name == "all-MiniLM-L6-v2"
    assert embedder.encode([]).shape == (0, 384)


@pytest.mark.slow
def test_semantics_and_determinism(tmp_path) -> None:
    # two independent embedders with separate caches must compute the same vectors
    a = Embedder(cache_dir=tmp_path / "a")
    b = Embedder(cache_dir=tmp_path / "b")
    va, vb = a.encode(TEXTS), b.encode(list(reversed(TEXTS)))[::-1]
    np.testing.assert_allclose(va, vb, atol=1e-5)
    q = a.encode_one("Did Caroline attend a support group?")
    sims = va @ q
    assert int(np.argmax(sims)) == 0  # the paraphrase is nearest


@pytest.mark.slow
def test_cache_hit_on_rerun(tmp_path) -> None:
    first = Embedder(cache_dir=tmp_path)
    v1 = first.encode(TEXTS + [TEXTS[0]])  # duplicate inside one batch is encoded once
    assert (first.misses, first.hits) == (3, 1)
    first.encode(TEXTS)  # memo
    assert (first.misses, first.hits) == (3, 4)
    first.close()

    second = Embedder(cache_dir=tmp_path)
    v2 = second.encode(TEXTS)
    assert (second.misses, second.hits) == (0, 3)
    assert second._model is None  # a fully cached rerun never loads the model
    np.testing.assert_array_equal(v1[:3], v2)

    second.encode(["a new sentence"])
    assert second.misses == 1


def test_keys_differ_by_text_and_model(tmp_path) -> None:
    assert text_key("a") != text_key("b") and text_key("a") == text_key("a")
    assert len(text_key("x")) == 64
    emb = Embedder(cache_dir=tmp_path)
    fp = model_fingerprint(emb.model_path)
    assert emb.identity == f"all-MiniLM-L6-v2@{fp[:16]}/single-1t"
    # a copy of the model folder with one config byte changed gets a different identity
    import shutil

    with pytest.raises(FileNotFoundError):
        model_fingerprint(tmp_path / "empty_dir_missing")

    other = tmp_path / "model_copy"
    shutil.copytree(emb.model_path, other, ignore=shutil.ignore_patterns("*.safetensors"))
    before = model_fingerprint(other)
    assert before != fp  # the weights file is part of the identity
    (other / "config.json").write_text((other / "config.json").read_text() + " ")
    after = model_fingerprint(other)
    assert after != before
    (other / "README.md").write_text("docs do not count")
    assert model_fingerprint(other) == after


def test_bad_input_is_a_clear_error(tmp_path) -> None:
    emb = Embedder(cache_dir=tmp_path)
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        emb.encode(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        emb.encode("not a list")
    with pytest.raises(FileNotFoundError, match="model_path"):
        Embedder(model_path=tmp_path / "nope")


def test_hash_embedder_is_a_signed_bag_of_words() -> None:
    """Words hash to distinct buckets at this width, so cosines are the bag-of-words values worked out by hand."""
    e = HashEmbedder(dim=1 << 16)
    red_bike, red_car, red_red_bike, red = e.encode(["Red, bike!", "red car", "red red bike", "RED"])
    assert abs(float(red_bike @ red_car) - 0.5) < 1e-6  # (1,1,0)·(1,0,1) / (√2·√2)
    assert abs(float(red_red_bike @ red) - 2 / 5**0.5) < 1e-6  # (2,1)·(1,0) / √5
    np.testing.assert_array_equal(red_bike, e.encode_one("red bike"))  # case and punctuation ignored
    assert not e.encode(["", "?!"]).any()  # a text without words is the zero vector
    assert e.encode([]).shape == (0, 1 << 16) and red.dtype == np.float32


def test_hash_embedder_is_deterministic_across_instances_and_never_loads_a_model() -> None:
    a, b = HashEmbedder(), HashEmbedder()
    np.testing.assert_array_equal(a.encode(TEXTS), b.encode(TEXTS))
    np.testing.assert_allclose(np.linalg.norm(a.encode(TEXTS), axis=1), 1.0, atol=1e-6)
    assert a.identity == "hash@dim64"
    with pytest.raises(TypeError):
        a.encode("not a list")
    with pytest.raises(ValueError, match="dim"):
        HashEmbedder(dim=1)


def test_onnx_backends_have_their_own_identity(tmp_path) -> None:
    """Vectors of another engine or precision never share cache entries with torch's: each backend names itself."""
    fp = model_fingerprint(Embedder(cache_dir=tmp_path).model_path)
    ids = {b: Embedder(cache_dir=tmp_path, backend=b).identity for b in ("torch", "onnx_fp32", "onnx_int8")}
    assert ids["torch"] == f"all-MiniLM-L6-v2@{fp[:16]}/single-1t"  # one text per forward pass
    assert ids["onnx_fp32"].startswith(f"all-MiniLM-L6-v2@{fp[:16]}/onnx-fp32-")
    assert ids["onnx_int8"].startswith(f"all-MiniLM-L6-v2@{fp[:16]}/onnx-int8-")
    assert ids["onnx_fp32"].endswith("/1x-1t") and len(set(ids.values())) == 3
    with pytest.raises(ValueError, match="backend must be one of"):
        Embedder(cache_dir=tmp_path, backend="onnx")


def test_onnx_backend_without_onnxruntime_fails_in_one_line(tmp_path, monkeypatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_ort(name, *args, **kwargs):  # noqa: ANN001, ANN202 - the import hook's signature
        if name.startswith("onnxruntime"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ort)
    emb = Embedder(cache_dir=tmp_path, backend="onnx_fp32")
    with pytest.raises(
        ImportError, match=r"needs the package onnxruntime: pip install 'allmem\[onnx\]'"
    ) as err:
        emb.encode(["a text that misses the cache"])
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_onnx_fp32_matches_torch_and_int8_stays_close(tmp_path) -> None:
    """Exported once into the cache folder; same token ids as sentence-transformers; fp32 within float rounding
    of torch, int8 (per-channel weights) near it; a text's vector does not depend on what it is encoded with."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    texts = [
        *TEXTS,
        "Short.",
        " ".join(["a much longer turn about pottery classes and a trip to Paris"] * 40),
    ]
    torch_vecs = Embedder(cache_dir=tmp_path / "t")._encode_model(texts)
    fp32 = Embedder(cache_dir=tmp_path / "o", backend="onnx_fp32")
    st = Embedder(cache_dir=tmp_path / "t")._load()
    prepare = getattr(st, "preprocess", None) or st.tokenize
    st_ids = prepare(texts)["input_ids"].tolist()
    ours = fp32._onnx_encoder().tokens(texts)
    assert [row[: len(ids)] for row, ids in zip(st_ids, ours, strict=True)] == ours
    assert max(len(ids) for ids in ours) == 256  # the long text is truncated at max_seq_length, as torch's
    v32 = fp32.encode(texts)
    np.testing.assert_allclose(v32, torch_vecs, atol=1e-5)
    assert list((tmp_path / "o" / "onnx").iterdir())  # the export lives in the cache folder
    np.testing.assert_array_equal(
        v32[1], Embedder(cache_dir=tmp_path / "o2", backend="onnx_fp32").encode([texts[1]])[0]
    )
    v8 = Embedder(cache_dir=tmp_path / "o", backend="onnx_int8").encode(texts)
    assert float((v8 * torch_vecs).sum(1).min()) > 0.97
