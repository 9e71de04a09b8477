"""Fixed-shape batches for the MiniLM embedder: many texts per forward pass, each text's vector its own.

Why fixed shapes (issue 32): a cache keeps the vector of whichever run embedded a text first, so a vector that
depended on its batch partners would make results depend on the job schedule and the cache state. A matrix
kernel's order of summation depends on the shapes it is given (the number of rows among them: a batch of 2 and a
batch of 64 take different code paths on some CPUs), and on one thread on nothing else, and padding changes the
numbers too. So every text is padded to a fixed length *bucket* chosen by its own token count, and every forward
pass of a bucket has the same number of rows, unused rows being a fixed dummy text. A text therefore always meets
the model in the same shape, and its vector is bitwise the same alone or with any partners
(tests/test_embed.py checks it for torch and ONNX Runtime). Measured on 400 LoCoMo turns (one thread, 2-core EPYC):
bit-equal alone, in order and shuffled, at 0.6 of the CPU time of one text per pass.

Rows of a pass: ``max(1, TOKENS_PER_PASS // bucket)``, so every pass holds about ``TOKENS_PER_PASS`` tokens: a
lone short query pays for a few dozen dummy tokens, not for a whole batch of long ones.

The model folder must hold the usual sentence-transformers pipeline (transformer, mean pooling, L2 normalisation),
which both engines compute themselves (``pooled_module``; ``allmem.embed_onnx`` exports the same module).
Tokenisation is the folder's ``tokenizer.json`` (Hugging Face ``tokenizers``), truncated at its ``max_seq_length``
as sentence-transformers does; the test checks the ids against sentence-transformers'.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

TOKENS_PER_PASS = 256
# Bucket lengths: every 8 tokens up to 64 (LoCoMo turns and sentences are mostly short), every 16 up to 128,
# every 32 beyond; a text is padded to the first bucket that holds it.
_LADDER = (*range(8, 65, 8), *range(80, 129, 16), *range(160, 4097, 32))


def check_pipeline(model_path: Path) -> int:
    """The model folder's max_seq_length; raises unless its pipeline is transformer + mean pooling + normalise."""
    modules = json.loads((model_path / "modules.json").read_text())
    kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
    pooling = json.loads((model_path / "1_Pooling" / "config.json").read_text())
    means = [k for k, v in pooling.items() if k.startswith("pooling_mode") and v]
    if kinds != ["Transformer", "Pooling", "Normalize"] or means != ["pooling_mode_mean_tokens"]:
        raise ValueError(
            f"{model_path}: the embedder computes transformer + mean pooling + normalise only, "
            f"found modules {kinds} and pooling {means} (modules.json)"
        )
    return int(json.loads((model_path / "sentence_bert_config.json").read_text())["max_seq_length"])


def buckets(max_tokens: int) -> tuple[int, ...]:
    """The bucket lengths for a model that reads at most ``max_tokens`` tokens (the last one is ``max_tokens``)."""
    return (*(b for b in _LADDER if b < max_tokens), max_tokens)


def scheme(max_tokens: int) -> str:
    """Names the batching in the embedder's identity: a change of buckets or pass size is another cache key."""
    blob = json.dumps([TOKENS_PER_PASS, buckets(max_tokens), "dummy=[CLS][SEP]"])
    return f"fixed-{hashlib.sha256(blob.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class Pass:
    """One forward pass: ``(rows, length)`` int64 arrays, and which input texts its first rows hold."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    token_type_ids: np.ndarray
    texts: list[int]  # indices into the encoded list, in row order; rows after them are dummies


class Batcher:
    """Tokenises texts and lays them out in fixed-shape passes (module docstring)."""

    def __init__(self, model_path: Path) -> None:
        from tokenizers import Tokenizer

        self.max_tokens = check_pipeline(model_path)
        self.buckets = buckets(self.max_tokens)
        tok = Tokenizer.from_file(str(model_path / "tokenizer.json"))
        tok.no_padding()
        tok.enable_truncation(max_length=self.max_tokens)
        self.tokenizer = tok
        dummy = tok.encode("")  # [CLS] [SEP]: a fixed text for the unused rows
        self._dummy = (dummy.ids, dummy.type_ids)

    def tokens(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, as the model sees them."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts))]

    def passes(self, texts: Sequence[str]) -> Iterator[Pass]:
        """Fixed-shape passes covering ``texts``: grouped by bucket (buckets in order of first use)."""
        encoded = self.tokenizer.encode_batch(list(texts))
        groups: dict[int, list[int]] = {}
        for i, enc in enumerate(encoded):
            length = next(b for b in self.buckets if b >= len(enc.ids))
            groups.setdefault(length, []).append(i)
        for length, members in groups.items():
            rows = max(1, TOKENS_PER_PASS // length)
            for start in range(0, len(members), rows):
                chunk = members[start : start + rows]
                ids = np.zeros((rows, length), dtype=np.int64)
                mask = np.zeros((rows, length), dtype=np.int64)
                types = np.zeros((rows, length), dtype=np.int64)
                filled = [(encoded[i].ids, encoded[i].type_ids) for i in chunk]
                filled += [self._dummy] * (rows - len(chunk))
                for r, (tok_ids, type_ids) in enumerate(filled):
                    ids[r, : len(tok_ids)] = tok_ids
                    mask[r, : len(tok_ids)] = 1
                    types[r, : len(type_ids)] = type_ids
                yield Pass(ids, mask, types, chunk)


def pooled_module(model_path: Path) -> Any:
    """The folder's transformer with sentence-transformers' mean pooling and normalisation as one torch module
    (inputs: input_ids, attention_mask, token_type_ids; output: unit vectors), in eval mode."""
    import torch
    from transformers import AutoModel

    bert = AutoModel.from_pretrained(str(model_path)).eval()

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

    return Pooled().eval()
