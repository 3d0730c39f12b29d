"""What the three command lines share (wpultr/cli.py, causal/cli.py, experiment/cli.py): how a user error
is shown, and `--set KEY=VALUE` overrides.

A `WpultrError` (config, schema, export, cluster, run directory, graph file) or a missing file is
something the user can fix: one red line, exit code 2. Every other exception is a bug and keeps its
traceback.
"""
from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable
from typing import Any

import typer

from .errors import WpultrError

USER_ERRORS = (WpultrError, FileNotFoundError, NotADirectoryError, FileExistsError)   # a file where a folder goes
_WRITE_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS}   # OSErrors a user fixes (user_errors)


def fail(error: BaseException) -> typer.Exit:
    """Print `error` as one line on stderr; the caller raises the returned Exit (code 2)."""
    typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
    return typer.Exit(2)


def user_errors(fn: Callable) -> Callable:
    """Wrap a command: the errors a user can fix become one clear line and exit code 2."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as e:
            raise fail(e) from None
        except OSError as e:   # a write the machine refused (disk full, file too large, read-only): one line
            if e.errno not in _WRITE_ERRNOS:
                raise
            where = f"{e.filename}: " if e.filename else ""
            raise fail(f"{where}{e.strerror or os.strerror(e.errno)} (errno {errno.errorcode[e.errno]}); "
                       f"free space or choose another output") from None
    return wrapper


def parse_sets(sets: list[str] | None, example: str = "train.epochs=2") -> dict[str, Any]:
    """`--set KEY=VALUE` options as {dotted key: YAML-parsed value}."""
    from .config import parse_overrides  # lazy: +0.9 s (pandas, pyarrow)
    return parse_overrides(sets, example)


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """{dotted key: value} as the nested mapping a config file would hold."""
    from .config import set_dotted  # lazy: +0.9 s (pandas, pyarrow)
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        set_dotted(nested, key, value)
    return nested
