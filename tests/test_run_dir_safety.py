"""Run folders are data, and a run's identity is checked before it is trusted.

A stored ``config.yaml`` is read by ``files.read_config`` only: nothing in it is instantiated or interpolated.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from allmem import files
from allmem.run import identity
from tests.faultkit import FIXTURES, Result, allmem_run, cli, done_dir, env

TINY = FIXTURES / "locomo_tiny.json"
SECRET = "sk-h1-SECRET-4b2e"
pytestmark = pytest.mark.slow


def _report(*args: str, **extra: str) -> Result:
    return cli("report", *args, cwd=Path.cwd(), environ=env(**extra), timeout=120)


@pytest.fixture(scope="module")
def bm25_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("bm25")
    return done_dir(allmem_run(tmp, "method=bm25", f"dataset.path={TINY}"))


def _copy(run: Path, root: Path, edit) -> Path:  # noqa: ANN001 - edits the config's data in place
    dest = shutil.copytree(run, root / "locomo" / run.name)
    cfg = yaml.safe_load((dest / files.CONFIG).read_text())
    edit(cfg)
    (dest / files.CONFIG).write_text(yaml.safe_dump(cfg))
    return dest


def test_report_never_instantiates_a_stored_target(bm25_run: Path, tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    _copy(
        bm25_run,
        tmp_path / "runs",
        lambda c: c.update(protocol={"_target_": "os.makedirs", "name": str(pwned)}),
    )
    res = _report(str(tmp_path / "runs"))
    assert not pwned.exists()
    lines = [x for x in res.err.splitlines() if x.strip()]
    assert res.rc == 1 and len(lines) == 1, res.err
    assert (
        lines[0].startswith("allmem report: error: ")
        and "config.yaml: protocol: unknown protocol" in lines[0]
    )


def test_a_target_beside_a_valid_name_is_ignored(bm25_run: Path, tmp_path: Path) -> None:
    """The protocol is built by its name, as ``allmem score`` does; the stored ``_target_`` plays no part."""
    node = {"_target_": "os.makedirs", "name": "allmem", "ks": [1, 3, 5, 10], "table_k": 5}
    _copy(bm25_run, tmp_path / "runs", lambda c: c.update(protocol=node))
    res = _report(str(tmp_path / "runs"))
    assert res.rc == 0, res.err
    assert "| bm25,embedder=hash | 60.85 |" in res.out


def test_a_stored_interpolation_is_never_resolved(
    bm25_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from allmem.report.frame import question_table
    from allmem.report.provenance import backend_text
    from allmem.report.runs import load_run

    monkeypatch.setenv("H1_SECRET_KEY", SECRET)
    run_dir = _copy(bm25_run, tmp_path / "runs", lambda c: c["llm"].update(model="${oc.env:H1_SECRET_KEY}"))
    metrics = json.loads((run_dir / files.METRICS).read_text())
    metrics["backend"] = {
        "llm": "openai",
        "llm_model": None,
        "offline": False,
    }  # a real-LLM run: the footer names the model
    (run_dir / files.METRICS).write_text(json.dumps(metrics))
    run = load_run(run_dir)
    text = backend_text([run]) + question_table([run]).to_csv()
    assert SECRET not in text
    assert "openai:${oc.env:H1_SECRET_KEY}" in text
    assert identity.config_hash(files.read_config_data(run_dir)) == identity.config_hash(run.cfg)


# --- item 9: credentials in a URL ---------------------------------------------------------------------------


def _files_holding(root: Path, needle: str) -> list[Path]:
    return [
        p for p in root.rglob("*") if needle in str(p) or (p.is_file() and needle.encode() in p.read_bytes())
    ]


@pytest.mark.parametrize("how", ["argv", "interpolated"])
def test_credentials_in_base_url_are_refused_before_anything_is_written(tmp_path: Path, how: str) -> None:
    password = "pw-H1-7f3a"
    url = f"http://user:{password}@127.0.0.1:9/v1"
    value = url if how == "argv" else "${oc.env:H1_URL}"
    res = allmem_run(
        tmp_path, "method=bm25", f"dataset.path={TINY}", "llm=openai", f"llm.base_url={value}",
        "llm.api_key_env=H1_KEY", environ=env(H1_KEY="sk-x", H1_URL=url),
    )  # fmt: skip
    assert res.rc == 1
    assert res.err_lines == ["allmem run: error: llm.base_url: holds credentials (user:password@host); put the key "
                             "in the variable llm.api_key_env names"]  # fmt: skip
    assert password not in res.out
    assert _files_holding(tmp_path, password) == []
    assert not (tmp_path / "runs").exists()


# --- item 3: a named run holding another config or data ------------------------------------------------------


def test_a_named_run_is_never_reused_for_another_config_or_data(tmp_path: Path) -> None:
    first = allmem_run(tmp_path, "method=bm25", f"dataset.path={TINY}", "run.name=o")
    assert first.rc == 0, first.err
    again = allmem_run(tmp_path, "method=bm25", f"dataset.path={TINY}", "run.name=o")
    assert again.rc == 0 and f"[allmem] skip (complete): {tmp_path / 'runs' / 'o'}" in again.out
    other = allmem_run(tmp_path, "method=naive_rag", f"dataset.path={TINY}", "run.name=o")
    assert other.rc == 1 and "skip" not in other.out
    assert len(other.err_lines) == 1 and "holds a complete run of another config or data" in other.last_line()
    data = json.loads(TINY.read_text())
    data[0]["qa"][0]["answer"] = "another answer"
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(data))
    moved = allmem_run(tmp_path, "method=bm25", f"dataset.path={changed}", "run.name=o")
    assert moved.rc == 1 and "holds a complete run of another config or data" in moved.last_line()


# --- item 10: run.name stays under run.root ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["..", ".", "../escaped", "/ABS", "a/../../b"])
def test_run_name_cannot_leave_run_root(tmp_path: Path, name: str) -> None:
    name = name.replace("/ABS", str(tmp_path / "abs"))
    res = allmem_run(tmp_path, "method=bm25", f"dataset.path={TINY}", f"run.name={name}")
    assert res.rc == 1 and res.err_lines == [
        f"allmem run: error: run.name: {name!r} must be a relative folder name under run.root (no '..', '.', "
        "empty part or leading '/')"
    ]
    assert (
        not (tmp_path / "abs").exists()
        and not (tmp_path / "escaped").exists()
        and not (tmp_path / "b").exists()
    )
    assert not (tmp_path / "runs").exists() and not (tmp_path / "config.yaml").exists()


# --- item 4: the code a result came from ---------------------------------------------------------------------


def test_every_run_records_its_source_fingerprint_and_declared_packages(bm25_run: Path) -> None:
    from allmem.fingerprint import source_fingerprint

    manifest = json.loads((bm25_run / files.MANIFEST).read_text())
    assert (
        manifest["code"] == source_fingerprint() and manifest["attempts"][0]["code"] == source_fingerprint()
    )
    for name in ("bm25s", "PyStemmer", "igraph", "threadpoolctl", "torch", "allmem", "numpy"):
        assert manifest["packages"][name], name  # installed, so a version string


def _set_code(run: Path, code: str | None) -> None:
    manifest = json.loads((run / files.MANIFEST).read_text())
    for entry in [manifest, *manifest["attempts"]]:
        entry.pop("code")
        if code is not None:
            entry["code"] = code
    (run / files.MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize("code", ["0123456789abcdef", None])
def test_a_table_from_runs_of_different_code_is_refused(
    bm25_run: Path, tmp_path: Path, code: str | None
) -> None:
    root = tmp_path / "runs"
    shutil.copytree(bm25_run, root / "a")
    _set_code(shutil.copytree(bm25_run, root / "b"), code)
    res = _report(str(root))
    lines = [x for x in res.err.splitlines() if x.strip() and "absl" not in x]
    assert res.rc == 1 and len(lines) == 1, res.err
    assert lines[0].startswith("allmem report: error: 1 of 2 runs were made by other code than the rest")
    assert lines[0].endswith("delete them and run them again with this code") and f"{root / 'b'}" in lines[0]
    assert _report(str(root), "--allow-mixed-code").rc == 2  # no way around it: the option is gone


def _targets(*args: str) -> Result:
    return cli("paper", "run", "table1", "--dry-run", *args, cwd=Path.cwd(), timeout=300)


def test_make_targets_never_silently_reuse_runs_of_other_code(tmp_path: Path) -> None:
    from report_fixture import write_experiment

    root = tmp_path / "paper"
    made = write_experiment(root, "table1", lambda label, i: True)
    same = _targets("--runs", str(root))  # the second invocation with the same code reuses every run
    assert same.rc == 0 and "table1 on locomo: " in same.out and "nothing to run" in same.out
    manifest = json.loads((made[0] / files.MANIFEST).read_text())
    (made[0] / files.MANIFEST).write_text(json.dumps(manifest | {"code": "0123456789abcdef"}))
    res = _targets("--runs", str(root))
    lines = [x for x in res.err.splitlines() if x.strip()]
    assert res.rc == 1 and len(lines) == 1, res.err
    assert "1 of " in lines[0] and "made by other code than this code" in lines[0]
    assert lines[0].endswith("delete them and run them again with this code")


# --- item 10: the smaller report cases -------------------------------------------------------------------------


def test_a_paper_target_without_runs_fails_in_one_line(tmp_path: Path) -> None:
    res = _report("table2", "--runs", str(tmp_path / "none"), "--out", str(tmp_path / "out"))
    lines = [x for x in res.err.splitlines() if x.strip()]
    assert res.rc == 1 and len(lines) == 1, res.err
    assert (
        lines[0]
        == f"allmem report: error: no complete run under {tmp_path / 'none'} for table2; run them first (make table2)"
    )
    assert not (tmp_path / "out" / "tables" / "table2.md").exists()


def test_the_overview_names_incomplete_runs(bm25_run: Path, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    shutil.copytree(bm25_run, root / "done")
    (shutil.copytree(bm25_run, root / "half") / files.DONE).unlink()
    res = _report(str(root), "--out", str(tmp_path / "o.md"))
    assert res.rc == 0, res.err
    assert f"- incomplete: {root / 'half'}" in res.out
    assert (tmp_path / "o.md").read_text() == res.out.removesuffix("\n")


def test_the_provenance_names_the_embedder_the_run_used(bm25_run: Path) -> None:
    from allmem.report.provenance import backend_text
    from allmem.report.runs import load_run

    run = load_run(bm25_run)
    assert run.backend["embedder"] == "hash"  # embedder=hash (tests/faultkit.py)
    assert backend_text([run]) == (
        "offline backend (extractive reader, hash embeddings, rule-based LLM roles; no LLM judge)"
    )


def test_a_failed_report_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "fig.png"
    target.write_bytes(b"old")

    def torn(tmp: Path) -> None:
        tmp.write_bytes(b"ha")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        files.write_via(target, torn)
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["fig.png"]


def test_allmem_run_refuses_a_run_of_other_code(tmp_path: Path) -> None:
    from allmem.fingerprint import source_fingerprint

    args = ("method=bm25", f"dataset.path={TINY}", "run.name=o")
    assert allmem_run(tmp_path, *args).rc == 0
    run = tmp_path / "runs" / "o"
    _set_code(run, "0123456789abcdef")
    again = allmem_run(tmp_path, *args)
    assert again.rc == 1 and "[allmem] skip" not in again.out
    assert again.err_lines == [
        f"allmem run: error: {run}: made by other code (source fingerprint 0123456789abcdef, this code "
        f"{source_fingerprint()}); delete it and run again"
    ]
    (run / files.DONE).unlink()  # nor is a partial run of other code continued
    resumed = allmem_run(tmp_path, *args)
    assert resumed.rc == 1 and resumed.last_line() == again.err_lines[0]
    shutil.rmtree(run)
    assert allmem_run(tmp_path, *args).rc == 0
