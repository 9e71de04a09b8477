"""The LLM layer: one chat interface, backends (offline, openai, replay), SQLite cache, cost ledger, prompts.

Build a client from the ``llm`` config group with ``build_llm(cfg.llm, run_dir=..., cache_dir=...)`` and call
roles (``allmem.llm.roles``) with it. See ``allmem/llm/README.md`` for the config fields and how to add roles.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from allmem import paths
from allmem.errors import LLMError
from allmem.files import CALLS, PACING, plain
from allmem.llm.base import PHASES, ChatRequest, ChatResult, ParseFailure, ReplayMiss, TransportError
from allmem.llm.cache import ResponseCache
from allmem.llm.client import LLM, CircuitOpen
from allmem.llm.ledger import Ledger
from allmem.llm.offline import OFFLINE_REPLIES
from allmem.llm.prompts import build_request

__all__ = [
    "LLM",
    "PHASES",
    "ChatRequest",
    "ChatResult",
    "CircuitOpen",
    "LLMError",
    "Ledger",
    "ParseFailure",
    "ReplayMiss",
    "ResponseCache",
    "TransportError",
    "build_llm",
    "build_request",
    "validate_llm_config",
]

# The client's own keys; every other key of the ``llm`` node is an argument of the backend class its ``_target_``
# names (``configs/llm/*.yaml``), so a backend added later declares its settings by its constructor alone.
CLIENT_KEYS = frozenset({"_target_", "backend", "temperature", "max_concurrency", "breaker_after", "cache", "judge",
                         "dry_run", "prices", "max_tokens", "context_window", "repair_retries", "server"})  # fmt: skip
# Backend arguments build_llm supplies, never the config: ``pacing_file``, the run directory's shared rpm / tpm
# windows (``allmem.llm.limiter``), so the limits hold for the whole run across its processes; ``replies_file``,
# the offline roles' reply store beside the response cache (``allmem.llm.offline``).
SERVICES = frozenset({"pacing_file", "replies_file"})
# Positive numbers (None allowed where the value means "unlimited"); checked before a run directory exists.
_POSITIVE = {"timeout_s": False, "connect_timeout_s": False, "try_timeout_s": False, "call_timeout_s": False,
             "max_concurrency": False, "rpm": True, "tpm": True}  # fmt: skip
_NON_NEGATIVE = ("max_retries", "breaker_after", "backoff_base_s", "backoff_max_s")


def validate_llm_config(cfg_llm: Any) -> None:
    """Raise ``LLMError`` naming the field for a pacing, timeout or retry setting that is not a number in range
    (``llm.rpm=-5``, ``llm.timeout_s=0``), so it stops the run before its directory is made, not at the first call.
    """
    cfg = plain(cfg_llm)
    for key, nullable in _POSITIVE.items():
        value = cfg.get(key)
        if value is None and (nullable or key not in cfg):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            unlimited = " (or null for unlimited)" if nullable else ""
            raise LLMError(f"llm.{key}: must be a number > 0{unlimited}, got {value!r}")
    for key in _NON_NEGATIVE:
        value = cfg.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise LLMError(f"llm.{key}: must be a number >= 0, got {value!r}")


def build_llm(
    cfg_llm: Any,
    run_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    attempt: int | None = None,
) -> LLM:
    """The ``LLM`` described by the ``llm`` config group.

    ``run_dir``: the ledger goes to ``<run_dir>/calls.jsonl`` (none when None; nothing is written before the
    first call), and ``llm.rpm`` / ``llm.tpm`` are shared by every process given the same ``run_dir``.
    ``cache_dir``: folder for the response cache when ``cache.path`` is empty or relative, and for the offline
    roles' reply store (``llm_cache_dir``; default ``<project cache>/llm``).
    Errors name the config field (``llm.<field>``).
    """
    cfg = plain(cfg_llm)
    validate_llm_config(cfg)
    factory = _backend_class(cfg)
    params = {n: p for n, p in inspect.signature(factory).parameters.items() if n != "self"}
    unknown = sorted(k for k in cfg if k not in CLIENT_KEYS and (k not in params or k in SERVICES))
    if unknown:
        raise LLMError(
            f"llm config: unknown field(s) {', '.join('llm.' + k for k in unknown)}; "
            f"{cfg['_target_']} takes: {', '.join(params)}"
        )
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in cfg]
    if missing:
        raise LLMError(f"llm.{missing[0]}: required for backend {cfg.get('backend') or cfg['_target_']}")
    services = {
        "pacing_file": Path(run_dir) / PACING if run_dir is not None else None,
        "replies_file": llm_cache_dir(cache_dir) / OFFLINE_REPLIES,
    }
    backend = factory(
        **{k: v for k, v in cfg.items() if k in params}, **{k: v for k, v in services.items() if k in params}
    )
    judge = dict(cfg.get("judge") or {})
    enabled = bool((cfg.get("cache") or {}).get("enabled", True))
    cache = ResponseCache(cache_path(cfg, cache_dir), enabled=enabled)
    ledger = Ledger(Path(run_dir) / CALLS if run_dir is not None else None, attempt=attempt)
    return LLM(
        backend,
        cache=cache,
        ledger=ledger,
        temperature=float(cfg.get("temperature", 0.0)),
        judge_model=judge.get("model") or None,
        judge_temperature=float(judge.get("temperature", 0.0)),
        judge_enabled=bool(judge.get("enabled", True)),
        judge_votes=int(judge.get("n_votes", 1)),
        max_concurrency=int(cfg.get("max_concurrency", 4)),
        dry_run=bool(cfg.get("dry_run", False)),
        info={k: cfg[k] for k in ("base_url", "api_key_env") if cfg.get(k)},
        breaker_after=int(cfg.get("breaker_after", 3)),
        max_tokens=cfg.get("max_tokens"),
        context_window=cfg.get("context_window"),
        repair_retries=int(cfg.get("repair_retries", 0)),
    )


def _backend_class(cfg: Mapping[str, Any]) -> Any:
    """The class ``llm._target_`` names (the live config only: a stored run config is never built)."""
    target = str(cfg.get("_target_") or "")
    module, _, name = target.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        raise LLMError(
            f"llm._target_: {target!r} is not an importable backend class (configs/llm/*.yaml)"
        ) from None


def cache_path(cfg_llm: Any, cache_dir: str | Path | None = None) -> Path:
    """Where the response cache of this ``llm`` config lives (what ``build_llm`` opens): ``cache.path`` if
    absolute, else relative to ``cache_dir`` (default ``<project cache>/llm``)."""
    path = dict(plain(cfg_llm).get("cache") or {}).get("path")
    p = Path(str(path)) if path else Path("responses.sqlite")
    return p if p.is_absolute() else llm_cache_dir(cache_dir) / p


def llm_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """``cache_dir``, or ``<project cache>/llm``: the folder of the response cache and the offline reply store."""
    return Path(paths.cache_dir() / "llm" if cache_dir is None else cache_dir)
