"""Where a run stands: stages done, running, failed or died, read from its directory alone.

The runner leaves three kinds of record (JSON) in `stages/`: `<stage>.running` when a stage starts (pid,
host, start time), `<stage>.json` when it finishes (rundir.RunDir.mark_done) and `<stage>.failed` with the
error when it raises (not `*.json`: readers of completion records glob those). The newest record of a stage
is its state; a running record whose process is gone from this host reads as `died` (killed, out of memory,
…). `wpultr status` prints `format_status(status_of(path))` (experiment directories: experiment/status.py);
`path` may be a run directory's fsspec URL.
"""
from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import RunDirError, WpultrError
from ..rundir.files import write_json
from ..rundir.layout import CONFIG_FILE, MARKER, STAGE_NAMES, STAGES_DIR
from ..rundir.safe_yaml import safe_yaml
from ..storage import is_url, readable_run_dir
from ..tables import table
from .run_lock import holder_alive, process_record, read_lock

RUNNING_SUFFIX = ".running"
FAILED_SUFFIX = ".failed"
DONE_SUFFIX = ".json"
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"


# ---------------------------------------------------------------------------------------------
# Writing (the runner)
# ---------------------------------------------------------------------------------------------
def _record(root: Path, stage: str, suffix: str) -> Path:
    return Path(root) / STAGES_DIR / f"{stage}{suffix}"


def _now() -> str:
    return time.strftime(_TIME_FORMAT)


def mark_running(root: Path, stage: str) -> None:
    """Record that `stage` started in this process; an older failure record of it is superseded."""
    write_json(_record(root, stage, RUNNING_SUFFIX), {"stage": stage, **process_record()})
    _record(root, stage, FAILED_SUFFIX).unlink(missing_ok=True)


def mark_finished(root: Path, stage: str) -> None:
    """Drop the running record of a stage whose completion record has just been written."""
    _record(root, stage, RUNNING_SUFFIX).unlink(missing_ok=True)


def mark_failed(root: Path, stage: str, error: BaseException, seconds: float) -> None:
    """Record why `stage` failed (the exception's type and message) and drop its running record."""
    write_json(_record(root, stage, FAILED_SUFFIX),
               {"stage": stage, "error": f"{type(error).__name__}: {error}", "seconds": round(seconds, 3),
                "failed_at": _now(), "pid": os.getpid(), "host": socket.gethostname()})
    _record(root, stage, RUNNING_SUFFIX).unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------
@dataclass
class StageStatus:
    name: str
    state: str                      # done | running | failed | died | pending
    seconds: float | None = None    # run time (done, failed) or time so far (running, died: until now)
    at: str | None = None           # finished, failed or started at
    error: str | None = None
    pid: int | None = None
    host: str | None = None


@dataclass
class RunStatus:
    path: str
    name: str | None
    state: str                      # finished | running | failed | died | incomplete | not started
    stages: list[StageStatus] = field(default_factory=list)
    lock: dict[str, Any] | None = None   # the run holding the directory (run_lock.read_lock), None when unlocked

    @property
    def done(self) -> int:
        return sum(s.state == "done" for s in self.stages)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kind": "run", "done": self.done}


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _stage_status(stages_dir: Path, name: str) -> StageStatus:
    """The state of one stage from the newest of its records."""
    found = []
    for suffix, state in ((DONE_SUFFIX, "done"), (RUNNING_SUFFIX, "running"), (FAILED_SUFFIX, "failed")):
        path = stages_dir / f"{name}{suffix}"
        if path.exists():
            found.append((path.stat().st_mtime_ns, state, path))
    if not found:
        return StageStatus(name, "pending")
    _, state, path = max(found)
    record = _read(path) or {}
    if state == "done":
        return StageStatus(name, "done", record.get("seconds"), record.get("finished_at"))
    if state == "failed":
        return StageStatus(name, "failed", record.get("seconds"), record.get("failed_at"), record.get("error"),
                           record.get("pid"), record.get("host"))
    started = record.get("started")
    elapsed = round(time.time() - started, 1) if isinstance(started, (int, float)) else None
    alive = holder_alive(record)
    return StageStatus(name, "died" if alive is False else "running", elapsed, record.get("started_at"),
                       None if alive is not False else "its process is gone (killed or out of memory?)",
                       record.get("pid"), record.get("host"))


def _stage_names(stages_dir: Path) -> list[str]:
    """The pipeline's stages in order, then any other stage that left a record (custom stage lists)."""
    names = list(STAGE_NAMES)
    if stages_dir.is_dir():
        for path in sorted(stages_dir.iterdir()):
            for suffix in (DONE_SUFFIX, RUNNING_SUFFIX, FAILED_SUFFIX):
                stem = path.name[: -len(suffix)]
                if path.name.endswith(suffix) and stem not in names and not stem.startswith("."):
                    names.append(stem)
    return names


def _run_name(root: Path) -> str | None:
    try:                                   # the bounded safe loader: a hostile config.yaml is no name, not a hang
        values = safe_yaml((root / CONFIG_FILE).read_text(), str(root / CONFIG_FILE))
    except (OSError, WpultrError, UnicodeDecodeError):
        return None
    return values.get("name") if isinstance(values, dict) else None


def has_run_files(path: Path) -> bool:
    """`path` holds any file a run writes (marker, config or stage records): what `wpultr status` shows as a run,
    however far it got; `rundir.files.is_run_dir` asks more, a readable marker, before anything is replaced."""
    return (path / MARKER).is_file() or (path / CONFIG_FILE).is_file() or (path / STAGES_DIR).is_dir()


def run_status(path: str | Path) -> RunStatus:
    """The status of the run directory `path` (which need not exist yet: then nothing has started)."""
    root = Path(path)
    stages_dir = root / STAGES_DIR
    stages = [_stage_status(stages_dir, name) for name in _stage_names(stages_dir)]
    states = {s.state for s in stages}
    if "running" in states:
        state = "running"
    elif "failed" in states:
        state = "failed"
    elif "died" in states:
        state = "died"
    elif states == {"done"}:
        state = "finished"
    elif "done" in states:
        state = "incomplete"
    else:
        state = "not started"
    return RunStatus(str(root), _run_name(root), state, stages, read_lock(root))


def status_of(path: str | Path) -> RunStatus:
    """The status of a run directory; RunDirError if `path` is none (experiment/status.py reads experiments).

    A run directory at an fsspec URL is read from the URL's files as they are now: its stage records and
    config are pulled into the reader copy (storage.readable_run_dir) on every call.
    """
    if is_url(path):
        url = str(path).rstrip("/")
        with readable_run_dir(url, "PATH", include=(STAGES_DIR, CONFIG_FILE, MARKER)) as root:
            found = run_status(root)
        found.path = url
        return found
    root = Path(path)
    if not root.is_dir():
        raise RunDirError(f"{root}: no such directory (give a run directory or an experiment directory)")
    if has_run_files(root):
        return run_status(root)
    raise RunDirError(f"{root}: neither a run directory (config.yaml, stages/) nor an experiment directory "
                      f"(experiment.yaml)")


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------
def _seconds(value: float | None) -> str:
    if value is None:
        return ""
    if value < 120:
        return f"{value:.1f} s"
    minutes, secs = divmod(int(round(value)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def _stage_row(s: StageStatus) -> list[str]:
    """stage, state, time, at, detail: one row of `format_status`'s table."""
    if s.state == "done":
        return [s.name, s.state, _seconds(s.seconds), s.at or "?", ""]
    if s.state == "running":
        return [s.name, s.state, _seconds(s.seconds), s.at or "?", f"pid {s.pid} on {s.host}" if s.pid else ""]
    if s.state == "died":
        return [s.name, s.state, "", s.at or "?", f"pid {s.pid} on {s.host}: {s.error}"]
    if s.state == "failed":
        return [s.name, s.state, _seconds(s.seconds), s.at or "?", s.error or ""]
    return [s.name, s.state, "", "", ""]


def run_summary(r: RunStatus) -> str:
    """One line: stages done and the stage that is running, failed or died."""
    current = next((s for s in r.stages if s.state in ("running", "failed", "died")), None)
    text = f"{r.done}/{len(r.stages)} stages done"
    if current is not None:
        text += f"; {current.name} {current.state}"
        if current.state == "failed" and current.error:
            text += f": {current.error}"
    return text


def format_status(status: RunStatus) -> str:
    """Human-readable lines: one per stage of a run."""
    lines = [f"run {status.path}" + (f" ({status.name})" if status.name else "") + f": {status.state}, "
             f"{status.done} of {len(status.stages)} stages done"]
    lines.append(table(["stage", "state", "time", "finished / started at", "detail"],
                       [_stage_row(s) for s in status.stages], left=2, indent="  "))
    if status.lock is not None:
        lines.append(_lock_line(status.lock))
    return "\n".join(lines)


def _lock_line(lock: dict[str, Any]) -> str:
    """Who holds the run directory: a live run, one whose process is gone (the next run takes it over), or one on
    another host."""
    if lock.get("unreadable"):
        return "  locked: the lock file is unreadable (being written, or left by a killed run)"
    who = f"pid {lock.get('pid')} on {lock.get('host')} since {lock.get('started_at')}"
    if lock["alive"] is False:
        return f"  locked by {who}: its process is gone; the next run takes the lock over"
    return f"  locked by {who}" + ("" if lock["alive"] else " (another host: cannot tell whether it runs)")
