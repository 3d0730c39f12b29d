"""The one rule for what an output of wpultr may replace: only what carries wpultr's own manifest.

Every command that writes outside a run directory (simulate, ingest, experiment, score, compare --html, graph show
--output, identifiability check --figure, the bench drivers' --out) names itself (`output_of(command)`); after the
output is in place its files are listed, each with its sha256, in `.wpultr-outputs.json` of the directory that holds
it. A later write may replace an existing path only when that manifest lists it, for the same command, and every file
under it still has the recorded hash (a file the user edited, or added, makes it the user's again). Nothing is ever
replaced for its type or its name (a PNG, a Parquet file, `part-00000.gz`). A directory wpultr fills whole carries the
manifest inside itself instead (an export's export.json, the bundled sample's MANIFEST.json): the same check.

Paths are normalised before any check (`normalise`, `normalise_url`): `..` resolved, a file:// URL turned into the
local path it names, the symlinks of the parent directory followed, so the path checked is the path written.
"""
from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError

OWNED_FILE = ".wpultr-outputs.json"
OWNED_FORMAT = "wpultr.outputs/1"
MAX_OWNED_BYTES = 16 << 20           # a manifest lists file names and hashes: far below this
_HOSTLESS = ("file", "local", "memory")   # protocols whose URL holds no host or bucket
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True)
class Replaces:
    """What an output may replace when its path exists: `test(path)` is True only for this program's own earlier
    output (its manifest, checked by content hash); `what` names that kind in the refusal; `record(path)`, when set,
    lists the new output in its manifest once it is in place; `in_runs`: a path inside a run directory is the run's
    own and may be replaced (a pipeline stage, a command writing into the run it reads), never for a user's --out."""

    what: str
    test: Callable[[Path], bool]
    record: Callable[[Path], None] | None = None
    in_runs: bool = False


def file_sha256(path: str | Path) -> str:
    """The sha256 hex digest of a file, read 1 MiB at a time: what provenance manifests record of each file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# Normalising a path or URL before any check
# ---------------------------------------------------------------------------------------------
def normalise_url(url: str) -> str:
    """`url` with `.`, `..` and doubled slashes of its path resolved (`file:///a/b/..` is `file:///a`); the
    protocol and host kept. A URL's `..` is resolved as a POSIX path, as the filesystem behind it will."""
    proto, rest = url.split("://", 1)
    if proto.lower() in _HOSTLESS:       # the whole rest is a path
        return f"{proto}://" + posixpath.normpath("/" + rest.lstrip("/")).lstrip("/" if proto.lower() != "file" else "")
    host, sep, path = rest.partition("/")
    if not sep:
        return url
    normal = posixpath.normpath("/" + path)
    return f"{proto}://{host}{'' if normal == '/' else normal}"


def local_path_of(url: str) -> Path | None:
    """The local path a file:// URL names (normalised), None for any other protocol."""
    if not url.lower().startswith("file://"):
        return None
    return Path(normalise_url(url)[len("file://"):])


def normalise(path: str | os.PathLike) -> Path:
    """The local path that writing `path` writes: absolute, `..` resolved, the parent's symlinks followed (the final
    name itself is kept: a symlink there is refused, never written through); a file:// URL as the path it names."""
    text = os.fspath(path)
    if isinstance(text, str) and _URL.match(text):
        local = local_path_of(text)
        if local is None:
            raise ValueError(f"{text}: not a local path or file:// URL")
        text = str(local)
    absolute = Path(os.path.abspath(text))
    if absolute.parent == absolute:
        return absolute
    return Path(os.path.realpath(absolute.parent)) / absolute.name


def output_path(value: str | os.PathLike, key: str) -> Path:
    """A command's local output as given on its command line: a path, or a file:// URL as the path it names (`..`
    resolved); ConfigError naming `key` for another protocol (the command writes local files only)."""
    text = os.fspath(value)
    if isinstance(text, str) and _URL.match(text):
        local = local_path_of(text)
        if local is None:
            raise ConfigError(f"{key}: {text!r} is a URL of protocol {text.split('://', 1)[0]!r}; this output is "
                              f"written to a local path or a file:// URL only")
        return local
    return Path(text)


# ---------------------------------------------------------------------------------------------
# The manifest beside an output
# ---------------------------------------------------------------------------------------------
class ManifestError(Exception):
    """The directory's `.wpultr-outputs.json` is not one wpultr wrote (unreadable, another format)."""


def read_manifest(directory: Path) -> dict[str, Any]:
    """{relative path: {"command", "sha256"}} of `directory`'s manifest ({} when there is none); ManifestError when
    a file of that name is not wpultr's manifest."""
    path = directory / OWNED_FILE
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_OWNED_BYTES:
            raise ValueError("not a plain file of a manifest's size")
        values = json.loads(path.read_text())
        files = values["files"] if isinstance(values, dict) and values.get("format") == OWNED_FORMAT else None
        if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
            raise ValueError(f"not {OWNED_FORMAT}")
        return files
    except (OSError, ValueError, KeyError, RecursionError) as error:
        raise ManifestError(f"{path} is not a manifest wpultr wrote ({error})") from None


def _entries(target: Path) -> dict[str, str] | None:
    """{path relative to target's parent: sha256} of every file at or under `target`; None when a symlink or
    something other than a plain file or directory lies there."""
    if target.is_symlink():
        return None
    if target.is_file():
        return {target.name: file_sha256(target)}
    if not target.is_dir():
        return None
    found: dict[str, str] = {}
    for root, dirs, files in os.walk(target):
        for name in dirs + files:
            path = Path(root) / name
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                return None
            if name in files:
                found[path.relative_to(target.parent).as_posix()] = file_sha256(path)
    return found


def why_not_owned(target: Path, command: str) -> str | None:
    """Why the existing `target` is not `command`'s own earlier output, or None when it is: the manifest beside it
    lists it (a directory: itself and every file under it) for `command`, each file with its present sha256."""
    try:
        listed = read_manifest(target.parent)
    except ManifestError as error:
        return str(error)
    entries = _entries(target)
    if entries is None:
        return "is a symlink or holds one, or holds something other than files and directories"
    mine = target.name if target.is_file() else f"{target.name}/"
    if listed.get(mine, {}).get("command") != command:
        return f"is not listed in {target.parent / OWNED_FILE} as written by {command}"
    for rel, digest in entries.items():
        entry = listed.get(rel)
        if entry is None or entry.get("command") != command:
            return f"holds {rel}, which {command} did not write"
        if entry.get("sha256") != digest:
            return f"{rel} changed since {command} wrote it (its sha256 differs)"
    return None


def record(target: Path, command: str) -> None:
    """List `target` (a file, or a directory and every file under it) in its parent's manifest as `command`'s, with
    each file's sha256, replacing what the manifest said of that path before."""
    target = normalise(target)
    directory = target.parent
    listed = read_manifest(directory)
    entries = _entries(target) or {}
    for rel in [r for r in listed if r == target.name or r == f"{target.name}/" or r.startswith(f"{target.name}/")]:
        del listed[rel]
    if target.is_dir():
        listed[f"{target.name}/"] = {"command": command}
    for rel, digest in entries.items():
        listed[rel] = {"command": command, "sha256": digest}
    path = directory / OWNED_FILE
    tmp = directory / f".{OWNED_FILE}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps({"format": OWNED_FORMAT, "files": dict(sorted(listed.items()))}, indent=1) + "\n")
    os.replace(tmp, path)


def output_of(command: str, in_runs: bool = False) -> Replaces:
    """What `command` (e.g. "wpultr score") may replace: only its own earlier output, listed with its hashes in the
    manifest beside it; the new output is listed there once in place. `in_runs`: also any path inside a run directory
    (the run's marker proves it; nothing is recorded there) — for a stage of the pipeline writing its own run."""
    return Replaces(f"an earlier output of {command} (listed with its sha256 in {OWNED_FILE} beside it)",
                    lambda path: why_not_owned(path, command) is None, lambda path: record(path, command), in_runs)


def check_manifest_writable(target: Path) -> str | None:
    """Why the manifest beside `target` cannot be written (a file of its name that is not wpultr's), or None."""
    try:
        read_manifest(normalise(target).parent)
    except ManifestError as error:
        return str(error)
    return None
