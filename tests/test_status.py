"""`wpultr status`: what the runner's records say about a run or an experiment, read from disk alone.

The runs here are real runs of the runner with quick stand-ins for the stages (same names), so the
records are the ones a real pipeline leaves.
"""
import json
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from wpultr.cli import app
from wpultr.config import config_from_dict
from wpultr.experiment.harness import write_resolved_experiment
from wpultr.experiment.spec import experiment_from_dict
from wpultr.experiment.status import experiment_status, format_experiment_status
from wpultr.pipeline.runner import run_pipeline
from wpultr.pipeline.stages import STAGES, Stage
from wpultr.pipeline.status import format_status, mark_running, run_status
from wpultr.rundir.files import RunDir

NAMES = [s.name for s in STAGES]


def quick_stages(fail_at=None):
    """The pipeline's stage names, each writing one small output; `fail_at` raises instead."""
    def make(name):
        def run(ctx):
            if name == fail_at:
                raise RuntimeError(f"disk full while writing {name}")
            ctx.run.path("out").mkdir(exist_ok=True)
            ctx.run.path("out", name).write_text(name)
            return {"wrote": name}
        return Stage(name, run, lambda cfg: [f"out/{name}"])
    return tuple(make(n) for n in NAMES)


def config(tmp_path, name="r"):
    return config_from_dict({"name": name, "run_dir": str(tmp_path / "{name}")})


@pytest.mark.e2e
def test_a_finished_run(tmp_path, dask_client):
    cfg = config(tmp_path)
    run_pipeline(cfg, client=dask_client, stages=quick_stages())
    status = run_status(cfg.resolved_run_dir)
    assert status.state == "finished" and status.name == "r"
    assert [s.name for s in status.stages] == NAMES and all(s.state == "done" for s in status.stages)
    assert all(s.seconds is not None and s.at for s in status.stages)
    text = format_status(status)
    assert text.splitlines()[0].endswith(f"finished, {len(NAMES)} of {len(NAMES)} stages done")
    result = CliRunner().invoke(app, ["status", str(cfg.resolved_run_dir)])
    assert result.exit_code == 0 and result.output.strip() == text
    as_json = json.loads(CliRunner().invoke(app, ["status", str(cfg.resolved_run_dir), "--json"]).output)
    assert as_json["kind"] == "run" and as_json["done"] == len(NAMES)


@pytest.mark.e2e
def test_a_failed_stage_then_resumed(tmp_path, dask_client):
    cfg = config(tmp_path)
    run = cfg.resolved_run_dir
    with pytest.raises(RuntimeError):
        run_pipeline(cfg, client=dask_client, stages=quick_stages(fail_at="train"))
    status = run_status(run)
    by_name = {s.name: s for s in status.stages}
    assert status.state == "failed"
    assert [by_name[n].state for n in NAMES] == ["done"] * NAMES.index("train") + ["failed"] + \
        ["pending"] * (len(NAMES) - NAMES.index("train") - 1)
    assert by_name["train"].error == "RuntimeError: disk full while writing train"
    # summary.json was written after each finished stage, and names the failure
    summary = json.loads((run / "summary.json").read_text())
    assert list(summary["stages"]) == NAMES[:NAMES.index("train")]
    assert summary["failed"] == {"stage": "train", "error": "RuntimeError: disk full while writing train"}
    assert re.search(r"^  train +failed ", format_status(status), re.M) and "disk full" in format_status(status)

    run_pipeline(cfg, client=dask_client, stages=quick_stages())
    assert run_status(run).state == "finished"
    assert not list((run / "stages").glob("*.failed")) and not list((run / "stages").glob("*.running"))


def test_running_and_died(tmp_path):
    root = RunDir.create(tmp_path / "r").root
    mark_running(root, "ingest")                           # this process: alive
    status = run_status(root)
    assert status.state == "running" and status.stages[0].state == "running"
    # a process that started a stage and was killed before finishing it
    subprocess.run([sys.executable, "-c", "import os, sys; from wpultr.pipeline.status import mark_running; "
                                          "mark_running(sys.argv[1], 'ingest'); os._exit(9)", str(root)], check=False)
    status = run_status(root)
    assert status.state == "died" and status.stages[0].state == "died"
    assert "died" in format_status(status)


@pytest.mark.e2e
def test_an_experiment_directory(tmp_path, dask_client):
    exp = experiment_from_dict({"name": "x", "out_dir": str(tmp_path / "x"), "base": {},
                                "methods": [{"label": "Naive", "overrides": {"train.method": "naive"}}],
                                "seeds": [0, 1, 2]})
    write_resolved_experiment(exp)
    runs = {spec.seed: spec for spec in exp.runs}
    run_pipeline(config_from_dict(runs[0].config), client=dask_client, stages=quick_stages())
    with pytest.raises(RuntimeError):
        run_pipeline(config_from_dict(runs[1].config), client=dask_client, stages=quick_stages(fail_at="evaluate"))
    status = experiment_status(exp.out_dir)
    assert [(r.key, r.state) for r in status.runs] == [("main/Naive/seed 0", "finished"),
                                                        ("main/Naive/seed 1", "failed"),
                                                        ("main/Naive/seed 2", "not started")]
    assert status.counts() == {"finished": 1, "failed": 1, "not started": 1}
    text = format_experiment_status(status)
    assert "3 runs: 1 finished, 1 failed, 1 not started" in text.splitlines()[0]
    assert "evaluate failed: RuntimeError: disk full while writing evaluate" in text
    # a moved experiment directory still finds its runs
    moved = tmp_path / "moved"
    exp.out_dir.rename(moved)
    assert [r.state for r in experiment_status(moved).runs] == ["finished", "failed", "not started"]
    shown = CliRunner().invoke(app, ["status", str(moved)])      # the CLI dispatches to experiment/status.py
    assert shown.exit_code == 0 and "3 runs: 1 finished, 1 failed, 1 not started" in shown.output
    result = CliRunner().invoke(app, ["status", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "no such directory" in result.output
