"""One run per run directory at a time (issue 29 item 4), tried with real processes: a second `wpultr run` on a
held directory stops with one line naming the holder and changes nothing (`--fresh` included); a lock left by a
killed run is taken over; the lock goes when the run ends, also when it fails."""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from wpultr.cli import app
from wpultr.config import config_from_dict
from wpultr.errors import RunDirError
from wpultr.pipeline.run_lock import RunLocked, lock_path, read_lock, run_lock
from wpultr.pipeline.runner import run_pipeline
from wpultr.pipeline.stages import Stage
from wpultr.rundir.files import RunDir
from wpultr.rundir.layout import MARKER

CLI = "from wpultr.cli import app; app()"
# A run that holds its directory until told to go on: its one stage says it started, then waits for a file.
HOLDER = r"""
import sys, time
from pathlib import Path
from distributed import Client
from wpultr.config import load_config
from wpultr.rundir.files import RunDir
from wpultr.pipeline.runner import run_pipeline
from wpultr.pipeline.stages import Stage
config, signals = sys.argv[1], Path(sys.argv[2])

def hold(ctx):
    (signals / "started").write_text("")
    while not (signals / "go").exists():
        time.sleep(0.05)
    ctx.run.path("out").mkdir(exist_ok=True)
    ctx.run.path("out", "ingest").write_text("first run")

with Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
    run_pipeline(load_config(config), client=client, stages=(Stage("ingest", hold, lambda cfg: ["out/ingest"]),))
"""


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "name": "held", "run_dir": str(tmp_path / "runs" / "{name}"),
        "data": {"simulate": {"n_queries": 20, "n_sessions": 100, "n_annotated_queries": 10}},
        "ranker": {"head": [8]}, "train": {"epochs": 1}, "evaluation": {"discover_graph": False},
        "cluster": {"n_workers": 1}}))
    return path


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _wait_for(path: Path, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.e2e
def test_a_second_run_on_a_held_directory_stops_and_changes_nothing(tmp_path):
    config, signals = _config(tmp_path), tmp_path / "signals"
    signals.mkdir()
    run = tmp_path / "runs" / "held"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(config), str(signals)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(signals / "started", holder)
        before = _files(run)
        assert MARKER in before and "config.yaml" in before
        # the same run as a second process; then, in this one, the same with --fresh (which deleted the live run)
        # and a changed config (which mixed two runs)
        second = subprocess.run([sys.executable, "-c", CLI, "run", str(config)], capture_output=True, text=True,
                                timeout=300)
        refusals = [(second.returncode, second.stderr.strip(), second.stdout)]
        for extra in (["--fresh"], ["--set", "train.epochs=2"]):
            again = CliRunner().invoke(app, ["run", str(config), *extra])
            refusals.append((again.exit_code, again.stderr.strip(), again.stdout))
        for code, message, out in refusals:
            assert code == 2, (out, message)
            assert "\n" not in message and "another wpultr run is writing it" in message, message
            assert f"pid {holder.pid} on {socket.gethostname()}" in message, message
        assert _files(run) == before
        shown = CliRunner().invoke(app, ["status", str(run)])
        assert shown.exit_code == 0 and f"locked by pid {holder.pid} on {socket.gethostname()}" in shown.output
        (signals / "go").write_text("")
        output, _ = holder.communicate(timeout=120)
        assert holder.returncode == 0, output
    finally:
        if holder.poll() is None:
            holder.kill()
    assert (run / "out" / "ingest").read_text() == "first run"
    assert not lock_path(run).exists()
    assert "locked by" not in CliRunner().invoke(app, ["status", str(run)]).output


def _killed_holder(root: Path) -> None:
    """A process that takes `root`'s lock and dies without releasing it (as under kill -9)."""
    died = subprocess.run([sys.executable, "-c", "import os, sys; from wpultr.pipeline.run_lock import acquire; "
                                                 "acquire(sys.argv[1]); os._exit(9)", str(root)])
    assert died.returncode == 9 and lock_path(root).exists()


def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path):
    root = tmp_path / "runs" / "r"
    _killed_holder(root)
    left = read_lock(root)
    assert left is not None and left["alive"] is False
    RunDir.create(root)
    assert "its process is gone; the next run takes the lock over" in \
        CliRunner().invoke(app, ["status", str(root)]).output
    with run_lock(root) as path:
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert not lock_path(root).exists()


def test_a_reused_pid_is_not_the_holder_and_another_hosts_lock_is_refused(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    path = lock_path(root)
    # the parent process lives, but it is not the process that wrote this lock (another start time)
    path.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname(), "process_started": 1.0,
                                "started_at": "2020-01-01T00:00:00+0000"}))
    with run_lock(root):
        assert json.loads(path.read_text())["pid"] == os.getpid()
    path.write_text(json.dumps({"pid": 1, "host": "elsewhere.example", "started_at": "2020-01-01T00:00:00+0000"}))
    with (pytest.raises(RunLocked, match=r"locked by a run on another host \(pid 1 on elsewhere.example.*delete "),
          run_lock(root)):
        pass
    assert json.loads(path.read_text())["host"] == "elsewhere.example"       # refused: left as it was


def test_of_processes_racing_for_a_stale_lock_exactly_one_wins(tmp_path):
    root, go = tmp_path / "r", tmp_path / "go"
    _killed_holder(root)
    racer = ("import sys, time, pathlib; from wpultr.pipeline.run_lock import RunLocked, run_lock\n"
             "go = pathlib.Path(sys.argv[2])\n"
             "while not go.exists(): time.sleep(0.001)\n"
             "try:\n"
             "    with run_lock(sys.argv[1]):\n"
             "        print('won', flush=True); time.sleep(1.5)\n"
             "except RunLocked:\n"
             "    print('refused')\n")
    racers = [subprocess.Popen([sys.executable, "-c", racer, str(root), str(go)], stdout=subprocess.PIPE, text=True)
              for _ in range(4)]
    time.sleep(3)            # every racer imported and waiting
    go.write_text("")
    outcomes = sorted(p.communicate(timeout=120)[0].strip() for p in racers)
    assert outcomes == ["refused", "refused", "refused", "won"], outcomes
    assert not lock_path(root).exists()


@pytest.mark.e2e
def test_the_lock_goes_when_the_run_fails(tmp_path, dask_client):
    cfg = config_from_dict({"name": "r", "run_dir": str(tmp_path / "{name}")})

    def fails(ctx):
        assert read_lock(ctx.run.root)["pid"] == os.getpid()
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        run_pipeline(cfg, client=dask_client, stages=(Stage("ingest", fails, lambda cfg: []),))
    assert not lock_path(cfg.resolved_run_dir).exists()


def test_a_lock_path_taken_by_a_directory_is_refused_in_one_line(tmp_path):
    root = tmp_path / "r"
    lock_path(root).mkdir(parents=True)
    with pytest.raises(RunDirError, match="in the way of the run directory's lock"), run_lock(root):
        pass


@pytest.mark.e2e
def test_a_url_run_is_locked_through_its_working_copy_and_then_runs(tmp_path, monkeypatch, dask_client):
    monkeypatch.setenv("WPULTR_WORKDIR", str(tmp_path / "work"))
    cfg = config_from_dict({"name": "r", "run_dir": (tmp_path / "bucket").as_uri() + "/{name}"})
    stages = (Stage("ingest", lambda ctx: ctx.run.path("out").write_text("x"), lambda cfg: ["out"]),)
    run_pipeline(cfg, client=dask_client, stages=stages)
    remote = tmp_path / "bucket" / "r"
    before = _files(remote)
    with (run_lock(cfg.resolved_run_dir),                  # another run of this URL on this machine
          pytest.raises(RunLocked, match="another wpultr run is writing it")):
        run_pipeline(cfg, fresh=True, client=dask_client, stages=stages)
    assert _files(remote) == before and not any(".wpultr-lock" in name for name in before)
    result = run_pipeline(cfg, fresh=True, client=dask_client, stages=stages)
    assert result.ran == ["ingest"] and (remote / "out").read_text() == "x"
    assert not lock_path(cfg.resolved_run_dir).exists()
