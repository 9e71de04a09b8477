"""LongMemEval-M and oracle: configs, downloads (sha256 recorded and printed), and the streaming loader.

The hub is never reached: the hub client is replaced by a fake that "downloads" a local file (the code path
around it, naming, moving, recording the checksum, is ours), and the endpoint probe meets a loopback listener.
"""

from __future__ import annotations

import json
import pickle
import random
import shutil
import socket
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import huggingface_hub
import pytest
from omegaconf import OmegaConf

import benchmarks.errors as errors
from allmem.paths import DATASETS, resolve_data_path
from benchmarks import DatasetError, load_dataset
from benchmarks.download import LONGMEMEVAL_REPO, DownloadError, download, main, sha256_file
from benchmarks.errors import iter_json_array
from benchmarks.lme_synth import write_longmemeval
from benchmarks.longmemeval import iter_longmemeval, load_longmemeval

REPO = Path(__file__).resolve().parents[1]
HUB_FILES = {
    "longmemeval_s": "longmemeval_s_cleaned.json",
    "longmemeval_m": "longmemeval_m_cleaned.json",
    "longmemeval_oracle": "longmemeval_oracle.json",
}


# --- configs -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["longmemeval_m", "longmemeval_oracle"])
def test_variant_config_loads_its_tiny_file(name: str, fixtures_dir: Path) -> None:
    cfg = OmegaConf.load(REPO / "configs" / "dataset" / f"{name}.yaml")
    assert cfg.name == name
    cfg.path = str(fixtures_dir / f"{name}_tiny.json")
    dialogues = list(load_dataset(cfg))
    assert [d.id for d in dialogues] == ["7161e7e2", "gpt4_2f8e1c90", "0b6a3f12_abs"]
    # the s fixture has 3, 3 and 2 sessions; the M fixture adds 3 distractors to each
    assert [len(d.sessions) for d in dialogues] == ([6, 6, 5] if name == "longmemeval_m" else [1, 2, 1])
    for d in dialogues:  # the oracle file lists sessions out of date order; the loader sorts them
        assert [s.date for s in d.sessions] == sorted(s.date for s in d.sessions)
    if name == "longmemeval_oracle":
        assert [s.id for s in dialogues[1].sessions] == ["answer_2f8e1c90_1", "answer_2f8e1c90_2"]


@pytest.mark.parametrize("name", ["longmemeval_m", "longmemeval_oracle"])
def test_variant_resolves_where_download_puts_it(name: str, tmp_path: Path) -> None:
    target = tmp_path / "main" / "data" / "longmemeval" / HUB_FILES[name]
    with pytest.raises(FileNotFoundError, match=f"allmem download {name}"):
        resolve_data_path(name, None, root=tmp_path / "main")
    target.parent.mkdir(parents=True)
    target.write_text("[]")
    assert resolve_data_path(name, None, root=tmp_path / "main") == target
    assert DATASETS[name].files[0] == HUB_FILES[name]  # the hub's file name is where it lands


# --- downloads -----------------------------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[str]:
    """A loopback port that accepts connections (the endpoint probe's only need)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """``hf_hub_download`` replaced: writes ``b'[]' + filename`` into ``local_dir``; returns the calls made."""
    calls: list[dict[str, Any]] = []

    def fake(repo_id: str, filename: str, **kw: Any) -> str:
        calls.append({"repo_id": repo_id, "filename": filename} | kw)
        out = Path(kw["local_dir"]) / filename
        out.write_bytes(b'[{"fake": "' + filename.encode() + b'"}]')
        return str(out)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    return calls


@pytest.mark.parametrize("name", sorted(HUB_FILES))
def test_download_fetches_the_variant_and_records_its_sha256(
    name: str,
    tmp_path: Path,
    listener: str,
    fake_hub: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    file = HUB_FILES[name]
    assert main([name, "--dest", str(tmp_path), "--endpoint", listener, "--timeout", "2"]) == 0
    target = tmp_path / "longmemeval" / file
    assert fake_hub[0]["repo_id"] == LONGMEMEVAL_REPO and fake_hub[0]["filename"] == file
    assert fake_hub[0]["repo_type"] == "dataset" and fake_hub[0]["endpoint"] == listener
    digest = sha256_file(target)
    assert target.read_bytes() == b'[{"fake": "' + file.encode() + b'"}]'
    assert target.with_name(file + ".sha256").read_text() == f"{digest}  {file}\n"
    out = capsys.readouterr().out
    assert f"{name}: {target}" in out and f"sha256 {digest}  {file}" in out


def test_a_file_put_there_by_hand_gets_its_sha256_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "longmemeval" / "longmemeval_m_cleaned.json"
    target.parent.mkdir(parents=True)
    target.write_text("[]")
    assert main(["longmemeval_m", "--dest", str(tmp_path)]) == 0  # present: no network asked
    digest = sha256_file(target)
    assert target.with_name(target.name + ".sha256").read_text() == f"{digest}  {target.name}\n"
    assert f"sha256 {digest}" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["longmemeval_m", "longmemeval_oracle"])
def test_variant_offline_names_its_own_file(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DownloadError) as info:
        download(name, tmp_path)
    msg = str(info.value)
    assert f"huggingface.co/datasets/{LONGMEMEVAL_REPO} (file {HUB_FILES[name]})" in msg
    assert str(tmp_path / "longmemeval" / HUB_FILES[name]) in msg and DATASETS[name].title in msg


# --- the streaming reader ------------------------------------------------------------------------------------


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["int", "float", "str", "bool", "null"] + (["list", "dict"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.randint(-(10**12), 10**12)
    if kind == "float":
        return rng.uniform(-1e6, 1e6)
    if kind == "str":
        return "".join(rng.choice('ab "\\\n\té€😀,[]{}') for _ in range(rng.randint(0, 12)))
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {f"k{i}": _random_json(rng, depth + 1) for i in range(rng.randint(0, 4))}


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
def test_streaming_equals_json_load_at_every_chunk_boundary(
    chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(errors, "_CHUNK_CHARS", chunk)
    rng = random.Random(chunk)
    for k in range(30):
        doc = [_random_json(rng) for _ in range(rng.randint(0, 6))]
        text = json.dumps(doc, indent=rng.choice([None, 1]), ensure_ascii=rng.random() < 0.5)
        path = tmp_path / f"{k}.json"
        path.write_text(" \n" + text + "\n ", encoding="utf-8")
        data = path.read_bytes()
        got = list(iter_json_array(path, str(path), "things"))
        assert [v for v, _, _ in got] == json.loads(text)
        assert all(json.loads(data[start:end]) == v for v, start, end in got)  # the spans are byte-exact


@pytest.mark.parametrize(
    "text",
    ['[{"a": 1}, {"b": tru}]', '[{"a": 1}\n,\n {"b": "x"} {"c": 2}]', '[1, 2,]', "[1, 2", '[{"a": 1}] x',
     '[\n  {"a": "unterminated\n  ]', ""],
)  # fmt: skip
@pytest.mark.parametrize("chunk", [1, 5, 1 << 20])
def test_streaming_errors_give_json_loads_line_and_column(
    text: str, chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(errors, "_CHUNK_CHARS", chunk)
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(json.JSONDecodeError) as want:
        json.loads(text)
    with pytest.raises(DatasetError) as got:
        list(iter_json_array(path, str(path), "things"))
    assert f"line {want.value.lineno} column {want.value.colno}" in str(got.value), (
        str(got.value),
        want.value,
    )
    assert str(got.value).startswith(f"{path}: invalid JSON at line ")


def test_streaming_stops_where_the_limit_is(tmp_path: Path, fixtures_dir: Path) -> None:
    """``limit_dialogues=1`` reads one record: a broken second record is never reached."""
    good = json.loads((fixtures_dir / "longmemeval_s_tiny.json").read_text())[0]
    path = tmp_path / "lme.json"
    path.write_text("[" + json.dumps(good) + ", {broken")
    assert [d.id for d in load_longmemeval(path, limit=1)] == ["7161e7e2"]
    cfg = OmegaConf.load(REPO / "configs" / "dataset" / "longmemeval_m.yaml")
    cfg.path, cfg.limit_dialogues = str(path), 1
    assert [d.id for d in load_dataset(cfg)] == ["7161e7e2"]
    with pytest.raises(DatasetError, match="invalid JSON at line 1"):
        load_longmemeval(path)


def _peak_while_walking(path: Path) -> tuple[int, int]:
    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_longmemeval(path))
        return count, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_streaming_memory_does_not_grow_with_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Walking a file 4 times longer takes about the same peak memory (one record and the read window), far
    below the file's size; ``json.load`` would need several times the file."""
    monkeypatch.setattr(errors, "_CHUNK_CHARS", 1 << 16)
    small = write_longmemeval(tmp_path / "small.json", questions=6, sessions=20, seed=2)
    big = write_longmemeval(tmp_path / "big.json", questions=24, sessions=20, seed=2)
    (n_small, peak_small), (n_big, peak_big) = _peak_while_walking(small), _peak_while_walking(big)
    assert (n_small, n_big) == (6, 24)
    assert big.stat().st_size > 4_000_000
    assert peak_big < 1.5 * peak_small, (peak_small, peak_big)
    assert peak_big < big.stat().st_size / 2, (peak_big, big.stat().st_size)


# --- the loaded file: spans, not Dialogues ---------------------------------------------------------------------


def test_loaded_file_decodes_the_same_dialogues_on_demand(tmp_path: Path) -> None:
    path = write_longmemeval(tmp_path / "lme.json", questions=5, sessions=3, seed=4)
    streamed = list(iter_longmemeval(path))
    loaded = load_longmemeval(path)
    assert (
        len(loaded) == 5
        and list(loaded) == streamed
        and loaded[3] == streamed[3]
        and loaded[-1] == streamed[-1]
    )
    assert [d.id for d in loaded[1:3]] == [d.id for d in streamed[1:3]]
    wire = pickle.dumps(loaded)  # what a worker process receives: spans, not the haystacks
    assert len(wire) < 1000 < path.stat().st_size and list(pickle.loads(wire)) == streamed
    with pytest.raises(IndexError):
        loaded[5]


def test_a_file_changed_after_loading_is_refused(tmp_path: Path, fixtures_dir: Path) -> None:
    path = tmp_path / "lme.json"
    shutil.copy(fixtures_dir / "longmemeval_s_tiny.json", path)
    loaded = load_longmemeval(path)
    path.write_text(path.read_text().replace("Business Administration", "Fine Arts and Crafts"))
    with pytest.raises(DatasetError, match="changed after it was loaded"):
        loaded[0]


def test_a_utf8_bom_is_skipped_and_spans_stay_exact(tmp_path: Path, fixtures_dir: Path) -> None:
    text = (fixtures_dir / "longmemeval_s_tiny.json").read_text()
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + text.replace("Sure!", "Sûre! ✓").encode())
    assert [d.id for d in load_longmemeval(path)] == ["7161e7e2", "gpt4_2f8e1c90", "0b6a3f12_abs"]
    assert list(load_longmemeval(path)) == list(iter_longmemeval(path))
