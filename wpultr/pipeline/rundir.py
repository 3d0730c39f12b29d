"""The run directory: atomic writes, stage completion records, and the provenance files beside artifacts.

Nothing a stage writes is overwritten in place: every file is written under a temporary name in
the same directory and renamed, so a run killed mid-write leaves either the old file or none.
A run directory carries a marker file (`.wpultr-run`) from its creation: `--fresh` deletes only a
directory that holds one, and never a filesystem root, the home directory or a directory holding the
working directory, the config file or another run.
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

from ..errors import RunDirError
from .layout import CONFIG_FILE, MARKER, VERSIONS_FILE

MARKER_FORMAT = 1
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

    @classmethod
    def create(cls, root: str | Path) -> "RunDir":
        """Make (or reopen) a run directory and mark it as one.

        Refuses (RunDirError) a filesystem root, the home directory, and a directory that already holds
        something other than a wpultr run (a run written before markers existed is adopted).
        """
        root = Path(root)
        _check_not_protected(root, holds=())
        if root.is_dir() and not (root / MARKER).is_file() and any(root.iterdir()):
            if not _unmarked_run(root):
                raise RunDirError(f"{root}: exists, is not empty and holds no wpultr run (no {MARKER}); "
                                  f"choose another run_dir or name")
        root.mkdir(parents=True, exist_ok=True)
        if not (root / MARKER).is_file():
            write_json(root / MARKER, {"wpultr_run": MARKER_FORMAT,
                                       "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        return cls(root)

    @staticmethod
    def remove_fresh(root: str | Path, keep: tuple[str | Path | None, ...] = ()) -> bool:
        """Delete the run directory `root` for `--fresh`; False when there is none.

        Only a directory holding a run's marker (or a run written before markers) is deleted; a root,
        the home directory, a directory holding the working directory or a path in `keep` (the config
        file), a symlink or a directory holding another run raise RunDirError and nothing is deleted.
        """
        root = Path(root)
        if not root.exists() and not root.is_symlink():
            return False
        _check_not_protected(root, holds=(Path.cwd(), *keep))
        if root.is_symlink() or not root.is_dir():
            raise RunDirError(f"{root}: --fresh deletes only a run directory, and this is a "
                              f"{'symlink' if root.is_symlink() else 'file'}; remove it yourself")
        if not (is_run_dir(root) or _unmarked_run(root)):
            raise RunDirError(f"{root}: holds no wpultr run (no {MARKER} marker); --fresh will not delete it. "
                              f"Remove it yourself or choose another run_dir")
        nested = next((Path(d) for d, _, files in os.walk(root) if MARKER in files and Path(d) != root), None)
        if nested is not None:
            raise RunDirError(f"{root}: holds another run ({nested}); --fresh will not delete it")
        shutil.rmtree(root)
        return True

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


def is_run_dir(path: str | Path) -> bool:
    """`path` holds a readable wpultr run marker."""
    marker = Path(path) / MARKER
    try:
        return marker.is_file() and read_json(marker).get("wpultr_run") == MARKER_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _unmarked_run(path: Path) -> bool:
    """`path` holds a run written before markers existed: config.yaml and a versions.json naming wpultr."""
    try:
        return (path / CONFIG_FILE).is_file() and "wpultr" in read_json(path / VERSIONS_FILE)
    except (OSError, ValueError, TypeError):
        return False


def _check_not_protected(root: Path, holds: tuple[str | Path | None, ...]) -> None:
    """RunDirError when `root` is a filesystem root, the home directory, or is or holds one of the paths
    `holds` (the working directory, the config file)."""
    target = Path(os.path.abspath(root))
    real = target.resolve()
    if target.parent == target or real.parent == real:
        raise RunDirError(f"{root}: is a filesystem root; a run directory must be a directory of its own")
    if real == Path.home().resolve():
        raise RunDirError(f"{root}: is the home directory; a run directory must be a directory of its own")
    for path in (h for h in holds if h is not None):
        inner = (Path(os.path.abspath(path)), Path(path).resolve())
        if any(outer == i or outer in i.parents for outer in (target, real) for i in inner):
            raise RunDirError(f"{root}: holds {path}; a run directory must be a directory of its own "
                              f"(check run_dir and name)")
