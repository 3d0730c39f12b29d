"""The pipeline on an external Dask cluster: a real `dask scheduler` and `dask worker` processes on loopback.

Workers run in another working directory (as on other machines). Losing one of two workers mid-stage
must not change the results; losing the only one, or a scheduler that never answers, must end in
one ClusterError line instead of a hang or a traceback.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest
from typer.testing import CliRunner

from wpultr.cli import app
from wpultr.cluster import open_client
from wpultr.config import config_from_dict
from wpultr.errors import ClusterError
from wpultr.pipeline.runner import run_pipeline
from wpultr.pipeline.stages import STAGES, Stage
from wpultr.pipeline.status import run_status
from wpultr.rundir import layout as L

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ExternalCluster:
    """A scheduler and named workers as subprocesses (no nanny: killing one is a real worker death)."""

    def __init__(self, workdir):
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.workdir = workdir
        self.procs: dict[str, subprocess.Popen] = {}
        self._spawn("scheduler", ["scheduler", "--host", "127.0.0.1", "--port", self.address.rsplit(":", 1)[1],
                                  "--no-dashboard"])

    def _spawn(self, name, args):
        with open(self.workdir / f"{name}.log", "wb") as log:     # the child writes through its own descriptor
            self.procs[name] = subprocess.Popen([sys.executable, "-m", "dask", *args], cwd=self.workdir, stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True)

    def add_workers(self, *names):
        for name in names:
            self._spawn(name, ["worker", self.address, "--name", name, "--no-nanny", "--nthreads", "1",
                               "--memory-limit", "2GiB", "--no-dashboard"])
        with open_client(config_from_dict({"cluster": {"scheduler": self.address, "connect_timeout": 30}}).cluster) \
                as client:
            client.wait_for_workers(len(names), timeout=60)

    def kill_worker_running_a_task(self, client, keys) -> str:
        """SIGKILL the worker that is processing one of `keys`; returns its name."""
        for _ in range(600):
            for address, processing in client.processing().items():
                if set(processing) & set(keys):
                    name = client.scheduler_info()["workers"][address]["name"]
                    self.procs[name].kill()
                    self.procs[name].wait()
                    return name
            time.sleep(0.05)
        raise AssertionError("no worker picked up the task to interrupt")

    def close(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def external_cluster(tmp_path):
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    cluster = ExternalCluster(workdir)
    try:
        yield cluster
    finally:
        cluster.close()


def small_config(tmp_path, name, **cluster):
    return config_from_dict({
        "name": name, "seed": 5, "run_dir": str(tmp_path / "{name}"),
        "data": {"source": "simulate", "valid_fraction": 0.3,
                 "simulate": {"n_queries": 30, "n_sessions": 300, "n_annotated_queries": 16}},
        "ranker": {"backbone": "mlp", "head": [16]},
        "train": {"epochs": 1, "batch_size": 64},
        "evaluation": {"discover_graph": False},   # PC on a cluster is tested in test_discovery.py
        "cluster": cluster,
    })


def killing_a_worker_mid(stage_name, cluster, held):
    """The pipeline's stages, with `stage_name` losing a worker while a task of it is running."""
    def run(ctx):
        holds = ctx.client.map(time.sleep, [1.0, 1.0], pure=False)   # in flight when the worker dies
        held.append(cluster.kill_worker_running_a_task(ctx.client, [f.key for f in holds]))
        info = original.run(ctx)
        ctx.client.gather(holds)     # the lost task was rerun elsewhere (or this raises)
        return info
    original = next(s for s in STAGES if s.name == stage_name)
    return tuple(Stage(s.name, run, s.outputs) if s.name == stage_name else s for s in STAGES)


def test_losing_one_of_two_workers_changes_nothing(tmp_path, external_cluster, dask_client):
    external_cluster.add_workers("w1", "w2")
    killed: list[str] = []
    cfg = small_config(tmp_path, "external", scheduler=external_cluster.address, no_worker_timeout=60)
    result = run_pipeline(cfg, stages=killing_a_worker_mid("ingest", external_cluster, killed))
    assert len(killed) == 1 and external_cluster.procs[killed[0]].poll() is not None
    assert result.ran == [s.name for s in STAGES]
    assert run_status(result.run_dir).state == "finished"
    local = run_pipeline(small_config(tmp_path, "local"), client=dask_client)
    assert json.loads((result.run_dir / L.METRICS).read_text()) == json.loads((local.run_dir / L.METRICS).read_text())
    pd.testing.assert_frame_equal(pd.read_parquet(result.run_dir / L.TEST_SCORES),
                                  pd.read_parquet(local.run_dir / L.TEST_SCORES))
    # nothing was written relative to the workers' own directory
    assert not (external_cluster.workdir / "runs").exists()


def test_losing_the_only_worker_is_a_cluster_error(tmp_path, external_cluster):
    external_cluster.add_workers("only")
    cfg = small_config(tmp_path, "orphan", scheduler=external_cluster.address, no_worker_timeout=2)
    outcome: list[BaseException] = []

    def target():
        try:
            run_pipeline(cfg, stages=killing_a_worker_mid("ingest", external_cluster, []))
        except BaseException as e:   # handed to the test thread
            outcome.append(e)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout=120)   # a guard against the hang this test is about, not a timing assertion
    assert not thread.is_alive(), "the run hung on a cluster without workers"
    assert len(outcome) == 1 and isinstance(outcome[0], ClusterError), outcome
    message = str(outcome[0])
    assert "stage ingest" in message and external_cluster.address in message
    assert "cluster.no_worker_timeout" in message and "dask worker" in message
    status = run_status(cfg.resolved_run_dir)
    ingest = next(s for s in status.stages if s.name == "ingest")
    assert status.state == "failed" and ingest.state == "failed" and "ClusterError" in ingest.error
    summary = json.loads((cfg.resolved_run_dir / "summary.json").read_text())
    assert summary["failed"]["stage"] == "ingest"


def test_an_unreachable_scheduler_is_one_line(tmp_path):
    address = f"tcp://127.0.0.1:{free_port()}"
    cfg = small_config(tmp_path, "nowhere", scheduler=address, connect_timeout=1)
    with pytest.raises(ClusterError, match="cluster.connect_timeout") as caught:
        run_pipeline(cfg)
    assert address in str(caught.value)
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps({"name": "nowhere", "run_dir": str(tmp_path / "cli"),
                                  "cluster": {"connect_timeout": 1}}))
    result = CliRunner().invoke(app, ["run", str(config), "--scheduler", address])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith("error: cluster.scheduler:") and address in lines[-1]


@pytest.mark.parametrize("profiling", [False, True])
def test_local_cluster_workers_profile_only_when_asked(profiling):
    """Dask's statistical profiler (every thread's stack each 10 ms) costs the CPU-bound stages: off by default."""
    import dask

    from wpultr.config import ClusterConfig
    with open_client(ClusterConfig(n_workers=1, worker_profiling=profiling)) as client:
        seen = client.run(lambda: dask.config.get("distributed.worker.profile.enabled"))
    assert list(seen.values()) == [profiling]
