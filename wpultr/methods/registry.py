"""The methods by name, importable without torch (the config validates `train.method` against it)."""
from __future__ import annotations

from importlib import import_module
from typing import Any

# name -> "module:Class" under wpultr.methods, imported on first use.
METHODS: dict[str, str] = {
    "naive": "naive:Naive",
}


def get_method(name: str) -> Any:
    """A new instance of the method registered under `name`; an unknown name lists the known ones."""
    if name not in METHODS:
        from ..config import ConfigError
        raise ConfigError(f"train.method: {name!r} is not allowed; allowed values: {', '.join(sorted(METHODS))}")
    module, cls = METHODS[name].split(":")
    return getattr(import_module(f"{__package__}.{module}"), cls)()
