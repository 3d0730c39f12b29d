"""Where a run's files live: a local path or an fsspec URL (s3://, gs://, file://, memory://, …).

Why: a remote Dask cluster should need no shared POSIX filesystem, only an object store every
machine can reach. The design keeps every stage's local-file code as it is:

* Inputs (`data.train`, `data.annotations`) are read through fsspec wherever they are opened
  (`open_input`, `expand` for `*` patterns, `size`, `is_file`), on the client or on a worker, so
  workers read the logs from the URL themselves. A local path keeps Python's own `open`.
* A run directory given as a URL has a *working copy*: a local directory at the same path on every
  machine (`working_copy_dir`, derived from the URL), where the stages read and write as today.
  `WorkingCopy.pull` brings the URL's files into it (on start and so on resume, and on remote workers
  before each stage); `WorkingCopy.push` sends what changed back after every finished stage, the
  stage's completion record last: a stage whose upload was cut short has no record at the URL and is
  re-run on resume. Workers on other hosts push what they wrote before the client pushes.
* Writes are atomic where the filesystem allows: a local file or a file:// URL is written under a
  temporary name and renamed; on an object store (s3, gs) one object PUT — multipart uploads too — is
  atomic by itself: the object appears whole or not at all, so it is written in place.
* memory:// lives in one process: fit for tests and in-process clusters, never shared with workers.
* Every URL is normalised before it is checked or used (`normalised`: `file:///d/x/..` is `file:///d`), and an
  upload (`upload_dir`) replaces only an earlier upload whose marker lists every file there with its present sha256.
* The commands that read a run (`wpultr evaluate`, `export`, `status`, `graph`, `identifiability check`) take a
  URL too (`readable_run_dir`): they pull only the files they read into a *reader copy* beside the working
  copy, never into it (a run on this machine may be syncing there), and their errors name the URL. A file://
  URL is read in place.

An unknown protocol, or one whose package (s3fs, gcsfs, …) is not installed, is a ConfigError naming
the config key (`check_url`).
"""
from __future__ import annotations

import builtins
import contextlib
import glob
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterable, Iterator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import IO, Any

from .errors import ConfigError, RunDirError, WpultrError
from .rundir.files import Replaces, atomic_path
from .rundir.layout import MARKER
from .rundir.ownership import local_path_of, normalise_url

URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
SYNC_MANIFEST = ".wpultr-sync.json"       # in a working copy: what it last sent or received, never uploaded
WORKDIR_ENV = "WPULTR_WORKDIR"            # where working copies of URL run directories go
_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs",
             "abfss": "adlfs", "adl": "adlfs", "hf": "huggingface_hub", "sftp": "paramiko", "ssh": "paramiko"}
_STAMP_KEYS = ("ETag", "etag", "md5Hash", "crc32c", "LastModified", "updated", "mtime", "created")


def normalised(url: str) -> str:
    """`url` as it will be read or written: its path's `.` and `..` resolved (`file:///d/x/..` is `file:///d`), so
    every check sees the place the filesystem will use, never the spelling (rundir.ownership.normalise_url)."""
    return normalise_url(url) if is_url(url) else url


def is_url(path: str | os.PathLike | None) -> bool:
    """`path` is a URL with a protocol (`s3://…`), not a local path."""
    return isinstance(path, str) and bool(URL.match(path))


def protocol(url: str) -> str:
    return url.split("://", 1)[0].lower()


def check_url(url: str, key: str) -> None:
    """ConfigError naming `key` when `url`'s protocol is unknown to fsspec or its package is missing."""
    import fsspec  # lazy: +0.2 s (fsspec)
    from fsspec.registry import known_implementations, registry  # lazy: +0.2 s (fsspec)
    proto = protocol(url)
    if proto not in known_implementations and proto not in registry:
        raise ConfigError(f"{key}: unknown storage protocol {proto!r} in {url!r}; allowed protocols: "
                          f"{', '.join(sorted(fsspec.available_protocols()))}")
    try:
        fsspec.get_filesystem_class(proto)
    except ImportError:
        package = _PACKAGES.get(proto)
        hint = f"pip install {package}" if package else known_implementations[proto].get("err", "install its package")
        raise ConfigError(f"{key}: protocol {proto!r} of {url!r} needs a package that is not installed: "
                          f"{hint}") from None


def filesystem(url: str):
    """(fsspec filesystem, path within it) of `url`."""
    from fsspec.core import url_to_fs  # lazy: +0.2 s (fsspec)
    return url_to_fs(url)


def _is_local_fs(fs: Any) -> bool:
    from fsspec.implementations.local import LocalFileSystem  # lazy: +0.2 s (fsspec)
    return isinstance(fs, LocalFileSystem)


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
def open_input(path: str | os.PathLike, mode: str = "rb", compression: str | None = None) -> IO:
    """Open an input file for reading: a local path with `open`, a URL through fsspec.

    `compression="infer"` decompresses by the name (.gz, .bz2, …); the default reads the bytes as stored
    (the Baidu reader decodes gzip itself, so it can keep the lines before a damaged member).
    """
    if not is_url(path):
        if compression is None:
            return builtins.open(path, mode)
        import fsspec  # lazy: +0.2 s (fsspec)
        return fsspec.open(os.fspath(path), mode, compression=compression).open()
    import fsspec  # lazy: +0.2 s (fsspec)
    return fsspec.open(path, mode, compression=compression).open()


def is_file(path: str | os.PathLike) -> bool:
    if not is_url(path):
        return Path(path).is_file()
    fs, inner = filesystem(path)
    return fs.isfile(inner)


def size(path: str | os.PathLike) -> int:
    """Bytes of a file as stored (compressed, if it is)."""
    if not is_url(path):
        return Path(path).stat().st_size
    fs, inner = filesystem(path)
    return int(fs.size(inner))


def expand(pattern: str) -> list[str]:
    """The files a path or `*` pattern names, sorted; URLs keep their protocol."""
    if not is_url(pattern):
        return sorted(glob.glob(pattern))
    fs, inner = filesystem(pattern)
    found = fs.glob(inner) if any(c in inner for c in "*?[") else ([inner] if fs.exists(inner) else [])
    return sorted(fs.unstrip_protocol(p) for p in found if fs.isfile(p))


def write_bytes(path: str, data: bytes, replaces: Replaces | None = None, key: str | None = None) -> None:
    """Write a whole file atomically: temporary name + rename locally (an existing path replaced only as
    `rundir.atomic_path` allows: what `replaces` accepts, named by `key` when refused), one PUT on an object store."""
    if is_url(path) and local_path_of(path) is not None:
        path = str(local_path_of(path))
    if not is_url(path):
        with atomic_path(path, replaces, key=key) as tmp:
            tmp.write_bytes(data)
        return
    path = normalised(path)
    fs, inner = filesystem(path)
    if _is_local_fs(fs):
        write_bytes(inner, data, replaces, key)
        return
    if key is not None and fs.exists(inner):   # a user-named object: no manifest there can prove it is wpultr's
        raise RunDirError(f"{key} {path}: exists, and wpultr keeps no record of what it wrote at a URL but a run "
                          f"directory or an export; wpultr replaces only what it wrote there before: choose another "
                          f"{key} or remove it yourself")
    fs.pipe_file(inner, data)


# ---------------------------------------------------------------------------------------------
# A run directory at a URL, and its local working copy
# ---------------------------------------------------------------------------------------------
def working_copy_dir(url: str) -> Path:
    """The local directory that mirrors run directory `url`: the same path on every machine.

    Under $WPULTR_WORKDIR, else <system temp>/wpultr-runs; named after the URL so two runs never share one.
    """
    root = os.environ.get(WORKDIR_ENV) or os.path.join(tempfile.gettempdir(), "wpultr-runs")
    digest = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]
    tail = re.sub(r"[^A-Za-z0-9._-]", "_", url.rstrip("/").rsplit("/", 1)[-1])[:64] or "run"
    return Path(root).resolve() / f"{tail}-{digest}"


def reader_copy_dir(url: str) -> Path:
    """Where the commands that only read run directory `url` keep their copy of it: beside its working copy
    (`working_copy_dir`), never in it, so a read cannot race a run on this machine syncing the same manifest."""
    copy = working_copy_dir(url)
    return copy.with_name(copy.name + ".read")


def _included(rel: str, include: list[tuple[str, ...]] | None) -> bool:
    """`rel` is one of the files or lies under one of the directories in `include` (None: every file); each
    pattern is matched component by component with fnmatch (`epoch_*` covers `epoch_0/graph.json`)."""
    if include is None:
        return True
    parts = rel.split("/")
    return any(len(parts) >= len(p) and all(fnmatchcase(a, b) for a, b in zip(parts, p, strict=False)) for p in include)


def _synced(rel: str) -> bool:
    """Files a sync moves: not the manifest, not a write in progress (`.<name>.tmp-<pid>`)."""
    name = rel.rsplit("/", 1)[-1]
    return name != SYNC_MANIFEST and not (name.startswith(".") and ".tmp-" in name)


def _remote_stamp(info: dict[str, Any]) -> list:
    """What tells one version of a remote file from another: its size and ETag / checksum / time."""
    value = next((info[k] for k in _STAMP_KEYS if info.get(k) is not None), "")
    if hasattr(value, "timestamp"):   # listings and info() may give one time as a datetime or as seconds
        value = value.timestamp()
    return [int(info.get("size") or 0), str(value)]


def _local_stamp(path: Path) -> list:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


class WorkingCopy:
    """The local working copy of a run directory at `url`, kept in step with it by pull and push."""

    def __init__(self, url: str, local: str | Path | None = None):
        self.url = normalised(url).rstrip("/")
        self.local = Path(local) if local is not None else working_copy_dir(url)
        self.fs, self.root = filesystem(self.url)
        self.root = self.root.rstrip("/")

    # -- the manifest: {relative path: {"local": stamp, "remote": stamp}} of the last transfer
    def _manifest(self) -> dict[str, dict[str, list]]:
        try:
            return json.loads((self.local / SYNC_MANIFEST).read_text())
        except (OSError, ValueError):
            return {}

    def _save(self, manifest: dict[str, dict[str, list]]) -> None:
        if not manifest and not (self.local / SYNC_MANIFEST).exists():
            return   # nothing moved: a new working copy stays empty (RunDir.create takes only an empty one)
        self.local.mkdir(parents=True, exist_ok=True)   # the working copy is wpultr's own: manifest replaced
        tmp = self.local / f".{SYNC_MANIFEST}.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(manifest, sort_keys=True))
        os.replace(tmp, self.local / SYNC_MANIFEST)

    def _remote_files(self) -> dict[str, dict[str, Any]]:
        if not self.fs.exists(self.root):
            return {}
        found = self.fs.find(self.root, detail=True)
        prefix = self.root + "/"
        out = {}
        for name, info in found.items():
            name = name.rstrip("/")
            rel = name[len(prefix):] if name.startswith(prefix) else None
            if rel and info.get("type", "file") == "file" and _synced(rel):
                out[rel] = info
        return out

    def holds_run(self, marker: str) -> bool:
        return self.fs.exists(f"{self.root}/{marker}")

    def pull(self, marker: str | None = None, include: Iterable[str] | None = None) -> int:
        """Bring every file of the URL that is new or changed into the working copy; the number fetched.

        Files the working copy got from the URL earlier and that are gone there are removed; files
        written or deleted here and not pushed yet are left to `push`. With `marker`, RunDirError when the URL
        holds files but no run marker (it is not a wpultr run directory). With `include` (relative paths of files or
        directories, fnmatch patterns allowed), only those are brought up to date: a reader needs no sessions.
        """
        remote = self._remote_files()
        if marker is not None and remote and marker not in remote:
            raise RunDirError(f"{self.url}: exists, is not empty and holds no wpultr run (no {marker}); "
                              f"choose another run_dir or name")
        patterns = None if include is None else [tuple(p.strip("/").split("/")) for p in include]
        remote = {rel: info for rel, info in remote.items() if _included(rel, patterns)}
        manifest, fetched = self._manifest(), 0
        for rel, info in sorted(remote.items()):
            target, stamp = self.local / rel, _remote_stamp(info)
            seen = manifest.get(rel)
            if seen and seen["remote"] == stamp:   # unchanged there; changed or deleted here: push decides
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
            self.fs.get_file(f"{self.root}/{rel}", str(tmp))
            os.replace(tmp, target)
            manifest[rel] = {"local": _local_stamp(target), "remote": stamp}
            fetched += 1
        for rel in [r for r in manifest if r not in remote and _included(r, patterns)]:
            (self.local / rel).unlink(missing_ok=True)
            del manifest[rel]
        self._save(manifest)
        return fetched

    def push(self, last: Iterable[str] = ()) -> int:
        """Send every file of the working copy that changed since the last transfer; the files in `last`
        (relative paths, e.g. a stage's completion record) go after all others. Files this copy sent
        or received before and that are gone here are deleted at the URL. Returns the number sent."""
        manifest = self._manifest()
        local = {p.relative_to(self.local).as_posix(): p for p in self.local.rglob("*")
                 if p.is_file() and _synced(p.relative_to(self.local).as_posix())}
        late = [r for r in last if r in local]
        order = sorted(r for r in local if r not in late) + late
        sent = 0
        for rel in order:
            stamp = _local_stamp(local[rel])
            if manifest.get(rel, {}).get("local") == stamp:
                continue
            remote = f"{self.root}/{rel}"
            self._put(local[rel], remote)
            manifest[rel] = {"local": stamp, "remote": _remote_stamp(self.fs.info(remote))}
            sent += 1
        for rel in [r for r in manifest if r not in local]:
            if self.fs.exists(f"{self.root}/{rel}"):
                self.fs.rm_file(f"{self.root}/{rel}")
            del manifest[rel]
        self._save(manifest)
        return sent

    def _put(self, source: Path, remote: str) -> None:
        """One file up, atomically: temporary name + rename on a local filesystem, one PUT on an object store."""
        parent = remote.rsplit("/", 1)[0]
        if _is_local_fs(self.fs):
            self.fs.makedirs(parent, exist_ok=True)
            tmp = f"{parent}/.{remote.rsplit('/', 1)[1]}.tmp-{os.getpid()}"
            self.fs.put_file(str(source), tmp)
            os.replace(tmp, remote)
        else:
            self.fs.put_file(str(source), remote)

    def remove(self, marker: str) -> None:
        """Delete the run at the URL (for --fresh) and the working copy; RunDirError, deleting nothing, when
        the URL holds files but no run `marker`."""
        remote = self._remote_files()
        if remote and marker not in remote:
            raise RunDirError(f"{self.url}: holds no wpultr run (no {marker} marker); --fresh will not delete "
                              f"it. Remove it yourself or choose another run_dir")
        if self.fs.exists(self.root):
            self.fs.rm(self.root, recursive=True)
        if self.local.is_dir():
            shutil.rmtree(self.local)

    # -- workers on other hosts keep their own working copy at the same path
    def _remote_workers(self, client: Any) -> list[str]:
        """Addresses of the workers on another host than this one (those on this host share the copy);
        none for memory://, which no other process sees."""
        if client is None or protocol(self.url) == "memory":
            return []
        here = _host()
        return [addr for addr, host in client.run(socket.gethostname).items() if host != here]

    def pull_on_workers(self, client: Any) -> None:
        workers = self._remote_workers(client)
        if workers:
            client.run(_pull_here, self.url, str(self.local), workers=workers)

    def push_from_workers(self, client: Any) -> None:
        workers = self._remote_workers(client)
        if workers:
            client.run(_push_here, self.url, str(self.local), workers=workers)


# ---------------------------------------------------------------------------------------------
# Reading a finished (or running) run directory, and sending a directory out
# ---------------------------------------------------------------------------------------------
_NAMED_ERRORS = (WpultrError, FileNotFoundError, NotADirectoryError)   # what the CLIs show as one line


def readable_run_dir(path: str | os.PathLike, key: str = "RUN_DIR",
                     include: Iterable[str] | None = None) -> contextlib.AbstractContextManager[Path]:
    """The run directory `path` as a local directory to read: a local path as it is; a URL pulled (only the
    files in `include`, see `WorkingCopy.pull`) into its reader copy, so every read sees the URL's files as they
    are now (a file:// URL is read in place). A user error raised inside names the URL, not the local path.

    ConfigError naming `key` for an unknown protocol; RunDirError naming the URL when it holds no wpultr run.
    """
    return readable_dir(path, key, include, f"{MARKER} marker", "a wpultr run directory")


@contextlib.contextmanager
def readable_dir(path: str | os.PathLike, key: str, include: Iterable[str] | None = None,
                 marker: str = f"{MARKER} marker", what: str = "a wpultr run directory") -> Iterator[Path]:
    """A directory this program wrote (a run, an export), `path` as a local directory to read: see
    `readable_run_dir`. `marker` (its first word a file name) is the file that tells `what` at a URL."""
    if not is_url(path):
        local = Path(path)
        if not (local / marker.split()[0]).is_file():      # every reader says so, before it looks for its files
            where = "no such directory" if not local.is_dir() else f"no {marker}"
            raise RunDirError(f"{local}: not {what} ({where})")
        yield local
        return
    url = normalised(str(path)).rstrip("/")
    check_url(url, key)
    copy = WorkingCopy(url, reader_copy_dir(url))
    if not copy.holds_run(marker.split()[0]):
        where = "holds files but" if copy.fs.exists(copy.root) else "nothing is stored there:"
        raise RunDirError(f"{url}: not {what} ({where} no {marker})")
    if _is_local_fs(copy.fs):      # file://: the directory itself is on this machine, read in place
        local = Path(copy.root)
    else:
        copy.pull(include=include)
        copy.local.mkdir(parents=True, exist_ok=True)   # a run with none of the files asked for is still a directory
        local = copy.local
    try:
        yield local
    except _NAMED_ERRORS as error:
        renamed = _renamed(error, str(local), url)
        if renamed is error:
            raise
        raise renamed from None


def _renamed(error: BaseException, local: str, url: str) -> BaseException:
    """`error` (same type) with the local copy's path in its message replaced by the URL it mirrors."""
    text = str(error)
    if local not in text:
        return error
    try:
        renamed = type(error)(text.replace(local, url))
    except Exception:   # an exception type that takes other arguments keeps its own message
        return error
    return renamed.with_traceback(error.__traceback__)


def upload_dir(local: str | Path, url: str, key: str, marker: str) -> int:
    """Make `url` hold exactly the files of directory `local` (e.g. an export going out): every file is sent,
    `marker` last, then what the earlier upload left at the URL and `local` lacks is deleted. Returns the
    number of files sent. The URL is normalised first (`..` resolved). What is there is replaced only when it is
    an earlier upload whole: `marker` (a JSON file whose `checksums` give the sha256 of every other file) lists
    every file at the URL with the hash it has now; anything else is a ConfigError naming `key`, and nothing is sent
    or deleted."""
    url = normalised(url)
    check_url(url, key)
    copy = WorkingCopy(url, local)
    before = copy._remote_files()
    if before:
        reason = _not_an_earlier_upload(copy, before, marker)
        if reason:
            raise ConfigError(f"{key}: {copy.url} {reason}; it is not a previous upload of this kind, so it is not "
                              f"replaced (wpultr replaces only what it wrote there before). Choose another {key}")
    files = sorted(p.relative_to(copy.local).as_posix() for p in copy.local.rglob("*") if p.is_file())
    late = [marker] if marker in files else []
    for rel in [r for r in files if r not in late] + late:
        copy._put(copy.local / rel, f"{copy.root}/{rel}")
    for rel in sorted(set(before) - set(files)):
        copy.fs.rm_file(f"{copy.root}/{rel}")
    return len(files)


def _not_an_earlier_upload(copy: WorkingCopy, remote: dict[str, dict[str, Any]], marker: str) -> str | None:
    """Why the files `remote` at `copy`'s URL are not one earlier upload whose `marker` lists each with its sha256."""
    if marker not in remote:
        return f"holds files but no {marker}"
    try:
        if int(remote[marker].get("size") or 0) > 64 << 20:
            raise ValueError("too large")
        with copy.fs.open(f"{copy.root}/{marker}", "rb") as handle:
            listed = json.loads(handle.read()).get("checksums")
    except (OSError, ValueError, AttributeError, RecursionError):
        listed = None
    if not isinstance(listed, dict):
        return f"holds a {marker} that lists no checksums"
    for rel in sorted(remote):
        if rel == marker:
            continue
        if rel not in listed:
            return f"holds {rel}, which its {marker} does not list"
        digest = hashlib.sha256()
        with copy.fs.open(f"{copy.root}/{rel}", "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != listed[rel]:
            return f"holds {rel}, changed since it was uploaded (its sha256 differs from {marker}'s)"
    return None


def _host() -> str:
    """This machine's name: workers with another name keep a working copy of their own."""
    return socket.gethostname()


def _pull_here(url: str, local: str) -> int:
    """On a worker: bring its working copy of `url` up to date (run by client.run)."""
    return WorkingCopy(url, local).pull()


def _push_here(url: str, local: str) -> int:
    """On a worker: send what it wrote into its working copy of `url` (run by client.run)."""
    return WorkingCopy(url, local).push()
