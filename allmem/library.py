"""All-Mem as a library: ``from allmem import AllMem`` (docs/LIBRARY.md). No Hydra: the settings are the YAML of
``configs/`` (the one home of defaults), read with OmegaConf by ``allmem.defaults``; a memory is one stream (one
user, one agent), written turn by turn or a session at a time, searched under a token budget, consolidated (ATC)
when asked and at the paper's checkpoints, and saved to / loaded from a folder of JSON and ``.npy`` files (never
pickle: data is never code).

    mem = AllMem.paper(embedder="hash")            # configs/method/allmem.yaml, the model-free embedder
    mem.add_session([("Ana", "I moved to Lisbon in May.")], when=datetime(2023, 5, 8))
    hits = mem.search("Where does Ana live?", budget_tokens=200)
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from allmem.defaults import CONFIG_DIR, group_node, method_node
from allmem.errors import ConfigError
from allmem.files import plain, read_json, write_atomic
from allmem.systems import MemorySystem, Resources
from allmem.types import SessionInfo, Turn

SETTINGS_FILE = (
    "library.json"  # beside the bank: the method node, the embedder and LLM configs it was made with
)
FORMAT = "allmem-library"
VERSION = 1


# ------------------------------------------------------------------------------------------ typed results
@dataclass(frozen=True)
class Unit:
    """One memory unit found by ``search``: its text (one ``Speaker: text`` line per utterance), the turns it came
    from (``source_turns``), its score and date."""

    id: str
    text: str
    source_turns: tuple[str, ...]
    score: float
    date: datetime | None


@dataclass(frozen=True)
class SearchResult:
    """``units``: best first, the longest prefix whose context fits the budget; ``context``: those units as the
    generator would see them (chronological ``[date] Speaker: text`` lines); ``tokens``: the context's
    o200k_base tokens; ``dropped``: units ranked but cut by the budget."""

    query: str
    units: tuple[Unit, ...]
    context: str
    tokens: int
    dropped: int


@dataclass(frozen=True)
class Session:
    """A session written by ``add_session``: its id, date and the ids given to its turns."""

    id: str
    date: datetime
    turn_ids: tuple[str, ...]


@dataclass(frozen=True)
class Consolidation:
    """One ATC run: the edits executed per operator (split / merge / update), the proposals skipped, and the
    bank after it (``units`` in all, ``visible`` on the searched surface)."""

    ran: bool
    executed: dict[str, int]
    skipped: int
    units: int
    visible: int


@dataclass(frozen=True)
class Stats:
    turns: int
    sessions: int
    units: int
    visible: int
    archived: int


# ------------------------------------------------------------------------------------------ building
def _target(node: Mapping[str, Any]) -> Any:
    module, _, name = str(node["_target_"]).rpartition(".")
    return getattr(importlib.import_module(module), name)


def _node(group: str, value: Any) -> dict[str, Any] | None:
    """The config of ``value``: the file ``configs/<group>/<value>.yaml`` for a name, the mapping itself, or None for
    an object that is already built."""
    if isinstance(value, str):
        return plain(OmegaConf.load(CONFIG_DIR / group / f"{value}.yaml"))
    if isinstance(value, Mapping):
        return plain(value)
    return None


def build_embedder(embedder: str | Mapping[str, Any] | Any) -> tuple[Any, dict[str, Any] | None]:
    """An embedder from a name of ``configs/embedder/`` (``"hash"``, ``"minilm"``), a config mapping, or an
    embedder object (returned as it is, with no config to save)."""
    node = _node("embedder", embedder)
    if node is None:
        return embedder, None
    args = {k: v for k, v in node.items() if k != "_target_" and v is not None}
    return _target(node)(**args), node


def build_llm_named(llm: str | Mapping[str, Any] | Any) -> tuple[Any, dict[str, Any] | None]:
    """An LLM client from a name of ``configs/llm/`` (``"offline"``, ``"openai"``), a config mapping, or a client."""
    from allmem.llm import build_llm

    node = _node("llm", llm)
    if node is None:
        return llm, None
    return build_llm(node), node


def build_method(
    name: str, *, embedder: str | Any = "hash", llm: str | Any = "offline", **changes: Any
) -> MemorySystem:
    """Any method of ``configs/method/`` (or of ``ALLMEM_CONFIG_PATH``) as a ``MemorySystem``, without Hydra."""
    from allmem.build import build

    node = method_node(name)
    for key, value in changes.items():
        node[key] = {**node[key], **value} if isinstance(value, Mapping) and key in node else value
    emb, _ = build_embedder(embedder)
    client, _ = build_llm_named(llm)
    return build(OmegaConf.create(node), resources=Resources(embedder=emb, llm=client))


# ------------------------------------------------------------------------------------------ the memory
class AllMem:
    """One All-Mem memory (one stream). ``AllMem.paper()`` for the paper's settings, ``AllMem.from_config()``
    for a YAML file or mapping of your own; ``add_turn`` / ``add_session``, ``search``, ``consolidate``,
    ``save`` / ``AllMem.load``."""

    def __init__(self, method: Mapping[str, Any], *, embedder: Any = "hash", llm: Any = "offline") -> None:
        """``method``: a ``method`` node as in ``configs/method/allmem*.yaml`` (with its ``atc`` node inlined)."""
        from allmem.memory.system import AllMemSystem as System

        node = plain(method)
        if str(node.get("_target_", "")) not in ("", f"{System.__module__}.{System.__name__}"):
            raise ConfigError(f"AllMem: the method node builds {node['_target_']}, not All-Mem")
        self._method = {k: v for k, v in node.items() if k not in ("_target_", "name")}
        self._embedder, self._embedder_node = build_embedder(embedder)
        self._llm, self._llm_node = build_llm_named(llm)
        self.system = System(Resources(embedder=self._embedder, llm=self._llm), **self._method)
        self._session: SessionInfo | None = None
        self._in_session = 0  # turns of the open session
        self._sessions = 0
        self._turns = 0
        self.system.reset("memory")

    @classmethod
    def paper(
        cls, name: str = "allmem", *, embedder: Any = "minilm", llm: Any = "offline", **changes: Any
    ) -> AllMem:
        """The settings of ``configs/method/<name>.yaml``; each of ``changes`` replaces keys of one node
        (``retrieval={"K": 8}``, ``atc={"enabled": False}``) or a value."""
        node = method_node(name)
        for key, value in changes.items():
            node[key] = {**node[key], **value} if isinstance(value, Mapping) and key in node else value
        return cls(node, embedder=embedder, llm=llm)

    @classmethod
    def from_config(cls, config: str | Path | Mapping[str, Any], **kwargs: Any) -> AllMem:
        """From a YAML file or mapping laid out as ``configs/method/allmem.yaml`` (``method:`` and ``atc:`` at
        the top, or the ``method`` node alone). Every key must be there: copy the paper's file and edit it."""
        raw = plain(OmegaConf.load(config)) if isinstance(config, str | Path) else plain(config)
        raw.pop("defaults", None)
        node = dict(raw.get("method", raw))
        if "atc" in raw and not isinstance(node.get("atc"), Mapping):
            node["atc"] = raw["atc"]
        return cls(node, **kwargs)

    # ------------------------------------------------------------------ writing
    def _start(self, when: datetime, session_id: str | None) -> SessionInfo:
        info = SessionInfo(session_id or f"S{self._sessions + 1}", when, self._sessions)
        self.system.start_session(info)
        self._session, self._in_session = info, 0
        return info

    def _end(self) -> None:
        if self._session is not None:
            self.system.end_session(self._session)
            self._sessions += 1
            self._session = None

    def add_turn(
        self, speaker: str, text: str, when: datetime, *, turn_id: str | None = None, new_session: bool = False,
        session_id: str | None = None, caption: str | None = None,
    ) -> str:  # fmt: skip
        """Write one turn; it joins the open session (a new one when none is open or ``new_session``). Returns
        its id (``turn_id``, else ``<session>:<n>``), what ``Unit.source_turns`` cites."""
        if self._session is None or new_session:
            self._end()
            self._start(when, session_id)
        assert self._session is not None
        self._in_session += 1
        tid = turn_id or f"{self._session.id}:{self._in_session}"
        turn = Turn(id=tid, session_id=self._session.id, speaker=speaker, text=text, timestamp=when,
                    order=self._turns, caption=caption, source_id=tid)  # fmt: skip
        self.system.ingest(turn)
        self._turns += 1
        return tid

    def end_session(self) -> None:
        """Close the open session (All-Mem's consolidation checkpoints count sessions)."""
        self._end()

    def add_session(
        self,
        turns: Iterable[tuple[str, str] | Mapping[str, Any]],
        when: datetime,
        *,
        session_id: str | None = None,
    ) -> Session:
        """Write a whole session: ``(speaker, text)`` pairs or mappings with ``speaker``, ``text`` and optionally
        ``id``, ``caption``; all dated ``when``. The session is closed afterwards."""
        self._end()
        info = self._start(when, session_id)
        ids = []
        for t in turns:
            item = {"speaker": t[0], "text": t[1]} if isinstance(t, Sequence) else dict(t)
            ids.append(self.add_turn(str(item["speaker"]), str(item["text"]), when, turn_id=item.get("id"),
                                     caption=item.get("caption")))  # fmt: skip
        self._end()
        return Session(info.id, when, tuple(ids))

    # ------------------------------------------------------------------ reading
    def search(
        self, query: str, *, budget_tokens: int | None = None, when: datetime | None = None
    ) -> SearchResult:
        """The ranked units for ``query`` (three-stage retrieval), cut to ``budget_tokens`` of context (default:
        ``configs/budget/default.yaml``, the paper's matched budget)."""
        from allmem.budget import pack

        budget = int(
            budget_tokens if budget_tokens is not None else group_node("budget", "default")["tokens"]
        )
        result = self.system.retrieve(query, when)
        packed = pack(result.units, budget)
        kept = result.units[: len(result.units) - packed.n_dropped]
        units = tuple(Unit(u.id, u.text, tuple(u.source_ids), u.score, u.timestamp) for u in kept)
        return SearchResult(query, units, packed.text, packed.used_tokens, packed.n_dropped)

    def consolidate(self) -> Consolidation:
        """Run ATC now over the units written since its last run (it also runs by itself every
        ``atc.every_sessions`` sessions). Without consolidation configured (``atc.enabled: false``) nothing runs."""
        cons = self.system.consolidator
        bank = self.system.bank
        assert bank is not None
        if cons is None:
            return Consolidation(False, {}, 0, len(bank), bank.n_visible)
        self.system.writer.flush()
        before = len(cons.log.events)
        cons.run("library")
        new = cons.log.events[before:]
        executed: dict[str, int] = {}
        for ev in new:
            if ev.get("kind") == "target" and ev.get("state") == "executed":
                executed[str(ev["op"])] = executed.get(str(ev["op"]), 0) + 1
        skipped = sum(1 for ev in new if ev.get("kind") == "target" and ev.get("state") != "executed")
        return Consolidation(bool(new), executed, skipped, len(bank), bank.n_visible)

    def stats(self) -> Stats:
        bank = self.system.bank
        assert bank is not None
        self.system.writer.flush()
        return Stats(self._turns, self._sessions, len(bank), bank.n_visible, len(bank) - bank.n_visible)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write the memory to the folder ``path`` (the bank as JSON and ``.npy``, atomically, and the settings
        it was made with in ``library.json``). An embedder or LLM passed as an object, not by name or config,
        must be passed again to ``load``."""
        self._end()
        out = self.system.save(path)
        settings = {"format": FORMAT, "version": VERSION, "method": self._method, "embedder": self._embedder_node,
                    "llm": self._llm_node, "turns": self._turns, "sessions": self._sessions}  # fmt: skip
        write_atomic(out / SETTINGS_FILE, json.dumps(settings, indent=1, default=str))
        return out

    @classmethod
    def load(cls, path: str | Path, *, embedder: Any = None, llm: Any = None) -> AllMem:
        """A memory saved by ``save``, with its settings; ``embedder`` / ``llm`` replace the saved ones."""
        settings = read_json(Path(path) / SETTINGS_FILE, None)
        if not isinstance(settings, dict) or settings.get("format") != FORMAT:
            raise ConfigError(
                f"{Path(path) / SETTINGS_FILE}: not an allmem library memory (saved by AllMem.save)"
            )
        if settings.get("version") != VERSION:
            raise ConfigError(
                f"{Path(path) / SETTINGS_FILE}: version {settings.get('version')}, this code reads {VERSION}"
            )
        emb = embedder if embedder is not None else settings["embedder"]
        client = llm if llm is not None else (settings["llm"] or "offline")
        if emb is None:
            raise ConfigError(f"{path}: saved with an embedder object; pass embedder= to load it")
        mem = cls(settings["method"], embedder=emb, llm=client)
        mem.system.load(path)
        mem._turns, mem._sessions = int(settings["turns"]), int(settings["sessions"])
        return mem
