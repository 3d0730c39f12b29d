"""One run per run directory at a time: a lock file naming the holder's host, pid and start time.

The lock is created atomically (O_CREAT | O_EXCL), so of two `wpultr run` on one directory exactly one goes on and
the other stops with one line naming the holder. It lies beside the run directory (`layout.RUN_LOCK`), not in it:
`--fresh` deletes the run while holding its lock, and a URL run's working copy is synced and removed file by file
(storage.WorkingCopy) without ever seeing it; for a URL it guards the working copy, so runs of one URL on one
machine. A lock whose process is gone from this host (killed, out of memory) is taken over; one held on another
host is refused, since its process cannot be checked from here. The holder removes it on exit, exception or not.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import RunDirError, cut
from ..processes import process_started
from ..rundir.layout import RUN_LOCK

_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"
_WRITE_GRACE_S = 5.0        # a lock file still empty or half written this long after its creation was left so


class RunLocked(RunDirError):
    """The run directory is held by another run (its host and pid are in the message)."""


def lock_path(root: str | Path) -> Path:
    """Where the lock of run directory `root` lies: beside it, named after it."""
    root = Path(os.path.abspath(root))
    return root.parent / RUN_LOCK.format(run=root.name)


def process_record() -> dict[str, Any]:
    """This process as a lock or a stage's running record gives it: host, pid, the pid's start time, now."""
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "process_started": process_started(pid),
            "started_at": time.strftime(_TIME_FORMAT), "started": time.time()}


def holder_alive(record: dict[str, Any]) -> bool | None:
    """Whether the process a record names lives: None when it ran on another host (cannot tell); a reused pid
    (another start time) is not it."""
    if record.get("host") != socket.gethostname():
        return None
    pid = record.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        return False
    started = process_started(pid)
    expected = record.get("process_started")
    return started is not None and (not isinstance(expected, (int, float)) or abs(started - expected) < 1.0)


def read_lock(root: str | Path) -> dict[str, Any] | None:
    """The holder of run directory `root`'s lock, with `alive` (holder_alive) added; None when it is not locked."""
    raw = _read(lock_path(root))
    if raw is None:
        return None
    record = _parse(raw)
    return {"alive": None, "unreadable": True} if record is None else {**record, "alive": holder_alive(record)}


@contextlib.contextmanager
def run_lock(root: str | Path) -> Iterator[Path]:
    """Hold run directory `root` for the `with` block: RunLocked when a live process holds it."""
    path, token = acquire(root)
    try:
        yield path
    finally:
        release(path, token)


def acquire(root: str | Path) -> tuple[Path, str]:
    """Create `root`'s lock (its path and this holder's token), taking over one whose holder is gone."""
    path = lock_path(root)
    token = uuid.uuid4().hex
    data = json.dumps({**process_record(), "run_dir": str(Path(os.path.abspath(root))), "token": token}).encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunDirError(f"{path.parent}: cannot create the run directory's parent ({e.strerror})") from None
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            _take_over_or_refuse(path, root)
            continue
        except OSError as e:
            raise RunDirError(f"{path}: cannot create the run directory's lock ({e.strerror})") from None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:              # disk full, quota: no half-written lock is left behind
            path.unlink(missing_ok=True)
            raise RunDirError(f"{path}: cannot write the run directory's lock ({e.strerror})") from None
        return path, token


def release(path: Path, token: str) -> None:
    """Remove the lock at `path` if it is still this holder's."""
    with contextlib.suppress(RunDirError):
        record = _parse(_read(path) or b"")
        if record is not None and record.get("token") == token:
            path.unlink(missing_ok=True)


def _take_over_or_refuse(path: Path, root: str | Path) -> None:
    """The lock at `path` exists: RunLocked if its holder may live; else move it out of the way (the caller retries)."""
    if path.is_symlink() or path.is_dir():
        raise RunDirError(f"{path}: is in the way of the run directory's lock (not a file); remove it yourself")
    raw = _read(path)
    if raw is None:                       # released meanwhile
        return
    record = _parse(raw)
    if record is None:                    # being written right now, or left half written by a killed process
        if _age(path) < _WRITE_GRACE_S:
            time.sleep(0.05)
            return
    else:
        alive = holder_alive(record)
        if alive is not False:
            raise RunLocked(_refusal(root, record, alive))
    _remove_stale(path, raw)


def _refusal(root: str | Path, record: dict[str, Any], alive: bool | None) -> str:
    who = cut(f"pid {record.get('pid')} on {record.get('host')}, since {record.get('started_at')}")
    if alive:
        return (f"{root}: another wpultr run is writing it ({who}); wait for it to finish, or choose another "
                f"run_dir or name")
    return (f"{root}: locked by a run on another host ({who}), which cannot be checked from here; if that run is "
            f"gone, delete {lock_path(root)}")


def _remove_stale(path: Path, raw: bytes) -> None:
    """Move the stale lock `raw` at `path` aside and delete it; should another process have replaced it with its
    own live lock in between, that one is put back."""
    aside = path.with_name(f"{path.name}.stale-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:             # another process took it over first
        return
    if _read(aside) != raw:
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
    aside.unlink(missing_ok=True)


def _read(path: Path) -> bytes | None:
    """The lock file's bytes; None when there is none; RunDirError when it cannot be read (another user's?)."""
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise RunDirError(f"{path}: cannot read the run directory's lock ({e.strerror})") from None


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    return record if isinstance(record, dict) and "pid" in record and "host" in record else None


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
