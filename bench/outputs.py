"""What a bench script's --json (or --out) file may replace: only what a bench script wrote there before, proved as
every wpultr output proves it (wpultr.rundir.ownership: listed with its sha256 in .wpultr-outputs.json beside it).
A refusal is one line (SystemExit), given before any figure is measured."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COMMAND = "bench --json"


def check_json_output(path: str | Path | None, key: str = "--json") -> Path | None:
    """`path` (a path or a file:// URL) as the local file it names, or SystemExit naming it when it exists and is not
    a bench script's own earlier output; None stays None."""
    if path is None:
        return None
    from wpultr.errors import WpultrError
    from wpultr.rundir.files import check_output
    from wpultr.rundir.ownership import output_of, output_path
    try:
        local = output_path(path, key)
        check_output(local, output_of(COMMAND), key=key)
    except WpultrError as error:
        raise SystemExit(f"error: {error}") from None
    return local


def write_json_output(path: str | Path, obj: Any, key: str = "--json", **dump: Any) -> None:
    """Write `obj` as JSON to `path` atomically, replacing only a bench script's own earlier file there."""
    from wpultr.errors import WpultrError
    from wpultr.rundir.files import write_text
    from wpultr.rundir.ownership import output_of
    local = check_json_output(path, key)
    try:
        write_text(local, json.dumps(obj, **{"indent": 2, **dump}), output_of(COMMAND), key)
    except WpultrError as error:
        raise SystemExit(f"error: {error}") from None
