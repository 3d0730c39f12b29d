"""`wpultr config show`: every run-config key with its default, allowed values and a one-line description,
generated from the settings dataclasses themselves (the single source): the field's type and default, and the
comment written beside the field (with its continuation lines) as its description."""
from __future__ import annotations

import dataclasses
import inspect
import io
import json
import re
import tokenize
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from .errors import ConfigError
from .tables import table


@dataclass(frozen=True)
class Key:
    key: str            # dotted, as in a run config and --set
    default: Any
    allowed: str
    description: str


def _comments(cls: type) -> dict[str, str]:
    """Field name -> the comment beside it in the class source, with the comment lines that continue it."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    found: dict[str, list[str]] = {}
    above: dict[str, list[str]] = {}
    pending: list[str] = []
    current: str | None = None
    field_line = re.compile(r"^\s{4}(\w+)\s*:")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.start[1] == 4 and field_line.match(token.line):
            current = field_line.match(token.line).group(1)
            found.setdefault(current, [])
            above[current], pending = pending, []
        elif token.type == tokenize.COMMENT:
            text = token.string.lstrip("#").strip()
            if token.line.strip().startswith("#") and not token.string.startswith("#  "):
                current = None               # '# text' on its own line describes the field below it; '#   text',
                pending.append(text)         # aligned under the comment above, continues that field's
            elif current is not None:
                found[current].append(text)
        elif token.type == tokenize.NAME and token.start[1] == 4 and token.string == "def":
            current, pending = None, []
    found = {name: texts or above.get(name, []) for name, texts in found.items()}
    return {name: " ".join(t for t in texts if t) for name, texts in found.items()}


def _allowed(annotation: Any, resolved: Any = None) -> str:
    """The allowed values as a person reads them: a Literal's values (a named tuple of them resolved, so `SOURCES`
    reads as its values), else the type's name."""
    if typing.get_origin(resolved) is Literal:
        return " | ".join(map(str, typing.get_args(resolved)))
    args = typing.get_args(resolved)
    if typing.get_origin(resolved) in (typing.Union, types.UnionType) and type(None) in args and len(args) == 2:
        inner = next(a for a in args if a is not type(None))
        if typing.get_origin(inner) is Literal:
            return _allowed(None, inner) + " | null"
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    literal = re.fullmatch(r"Literal\[(.*)\](\s*\|\s*None)?", text)
    if literal:
        values = " | ".join(v.strip().strip("'\"") for v in literal.group(1).split(","))
        return values + (" | null" if literal.group(2) else "")
    text = text.replace("None", "null").replace(" | ", " or ")
    return {"bool": "true | false"}.get(text, text)


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()                   # type: ignore[misc]
    return None


def keys(cls: type | None = None, prefix: str = "") -> list[Key]:
    """Every key of the run config (or of the settings dataclass `cls` under `prefix`), in declaration order."""
    if cls is None:
        from .config import RunConfig  # lazy: +0.9 s (pandas, pyarrow)
        cls = RunConfig
    comments = _comments(cls)
    try:
        hints = typing.get_type_hints(cls)
    except (NameError, TypeError):    # an annotation this Python cannot evaluate: read as written
        hints = {}
    out: list[Key] = []
    for f in dataclasses.fields(cls):
        default = _default(f)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(default):
            out += keys(type(default), f"{key}.")
            continue
        out.append(Key(key, default, _allowed(f.type, hints.get(f.name)), comments.get(f.name, "")))
    return out


def _value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def section_keys(section: str | None) -> list[Key]:
    """The keys under `section` (a dotted prefix: `bal`, `bal.weights`, or one key); ConfigError naming the
    sections when it names none."""
    every = keys()
    if not section:
        return every
    chosen = [k for k in every if k.key == section or k.key.startswith(section + ".")]
    if not chosen:
        sections = sorted({k.key.split(".")[0] for k in every})
        raise ConfigError(f"SECTION: {section!r} is no config key or section; sections: {', '.join(sections)}")
    return chosen


def reference_text(section: str | None = None) -> str:
    """The reference as an aligned table: key, default, allowed values, description."""
    rows = [[k.key, _value(k.default), k.allowed, k.description] for k in section_keys(section)]
    return table(["key", "default", "allowed", "description"], rows, left=3, text_last=True)


def defaults_yaml(section: str | None = None) -> str:
    """The defaults as YAML (a config to start from), each key's description as a comment."""
    lines: list[str] = []
    opened: list[str] = []
    for k in section_keys(section):
        parts = k.key.split(".")
        common = 0
        while common < min(len(opened), len(parts) - 1) and opened[common] == parts[common]:
            common += 1
        opened = opened[:common]
        for depth in range(common, len(parts) - 1):
            lines.append(f"{'  ' * depth}{parts[depth]}:")
            opened.append(parts[depth])
        comment = f"   # {k.description}" if k.description else ""
        lines.append(f"{'  ' * (len(parts) - 1)}{parts[-1]}: {_value(k.default)}{comment}")
    return "\n".join(lines)
