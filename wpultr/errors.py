"""The errors a user can fix, at the bottom of the import graph: every module may raise them.

The CLI shows a `WpultrError` as one line (exit code 2); any other exception is a bug and keeps
its traceback.
"""
from __future__ import annotations


class WpultrError(Exception):
    """Something the user can fix; the message names the file, line, column or config key at fault."""


class ConfigError(WpultrError, ValueError):
    """A config key has a value wpultr cannot use; the message names the key and what is allowed."""


class SchemaError(WpultrError, ValueError):
    """A table does not match its declared schema; the message names the column and row at fault."""


class ExportError(WpultrError, ValueError):
    """An exported ranker directory is incomplete, tampered with or of an unknown format version."""


class ClusterError(WpultrError, RuntimeError):
    """The Dask scheduler cannot be reached or lost its workers; the message says what to do."""


class RunDirError(WpultrError, ValueError):
    """A run directory or run name that wpultr refuses to write to or delete."""


MAX_SHOWN = 200      # characters of a value a message shows: one readable line whatever was written


def cut(text: str) -> str:
    """`text` cut to MAX_SHOWN characters."""
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "..."


def brief(value: object) -> str:
    """`value`'s repr, cut to MAX_SHOWN characters."""
    return cut(repr(value))


def require(ok: bool, key: str, allowed: str, value: object) -> None:
    """Raise ConfigError `<key>: must be <allowed>, got <value>` unless `ok`: the one form of a config check."""
    if not ok:
        raise ConfigError(f"{key}: must be {allowed}, got {brief(value)}")
