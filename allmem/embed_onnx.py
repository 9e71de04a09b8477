"""The local MiniLM through ONNX Runtime (``embedder=minilm``, the default, and ``minilm_onnx_int8``).

Why: embedding is the floor of every method's time per turn. ONNX Runtime runs the same weights without torch's
per-call overhead, and its dynamic int8 quantisation (``onnxruntime.quantization.quantize_dynamic``: int8 weights,
activations quantised per call) runs the matrix products in int8.

How: the model folder's sentence-transformers pipeline (transformer, mean pooling over the attention mask, L2
normalisation; the only pipeline accepted) is exported once with ``torch.onnx.export`` into the cache folder
(``<cache>/onnx/<key>-<precision>/``, never the repository; one export serves every vector store), keyed by the model's file fingerprint and the code of this module and
``allmem.embed_batch`` (``allmem.cache_store`` rule), and quantised there for int8. Tokenisation is the model folder's own
``tokenizer.json`` (Hugging Face ``tokenizers``), truncated at the model's ``max_seq_length`` as
sentence-transformers does. sentence-transformers' own ONNX backend is not used: it needs ``optimum-onnx``, whose
release pins transformers below the installed 5.

A text's vector depends on the text alone, on one thread: fp32 runs the fixed-shape passes of
``allmem.embed_batch`` (the torch engine's too); int8 runs every text in a pass of its own, since its activation
scales are computed over the whole input and a batch partner would change them. The scheme is part of the
embedder's identity (``Embedder.identity``), so ONNX vectors never mix with torch's in the cache.

``onnxruntime`` and ``onnx`` (the int8 quantiser) are dependencies: fp32 is the default engine (``embedder=minilm``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from allmem import cache_store
from allmem.embed_batch import Batcher, Pass, check_pipeline, pooled_module, scheme

PRECISIONS = ("fp32", "int8")
_OPSET = 17
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _require(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(
            f"embedder backend onnx needs the package {module}: pip install onnxruntime onnx "
            f"(or choose embedder=minilm_torch)"
        ) from None


def _export(model_path: Path, folder: Path, precision: str, exported: Path | None = None) -> None:
    """Write ``model_fp32.onnx`` into ``folder`` (``exported``: a copy of that file, exported before), and for
    int8 ``model_int8.onnx`` quantised from it."""
    fp32 = folder / "model_fp32.onnx"
    if exported is not None:
        shutil.copyfile(exported, fp32)
    else:
        import torch

        pooled = pooled_module(model_path)
        ids = torch.ones((1, 8), dtype=torch.long)
        with torch.no_grad():
            torch.onnx.export(
                pooled, (ids, ids, torch.zeros_like(ids)), str(fp32), input_names=list(_INPUTS),
                output_names=["embedding"], opset_version=_OPSET, dynamo=False,
                dynamic_axes={n: {0: "batch", 1: "tokens"} for n in _INPUTS} | {"embedding": {0: "batch"}},
            )  # fmt: skip
    if precision == "int8":
        quantization = _require("onnxruntime.quantization")
        quantization.quantize_dynamic(
            str(fp32),
            str(folder / "model_int8.onnx"),
            weight_type=quantization.QuantType.QInt8,
            per_channel=True,
        )


class OnnxEncoder:
    """Unit vectors through ONNX Runtime on one thread: fixed-shape passes (fp32), or one text a pass (int8)."""

    def __init__(self, model_path: Path, fingerprint: str, precision: str, export_root: Path) -> None:
        if precision not in PRECISIONS:
            raise ValueError(
                f"embedder onnx precision must be one of {', '.join(PRECISIONS)}, got {precision!r}"
            )
        self.model_path = model_path
        self.precision = precision
        self.max_tokens = check_pipeline(model_path)
        self.batching = scheme(self.max_tokens)
        self.export_key = cache_store.code_key(
            ("allmem/embed_onnx.py", "allmem/embed_batch.py"), fingerprint, _OPSET, length=16
        )
        self.folder = export_root / f"{self.export_key}-{precision}"
        self._session: Any = None

    @property
    def scheme(self) -> str:
        """How vectors are computed (part of the embedder identity): engine, precision, export, batching, threads.
        fp32 runs fixed-shape passes (``allmem.embed_batch``); int8 one text per pass (module docstring)."""
        batching = self.batching if self.precision == "fp32" else "1x"
        return f"onnx-{self.precision}-{self.export_key[:8]}/{batching}-1t"

    def _model_file(self, precision: str | None = None) -> Path:
        """The exported model of ``precision`` (default: this encoder's), made once under a lock. int8 is
        quantised from the fp32 export, which is made first (one torch export serves both)."""
        precision = precision or self.precision
        folder = self.folder.with_name(f"{self.export_key}-{precision}")
        path = folder / f"model_{precision}.onnx"
        if not path.exists():
            exported = self._model_file("fp32") if precision != "fp32" else None
            with cache_store.locked(folder.with_name(f"{folder.name}.export")):
                if not path.exists():
                    cache_store.write_folder(
                        folder, lambda tmp: _export(self.model_path, tmp, precision, exported)
                    )
        return path

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def _load(self) -> Any:
        if self._session is None:
            ort = _require("onnxruntime")
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            opts.inter_op_num_threads = 1
            opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            self._session = ort.InferenceSession(
                str(self._model_file()), sess_options=opts, providers=["CPUExecutionProvider"]
            )
        return self._session

    def run(self, p: Pass) -> np.ndarray:
        """Unit vectors of one fixed-shape pass (every row, dummies included)."""
        feed = {
            "input_ids": p.input_ids,
            "attention_mask": p.attention_mask,
            "token_type_ids": p.token_type_ids,
        }
        (vecs,) = self._load().run(["embedding"], feed)
        return np.asarray(vecs, dtype=np.float32)

    def encode_one_by_one(self, texts: list[str], batcher: Batcher, dim: int) -> np.ndarray:
        """int8: each text in a pass of its own, unpadded (its activation scales are its own)."""
        out = np.empty((len(texts), dim), dtype=np.float32)
        for i, enc in enumerate(batcher.tokenizer.encode_batch(texts)):
            ids = np.asarray([enc.ids], dtype=np.int64)
            types = np.asarray([enc.type_ids], dtype=np.int64)
            out[i] = self.run(Pass(ids, np.ones_like(ids), types, [0]))[0]
        return out
