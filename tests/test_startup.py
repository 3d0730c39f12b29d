"""Start-up: `wpultr` and its read-only commands import only what they run (module sets, never wall-clock
times), ingest tasks never import the model stack, and a small ingest runs in this process with no cluster."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from distributed import get_task_stream
from typer.testing import CliRunner

from wpultr import cluster
from wpultr.cli import app
from wpultr.config import config_from_dict
from wpultr.pipeline.runner import run_pipeline
from wpultr.pipeline.stages import STAGES
from wpultr.rundir.layout import STAGE_NAMES

REPO = Path(__file__).resolve().parents[1]
SAMPLE_LOG = REPO / "data" / "sample" / "train" / "part-00000.gz"
HEAVY = ("torch", "dask", "distributed", "pandas", "sklearn", "transformers", "lightgbm", "scipy", "pyarrow",
         "matplotlib", "numba")
MODEL_STACK = {"torch", "transformers", "sklearn", "lightgbm"}


def heavy_modules_after(code: str) -> list[str]:
    """The heavy top-level packages a fresh interpreter holds after running `code`."""
    probe = (f"{code}\nimport sys\nprint(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    return eval(done.stdout.strip().splitlines()[-1])   # our own probe's printed list


def invoking(*args: str) -> str:
    """Code that runs `wpultr ARGS` in the probe's interpreter and fails unless it exits 0."""
    return (f"from typer.testing import CliRunner\nfrom wpultr.cli import app\n"
            f"r = CliRunner().invoke(app, {list(args)!r})\nassert r.exit_code == 0, r.output")


def test_importing_the_cli_loads_no_heavy_package():
    assert heavy_modules_after("import wpultr.cli") == []


@pytest.mark.parametrize("args", [("--help",), ("ingest", "--help"), ("graph", "show", "--help"),
                                  ("experiment", "--help"), ("identifiability", "check", "--help"),
                                  ("compare", "--help")])
def test_help_loads_no_heavy_package(args):
    assert heavy_modules_after(invoking(*args)) == []


def test_ingest_tasks_import_no_model_stack():
    """What a Dask worker imports to run an ingest task: the readers, never torch & co."""
    loaded = heavy_modules_after("import wpultr.io.baidu, wpultr.io.tables, wpultr.io.parquet")
    assert not set(loaded) & MODEL_STACK, loaded


def test_stage_names_are_the_pipelines():
    """`wpultr status` lists stages by layout.STAGE_NAMES so as not to import the stages: the same names."""
    assert tuple(s.name for s in STAGES) == STAGE_NAMES


def test_small_ingest_runs_in_process_without_a_cluster(tmp_path):
    assert SAMPLE_LOG.stat().st_size < cluster.IN_PROCESS_INPUT_BYTES
    before = cluster.local_clusters_started
    result = CliRunner().invoke(app, ["ingest", str(SAMPLE_LOG), "--out", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    assert cluster.local_clusters_started == before
    summary = json.loads(result.output)
    assert summary["sessions"] > 0
    assert list((tmp_path / "out" / "sessions").glob("*.parquet"))


@pytest.mark.e2e
def test_small_ingest_still_runs_on_a_named_scheduler(tmp_path, dask_client):
    address = dask_client.scheduler.address
    with get_task_stream(client=dask_client) as tasks:
        result = CliRunner().invoke(app, ["ingest", str(SAMPLE_LOG), "--out", str(tmp_path / "out"),
                                          "--scheduler", address])
    assert result.exit_code == 0, result.output
    assert any("_ingest_file" in str(t["key"]) for t in tasks.data)


@pytest.fixture(scope="module")
def bal_run(tmp_path_factory, dask_client):
    out = tmp_path_factory.mktemp("startup")
    cfg = config_from_dict({
        "name": "startup", "seed": 3, "run_dir": str(out / "{name}"),
        "data": {"source": "simulate", "valid_fraction": 0.3,
                 "simulate": {"n_queries": 30, "n_sessions": 300, "n_annotated_queries": 16}},
        "ranker": {"backbone": "mlp", "head": [16]},
        "train": {"method": "bal", "epochs": 1, "batch_size": 64},
        "discovery": {"n_sessions": 120, "n_bootstrap": 1}})
    return str(run_pipeline(cfg, client=dask_client).run_dir)


@pytest.mark.e2e
@pytest.mark.parametrize("command", [("status",), ("evaluate",)])
def test_read_only_commands_on_a_run_load_no_heavy_package(bal_run, command):
    assert heavy_modules_after(invoking(*command, bal_run)) == []


@pytest.mark.e2e
def test_graph_show_loads_no_heavy_package(bal_run):
    """The graph's bias lines take the column names from wpultr.columns, not the schema (pandas, Arrow)."""
    assert heavy_modules_after(invoking("graph", "show", bal_run)) == []
