"""The run directory: atomic writes, stage completion records, and the provenance files beside artifacts.

Nothing a stage writes is overwritten in place: every file is written under a temporary name in
the same directory and renamed, so a run killed mid-write leaves either the old file or none.
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

_PACKAGES = ("wpultr", "numpy", "pandas", "pyarrow", "dask", "distributed", "causal-learn", "torch",
             "transformers", "safetensors", "scikit-learn", "scipy", "pyyaml", "typer")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling of `path`; on success rename it onto `path` (file or directory)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
    try:
        yield tmp
        if path.is_dir():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


def write_parquet(path: str | Path, df: pd.DataFrame) -> None:
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def package_versions() -> dict[str, Any]:
    """Versions of Python, the platform and every package a run's numbers depend on."""
    versions: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    try:
        import torch
        versions["torch_cuda"] = torch.version.cuda
        versions["cuda_available"] = bool(torch.cuda.is_available())
    except ImportError:  # torch is a dependency; this only guards odd environments
        pass
    return versions


class RunDir:
    """A run's directory: where stages put outputs and record that they finished."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def _marker(self, stage: str) -> Path:
        return self.path("stages", f"{stage}.json")

    def is_done(self, stage: str, outputs: list[str]) -> bool:
        """A stage is done when its completion record exists and every declared output is on disk."""
        return self._marker(stage).exists() and all(self.path(o).exists() for o in outputs)

    def mark_done(self, stage: str, outputs: list[str], seconds: float, info: dict[str, Any] | None = None) -> None:
        write_json(self._marker(stage), {"stage": stage, "outputs": outputs, "seconds": round(seconds, 3),
                                         "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                         "info": info or {}})

    def stage_record(self, stage: str) -> dict[str, Any] | None:
        marker = self._marker(stage)
        return read_json(marker) if marker.exists() else None
