"""The local MiniLM through ONNX Runtime (``embedder=minilm_onnx``, ``minilm_onnx_int8``): same model, other engine.

Why: embedding is the floor of every method's time per turn. ONNX Runtime runs the same weights without torch's
per-call overhead, and its dynamic int8 quantisation (``onnxruntime.quantization.quantize_dynamic``: int8 weights,
activations quantised per call) runs the matrix products in int8.

How: the model folder's sentence-transformers pipeline (transformer, mean pooling over the attention mask, L2
normalisation; the only pipeline accepted) is exported once with ``torch.onnx.export`` into the cache folder
(``<cache>/embeddings/onnx/<key>/``, never the repository), keyed by the model's file fingerprint and the code of this module
(``allmem.cache_store`` rule), and quantised there for int8. Tokenisation is the model folder's own
``tokenizer.json`` (Hugging Face ``tokenizers``), truncated at the model's ``max_seq_length`` as
sentence-transformers does. sentence-transformers' own ONNX backend is not used: it needs ``optimum-onnx``, whose
release pins transformers below the installed 5.

A text's vector depends on the text alone: every text runs in its own forward pass (int8's activation scales are
computed over the whole input, so a batch partner would change them) on one thread. The scheme is part of the
embedder's identity (``Embedder.identity``), so ONNX vectors never mix with torch's in the cache.

``onnxruntime`` (and ``onnx`` for the int8 quantiser) is the optional extra ``allmem[onnx]``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from allmem import cache_store

PRECISIONS = ("fp32", "int8")
_OPSET = 17
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _require(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(
            f"embedder backend onnx needs the package {module}: pip install 'allmem[onnx]' "
            f"(or choose embedder=minilm)"
        ) from None


def _check_pipeline(model_path: Path) -> int:
    """The model folder's max_seq_length; raises unless its pipeline is transformer + mean pooling + normalise."""
    modules = json.loads((model_path / "modules.json").read_text())
    kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
    pooling = json.loads((model_path / "1_Pooling" / "config.json").read_text())
    means = [k for k, v in pooling.items() if k.startswith("pooling_mode") and v]
    if kinds != ["Transformer", "Pooling", "Normalize"] or means != ["pooling_mode_mean_tokens"]:
        raise ValueError(
            f"{model_path}: the onnx backend exports transformer + mean pooling + normalise only, "
            f"found modules {kinds} and pooling {means} (modules.json)"
        )
    return int(json.loads((model_path / "sentence_bert_config.json").read_text())["max_seq_length"])


def _export(model_path: Path, folder: Path) -> None:
    """Write ``model_fp32.onnx`` and ``model_int8.onnx`` into ``folder``."""
    import torch
    from sentence_transformers import SentenceTransformer

    quantization = _require("onnxruntime.quantization")
    st = SentenceTransformer(str(model_path), device="cpu")
    bert = st[0].auto_model.eval()

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # sentence-transformers' Pooling
            return torch.nn.functional.normalize(mean, p=2, dim=1)  # and its Normalize

    ids = torch.ones((1, 8), dtype=torch.long)
    fp32 = folder / "model_fp32.onnx"
    with torch.no_grad():
        torch.onnx.export(
            Pooled(), (ids, ids, torch.zeros_like(ids)), str(fp32), input_names=list(_INPUTS),
            output_names=["embedding"], opset_version=_OPSET, dynamo=False,
            dynamic_axes={n: {0: "batch", 1: "tokens"} for n in _INPUTS} | {"embedding": {0: "batch"}},
        )  # fmt: skip
    quantization.quantize_dynamic(
        str(fp32), str(folder / "model_int8.onnx"), weight_type=quantization.QuantType.QInt8, per_channel=True
    )


class OnnxEncoder:
    """Unit vectors of texts through ONNX Runtime, one text per forward pass, one thread."""

    def __init__(self, model_path: Path, fingerprint: str, precision: str, cache_root: Path) -> None:
        if precision not in PRECISIONS:
            raise ValueError(
                f"embedder onnx precision must be one of {', '.join(PRECISIONS)}, got {precision!r}"
            )
        self.model_path = model_path
        self.precision = precision
        self.max_tokens = _check_pipeline(model_path)
        self.export_key = cache_store.code_key(("allmem/embed_onnx.py",), fingerprint, _OPSET, length=16)
        self.folder = cache_root / "onnx" / self.export_key
        self._session: Any = None
        self._tokenizer: Any = None

    @property
    def scheme(self) -> str:
        """How vectors are computed (part of the embedder identity): engine, precision, export, one text a pass."""
        return f"onnx-{self.precision}-{self.export_key[:8]}/1x-1t"

    def _model_file(self) -> Path:
        path = self.folder / f"model_{self.precision}.onnx"
        if not path.exists():
            with cache_store.locked(self.folder.with_name(f"{self.folder.name}.export")):
                if not path.exists():
                    cache_store.write_folder(self.folder, lambda tmp: _export(self.model_path, tmp))
        return path

    def _load(self) -> tuple[Any, Any]:
        if self._session is None:
            ort = _require("onnxruntime")
            from tokenizers import Tokenizer

            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            opts.inter_op_num_threads = 1
            opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            self._session = ort.InferenceSession(
                str(self._model_file()), sess_options=opts, providers=["CPUExecutionProvider"]
            )
            tok = Tokenizer.from_file(str(self.model_path / "tokenizer.json"))
            tok.no_padding()
            tok.enable_truncation(max_length=self.max_tokens)
            self._tokenizer = tok
        return self._session, self._tokenizer

    def tokens(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, as the model sees them (for the tokenisation check against sentence-transformers)."""
        _, tok = self._load()
        return [e.ids for e in tok.encode_batch(texts)]

    def encode(self, texts: list[str], dim: int) -> np.ndarray:
        session, tok = self._load()
        out = np.empty((len(texts), dim), dtype=np.float32)
        for i, enc in enumerate(tok.encode_batch(texts)):
            feed = {
                "input_ids": np.asarray([enc.ids], dtype=np.int64),
                "attention_mask": np.asarray([enc.attention_mask], dtype=np.int64),
                "token_type_ids": np.asarray([enc.type_ids], dtype=np.int64),
            }
            (vec,) = session.run(["embedding"], feed)
            out[i] = vec[0]
        return out
