"""``method=http``: any memory service that speaks the small REST contract of docs/LIBRARY.md ("A memory service
over HTTP") is a ``MemorySystem``. Every call is a JSON ``POST`` to ``<url>/<route>``:

``reset`` {dialogue_id} · ``session/start`` and ``session/end`` {session} · ``turn`` {turn} · ``session``
{session, turns} (a whole session in one call) · ``end`` {} · ``search`` {query, date, k} → {units, timings_ms} ·
``stats`` {} → {counters}. A unit is {id, utterances: [{speaker, text, caption}] (or text), source_ids, score,
timestamp}; its ``source_ids`` are the turns it came from (what R@k credits).

Retries, backoff, time limits and failures are the LLM client's (``allmem.llm.retry``): a call that fails after
its retries is booked in the run's ledger (``LLM.book_failure``), so its dialogue or question is recorded as failed
and ``llm.breaker_after`` consecutive failures stop the run, as for a failed LLM call. The wire format's
converters (``turn_json``, ``unit_json``, ...) live here, and the reference server (``examples/memory_server.py``)
uses them too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from allmem.llm.base import TransportError
from allmem.llm.retry import Retrying, retry_after_s
from allmem.systems import MemorySystem, Resources
from allmem.types import RetrievalResult, Retrieved, SessionInfo, Turn, Utterance

ROUTES = ("reset", "session/start", "turn", "session/end", "session", "end", "search", "stats", "checkpoint")
INGEST_MODES = ("turn", "session")
# a service may answer 404 to these: nothing to do there
OPTIONAL = ("session/start", "session/end", "end", "stats", "checkpoint")


# ---------------------------------------------------------------------------------------------- wire format
def _date(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def parse_date(value: Any, where: str) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        raise ValueError(f"{where}: {value!r} is not an ISO 8601 date") from None


def turn_json(turn: Turn) -> dict[str, Any]:
    return {"id": turn.id, "session_id": turn.session_id, "speaker": turn.speaker, "text": turn.text,
            "timestamp": _date(turn.timestamp), "order": turn.order, "caption": turn.caption, "role": turn.role,
            "source_id": turn.source_id or turn.id}  # fmt: skip


def turn_of(raw: Mapping[str, Any]) -> Turn:
    when = parse_date(raw["timestamp"], "turn.timestamp")
    assert when is not None, "turn.timestamp: required"
    return Turn(id=str(raw["id"]), session_id=str(raw["session_id"]), speaker=str(raw["speaker"]),
                text=str(raw["text"]), timestamp=when, order=int(raw["order"]), caption=raw.get("caption"),
                role=raw.get("role"), source_id=str(raw.get("source_id") or raw["id"]))  # fmt: skip


def session_json(session: SessionInfo) -> dict[str, Any]:
    return {"id": session.id, "date": _date(session.date), "index": session.index}


def session_of(raw: Mapping[str, Any]) -> SessionInfo:
    when = parse_date(raw["date"], "session.date")
    assert when is not None, "session.date: required"
    return SessionInfo(str(raw["id"]), when, int(raw["index"]))


def unit_json(unit: Retrieved) -> dict[str, Any]:
    return {"id": unit.id, "utterances": [{"speaker": p.speaker, "text": p.text, "caption": p.caption} for p in unit.parts],
            "source_ids": list(unit.source_ids), "score": unit.score, "timestamp": _date(unit.timestamp)}  # fmt: skip


def unit_of(raw: Any, where: str) -> Retrieved:
    """A unit of a ``search`` reply; a ``ValueError`` naming ``where`` and the field when it is malformed."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: a unit must be a JSON object")
    ids = raw.get("source_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise ValueError(f"{where}.source_ids: a non-empty list of turn ids is required")
    if "utterances" in raw:
        parts = tuple(
            Utterance(p.get("speaker"), str(p["text"]), p.get("caption")) for p in raw["utterances"]
        )
    elif isinstance(raw.get("text"), str):
        parts = (Utterance(raw.get("speaker"), raw["text"], None),)
    else:
        raise ValueError(f"{where}: needs utterances or text")
    score = raw.get("score", 0.0)
    if not isinstance(score, int | float) or isinstance(score, bool):
        raise ValueError(f"{where}.score: a number is required")
    return Retrieved(str(raw.get("id", ids[0])), parts, tuple(ids), float(score),
                     parse_date(raw.get("timestamp"), f"{where}.timestamp"))  # fmt: skip


# ---------------------------------------------------------------------------------------------- the adapter
class ServiceError(RuntimeError):
    """A try that reached the service but got no usable answer (5xx, 429, a body that is not JSON)."""

    def __init__(
        self, message: str, status_code: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retry_after = retry_after


class HttpMemory(MemorySystem):
    """A memory service reached over HTTP (``configs/method/http.yaml``). ``ingest``: ``turn`` posts each turn
    with the session boundaries, ``session`` posts each session whole at its end."""

    name = "http"

    def __init__(
        self,
        resources: Resources | None,
        url: str,
        k: int,
        ingest: str,
        timeout_s: float,
        connect_timeout_s: float,
        max_retries: int,
        backoff_base_s: float,
        backoff_max_s: float,
        call_timeout_s: float,
    ) -> None:
        super().__init__(resources)
        if not str(url).startswith(("http://", "https://")):
            raise ValueError(f"method.url: an http:// or https:// URL is required, got {url!r}")
        if ingest not in INGEST_MODES:
            raise ValueError(f"method.ingest: one of {', '.join(INGEST_MODES)}, got {ingest!r}")
        if int(k) < 1:
            raise ValueError(f"method.k: must be >= 1, got {k}")
        self.url, self.k, self.mode = str(url).rstrip("/"), int(k), ingest
        self.timeout_s, self.connect_timeout_s = float(timeout_s), float(connect_timeout_s)
        self.retrying = Retrying(max_retries=max_retries, backoff_base_s=backoff_base_s,
                                 backoff_max_s=backoff_max_s, call_timeout_s=call_timeout_s)  # fmt: skip
        self._client: Any = None
        self._session: SessionInfo | None = None
        self._turns: list[Turn] = []
        self._broken = False  # an ingestion call failed: this dialogue's memory is incomplete, stop sending

    def _http(self) -> Any:
        if self._client is None:
            import httpx

            timeout = httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s)
            self._client = httpx.Client(trust_env=False, follow_redirects=False, timeout=timeout)
        return self._client

    def _try(self, route: str, body: dict[str, Any], deadline: float) -> Any:
        import httpx

        limit = deadline - time.monotonic()
        if limit <= 0:
            raise ServiceError("no time left for a try")
        timeout = httpx.Timeout(min(self.timeout_s, limit), connect=min(self.connect_timeout_s, limit))
        try:
            reply = self._http().post(f"{self.url}/{route}", json=body, timeout=timeout)
        except httpx.HTTPError as exc:
            raise ServiceError(f"{type(exc).__name__}: {exc}") from None
        if reply.status_code == 429 or reply.status_code >= 500:
            raise ServiceError(f"HTTP {reply.status_code}", reply.status_code,
                               retry_after_s(reply.headers.get("retry-after")))  # fmt: skip
        if reply.status_code == 404 and route in OPTIONAL:
            return {}
        if reply.status_code != 200:  # a 4xx: this request is bad, asking again will not help
            raise TransportError(f"HTTP {reply.status_code}: {reply.text[:200]}", status=reply.status_code)
        try:
            return json.loads(reply.content)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ServiceError(f"reply to {route} is not JSON ({len(reply.content)} bytes)") from None

    def _call(self, route: str, body: dict[str, Any], phase: str) -> Any:
        """One service call with the client's retries; None after a failure, booked in the run's ledger."""
        t0 = time.perf_counter()
        try:
            return self.retrying.run(
                lambda deadline, attempt: self._try(route, body, deadline),
                retryable=(ServiceError,), what=f"memory service: {route}", where=self.url,
                retry_after=lambda exc: getattr(exc, "retry_after", None),
            )  # fmt: skip
        except TransportError as exc:
            llm = self.resources.llm
            if llm is None or not hasattr(llm, "book_failure"):  # no ledger to record it: the caller hears it
                raise
            error = f"memory service {self.url}/{route}: {exc}"
            llm.book_failure(phase, f"http:{route}", error, (time.perf_counter() - t0) * 1000, exc.retries)
            return None

    def _ingest_call(self, route: str, body: dict[str, Any]) -> None:
        if self._broken:
            return
        if self._call(route, body, "write") is None:
            self._broken = True
        elif self.resources.llm is not None and hasattr(self.resources.llm, "note_success"):
            self.resources.llm.note_success()

    # ------------------------------------------------------------------ MemorySystem
    def reset(self, dialogue_id: str) -> None:
        self._broken, self._session, self._turns = False, None, []
        self._ingest_call("reset", {"dialogue_id": dialogue_id})

    def start_session(self, session: SessionInfo) -> None:
        self._session, self._turns = session, []
        if self.mode == "turn":
            self._ingest_call("session/start", {"session": session_json(session)})

    def ingest(self, turn: Turn) -> None:
        if self.mode == "turn":
            self._ingest_call("turn", {"turn": turn_json(turn)})
        else:
            self._turns.append(turn)

    def end_session(self, session: SessionInfo) -> None:
        if self.mode == "turn":
            self._ingest_call("session/end", {"session": session_json(session)})
        else:
            body = {"session": session_json(session), "turns": [turn_json(t) for t in self._turns]}
            self._ingest_call("session", body)
        self._session, self._turns = None, []

    def end_stream(self) -> None:
        self._ingest_call("end", {})

    def checkpoint(self) -> None:
        self._ingest_call("checkpoint", {})  # questions come mid-stream (protocol.ask; optional route)

    def retrieve(self, query: str, when: datetime | None = None) -> RetrievalResult:
        reply = self._call("search", {"query": query, "date": _date(when), "k": self.k}, "retrieve")
        if reply is None:  # booked as failed: the question is recorded as failed, not scored
            return RetrievalResult(units=())
        units = reply.get("units") if isinstance(reply, Mapping) else None
        if not isinstance(units, list):
            raise ValueError(f"memory service {self.url}/search: the reply holds no units list")
        out = tuple(unit_of(u, f"{self.url}/search units[{i}]") for i, u in enumerate(units[: self.k]))
        timings = reply.get("timings_ms") if isinstance(reply.get("timings_ms"), Mapping) else {}
        return RetrievalResult(units=out, timings_ms={f"service_{k}": float(v) for k, v in timings.items()})

    def stats(self) -> dict[str, Any]:
        if self._broken:
            return {}
        reply = self._call("stats", {}, "write")
        return dict(reply) if isinstance(reply, Mapping) else {}

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
