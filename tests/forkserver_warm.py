"""What faultkit's forkserver does once, before it forks any ``allmem`` run: import the third-party libraries a run
imports, and load tiktoken's ``o200k_base`` encoding (about half a second of BPE parsing in every run that counts a
token).

The encoding is loaded the way ``allmem.tokens.encoding()`` loads it (the bundled file seeded into a folder that
``TIKTOKEN_CACHE_DIR`` names, tiktoken checking its sha256), from a temporary folder, and stays in tiktoken's own
registry. A forked run's ``allmem.tokens.encoding()`` still seeds its own cache folder and sets
``TIKTOKEN_CACHE_DIR`` as in any process; ``tiktoken.get_encoding`` then returns these same ranks. Of allmem, only
``allmem.tokens`` and the modules it imports are loaded here; none reads the environment at import.
"""

from __future__ import annotations

import importlib
import os
import tempfile

LIBRARIES = (
    "numpy", "pandas", "scipy.stats", "sklearn", "nltk", "yake", "bm25s", "rouge_score.rouge_scorer", "tokenizers",
    "onnxruntime", "omegaconf", "hydra", "hydra.compose", "hydra._internal.hydra", "hydra._internal.utils",
    "hydra.core.override_parser.overrides_parser",
)  # fmt: skip


def _load_encoding() -> None:
    import tiktoken

    from allmem import tokens

    before = os.environ.get("TIKTOKEN_CACHE_DIR")
    with tempfile.TemporaryDirectory() as folder:
        os.environ["TIKTOKEN_CACHE_DIR"] = str(tokens.seed_tiktoken_cache(folder))
        try:
            tiktoken.get_encoding(tokens.ENCODING)
        finally:
            if before is None:
                del os.environ["TIKTOKEN_CACHE_DIR"]
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = before


for _module in LIBRARIES:
    importlib.import_module(_module)
_load_encoding()
