"""The run directory: atomic writes, stage completion records, and the provenance files beside artifacts.

Nothing a stage writes is overwritten in place: every file is written under a temporary name in
the same directory and renamed, so a run killed mid-write leaves either the old file or none.
Every output of every command goes through `atomic_path`, which replaces an existing path only when it
is this program's own earlier output — inside a run directory (its marker), or listed with its sha256 in the manifest
beside it (`rundir.ownership`: the one rule, never a file's type or name) — and never the working directory or above,
a run, a symlink or one of the command's inputs (`check_output`). Paths are normalised (`..`, file://, the parent's
symlinks) before any check.
A run directory carries a marker file (`.wpultr-run`) from its creation: `--fresh` deletes only a
directory that holds one, and never a filesystem root, the home directory or a directory holding the
working directory, the config file or another run.
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:    # only an annotation here: the read-only commands start without pandas
    import pandas as pd

from ..errors import RunDirError
from .layout import CONFIG_FILE, MARKER, STAGES_DIR, VERSIONS_FILE
from .ownership import OWNED_FILE, Replaces, check_manifest_writable, file_sha256, normalise

__all__ = ["OWNED_FILE", "Replaces", "RunDir", "atomic_path", "check_output", "file_sha256", "holds_only",
           "is_run_dir", "package_versions", "read_json", "write_json", "write_parquet", "write_text"]

MARKER_FORMAT = 1
_PACKAGES = ("wpultr", "numpy", "pandas", "pyarrow", "dask", "distributed", "causal-learn", "torch",
             "transformers", "safetensors", "scikit-learn", "scipy", "pyyaml", "typer")
_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def version_packages() -> tuple[str, ...]:
    """The packages whose versions a run records: those above, then every package wpultr requires as installed
    (its metadata; an optional extra's too — xgboost —, the test tools aside), so LightGBM, numba and the rest
    are named without a list kept by hand."""
    try:
        requires = metadata.requires("wpultr") or []
    except metadata.PackageNotFoundError:      # run from a source tree that is not installed
        return _PACKAGES
    names = [m.group(0) for r in requires if 'extra == "test"' not in r and (m := _REQUIREMENT_NAME.match(r))]
    return tuple(dict.fromkeys([*_PACKAGES, *names]))


@contextlib.contextmanager
def atomic_path(path: str | Path, replaces: Replaces | None = None, inputs: Iterable[str | Path | None] = (),
                key: str | None = None) -> Iterator[Path]:
    """Yield a temporary sibling of `path`; on success rename it onto `path` (file or directory).

    An existing `path` is replaced only when it is this program's own (`check_output`): what `replaces` accepts
    (its manifest), or, without it, a path inside a run directory. The old directory is moved aside first and
    deleted only once the new one is in place; `replaces.record` then lists the new output in its manifest.
    """
    check_output(path, replaces, inputs, key)
    label = f"{key} {path}" if key else str(path)
    path = normalise(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise RunDirError(f"{label}: a file stands where its directory would go ({_file_above(path)}); "
                          f"choose another {key or 'path'}") from None
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    old = path.with_name(f".{path.name}.old-{os.getpid()}")
    for leftover in (tmp, old):
        _remove(leftover)
    try:
        try:
            yield tmp
        except OSError as error:   # a failed write (disk full, file too large) names the output it was for
            if error.errno is None or error.filename is not None:
                raise
            raise OSError(error.errno, error.strerror, str(path)) from error
        swap = path.exists() and (path.is_dir() or tmp.is_dir())   # rename cannot put a directory over a path
        if swap:
            os.replace(path, old)
        try:
            os.replace(tmp, path)
        except OSError:
            if swap:
                os.replace(old, path)
            raise
        if replaces is not None and replaces.record is not None and not (replaces.in_runs and _in_run_dir(path)):
            replaces.record(path)      # a run's own files need no record: its marker proves them
    finally:
        for leftover in (tmp, old):
            _remove(leftover)


def _file_above(path: Path) -> Path:
    """The nearest path above `path` that exists and is not a directory (what a mkdir of its parents trips on)."""
    return next((p for p in path.parents if p.exists() and not p.is_dir()), path.parent)


def _remove(path: Path) -> None:
    """Delete `path` (file, link or directory) if it exists: only ever a temporary name of atomic_path's."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def check_output(path: str | Path, replaces: Replaces | None = None, inputs: Iterable[str | Path | None] = (),
                 key: str | None = None) -> None:
    """RunDirError (one line naming `key` and `path`) unless writing `path` can destroy nothing but this program's
    own earlier output.

    `path` (a local path or a file:// URL) is normalised first (`ownership.normalise`). Refused always: a filesystem
    root, the home directory, the working directory or one holding it, a symlink, a run directory, and a path that
    is, holds or lies inside one of `inputs` (the command's own local inputs). An existing path must pass `replaces`
    (its manifest lists it with its present hashes); without it, only a path inside a run directory (a stage's own
    output) may be replaced. A file named like the manifest beside `path` that is not one is refused too.
    """
    target = normalise(path)
    label = f"{key} {path}" if key else str(path)
    reason = _protected(target, (Path.cwd(),)) or _an_input(target, inputs)
    if reason is None and (target.exists() or target.is_symlink()):
        reason = _not_ours(target, replaces)
    if reason is None and replaces is not None and replaces.record is not None:
        reason = check_manifest_writable(target)
    if reason:
        raise RunDirError(f"{label}: {reason}; wpultr replaces only what it wrote there before: "
                          f"choose another {key or 'path'} or remove it yourself")


def _protected(target: Path, holds: Iterable[str | Path | None]) -> str | None:
    """Why nothing may be written at (or deleted as) `target` whatever it holds: a filesystem root, the home
    directory, or one of the paths `holds` (the working directory, a config file) or a directory above one."""
    target = Path(os.path.abspath(target))
    real = target.resolve()
    if target.parent == target or real.parent == real:
        return "is a filesystem root"
    if real == Path.home().resolve():
        return "is the home directory"
    for path in (h for h in holds if h is not None):
        inner = (Path(os.path.abspath(path)), Path(path).resolve())
        if any(_within(i, outer) for outer in (target, real) for i in inner):
            return "is the working directory or holds it" if Path(path) == Path.cwd() else f"holds {path}"
    return None


def _an_input(target: Path, inputs: Iterable[str | Path | None]) -> str | None:
    """Why `target` may not be written: it is, holds or lies inside one of this command's inputs (local paths)."""
    for given in inputs:
        if given is None:
            continue
        source = Path(os.path.abspath(given))     # a URL input (caller's to pass local) overlaps no local path
        for a in (target, target.resolve()):
            for b in (source, source.resolve()):
                if _within(a, b) or _within(b, a):
                    return f"is, holds or lies inside an input of this command ({given})"
    return None


def _within(inner: Path, outer: Path) -> bool:
    """`inner` is `outer` or lies under it."""
    return inner == outer or outer in inner.parents


def _not_ours(target: Path, replaces: Replaces | None) -> str | None:
    """Why the existing `target` may not be replaced, or None when it is this program's own output."""
    if target.is_symlink():
        return "is a symlink"
    if target.is_dir() and (is_run_dir(target) or _unmarked_run(target)):
        return "holds a wpultr run"
    if replaces is not None:
        if replaces.test(target) or (replaces.in_runs and _in_run_dir(target)):
            return None
        return f"exists and is not {replaces.what}"
    if not (_in_run_dir(target) or _in_own_temporary(target)):
        return f"exists outside any run directory ({'a directory' if target.is_dir() else 'a file'} wpultr has no " \
               f"record of writing)"
    return None


def replaceable(path: str | Path, replaces: Replaces | None) -> bool:
    """The existing `path` may be replaced by an output that `replaces` describes (check_output's test, the
    protected places and inputs aside)."""
    return _not_ours(normalise(path), replaces) is None


def _in_own_temporary(target: Path) -> bool:
    """`target` lies inside a temporary directory of this process's `atomic_path` (`.<name>.tmp-<pid>`): an output
    still being written, before it is swapped into place."""
    suffix = f".tmp-{os.getpid()}"
    return any(p.name.startswith(".") and p.name.endswith(suffix) for p in target.parents)


def _in_run_dir(target: Path) -> bool:
    """`target` lies inside a run directory (one of its parents carries the run marker): the run's own file."""
    return any(is_run_dir(parent) for parent in target.parents)


def holds_only(path: Path, allowed: Callable[[str], bool]) -> bool:
    """`path` is a directory whose every entry (relative POSIX path, walked down) is a plain file or directory
    that `allowed` accepts: a directory this program fills with files of known names."""
    if not path.is_dir() or path.is_symlink():
        return False
    for entry in path.rglob("*"):
        rel = entry.relative_to(path).as_posix()
        if entry.is_symlink() or not (entry.is_dir() or entry.is_file()):
            return False
        if entry.is_file() and not allowed(rel):
            return False
    return True


def write_text(path: str | Path, text: str, replaces: Replaces | None = None, key: str | None = None) -> None:
    """Write `text` atomically; an existing path replaced only as `atomic_path` allows."""
    with atomic_path(path, replaces, key=key) as tmp:
        tmp.write_text(text)


def write_json(path: str | Path, obj: Any, replaces: Replaces | None = None) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n", replaces)


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


def write_parquet(path: str | Path, df: pd.DataFrame, replaces: Replaces | None = None,
                  inputs: Iterable[str | Path | None] = (), key: str | None = None) -> None:
    with atomic_path(path, replaces, inputs, key) as tmp:
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
    for name in version_packages():
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    try:
        import torch  # lazy: +3.0 s (torch)
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
    def create(cls, root: str | Path) -> RunDir:
        """Make (or reopen) a run directory and mark it as one.

        Refuses (RunDirError) a filesystem root, the home directory, and a directory that already holds
        something other than a wpultr run (a run written before markers existed is adopted). The final path is
        checked and written, not its spelling (`victim/new/..` is `victim`, whether or not `new` exists yet).
        """
        root = cls.checked_root(root)
        if root.is_dir() and not (root / MARKER).is_file() and any(root.iterdir()) and not _unmarked_run(root):
            raise RunDirError(f"{root}: exists, is not empty and holds no wpultr run (no {MARKER}); "
                              f"choose another run_dir or name")
        root.mkdir(parents=True, exist_ok=True)
        if not (root / MARKER).is_file():
            write_json(root / MARKER, {"wpultr_run": MARKER_FORMAT,
                                       "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        return cls(root)

    @staticmethod
    def checked_root(root: str | Path) -> Path:
        """The final path of run directory `root` (`..` resolved, not its spelling); RunDirError when it is a
        filesystem root or the home directory."""
        root = Path(os.path.abspath(root))
        _check_not_protected(root, holds=())
        return root

    @staticmethod
    def remove_fresh(root: str | Path, keep: tuple[str | Path | None, ...] = ()) -> bool:
        """Delete the run directory `root` for `--fresh`; False when there is none.

        Only a directory holding a run's marker (or a run written before markers) is deleted; a root,
        the home directory, a directory holding the working directory or a path in `keep` (the config
        file), a symlink or a directory holding another run raise RunDirError and nothing is deleted. As in
        `create`, the final path is checked, not its spelling.
        """
        root = Path(os.path.abspath(root))
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
        return self.path(STAGES_DIR, f"{stage}.json")

    def is_done(self, stage: str, outputs: list[str]) -> bool:
        """A stage is done when its completion record exists and every declared output is on disk."""
        return self._marker(stage).exists() and all(self.path(o).exists() for o in outputs)

    def mark_done(self, stage: str, outputs: list[str], seconds: float, info: dict[str, Any] | None = None,
                  cluster: dict[str, Any] | None = None) -> None:
        """Write `stage`'s completion record: outputs, seconds, what it reported and the cluster it ran on."""
        record = {"stage": stage, "outputs": outputs, "seconds": round(seconds, 3),
                  "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "info": info or {}}
        write_json(self._marker(stage), record if cluster is None else {**record, "cluster": cluster})

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
    """RunDirError when `root` is a filesystem root, the home directory, or is or holds the working directory or
    one of the paths `holds` (the config file): `_protected`, worded for a run directory."""
    reason = _protected(root, holds)
    if reason:
        hint = "" if reason in ("is a filesystem root", "is the home directory") else " (check run_dir and name)"
        raise RunDirError(f"{root}: {reason}; a run directory must be a directory of its own{hint}")
