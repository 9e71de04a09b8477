"""Checks made before a run directory exists, so a run that cannot work leaves nothing behind (docs/DESIGN.md,
"Failure rules of a run"): ``check_config`` reads only the config and the environment, ``check_data`` the loaded
dialogues (counted degenerate input goes into ``metrics.json`` too)."""

from __future__ import annotations

import logging
import os
import re
import socket
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from omegaconf import DictConfig

from allmem.errors import ConfigError, LLMError
from allmem.files import plain
from allmem.llm import cache_path, validate_llm_config
from allmem.types import Dialogue
from benchmarks import check_limits

log = logging.getLogger("allmem.run")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_config(cfg: DictConfig) -> None:
    """Raise ``ConfigError`` / ``LLMError`` naming the key for anything that would fail later in the run."""
    budget = cfg.budget.get("tokens")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ConfigError(f"budget.tokens: must be a non-negative integer, got {budget!r}")
    if not isinstance(cfg.budget.get("fill", False), bool):
        raise ConfigError(f"budget.fill: must be true or false, got {cfg.budget.get('fill')!r}")
    if not isinstance(cfg.run.get("seed"), int):
        raise ConfigError(f"run.seed: must be an integer, got {cfg.run.get('seed')!r}")
    check_limits(cfg.dataset)
    llm = cfg.llm
    validate_llm_config(llm)
    backend = str(llm.get("backend", "offline"))
    if backend == "openai" and not llm.get("dry_run", False):
        _check_openai(llm)
    if backend == "local" and not llm.get("dry_run", False):
        _check_local(llm)
    if backend == "replay":
        _check_replay(cfg)


def _check_openai(llm: DictConfig) -> None:
    name = str(llm.get("api_key_env") or "")
    if not _ENV_NAME.fullmatch(name):
        # never echo it: a value that is not a variable name may be the key itself
        raise ConfigError(
            "llm.api_key_env: must be the NAME of an environment variable (letters, digits, _), "
            "not the key; the value given is not shown"
        )
    if not os.environ.get(name):
        raise LLMError(
            f"llm.api_key_env: environment variable {name} is not set (backend openai reads its key there)"
        )
    url = str(llm.get("base_url") or "")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"llm.base_url: {url!r} is not an http(s) URL (e.g. https://api.openai.com/v1)")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ConfigError(f"llm.base_url: {url!r} has an invalid port") from None
    _probe(url, parts.hostname, port, os.environ[name], float(llm.get("connect_timeout_s", 5)),
           min(float(llm.get("timeout_s", 60)), PROBE_READ_S))  # fmt: skip


def _check_local(llm: DictConfig) -> None:
    """llm=local: a server must answer at its base URL; if none does, say how to start one, in one line."""
    url = str(llm.get("base_url") or "")
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise ConfigError(f"llm.base_url: {url!r} is not an http://host:port URL of the local server")
    try:
        _probe(url, parts.hostname, parts.port, "", float(llm.get("connect_timeout_s", 5)), PROBE_READ_S)
    except LLMError:
        raise LLMError(
            f"llm=local: no LLM server answers at {url}; start one with `make llm-server` (or `allmem llm start`)"
        ) from None


PROBE_READ_S = 10.0  # a live server answers any request (even 401/404) within this, however slow its model


def _probe(url: str, host: str, port: int, key: str, connect_s: float, read_s: float) -> None:
    """Fail now, not after a dialogue's worth of retries, when nothing listens at ``url`` or when it accepts
    connections but never answers. Any HTTP answer to ``GET <url>/models`` counts as alive (no tokens spent);
    proxies are ignored as the client ignores them (``trust_env=False``)."""
    import httpx

    try:
        socket.create_connection((host, port), timeout=connect_s).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise LLMError(f"llm.base_url: cannot connect to {url} ({reason}); is the server running?") from None
    try:
        with httpx.Client(
            trust_env=False, follow_redirects=False, timeout=httpx.Timeout(read_s, connect=connect_s)
        ) as c:
            c.get(url.rstrip("/") + "/models", headers={"Authorization": f"Bearer {key}"} if key else {})
    except httpx.TimeoutException:
        raise LLMError(
            f"llm.base_url: {url} accepted a connection but sent no answer within {read_s:g} s; is it hung?"
        ) from None
    except httpx.HTTPError as exc:
        raise LLMError(f"llm.base_url: {url} did not answer over HTTP ({type(exc).__name__})") from None


def _check_replay(cfg: DictConfig) -> None:
    from allmem.llm.cache import unreadable

    path = cache_path(cfg.llm, Path(cfg.paths.cache_dir) / "llm")
    rows = 0
    if path.is_file():
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
                rows = int(conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])
        except sqlite3.Error as exc:  # a damaged cache is no empty one: name it, never "record it first"
            raise unreadable(path, exc) from None
    if rows == 0:
        state = "holds no responses" if path.exists() else "does not exist"
        raise LLMError(
            f"llm=replay: the response cache {path} {state}; record it first with llm=openai "
            "(same models, same llm.cache.path)"
        )


def check_data(dialogues: Sequence[Dialogue], cfg: DictConfig) -> dict[str, Any]:
    """Refuse input with nothing to ask; return (and log) the counts of degenerate items."""
    where = f"dataset {cfg.dataset.name}"
    if not dialogues:
        raise ConfigError(f"{where}: no dialogues to run (empty file, or dataset.limit_dialogues=0)")
    n_questions = sum(len(d.questions) for d in dialogues)
    if n_questions == 0:
        raise ConfigError(f"{where}: no questions to ask (none in the file, or none left by dataset.limit_*)")
    counts = {
        "questions": n_questions,
        "questions_without_evidence": 0,
        "questions_with_unmatched_evidence": 0,
        "empty_questions": 0,
        "dialogues_without_turns": 0,
        "empty_turns": 0,
    }
    for d in dialogues:
        turns = d.turns()
        counts["dialogues_without_turns"] += not turns
        counts["empty_turns"] += sum(1 for t in turns if not t.text.strip() and not (t.caption or "").strip())
        sources = {t.source_id or t.id for t in turns}
        sessions = {t.session_id for t in turns}  # LongMemEval's evidence names sessions
        for q in d.questions:
            counts["empty_questions"] += not q.text.strip()
            counts["questions_without_evidence"] += not q.evidence
            known = sources | sessions if q.question_type is not None else sources
            counts["questions_with_unmatched_evidence"] += any(e not in known for e in q.evidence)
    for key, n in counts.items():
        if key != "questions" and n:
            log.warning("%s: %d %s", where, n, key.replace("_", " "))
    from benchmarks import sampling

    if (drawn := sampling.record(dialogues, plain(cfg.dataset))) is not None:
        counts["sample"] = drawn  # the chosen ids (dataset.sample, dataset.sample_dialogues)
    return counts
