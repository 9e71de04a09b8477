"""Settings built from ``configs/``, the one home of every default (docs/DESIGN.md, "Configuration"): ``from_node``
builds a settings dataclass from its node; without Hydra, ``paper(RetrievalConfig, K=4)`` takes the paper's values
(``method_node("allmem")``) and changes what it needs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from functools import cache
from typing import Any, TypeVar

from omegaconf import OmegaConf

from allmem.errors import ConfigError
from allmem.files import plain  # the one config-to-dict conversion; re-exported for callers here
from allmem.paths import config_dir, user_config_dirs

PRIMARY = "config"  # Hydra's primary config, configs/config.yaml (allmem run composes from it)
CONFIG_DIR = config_dir()  # the checkout's configs/, or the copy a non-editable install ships
T = TypeVar("T")


def _value(value: Any) -> Any:
    """YAML lists become tuples and mappings become ``(key, value)`` pairs: the dataclasses are frozen and hashable."""
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, Mapping):
        return tuple(value.items())
    return value


def from_node(cls: type[T], node: Any, where: str) -> T:
    """``cls`` from a config node holding exactly its fields; otherwise one ``ConfigError`` naming the keys."""
    data = plain(node)
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(f"{where}.{k}" for k in data if k not in names)
    missing = [f"{where}.{n}" for n in names if n not in data]
    if unknown or missing:
        parts = [f"unknown key(s) {', '.join(unknown)}" if unknown else "",
                 f"missing key(s) {', '.join(missing)}" if missing else ""]  # fmt: skip
        raise ConfigError(f"{'; '.join(p for p in parts if p)} (its keys: {', '.join(names)})")
    return cls(**{n: _value(data[n]) for n in names})


@cache
def _load(name: str) -> dict[str, Any]:
    path = CONFIG_DIR / "method" / f"{name}.yaml"
    mine = [d / "method" / f"{name}.yaml" for d in user_config_dirs()]  # ALLMEM_CONFIG_PATH (docs/LIBRARY.md)
    path = next((p for p in [path, *mine] if p.is_file()), path)
    if not path.is_file():
        raise ConfigError(
            f"no method config {path}" + (f" (nor in {', '.join(map(str, mine))})" if mine else "")
        )
    raw = OmegaConf.load(path)
    merged = OmegaConf.create()
    for entry in raw.get("defaults", ["_self_"]):  # a method file includes its base (allmem_ref)
        merged = OmegaConf.merge(merged, raw if entry == "_self_" else OmegaConf.create(_load(str(entry))))
    merged.pop("defaults", None)
    out = OmegaConf.to_container(merged, resolve=False)
    assert isinstance(out, dict)
    return out


def group_node(group: str, option: str) -> dict[str, Any]:
    """``configs/<group>/<option>.yaml`` (a file without a defaults list) as keyword arguments: no ``_target_``."""
    node = plain(OmegaConf.load(CONFIG_DIR / group / f"{option}.yaml"))
    node.pop("_target_", None)
    return node


def method_node(name: str = "allmem") -> dict[str, Any]:
    """The resolved ``method`` node of ``configs/method/<name>.yaml`` (its ``atc`` inlined), without Hydra."""
    node = plain(OmegaConf.create(_load(name)))
    return node.get("method", node)  # All-Mem files are global (method: + atc:); others not


def paper(cls: type[T], name: str = "allmem", **changes: Any) -> T:
    """A settings dataclass with the values of ``configs/method/<name>.yaml`` and ``changes`` on top."""
    where = cls.WHERE  # "method.retrieval", "atc", ...
    node: Any = method_node(name)
    for part in where.split(".")[1:] if where.startswith("method.") else [where]:
        node = node[part]
    return from_node(cls, {**node, **changes}, where)


@cache
def cutoffs() -> tuple[tuple[int, ...], int]:
    """``protocol.ks`` and ``protocol.table_k`` of ``configs/config.yaml``: every protocol's R@k / N@k cut-offs,
    for scoring outside a run (``allmem score --protocol mem0``) and for library code."""
    node = OmegaConf.load(CONFIG_DIR / f"{PRIMARY}.yaml").protocol
    return tuple(int(k) for k in node.ks), int(node.table_k)


def llm_config(overrides: Sequence[str]) -> dict[str, Any]:
    """The ``llm`` node composed from ``configs/`` with the overrides (each must start with ``llm``): what
    ``allmem judge`` and ``allmem llm`` take instead of a whole run's config."""
    from hydra import compose, initialize_config_dir

    bad = [o for o in overrides if not o.lstrip("+").startswith("llm")]
    if bad:
        raise ConfigError(f"allmem judge takes llm overrides only (llm=..., llm.judge.model=...), got {bad}")
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(config_name=PRIMARY, overrides=list(overrides))
    return plain(cfg.llm)
