"""Imported once by the forkserver that ``run.workers``' processes are forked from (``allmem.run.parallel``): the
third-party libraries every worker imports, each native thread pool held at one thread as in a worker.

Each worker used to be a new interpreter paying about 3 s of CPU for these imports (nltk, with scikit-learn,
scipy and pandas under it, most of it); a run now pays them once, in the forkserver. Left out: torch (its thread
pools are not safe across a fork), onnxruntime (it starts a thread when imported, and imports in a tenth of a
second) and allmem's own modules but ``allmem.threads`` (a worker imports them after it has taken the parent's
environment). The one thread these imports leave running is the background thread of pyarrow's allocator
(jemalloc, under pandas), which jemalloc's own fork handlers make safe to fork.
"""

from __future__ import annotations

import importlib
import os

from allmem.threads import ONE_THREAD_ENV

LIBRARIES = (
    "numpy", "scipy.stats", "pandas", "nltk", "rouge_score.rouge_scorer", "yake", "bm25s", "tokenizers", "tiktoken",
    "networkx", "omegaconf", "hydra.utils", "threadpoolctl", "tqdm.auto",
)  # fmt: skip

os.environ.update(ONE_THREAD_ENV)
for _name in LIBRARIES:
    importlib.import_module(_name)
