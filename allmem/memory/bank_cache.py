"""Re-use ingested All-Mem banks across runs that differ only in query-time settings.

Why: a sweep over retrieval budgets (K, k, L), the Stage 1 scorer or the search-the-full-bank / no-expansion /
no-type-priority ablations changes nothing that happens while a dialogue is written and consolidated, yet each
run would ingest (describe, embed, link, consolidate) the whole stream again. With ``run.bank_cache`` set to
a folder, All-Mem stores each dialogue's final bank there, keyed by everything that shapes ingestion, and a
later run with the same key loads it instead of writing the stream again.

What the key covers: the ingestion settings (``links``, ``write``, ``atc``, ``recover_mode``), the LLM backend,
model and temperature, the embedding model's identity, and the source fingerprint of ``allmem/`` (any code change
makes a new key: ``allmem.cache_store.code_key``, the one rule of the caches). What it does not cover is the dialogue's content: instead, every turn and session
boundary the runner streams is compared with the stream the cached bank was built from, and the first
difference makes the run ingest normally (replaying what it had held back). So a cached bank is used only for
the identical stream under the identical ingestion settings and code.

A reused run reports the stats and ATC events of the run that built the bank, marked ``bank_cache.hit``, with
that run's ingestion wall time (its own write timings would be meaningless: nothing was written), and books the
building run's ingestion calls in its own ledger as cached replies. So a run that found its banks in the cache
and one that ingested them give the same run directory by the comparison rule (``allmem.run.compare``), which
ignores the ``bank_cache`` and ``reused`` marks as it ignores ``cached``.

A damaged entry (a truncated file from a full disk or a killed copy, a garbled line) is found before the stream is
matched, since the whole entry is read then: a warning names the file, the entry is moved aside to
``<dialogue>.corrupt-<time>`` (kept for a look, never read again) and the dialogue is ingested again. The cache is
only an accelerator, so damage costs time, never a run. Entries are written and set aside by
``allmem.cache_store``, which also removes temporary folders left by killed writers.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

from allmem import cache_store
from allmem.files import CALLS, EVENTS, dump_line, read_jsonl
from allmem.memory.persist import load_bank
from allmem.memory.units import BankError

FORMAT = 3  # 2: the ingestion calls are kept (calls.jsonl); 3: executed edits' ATC lines hold their units
ENTRY = "entry.json"
BANK = "bank"


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return _plain(asdict(value))
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def ingest_key(settings: Mapping[str, Any], llm: Any, embedder: Any) -> str:
    """The cache key: ingestion settings + LLM identity + embedder identity + the source fingerprint of allmem/."""
    describe = llm.describe() if llm is not None and hasattr(llm, "describe") else {}
    material = {
        "format": FORMAT,
        "settings": _plain(settings),
        "llm": {k: describe.get(k) for k in ("backend", "model", "temperature", "dry_run")},
        "embedder": getattr(embedder, "identity", type(embedder).__name__),
    }
    return cache_store.code_key(("allmem",), material, length=20)


def event_digest(kind: str, payload: Any) -> str:
    """A short digest of one stream event (a session start or end, or a turn) with every field it carries."""
    blob = json.dumps([kind, _plain(payload)], sort_keys=True, default=str).encode()
    return hashlib.sha1(blob).hexdigest()[:16]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"


@dataclass
class Expectation:
    """A cached stream being matched event by event; ``held`` keeps the events not processed yet."""

    path: Path
    digests: list[str]
    held: list[tuple[str, Any]] = field(default_factory=list)

    def feed(self, kind: str, payload: Any, digest: str) -> bool:
        """True when the event matches the cached stream at this position (it is then held back)."""
        pos = len(self.held)
        if pos < len(self.digests) and self.digests[pos] == digest:
            self.held.append((kind, payload))
            return True
        return False

    @property
    def complete(self) -> bool:
        return len(self.held) == len(self.digests)


class BankCache:
    """``<root>/<key>/<dialogue>/``: ``bank/`` (allmem.memory.persist format), ``entry.json``, ATC events."""

    def __init__(self, root: str | Path, key: str) -> None:
        self.root = Path(root)
        self.key = key

    def folder(self, dialogue_id: str) -> Path:
        return self.root / self.key / _safe(dialogue_id)

    def expect(self, dialogue_id: str) -> Expectation | None:
        """The cached stream of this dialogue, when a complete, readable entry exists.

        The whole entry (events and bank) is read here, so damage is found before any event is held back; a
        damaged entry is moved aside with a warning naming the file, and the dialogue is ingested again.
        """
        path = self.folder(dialogue_id)
        if not (path / ENTRY).is_file():
            return None
        try:
            entry, _, _ = self.read(path)
            if entry.get("format") != FORMAT or entry.get("dialogue_id") != dialogue_id:
                return None  # another format, or another dialogue with the same safe name: not damage
            load_bank(path / BANK)
            stream = entry.get("stream")
            if not isinstance(stream, list) or not all(isinstance(d, str) for d in stream):
                raise BankError(f"{path / ENTRY}: field 'stream' is not a list of digests")
        except (OSError, ValueError) as exc:  # BankError and JSON errors are ValueErrors
            cache_store.set_aside(path, exc, cache="bank cache", then="ingesting this dialogue again")
            return None
        return Expectation(path, list(stream))

    @staticmethod
    def read(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
        """The entry, its ATC events and its ingestion calls (ledger lines); a damaged file raises ``BankError``
        naming it (and the line)."""
        try:
            entry = json.loads((path / ENTRY).read_text(encoding="utf-8"))
        except ValueError as exc:
            raise BankError(f"{path / ENTRY}: not valid JSON ({exc})") from None
        if not isinstance(entry, dict):
            raise BankError(f"{path / ENTRY}: not a JSON object")
        try:
            events = read_jsonl(path / EVENTS, whole=True)
            calls = read_jsonl(path / CALLS, whole=True)
        except ValueError as exc:
            raise BankError(str(exc)) from None
        return entry, events, calls

    def store(
        self,
        dialogue_id: str,
        save_bank: Callable[[Path], Any],
        stream: list[str],
        stats: Mapping[str, Any],
        events: Iterable[Mapping[str, Any]],
        ingest_s: float,
        calls: Iterable[Mapping[str, Any]] = (),
    ) -> Path:
        """Write an entry atomically (``cache_store.write_folder``); a concurrent writer of the same key wins."""

        def fill(tmp: Path) -> None:
            save_bank(tmp / BANK)
            for name, lines in ((EVENTS, events), (CALLS, calls)):
                with open(tmp / name, "w", encoding="utf-8") as fh:
                    fh.writelines(dump_line(line) for line in lines)
            entry = {
                "format": FORMAT,
                "key": self.key,
                "dialogue_id": dialogue_id,
                "stream": stream,
                "stats": dict(stats),
                "ingest_s": ingest_s,
            }
            (tmp / ENTRY).write_text(json.dumps(entry, default=str), encoding="utf-8")

        return cache_store.write_folder(self.folder(dialogue_id), fill)
