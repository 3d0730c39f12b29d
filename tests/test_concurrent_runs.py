"""Two runs of one config trained at once in one process (as an experiment's runs can share a Dask worker: each run
task secedes its thread) give the same numbers: torch's global RNG (dropout, the methods' seeds) is per process, so
the runner runs one stage at a time per process."""
from __future__ import annotations

import json
import threading

import pytest

from wpultr.config import config_from_dict
from wpultr.pipeline.runner import run_pipeline
from wpultr.rundir import layout as L


def _config(run_dir: str) -> dict:
    return {"name": "same", "seed": 5, "run_dir": run_dir,
            "data": {"source": "simulate", "valid_fraction": 0.3,
                     "simulate": {"n_queries": 40, "n_sessions": 1500, "n_annotated_queries": 20}},
            "ranker": {"backbone": "mlp", "head": [64, 32], "dropout": 0.3},
            "train": {"epochs": 3, "batch_size": 16, "method": "naive"},
            "evaluation": {"discover_graph": False}}


@pytest.mark.e2e
def test_two_runs_trained_at_once_in_one_process_match(tmp_path, dask_client):
    dirs = [tmp_path / "a", tmp_path / "b"]
    start = threading.Barrier(len(dirs))
    errors: list[BaseException] = []

    def run(directory) -> None:
        try:
            cfg = config_from_dict(_config(str(directory)))
            start.wait()
            run_pipeline(cfg, client=dask_client)
        except BaseException as e:   # re-raised in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(d,)) for d in dirs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    metrics = [json.loads((d / L.METRICS).read_text()) for d in dirs]
    history = [json.loads((d / L.HISTORY).read_text())["epochs"] for d in dirs]
    losses = [[e["train"]["loss"] for e in h if "train" in e and "loss" in e["train"]] for h in history]
    assert losses[0] and losses[0] == losses[1]
    assert metrics[0] == metrics[1]
