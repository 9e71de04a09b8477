"""Versioned prompt templates: loading, rendering, and reading replies back as validated JSON.

Each template is one file ``allmem/llm/prompts/<name>.txt``::

    # name: descriptor            <- must equal the file name
    # version: 1                  <- bump on any wording change; part of the cache key
    # phase: write                <- the phase tag its calls carry
    # est_tokens_out: 60          <- typical reply length, used only by dry-run estimates
    # variables:                  <- free-form documentation of every {{variable}}
    #   evidence: ...
    # output: ...                 <- documentation of the reply
    @@ system
    ...
    @@ user
    ... {{evidence}} ...
    @@ schema                     <- optional: the JSON Schema (subset) the reply must match; implies JSON mode
    {...}
    @@ grammar                    <- optional: a GBNF grammar of the reply's form (a judge's verdict tag), sent only
    root ::= ...                     to backends that constrain decoding with one (llama.cpp: ``llm.grammar``)

``{{name}}`` placeholders are used instead of ``str.format`` so that prompts can show literal JSON braces.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from allmem.llm.base import PHASES, ChatRequest, ParseFailure

PROMPT_DIR = Path(__file__).resolve().parent / "prompts"
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
_ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Template:
    """A parsed template file. ``sections`` maps message role (and ``schema``) to raw text."""

    name: str
    version: str
    phase: str
    path: Path
    sections: tuple[tuple[str, str], ...]
    schema: Mapping[str, Any] | None
    est_tokens_out: int
    header: str
    grammar: str | None = None

    @property
    def variables(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for _, text in self.sections:
            for m in _PLACEHOLDER.finditer(text):
                seen.setdefault(m.group(1), None)
        return tuple(seen)

    def render(self, variables: Mapping[str, Any]) -> tuple[dict[str, str], ...]:
        """Fill every placeholder; a missing variable is an error naming the file and the variable."""
        missing = [v for v in self.variables if v not in variables]
        if missing:
            raise KeyError(f"{self.path}: template variables not supplied: {', '.join(missing)}")

        def fill(m: re.Match[str]) -> str:
            value = variables[m.group(1)]
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

        return tuple({"role": role, "content": _PLACEHOLDER.sub(fill, text)} for role, text in self.sections)


def parse_template(path: Path) -> Template:
    """Read one template file; errors name the file and the field."""
    raw = path.read_text(encoding="utf-8")
    meta: dict[str, str] = {}
    header_lines: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    for line in raw.splitlines():
        if line.startswith("@@ "):
            sections.append((line[3:].strip(), []))
        elif sections:
            sections[-1][1].append(line)
        else:
            header_lines.append(line)
            m = re.match(r"#\s*(\w+):\s*(\S.*)?$", line)
            if m and m.group(2) is not None and m.group(1) not in meta:
                meta[m.group(1)] = m.group(2).strip()
    for key in ("name", "version", "phase"):
        if key not in meta:
            raise ValueError(f"{path}: header field '# {key}:' is missing")
    if meta["name"] != path.stem:
        raise ValueError(f"{path}: header name {meta['name']!r} differs from the file name")
    if meta["phase"] not in PHASES:
        raise ValueError(f"{path}: phase {meta['phase']!r} is not one of {PHASES}")
    messages: list[tuple[str, str]] = []
    schema = grammar = None
    for role, lines in sections:
        text = "\n".join(lines).strip("\n")
        if role == "grammar":
            grammar = text
        elif role == "schema":
            try:
                schema = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: section @@ schema is not valid JSON: {exc}") from exc
        elif role in _ROLES:
            messages.append((role, text))
        else:
            raise ValueError(
                f"{path}: unknown section '@@ {role}' (use system, user, assistant, schema, grammar)"
            )
    if not messages:
        raise ValueError(f"{path}: no message sections (@@ system / @@ user)")
    try:
        est = int(meta.get("est_tokens_out", "32"))
    except ValueError as exc:
        raise ValueError(f"{path}: est_tokens_out must be an integer") from exc
    return Template(
        name=meta["name"],
        version=meta["version"],
        phase=meta["phase"],
        path=path,
        sections=tuple(messages),
        schema=schema,
        est_tokens_out=est,
        header="\n".join(header_lines),
        grammar=grammar,
    )


@cache
def load_template(name: str) -> Template:
    """The template ``prompts/<name>.txt`` (parsed once per process)."""
    path = PROMPT_DIR / f"{name}.txt"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in PROMPT_DIR.glob("*.txt")))
        raise FileNotFoundError(f"{path}: no such prompt template (known: {known})")
    return parse_template(path)


def template_names() -> list[str]:
    return sorted(p.stem for p in PROMPT_DIR.glob("*.txt"))


def build_request(
    name: str,
    variables: Mapping[str, Any],
    *,
    phase: str | None = None,
    model: str | None = None,
    max_tokens: int | None = None,
    sample: int = 0,
    payload: Any = None,
) -> ChatRequest:
    """Render template ``name`` into a request; the phase defaults to the template's own."""
    tpl = load_template(name)
    return ChatRequest(
        phase=phase or tpl.phase,
        template=tpl.name,
        template_version=tpl.version,
        messages=tpl.render(variables),
        variables=dict(variables),
        json_schema=tpl.schema,
        grammar=tpl.grammar,
        model=model,
        max_tokens=max_tokens,
        sample=sample,
        payload=payload,
    )


# ---------------------------------------------------------------- reading replies


def extract_json(text: str) -> Any | ParseFailure:
    """The JSON value in a reply, tolerating code fences and prose around one object."""
    body = text.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", body, flags=re.S)
    if fenced:
        body = fenced.group(1).strip()
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        pass
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end <= start:
        return ParseFailure("no_json", "the reply holds no JSON object", text)
    try:
        return json.loads(body[start : end + 1])
    except json.JSONDecodeError as exc:
        return ParseFailure("invalid_json", f"invalid JSON: {exc.msg} at char {exc.pos}", text)


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "null": (type(None),),
}


def schema_errors(value: Any, schema: Mapping[str, Any], where: str = "$") -> list[str]:
    """Violations of a JSON Schema subset (type, required, properties, items, enum, min/max, minItems)."""
    errors: list[str] = []
    typ = schema.get("type")
    if typ is not None:
        names = typ if isinstance(typ, list) else [typ]
        ok = any(
            isinstance(value, _TYPES[t]) and not (t in ("number", "integer") and isinstance(value, bool))
            for t in names
        )
        if not ok:
            return [f"{where}: expected {'/'.join(names)}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not in {schema['enum']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where}: {value} > maximum {schema['maximum']}")
    if isinstance(value, str) and len(value.strip()) < schema.get("minLength", 0):
        errors.append(f"{where}: string shorter than {schema['minLength']}")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{where}: missing field {key!r}")
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                errors.extend(schema_errors(value[key], sub, f"{where}.{key}"))
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{where}: fewer than {schema['minItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                errors.extend(schema_errors(item, schema["items"], f"{where}[{i}]"))
    return errors


def parse_reply(text: str, schema: Mapping[str, Any] | None) -> tuple[Any, ParseFailure | None]:
    """``(data, None)`` for a reply matching ``schema``; ``(None, ParseFailure)`` otherwise."""
    value = extract_json(text)
    if isinstance(value, ParseFailure):
        return None, value
    if schema is not None:
        errs = schema_errors(value, schema)
        if errs:
            return None, ParseFailure("schema", "; ".join(errs[:5]), text)
    return value, None
