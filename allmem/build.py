"""Config to object, in one place: the nodes of a composed config (``method``, ``embedder``, ``llm``,
``generator``) become the objects the runner, the scripts and the library use.

``build`` instantiates any node, passing only the shared services its constructor accepts; ``build_embedder`` and
``build_run_llm`` build a run's embedder and LLM client with their caches under ``paths.cache_dir``; ``checked``
turns a bad argument or value into a config error naming the group. The pipeline's ``Services``
(``allmem.run.pipeline``) puts them together for a run; the library (``allmem.library``) reads a config file by
name instead of composing, then calls ``build``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.utils import get_object
from omegaconf import DictConfig

from allmem import files
from allmem.errors import ConfigError


def build(node: DictConfig, **available: Any) -> Any:
    """Instantiate ``node._target_`` passing only the shared services its constructor accepts.

    Every buildable object declares what it needs by its signature (``embedder``, ``llm``, ``resources``), so
    configs stay plain data and no second registry is needed.
    """
    params = files.plain(node)
    target = params.pop("_target_")
    params.pop("name", None)
    factory = get_object(target) if "." in target else None
    if factory is None:
        raise ValueError(f"config node has no importable _target_: {target!r}")
    accepted = inspect.signature(factory).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    unknown = sorted(k for k in params if not takes_any and k not in accepted)
    if unknown:
        known = ", ".join(k for k in accepted if k not in available and k != "self")
        raise ConfigError(f"{target}: unknown argument(s) {', '.join(unknown)}; it takes: {known}")
    for key, value in available.items():
        if (takes_any or key in accepted) and params.get(key) is None:
            params[key] = value
    return factory(**params)


def checked(group: str, make: Callable[[], Any]) -> Any:
    """Build one component; a bad argument or value is a config error naming the group, not a traceback."""
    try:
        return make()
    except ConfigError as exc:
        raise ConfigError(f"{group}: {exc}") from exc
    except (TypeError, ValueError) as exc:
        from benchmarks.errors import DatasetError

        if isinstance(exc, DatasetError):
            raise
        raise ConfigError(f"{group}: {exc}") from exc


def build_embedder(cfg: DictConfig, cache_dir: str | Path | None = None) -> Any:
    """The config's embedder, its vector cache in ``cache_dir``, else ``embedder.cache_dir``, else
    ``<paths.cache_dir>/embeddings``."""
    embedder_cache = cache_dir or cfg.embedder.get("cache_dir") or Path(cfg.paths.cache_dir) / "embeddings"
    return checked("embedder", lambda: build(cfg.embedder, cache_dir=embedder_cache))


def build_run_llm(cfg: DictConfig, run_dir: Path) -> Any:
    """The config's LLM client, its ledger in ``run_dir``, its response cache under ``<paths.cache_dir>/llm``."""
    from allmem.llm import build_llm

    return checked(
        "llm", lambda: build_llm(cfg.llm, run_dir=run_dir, cache_dir=Path(cfg.paths.cache_dir) / "llm")
    )
