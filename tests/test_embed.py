"""Embedder: shape/dtype/norm, fixed-shape batches (a vector is its text's alone), the on-disk cache (counted, not
timed), the engines; the model-free HashEmbedder."""

from __future__ import annotations

import numpy as np
import pytest

from allmem import embed_batch
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
    assert not second.loaded  # a fully cached rerun never loads the model
    np.testing.assert_array_equal(v1[:3], v2)

    second.encode(["a new sentence"])
    assert second.misses == 1


def test_keys_differ_by_text_and_model(tmp_path) -> None:
    assert text_key("a") != text_key("b") and text_key("a") == text_key("a")
    assert len(text_key("x")) == 64
    emb = Embedder(cache_dir=tmp_path, backend="torch")
    fp = model_fingerprint(emb.model_path)
    assert emb.identity == f"all-MiniLM-L6-v2@{fp[:16]}/torch-{embed_batch.scheme(256)}-1t"
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
    """Vectors of another engine or precision never share cache entries: each backend names itself, with its
    batching (fixed-shape passes, or one text a pass for int8). ONNX Runtime fp32 is the default."""
    fp = model_fingerprint(Embedder(cache_dir=tmp_path).model_path)
    ids = {b: Embedder(cache_dir=tmp_path, backend=b).identity for b in ("torch", "onnx_fp32", "onnx_int8")}
    fixed = embed_batch.scheme(256)
    assert ids["torch"] == f"all-MiniLM-L6-v2@{fp[:16]}/torch-{fixed}-1t"
    assert ids["onnx_fp32"].startswith(f"all-MiniLM-L6-v2@{fp[:16]}/onnx-fp32-")
    assert (
        ids["onnx_fp32"].endswith(f"/{fixed}-1t")
        and Embedder(cache_dir=tmp_path).identity == ids["onnx_fp32"]
    )
    assert ids["onnx_int8"].startswith(f"all-MiniLM-L6-v2@{fp[:16]}/onnx-int8-")
    assert ids["onnx_int8"].endswith("/1x-1t") and len(set(ids.values())) == 3
    with pytest.raises(ValueError, match="backend must be one of"):
        Embedder(cache_dir=tmp_path, backend="onnx")


def test_onnx_backend_without_onnxruntime_fails_in_one_line(tmp_path, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime now raises ImportError
    emb = Embedder(cache_dir=tmp_path, backend="onnx_fp32")
    with pytest.raises(
        ImportError,
        match=r"needs the package onnxruntime: pip install onnxruntime onnx \(or choose embedder=minilm_torch\)",
    ) as err:
        emb.encode(["a text that misses the cache"])
    assert "\n" not in str(err.value)


def test_passes_have_fixed_shapes_worked_out_by_hand() -> None:
    """Buckets: every 8 tokens to 64, 16 to 128, 32 beyond, the model's limit last; rows = 256 tokens / bucket;
    unused rows hold the dummy [CLS] [SEP]; texts are grouped by bucket in order of first use."""
    assert embed_batch.buckets(256) == (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256)
    assert embed_batch.buckets(100)[-3:] == (80, 96, 100)
    batcher = embed_batch.Batcher(Embedder().model_path)
    texts = ["hi", "x " * 20, "ok", "y " * 300]  # 3, 22, 3 and (truncated) 256 tokens with [CLS] and [SEP]
    assert [len(t) for t in batcher.tokens(texts)] == [3, 22, 3, 256]
    passes = list(batcher.passes(texts))
    assert [(p.input_ids.shape, p.texts) for p in passes] == [
        ((32, 8), [0, 2]),
        ((10, 24), [1]),
        ((1, 256), [3]),
    ]
    first = passes[0]
    cls, sep = batcher.tokens([""])[0]
    assert first.input_ids[2].tolist() == [cls, sep, 0, 0, 0, 0, 0, 0]  # a dummy row
    assert first.attention_mask[0].tolist() == [1, 1, 1, 0, 0, 0, 0, 0] and not first.token_type_ids.any()
    assert first.input_ids[0, :3].tolist() == batcher.tokens(["hi"])[0]


def _locomo_turns(locomo_path, n: int) -> list[str]:
    import json

    conv = json.loads(locomo_path.read_text())[0]["conversation"]
    turns = [
        t["text"] for k, v in conv.items() if k.startswith("session_") and isinstance(v, list) for t in v
    ]
    return turns[:n]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["onnx_fp32", "torch"])
def test_a_vector_is_bitwise_its_texts_alone(backend, locomo_path, tmp_path) -> None:
    """Real LoCoMo turns (and a text truncated at 256 tokens, and an empty one) embedded alone, in order, shuffled,
    and beside other partners give bit-equal vectors: the cache may keep whichever run's vector came first."""
    # 60 turns fill every bucket that 120 do (16 to 96 tokens), most over two passes or more
    texts = [*_locomo_turns(locomo_path, 60), "", " ".join(["pottery class in Paris"] * 80)]
    emb = Embedder(cache_dir=tmp_path, backend=backend)
    together = emb.encode_uncached(texts)
    alone = np.stack([emb.encode_uncached([t])[0] for t in texts])
    perm = np.random.default_rng(7).permutation(len(texts))
    shuffled = np.empty_like(together)
    shuffled[perm] = emb.encode_uncached([texts[i] for i in perm])
    partners = emb.encode_uncached([*texts[::3], "another partner entirely", *texts[1::3]])
    np.testing.assert_array_equal(together, alone)
    np.testing.assert_array_equal(together, shuffled)
    np.testing.assert_array_equal(together[::3], partners[: len(texts[::3])])
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)


@pytest.mark.slow
def test_engines_match_sentence_transformers_and_int8_stays_close(locomo_path, tmp_path) -> None:
    """The fixed-shape passes compute sentence-transformers' pipeline: the same token ids (truncated at
    max_seq_length), torch and ONNX fp32 within float rounding of its vectors; int8 near them. The export is made
    once, in the cache folder's onnx/ (not the vector store's folder)."""
    from sentence_transformers import SentenceTransformer

    from allmem import paths

    texts = [
        *TEXTS,
        "Short.",
        *_locomo_turns(locomo_path, 30),
        " ".join(["a much longer turn about pottery"] * 60),
    ]
    st = SentenceTransformer(str(Embedder().model_path), device="cpu")
    prepare = getattr(st, "preprocess", None) or st.tokenize
    st_ids = prepare(texts)["input_ids"].tolist()
    ours = embed_batch.Batcher(Embedder().model_path).tokens(texts)
    assert [row[: len(ids)] for row, ids in zip(st_ids, ours, strict=True)] == ours
    assert max(len(ids) for ids in ours) == 256  # the long text is truncated at max_seq_length, as torch's
    reference = st.encode(texts, batch_size=1, normalize_embeddings=True, convert_to_numpy=True)
    torch_vecs = Embedder(cache_dir=tmp_path / "t", backend="torch").encode(texts)
    v32 = Embedder(cache_dir=tmp_path / "o").encode(texts)
    np.testing.assert_allclose(torch_vecs, reference, atol=1e-6)
    np.testing.assert_allclose(v32, reference, atol=1e-6)
    assert any(p.name.endswith("-fp32") for p in (paths.cache_dir() / "onnx").iterdir())
    assert not (tmp_path / "o" / "onnx").exists()
    v8 = Embedder(cache_dir=tmp_path / "o", backend="onnx_int8").encode(texts)
    assert float((v8 * reference).sum(1).min()) > 0.97
    np.testing.assert_array_equal(
        v8[1], Embedder(cache_dir=tmp_path / "o8", backend="onnx_int8").encode([texts[1]])[0]
    )
