"""Errors for malformed dataset files, and the small field readers the loaders share.

A bad dataset file should fail at load time with a message a user can act on: which file, which sample, which
field, what was wrong (``locomo10.json: sample conv-26: field 'conversation.session_3_date_time': cannot parse
date 'yesterday'``). The readers below check type and presence once, so the loaders stay declarative.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from os import PathLike
from typing import Any


class DatasetError(ValueError):
    """A dataset file is malformed. ``file``, ``sample`` and ``field`` locate the problem."""

    def __init__(
        self, file: str, problem: str, *, sample: str | None = None, field: str | None = None
    ) -> None:
        parts = [file]
        if sample is not None:
            parts.append(f"sample {sample}")
        if field:
            parts.append(f"field {field!r}")
        parts.append(problem)
        super().__init__(": ".join(parts))
        self.file = file
        self.sample = sample
        self.field = field
        self.problem = problem


def _type_name(types: type | tuple[type, ...]) -> str:
    names = {str: "string", int: "integer", float: "number", list: "list", dict: "object", bool: "boolean"}
    seq = types if isinstance(types, tuple) else (types,)
    return " or ".join(names.get(t, t.__name__) for t in seq)


@dataclass(frozen=True)
class Where:
    """A location in a dataset file: the file, the sample, and a prefix for field paths (``conversation.``)."""

    file: str
    sample: str | None = None
    prefix: str = ""

    def field(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def error(self, field: str | None, problem: str) -> DatasetError:
        return DatasetError(self.file, problem, sample=self.sample, field=field)

    def check(self, value: Any, types: type | tuple[type, ...], field: str) -> Any:
        """``value`` if it has one of ``types`` (bool never counts as a number), else a DatasetError."""
        seq = types if isinstance(types, tuple) else (types,)
        is_bool_as_number = isinstance(value, bool) and bool not in seq
        if not isinstance(value, seq) or is_bool_as_number:
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            raise self.error(field, f"expected {_type_name(types)}, got {type(value).__name__} {shown}")
        if isinstance(value, str):
            try:  # JSON may hold "\ud83d" (half a surrogate pair): valid JSON, but no text can be made of it
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                bad = value[exc.start : exc.end]
                raise self.error(
                    field, f"text cannot be encoded as UTF-8: lone surrogate {bad!r} at character {exc.start}"
                ) from None
        return value

    def get(
        self,
        obj: Mapping[str, Any],
        key: str,
        types: type | tuple[type, ...],
        *,
        field: str | None = None,
        required: bool = True,
    ) -> Any:
        """``obj[key]`` type-checked; ``field`` is the path shown in errors (default: prefix + key)."""
        where = field if field is not None else self.field(key)
        if key not in obj:
            if required:
                raise self.error(where, "missing")
            return None
        return self.check(obj[key], types, where)


def parse_json(data: bytes | str, file: str) -> Any:
    """Decode a JSON document, turning syntax errors into a DatasetError naming the file and position."""
    try:
        return json.loads(data)
    except UnicodeDecodeError as exc:
        raise DatasetError(file, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        msg = exc.msg.removesuffix(" at")  # "Invalid control character at" reads badly before our position
        raise DatasetError(file, f"invalid JSON at line {exc.lineno} column {exc.colno}: {msg}") from None
    except ValueError as exc:  # valid JSON Python refuses: an integer of more than 4,300 digits
        raise DatasetError(file, f"unreadable JSON: {str(exc).split(';')[0]}") from None
    except RecursionError:  # valid JSON nested deeper than Python's recursion limit (~1,000 levels)
        raise DatasetError(file, "unreadable JSON: nested too deeply (over ~1,000 levels)") from None


# -- streaming a top-level JSON array -------------------------------------------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_CHUNK_CHARS = 1 << 20
# A decode error this far before the end of what has been read cannot be the read's truncation (truncation errors
# point at the end, except "Unterminated string", which points at the string's start), so it is reported at once
# instead of reading the rest of a multi-GB file first.
_TRUNCATION_MARGIN = 64
_KINDS = {"{": "dict", '"': "str", "t": "bool", "f": "bool", "n": "NoneType"}


class _Reader:
    """A sliding text window over a file that knows the line, column and byte offset of every position in it."""

    def __init__(self, f: Any, file: str, offset: int) -> None:
        self.f, self.file = f, file
        self.buf, self.pos, self.eof = "", 0, False
        self.line, self.col, self.offset = 1, 1, offset  # of buf[0]

    def byte(self, pos: int) -> int:
        """The file offset of ``buf[pos]`` (the window is text; seeking needs bytes)."""
        return self.offset + len(self.buf[:pos].encode("utf-8"))

    def more(self) -> None:
        """Drop what was consumed and append the next chunk (sets ``eof`` when the file is spent)."""
        self.offset = self.byte(self.pos)
        newlines = self.buf.count("\n", 0, self.pos)
        self.line += newlines
        self.col = self.pos - self.buf.rfind("\n", 0, self.pos) if newlines else self.col + self.pos
        try:
            chunk = self.f.read(_CHUNK_CHARS)
        except UnicodeDecodeError as exc:
            raise DatasetError(self.file, f"not UTF-8 text ({exc.reason} near line {self.line})") from None
        self.buf, self.pos = self.buf[self.pos :] + chunk, 0
        self.eof = not chunk

    def skip_ws(self) -> str:
        """The next non-blank character ('' at the end of the file), not consumed."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf) or self.eof:
                return self.buf[self.pos : self.pos + 1]
            self.more()

    def where(self, pos: int) -> str:
        before = self.buf[:pos]
        nl = before.rfind("\n")
        line = self.line + before.count("\n")
        col = pos - nl if nl >= 0 else self.col + pos
        return f"line {line} column {col}"

    def fail(self, pos: int, problem: str) -> DatasetError:
        return DatasetError(self.file, f"invalid JSON at {self.where(pos)}: {problem}")


def iter_json_array(path: str | PathLike[str], file: str, what: str) -> Iterator[tuple[Any, int, int]]:
    """The elements of a file holding one JSON array, decoded one at a time, each with its byte span
    ``(value, start, end)``: ``json.loads(data[start:end]) == value``, so a caller can keep spans, not values.

    LongMemEval-M is several GB of JSON: ``json.load`` would hold the text and every decoded record at once (and
    N workers N copies). This reads 1 MB at a time and decodes each element with the C decoder as soon as it is
    complete, so memory holds one element (plus what the caller keeps). Errors are the ``parse_json`` ones, with
    the line and column in the whole file; ``what`` names the expected elements (``question records``).
    """
    decoder = json.JSONDecoder()
    with open(path, "rb") as raw:
        bom = len(codecs.BOM_UTF8) if raw.read(len(codecs.BOM_UTF8)) == codecs.BOM_UTF8 else 0
    with open(path, encoding="utf-8-sig", newline="") as f:
        r = _Reader(f, file, bom)
        first = r.skip_ws()
        if first != "[":
            kind = _KINDS.get(first, "number" if first and first in "-0123456789" else None)
            if kind is None:
                raise r.fail(r.pos, "Expecting value")
            raise DatasetError(file, f"expected a JSON list of {what}, got {kind}")
        r.pos += 1
        expect_value = False
        while True:
            c = r.skip_ws()
            if c == "]" and not expect_value:
                r.pos += 1
                break
            if not c:
                raise r.fail(r.pos, "Expecting value" if expect_value else "Expecting ',' delimiter")
            start = r.byte(r.pos)
            value = _decode_one(decoder, r)
            yield value, start, r.byte(r.pos)
            c = r.skip_ws()
            if c == ",":
                r.pos += 1
                expect_value = True
            elif c == "]":
                r.pos += 1
                break
            else:
                raise r.fail(r.pos, "Expecting ',' delimiter")
        if r.skip_ws():
            raise r.fail(r.pos, "Extra data")


def _decode_one(decoder: json.JSONDecoder, r: _Reader) -> Any:
    """Decode the element at ``r.pos``, reading more of the file until it is complete."""
    while True:
        try:
            value, end = decoder.raw_decode(r.buf, r.pos)
        except json.JSONDecodeError as exc:
            truncated = exc.pos + _TRUNCATION_MARGIN >= len(r.buf) or exc.msg.startswith(
                "Unterminated string"
            )
            if r.eof or not truncated:
                raise r.fail(exc.pos, exc.msg.removesuffix(" at")) from None
        except ValueError as exc:  # valid JSON Python refuses: an integer of more than 4,300 digits
            raise DatasetError(r.file, f"unreadable JSON: {str(exc).split(';')[0]}") from None
        except RecursionError:
            raise DatasetError(r.file, "unreadable JSON: nested too deeply (over ~1,000 levels)") from None
        else:
            # A number cut by the window's end decodes as its prefix ("-30" of "-308.5"): read on unless the
            # next character shows it ended.
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            cut = end == len(r.buf) or (number and r.buf[end] in "0123456789.eE+-")
            if r.eof or not cut:
                r.pos = end
                return value
        r.more()
