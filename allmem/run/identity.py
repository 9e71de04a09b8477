"""A run's identity and name: which config keys can change a result (``NOT_IDENTITY``), the hash over the rest
and the data, the directory the run lives in, and whether a complete run there can be reused. Credentials are
refused here, since the identity is what reaches the directory name and the stored files."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from allmem import files
from allmem.errors import ConfigError
from allmem.fingerprint import source_fingerprint
from allmem.paths import resolve_data_path  # importing it also registers the ${allmem.repo:...} resolver

# Keys that place files or tune how a run executes but cannot change a result (docs/DESIGN.md, "Run identity"):
# left out of the identity hash and of the directory name (a key matches itself and everything below it).
NOT_IDENTITY: tuple[str, ...] = (
    "run.root", "run.name", "run.progress", "run.workers", "run.shard", "paths", "wandb", "hydra",
    "dataset.path", "dataset.fit_dialogues", "embedder.cache_dir",
    "llm.timeout_s", "llm.connect_timeout_s", "llm.max_retries", "llm.backoff_base_s", "llm.backoff_max_s",
    "llm.max_concurrency", "llm.rpm", "llm.tpm", "llm.breaker_after", "llm.try_timeout_s", "llm.call_timeout_s",
    "llm.cache", "llm.prices", "llm.api_key_env",
    "run.bank_cache",  # where All-Mem keeps re-usable banks (a re-used bank answers the same)
    # thread pools whose results are gathered in stream / buffer order (tests/test_faults_determinism.py)
    "method.write.describe_workers", "method.atc.workers", "atc.workers",  # method.atc is ${atc}
    # method=http: how long and how often a memory service is asked, as for the LLM (its url counts)
    "method.timeout_s", "method.connect_timeout_s", "method.max_retries", "method.backoff_base_s",
    "method.backoff_max_s", "method.call_timeout_s",
)  # fmt: skip
# Override keys the path already shows (``<dataset>/<method>...``): not repeated in the name.
_IN_PATH = ("dataset", "method")
_MAX_NAME = 180  # bytes of a directory name before the hash; file systems allow 255


def _matches(key: str, prefixes: Iterable[str]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def _drop_keys(data: dict[str, Any], prefixes: Iterable[str], parent: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{parent}.{key}" if parent else str(key)
        if _matches(full, prefixes):
            continue
        out[key] = _drop_keys(value, prefixes, full) if isinstance(value, dict) else value
    return out


def identity(cfg: DictConfig | dict[str, Any]) -> dict[str, Any]:
    """The resolved config without the keys in ``NOT_IDENTITY``: what a run's results depend on, besides data.
    A plain dict (a stored config, ``files.read_config_data``) is taken as it is, never resolved. A key at a value
    that changes nothing (the default ask point, a budget that only caps, sampling switched off) is left out, so
    a config that names it and one that does not are the same run."""
    data = cfg if isinstance(cfg, dict) else files.plain(cfg)
    if isinstance(data.get("protocol"), dict) and data["protocol"].get("ask", "end") == "end":
        data = _drop_keys(data, ("protocol.ask",))  # the default ask point
    if isinstance(data.get("budget"), dict) and not data["budget"].get("fill", False):
        data = _drop_keys(data, ("budget.fill",))  # a cap only (the default)
    dataset = data.get("dataset")
    if (
        isinstance(dataset, dict)
        and dataset.get("sample") is None
        and dataset.get("sample_dialogues") is None
    ):
        return _drop_keys(data, (*NOT_IDENTITY, *_SAMPLING))  # sampling off: its keys change nothing
    return _drop_keys(data, NOT_IDENTITY)


# Sampling keys (benchmarks/sampling.py) count only when sampling is on: with ``sample`` and
# ``sample_dialogues`` both null the seed changes nothing.
_SAMPLING = ("dataset.sample", "dataset.sample_seed", "dataset.sample_dialogues")


def data_digest(cfg: DictConfig) -> str:
    """sha256 of the dataset's bytes (every file, for a folder): where the data lie does not matter, what they
    hold does. Raises ``DataNotFoundError`` (naming the places looked in) when there is nothing to read."""
    path = resolve_data_path(str(cfg.dataset.name), cfg.dataset.get("path"))
    if path.is_file():
        return files.sha256_file(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(f"{f.relative_to(path).as_posix()}\0{files.sha256_file(f)}\n".encode())
    return h.hexdigest()


def config_hash(cfg: DictConfig | dict[str, Any], data: str | None = None) -> str:
    """Short stable hash of everything that can change a run's results: the identity config and the data."""
    blob = json.dumps({"config": identity(cfg), "data": data}, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:10]


def override_dirname(overrides: Iterable[str]) -> str:
    """Hydra's ``override_dirname`` (sorted ``key=value`` joined by commas), without the keys that do not
    change a result (``NOT_IDENTITY``) or that the path already shows (dataset, method). ``+``/``++`` prefixes
    are dropped (``+experiment=x`` reads ``experiment=x``) and path separators become ``_``."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = []
    for o in OverridesParser.create().parse_overrides(list(overrides)):
        key = o.key_or_group
        if _matches(key, NOT_IDENTITY) or key in _IN_PATH or key.startswith("hydra/"):  # hydra/launcher=...
            continue
        line = o.input_line or ""
        lines.append(line.lstrip("+").replace(os.sep, "_").replace("\0", ""))
    return ",".join(sorted(lines))


def run_label(cfg: DictConfig, overrides: Iterable[str] = ()) -> str:
    """How tables name a run: ``run.name`` if given, else ``<method>[,<overrides>]`` (the directory name
    without its hash), as HELM names runs by their arguments."""
    if cfg.run.get("name"):
        return str(cfg.run.name)
    extra = override_dirname(overrides)
    label = f"{cfg.method.name},{extra}" if extra else str(cfg.method.name)
    return label.encode("utf-8")[:_MAX_NAME].decode("utf-8", "ignore")  # a whole label comes back as it was


def resolve(cfg: DictConfig, overrides: Iterable[str] = (), data: str | None = None) -> Path:
    """``<run.root>/<dataset>/<label>-<hash>``, or ``<run.root>/<run.name>`` when a name is given.

    ``overrides`` are the command line's (Hydra's task overrides); ``data`` the ``data_digest`` (computed here
    when not given).
    """
    refuse_credentials(files.plain(cfg))
    root = Path(cfg.run.root)
    if cfg.run.get("name"):
        return root / checked_name(str(cfg.run.name))
    digest = data if data is not None else data_digest(cfg)
    return root / str(cfg.dataset.name) / f"{run_label(cfg, overrides)}-{config_hash(cfg, digest)}"


def checked_name(name: str) -> str:
    """``run.name`` as a folder under ``run.root``: relative, and no part ``..``, ``.`` or empty (a name that
    escapes the root, or is the root itself, could write into or mistake another folder for a run)."""
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in name:
        raise ConfigError(
            f"run.name: {name!r} must be a relative folder name under run.root (no '..', '.', empty part or "
            "leading '/')"
        )
    return name


def credential_url(value: object) -> bool:
    """Whether ``value`` is a URL carrying a user name or password (``http://user:pw@host``)."""
    if not isinstance(value, str) or "://" not in value or "@" not in value:
        return False
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return "@" in value.split("://", 1)[1].split("/", 1)[0]
    return parts.username is not None or parts.password is not None


_CREDENTIALS = "holds credentials (user:password@host); put the key in the variable llm.api_key_env names"


def refuse_credentials(data: Any, where: str = "") -> None:
    """Refuse a config holding a URL with credentials (``llm.base_url``) before anything is written: the URL
    would reach the run directory's name, config.yaml, the manifest and metrics. The message never repeats it."""
    if isinstance(data, dict):
        for key, value in data.items():
            refuse_credentials(value, f"{where}.{key}" if where else str(key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            refuse_credentials(value, f"{where}[{i}]")
    elif credential_url(data):
        raise ConfigError(f"{where}: {_CREDENTIALS}")


def credential_override(argv: Iterable[str]) -> str | None:
    """The one-line refusal for a command-line override whose value is a URL with credentials, else None:
    checked before Hydra starts, since Hydra writes the overrides into its own folder at once."""
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and any(credential_url(v) for v in (value, *value.split(","))):
            return f"{key.lstrip('+~')}: {_CREDENTIALS}"
    return None


def recorded_hash(run_dir: Path) -> str | None:
    """The identity hash a complete run recorded (``metrics.json`` ``run.config_hash``); for one not sealed yet,
    computed from its stored config and the data digest of its first attempt."""
    recorded = (files.read_json(run_dir / files.METRICS, {}).get("run") or {}).get("config_hash")
    if recorded or not (run_dir / files.CONFIG).exists():
        return str(recorded) if recorded else None
    manifest = files.read_json(run_dir / files.MANIFEST, {})
    digest = next(
        (a.get("data_digest") for a in manifest.get("attempts") or () if a.get("data_digest")), None
    )
    return config_hash(files.read_config_data(run_dir), digest)


def reusable(run_dir: Path, cfg: DictConfig, digest: str) -> bool:
    """Whether ``run_dir`` holds a complete run of ``cfg`` on the data with ``digest``, so it need not run
    again. A complete run of another config or data there (a ``run.name`` reused) is a ``ConfigError``, never
    a silent skip."""
    if not files.is_complete(run_dir):
        return False
    want, have = config_hash(cfg, digest), recorded_hash(run_dir)
    if have != want:
        raise ConfigError(
            f"{run_dir}: holds a complete run of another config or data (hash {have}, this one {want}); "
            "choose another run.name or delete the folder"
        )
    refuse_other_code(run_dir)
    return True


def made_by(manifest: dict[str, Any]) -> str | None:
    """The source fingerprint (``allmem.fingerprint``) every attempt of a run was made with; None when the run
    records none or its attempts were made by different code."""
    codes = {a.get("code") for a in manifest.get("attempts") or [manifest]}
    return codes.pop() if len(codes) == 1 and None not in codes else None


def refuse_other_code(run_dir: Path) -> None:
    """A ``ConfigError`` (one line) when the run in ``run_dir`` was made, or begun, by other code than this
    checkout's: its records, hashes and keys are those of that code, so it is neither reused nor continued."""
    manifest = files.read_json(run_dir / files.MANIFEST, {})
    if not manifest or made_by(manifest) == source_fingerprint():
        return
    raise ConfigError(
        f"{run_dir}: made by other code (source fingerprint {made_by(manifest) or 'none or mixed'}, this code "
        f"{source_fingerprint()}); delete it and run again"
    )


def complete_twin(run_dir: Path) -> Path | None:
    """A complete run beside ``run_dir`` with the same hash: the same config and data reached through other
    overrides (a sweep value equal to the default, another experiment file naming the same point), so the run
    need not be made again. None for a ``run.name`` directory (it carries no hash)."""
    label, _, digest = run_dir.name.rpartition("-")
    if not label or len(digest) != 10 or any(c not in "0123456789abcdef" for c in digest):
        return None
    twin = next((done.parent for done in sorted(run_dir.parent.glob(f"*-{digest}/{files.DONE}"))), None)
    if twin is not None:
        refuse_other_code(twin)
    return twin


def prepare(run_dir: Path, cfg: DictConfig) -> None:
    """Create the directory and write the resolved config; refuse to resume a run made with another config
    (the data are compared per attempt, ``allmem.run.attempts.begin``)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    text = OmegaConf.to_yaml(cfg, resolve=True)
    path = run_dir / files.CONFIG
    if path.exists() and config_hash(files.read_config_data(run_dir)) != config_hash(cfg):
        raise ConfigError(
            f"{run_dir}: holds a run made with a different config; choose another run.name or delete it"
        )
    files.write_atomic(path, text)
