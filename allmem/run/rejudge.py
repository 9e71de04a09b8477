"""``allmem judge RUN_DIR [llm overrides] [--graded | --sanity]``: judge a finished run's saved answers again, with
another judge, more votes or the graded template, without answering again; ``--sanity``: how often the judge
accepts known-wrong and known-right answers to the run's questions (``allmem.metrics.judge_sanity``).

The run is read as data (``files.read_config_data``, the predictions through the scorer's validating reader) and
its lock is held while judging, so no ``allmem run`` resumes it meanwhile. Nothing of the run's own files
changes: the verdicts, the judge's ledger and its metrics go to ``<run>/judges/<key>/``, where the key names the
judge's identity (model, template and version, votes, graded or not) and ends in a hash of it:

- ``judge.json``: that identity, written first;
- ``verdicts.jsonl``: one line per judged question (``question_id``, ``dialogue_id``, ``judge``), appended as
  they come; a second call with the same judge resumes after the last complete line;
- ``calls.jsonl``: the judge's LLM ledger (``allmem.llm``);
- ``metrics.json``: the run's summary (``allmem.metrics.score_records``) with these verdicts in the 4o-J column;
  with ``--graded``, also ``graded``: strict accuracy (correct) and lenient accuracy (correct or partial) over
  the decided verdicts, with the counts of each grade, overall and per group;
- ``DONE``, written last.

A failed judge call leaves its question without a line and the command exits 1 (run it again to retry); an
invalid reply is a verdict (left out of the denominators, counted). ``llm=replay`` replays a judge from the
response cache. The tables pick a judge with ``allmem.report.items.item_frame(run, judge=KEY)``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from allmem import files
from allmem.defaults import llm_config
from allmem.types import record_key

JUDGES, JUDGE_INFO, VERDICTS = files.JUDGES, files.JUDGE_INFO, files.VERDICTS  # run-file names: files.py
GRADED_TEMPLATE = "judge_graded"
GRADES = ("correct", "partial", "wrong", "abstain")
_GRADE_RE = re.compile(r"\[\[(correct|partial|wrong|abstain)\]\]")


def parse_grade(reply: Any) -> str:
    """correct | partial | wrong | abstain for one ``ChatResult``; invalid with none or several different tags."""
    if reply.error is not None:
        return "invalid"
    found = set(_GRADE_RE.findall((reply.text or "").lower()))
    return found.pop() if len(found) == 1 else "invalid"


def grade_record(llm: Any, record: Mapping[str, Any], n_votes: int) -> dict[str, Any]:
    """The graded ``judge`` dict of one record: ``grade``, ``verdict`` (yes for correct, no for the others, so the
    4o-J column reads it strictly), the template and model, every vote and their agreement."""
    from allmem.llm.prompts import build_request
    from allmem.metrics.judge import majority

    variables = {k: str(record.get(f, "")) for k, f in (("question", "question"), ("gold", "gold"),
                                                        ("response", "prediction"))}  # fmt: skip
    results = [llm.chat(build_request(GRADED_TEMPLATE, variables, sample=i)) for i in range(n_votes)]
    grades = [parse_grade(r) for r in results]
    grade = majority(grades) or "invalid"  # the judges' one vote rule; a tie or no decided vote: invalid
    out: dict[str, Any] = {
        "grade": grade,
        "verdict": "invalid" if grade == "invalid" else "yes" if grade == "correct" else "no",
        "template": GRADED_TEMPLATE,
        "model": results[0].model,
        "reply": results[0].text[:500],
        "prompt_hash": results[0].prompt_hash,
        "cached": all(r.cached for r in results),
    }
    if n_votes > 1:
        out["votes"] = grades
        out["agreement"] = sum(g == grade for g in grades) / n_votes
    errors = [r.error for r in results if r.error]
    if errors:
        out["error"] = errors[0]
    return out


def graded_block(grades: Sequence[str | None]) -> dict[str, Any]:
    """Strict (correct) and lenient (correct or partial) accuracy ×100 over the decided grades, and the counts."""
    counts = {g: sum(1 for x in grades if x == g) for g in (*GRADES, "invalid")}
    counts["missing"] = sum(1 for x in grades if x is None)
    decided = sum(counts[g] for g in GRADES)
    return {
        "strict": 100.0 * counts["correct"] / decided if decided else None,
        "lenient": 100.0 * (counts["correct"] + counts["partial"]) / decided if decided else None,
        "abstain_rate": 100.0 * counts["abstain"] / decided if decided else None,
        "counts": counts,
    }


def identity_of(
    llm_cfg: Mapping[str, Any], protocol: Any, graded: bool, records: Mapping[Any, Any]
) -> dict[str, Any]:
    """What makes two judges the same: backend, model, template(s) and versions, votes, graded."""
    from allmem.llm.prompts import load_template

    if graded:
        names = [GRADED_TEMPLATE]
    else:
        names = sorted({protocol.judge_template(r) for r in records.values() if protocol.judges(r)})
    judge = dict(llm_cfg.get("judge") or {})
    return {
        # a replay of a recorded judge is that judge: it lands in the same folder
        "backend": str(llm_cfg.get("replay_of") or llm_cfg.get("backend") or llm_cfg.get("_target_")),
        "model": str(judge.get("model") or llm_cfg.get("model") or "default"),
        "temperature": float(judge.get("temperature", 0.0)),
        "templates": {n: load_template(n).version for n in names},
        "votes": int(judge.get("n_votes", 1)),
        "graded": graded,
        "protocol": protocol.name,
    }


def key_of(ident: Mapping[str, Any]) -> str:
    """``<model>-<votes>v[-graded]-<hash>``: readable, and distinct for distinct identities."""
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:8]
    model = re.sub(r"[^A-Za-z0-9._-]+", "_", str(ident["model"]))[:60]
    return f"{model}-{ident['votes']}v{'-graded' if ident['graded'] else ''}-{digest}"


def judge_run(run_dir: Path, overrides: Sequence[str] = (), graded: bool = False) -> Path:
    """Judge ``run_dir``'s answers with the judge the ``llm`` overrides describe; returns the judge's folder."""
    from allmem.errors import ConfigError, RunFailed
    from allmem.llm import build_llm
    from allmem.metrics import load_predictions
    from allmem.metrics.judge import judge_records
    from allmem.metrics.protocols import as_protocol
    from allmem.run.attempts import RunLock

    run_dir = Path(run_dir)
    if not files.is_complete(run_dir):
        raise ConfigError(f"{run_dir}: not a complete run (no {files.DONE}); finish it with allmem run first")
    stored = files.read_config_data(run_dir)
    protocol = as_protocol(stored.get("protocol") or {"name": "allmem"})  # by name, never by _target_
    llm_cfg = llm_config(overrides)
    records = load_predictions(run_dir / files.PREDICTIONS)
    keyed = {record_key(r): r for r in records}  # a record per ask point
    with RunLock(run_dir):
        probe = build_llm(llm_cfg)
        if not probe.can_judge:
            raise ConfigError(
                f"llm backend {llm_cfg.get('backend')!r} cannot judge; use llm=openai or llm=replay"
            )
        ident = identity_of(llm_cfg, protocol, graded, keyed)
        folder = run_dir / JUDGES / key_of(ident)
        folder.mkdir(parents=True, exist_ok=True)
        info = folder / JUDGE_INFO
        if info.exists() and json.loads(info.read_text(encoding="utf-8")) != ident:
            raise ConfigError(f"{info}: holds another judge's identity; remove the folder to start again")
        files.write_json(info, ident)
        if (folder / VERDICTS).exists():
            files.repair_jsonl(folder / VERDICTS)  # a torn last line from an interrupted call
        done = set(verdicts_of(folder))
        todo = [r for k, r in keyed.items() if k not in done and protocol.judges(r)]
        llm = build_llm(llm_cfg, run_dir=folder)
        n_votes = int(ident["votes"])
        failed = 0
        for start in range(0, len(todo), 64):
            part = todo[start : start + 64]
            if graded:
                verdicts = [grade_record(llm, r, n_votes) for r in part]
            else:
                verdicts = judge_records(llm, part, protocol, n_votes)
            for rec, verdict in zip(part, verdicts, strict=True):
                if verdict is None or verdict.get("error"):
                    failed += 1
                    continue
                line = {
                    "dialogue_id": rec["dialogue_id"],
                    "question_id": rec["question_id"],
                    "ask": rec["ask"],
                    "judge": verdict,
                }
                files.append_jsonl(folder / VERDICTS, line)
            print(f"[allmem judge] {min(start + 64, len(todo))}/{len(todo)} judged", file=sys.stderr)
        if failed:
            raise RunFailed(
                f"{failed} judge call(s) failed in {folder}; run the same command again to retry them"
            )
        metrics = judged_metrics(run_dir, folder, protocol, stored)
        files.write_json(folder / files.METRICS, metrics)
        files.write_atomic(folder / files.DONE, "complete\n")
    return folder


def sanity_run(run_dir: Path, overrides: Sequence[str] = ()) -> Path:
    """``allmem judge --sanity``: the judge's acceptance of known-wrong and known-right answers to ``run_dir``'s
    questions, into ``<run>/judges/<key>-sanity/sanity.json`` (with the judge's identity and its ledger)."""
    from allmem.errors import ConfigError, RunFailed
    from allmem.llm import build_llm
    from allmem.metrics import load_predictions
    from allmem.metrics.judge_sanity import SANITY, sanity
    from allmem.metrics.protocols import as_protocol
    from allmem.run.attempts import RunLock

    run_dir = Path(run_dir)
    if not files.is_complete(run_dir):
        raise ConfigError(f"{run_dir}: not a complete run (no {files.DONE}); finish it with allmem run first")
    stored = files.read_config_data(run_dir)
    protocol = as_protocol(stored.get("protocol") or {"name": "allmem"})
    llm_cfg = llm_config(overrides)
    records = load_predictions(run_dir / files.PREDICTIONS)
    with RunLock(run_dir):
        ident = identity_of(llm_cfg, protocol, False, {i: r for i, r in enumerate(records)})
        folder = run_dir / JUDGES / f"{key_of(ident)}-sanity"
        folder.mkdir(parents=True, exist_ok=True)
        files.write_json(folder / JUDGE_INFO, ident)
        llm = build_llm(llm_cfg, run_dir=folder)
        if not llm.can_judge:
            raise ConfigError(
                f"llm backend {llm_cfg.get('backend')!r} cannot judge; use llm=local or llm=openai"
            )
        out = sanity(llm, records, protocol)
        if out["failed"]:
            raise RunFailed(f"{out['failed']} judge call(s) failed in {folder}; run the same command again")
        files.write_json(folder / SANITY, out | {"judge_identity": ident})
    return folder


def verdicts_of(folder: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(dialogue_id, question_id, ask point) → the judge dict of one judge folder (a line without ``ask``: end)."""
    path = folder / VERDICTS
    if not path.exists():
        return {}
    return {record_key(v): v["judge"] for _, v in files.iter_jsonl(path)}


def judged_metrics(run_dir: Path, folder: Path, protocol: Any, stored: Mapping[str, Any]) -> dict[str, Any]:
    """The run's summary with this judge's verdicts, plus ``graded`` when the judge graded."""
    from allmem.metrics import score_records

    verdicts = verdicts_of(folder)
    raw = files.read_jsonl(run_dir / files.PREDICTIONS)
    rejudged = []
    for rec in raw:
        rec = {k: v for k, v in rec.items() if k != "judge"}
        judge = verdicts.get(record_key(rec))
        if judge is not None:
            rec["judge"] = {k: v for k, v in judge.items() if k != "grade"}
        rejudged.append(rec)
    dataset = (stored.get("dataset") or {}).get("name")
    out = score_records(rejudged, protocol, dataset=dataset)
    grades = [v.get("grade") for v in verdicts.values()]
    if any(g is not None for g in grades):
        keys = [record_key(r) for r in raw]
        groups: dict[str, list[str | None]] = {}
        for rec, key in zip(raw, keys, strict=True):
            group = str(rec["category"]) if rec.get("category") is not None else str(rec.get("question_type"))
            groups.setdefault(group, []).append((verdicts.get(key) or {}).get("grade"))
        out["graded"] = {
            "overall": graded_block([(verdicts.get(k) or {}).get("grade") for k in keys]),
            "groups": {g: graded_block(v) for g, v in sorted(groups.items())},
        }
    out["judge_identity"] = json.loads((folder / JUDGE_INFO).read_text(encoding="utf-8"))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="allmem judge",
        description="Judge a finished run's saved answers again (another judge, more votes, or graded), into "
        "<run>/judges/<key>/, never changing the run's own files.",
    )
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("overrides", nargs="*", help="llm overrides: llm=openai llm.judge.model=gpt-4o ...")
    parser.add_argument("--graded", action="store_true", help="correct / partial / wrong / abstain verdicts")
    parser.add_argument("--sanity", action="store_true",
                        help="judge known-wrong and known-right answers to the run's questions instead "
                        "(allmem.metrics.judge_sanity): how often the judge accepts each")  # fmt: skip
    args = parser.parse_args(argv)
    from allmem.errors import expected_errors, one_line

    try:
        if args.sanity:
            folder = sanity_run(args.run_dir, args.overrides)
        else:
            folder = judge_run(args.run_dir, args.overrides, args.graded)
    except expected_errors() as exc:
        print(f"allmem judge: error: {one_line(exc)}", file=sys.stderr)
        return 1
    print(f"[allmem judge] done: {folder}")
    return 0
