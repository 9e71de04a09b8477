"""Errors for malformed dataset files, and the small field readers the loaders share.

A bad dataset file should fail at load time with a message a user can act on: which file, which sample, which
field, what was wrong (``locomo10.json: sample conv-26: field 'conversation.session_3_date_time': cannot parse
date 'yesterday'``). The readers below check type and presence once, so the loaders stay declarative.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
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
