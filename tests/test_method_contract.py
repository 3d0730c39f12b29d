"""The contract every method keeps (issue 46), as scikit-learn runs one battery over every estimator: parametrised
over `settings.methods.METHODS`, so a method added there fails here until it keeps it.

On one tiny simulated log (the same for every method) each method runs the pipeline (1 epoch, a one-layer MLP or a
few boosting rounds); its ranker exports, loads through `rankers.registry.load_ranker` and scores the run's test
queries exactly as the run's evaluate stage did; a second run in the same directory does no work and changes
nothing; and every setting its spec says it lacks (a loss, a backbone, streaming, DDP ranks) is refused when the
config loads, in one line naming the key and the method."""
from __future__ import annotations

import hashlib
import re
import shutil
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from wpultr.config import BACKBONES, TRAIN_LOSSES, config_from_dict
from wpultr.errors import ConfigError
from wpultr.export import EXPORT_FILE, export_run, score_table
from wpultr.pipeline.runner import run_pipeline
from wpultr.pipeline.stages import STAGES
from wpultr.rankers.base import CONFIG_FILE
from wpultr.rankers.registry import load_ranker
from wpultr.rundir import layout as L
from wpultr.settings.methods import EXTRAS, METHODS, supported

# one small log for every method: 30 queries, 300 sessions, every page feature of the default world
SIM = {"n_queries": 30, "n_sessions": 300, "n_annotated_queries": 16}
BOOSTER = {"rounds": 5, "rounds_per_epoch": 3, "min_data_in_leaf": 2, "num_threads": 1}
# a method's own sections kept as small as its fit allows (the contract is what a fit gives back, not its quality)
OWN: dict[str, dict[str, Any]] = {
    "xgboost_unbiased": {"xgboost": {"rounds": 5, "eval_every": 5, "early_stopping": "none", "num_threads": 1}},
    "bal": {"bal": {"estimator_rows": 500, "cpu_threads": 1, "influence": {"epochs": 2}, "click_model": {"epochs": 2}},
            # a quick CI test: each epoch still discovers its graph (PC), in well under a second
            "discovery": {"ci_test": "fisherz", "n_sessions": 100, "n_bootstrap": 0, "max_depth": 1}},
}
RUN_STAGES = tuple(s for s in STAGES if s.name != "report")   # the report's figures are no part of a method's contract
PREFIX = RUN_STAGES[:[s.name for s in RUN_STAGES].index("train")]
DOMAINS: dict[str, tuple[Any, ...]] = {"train.loss": TRAIN_LOSSES, "ranker.backbone": BACKBONES,
                                       "train.streaming": (False, True), "train.processes": (False, True)}


def run_config(tmp: Path, method: str) -> dict[str, Any]:
    return {"name": method, "seed": 5, "run_dir": str(tmp / "{name}"),
            "data": {"source": "simulate", "valid_fraction": 0.3, "simulate": SIM},
            "ranker": {"backbone": "mlp", "head": [8], "lightgbm": BOOSTER},
            "train": {"method": method, "epochs": 1, "batch_size": 64, "device": "cpu"},
            "evaluation": {"discover_graph": False}, "cluster": {"n_workers": 2}, **OWN.get(method, {})}


def needs_extra(method: str) -> None:
    """Skip (cleanly, saying what to install) a method whose optional package is absent."""
    if method in EXTRAS and find_spec(EXTRAS[method][0]) is None:
        pytest.skip(f"{method} needs the optional package {EXTRAS[method][0]}")


def snapshot(run: Path) -> dict[str, str]:
    """sha256 of every file the stages wrote (their completion records, which carry the time each finished,
    included); the files every `run` rewrites (versions, summary, the lock and logs) aside."""
    skip = {L.VERSIONS_FILE, "summary.json", L.METRICS}
    return {p.relative_to(run).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run.rglob("*")) if p.is_file() and p.relative_to(run).as_posix() not in skip
            and not p.relative_to(run).as_posix().startswith("logs/") and not p.name.endswith(".lock")}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("contract")


@pytest.fixture(scope="module")
def shared_log(tmp, dask_client) -> Path:
    """The one log every method trains on: a run directory through the stages before train (ingest, featurize,
    preprocess, split — none depends on the method), which each method's run starts from a copy of."""
    cfg = config_from_dict(run_config(tmp, "naive") | {"name": "shared"})
    return run_pipeline(cfg, client=dask_client, stages=PREFIX).run_dir


@pytest.mark.e2e
@pytest.mark.parametrize("method", sorted(METHODS))
def test_a_method_fits_exports_loads_scores_as_its_run_and_resumes_without_work(method, tmp, shared_log, dask_client,
                                                                                 one_torch_thread):
    needs_extra(method)
    cfg = config_from_dict(run_config(tmp, method))
    shutil.copytree(shared_log, cfg.resolved_run_dir, ignore=shutil.ignore_patterns(L.CONFIG_FILE))
    run = run_pipeline(cfg, client=dask_client, stages=RUN_STAGES).run_dir
    for stage in RUN_STAGES:
        assert (run / "stages" / f"{stage.name}.json").is_file(), stage.name
    assert (run / L.RANKER_DIR).is_dir() and (run / L.HISTORY).is_file()

    # export, load through the registry, score the test queries: the run's own scores, row for row, bit for bit
    theirs = pd.read_parquet(run / L.TEST_SCORES)
    assert len(theirs) > 0
    exported = export_run(run, tmp / f"{method}-export")
    assert (exported / EXPORT_FILE).is_file() and (exported / CONFIG_FILE).is_file()
    assert type(load_ranker(exported)) is type(load_ranker(run / L.RANKER_DIR))
    annotations = pd.read_parquet(run / L.ANNOTATIONS)      # the test rows as the evaluate stage read them
    test = theirs[["query_id", "doc_id"]].merge(annotations, on=["query_id", "doc_id"], how="left", validate="1:1")
    mine = score_table(exported, test)
    np.testing.assert_array_equal(mine["score"].to_numpy(), theirs["score"].to_numpy())
    assert np.isfinite(mine["score"]).all()

    # resume: a second run in the same directory finds every stage done and writes nothing of theirs again
    before = snapshot(run)
    again = run_pipeline(config_from_dict(run_config(tmp, method)), client=dask_client, stages=RUN_STAGES)
    assert again.run_dir == run
    assert snapshot(run) == before


def lacks(method: str) -> list[tuple[str, Any]]:
    """(setting, value) pairs that `method`'s spec does not support."""
    return [(s, v) for s, domain in DOMAINS.items() for v in domain if v not in supported(method, s)]


def setting_values(method: str, setting: str, value: Any) -> dict[str, Any]:
    train: dict[str, Any] = {"method": method}
    ranker: dict[str, Any] = {}
    if setting == "train.loss":
        train["loss"] = value
        ranker["backbone"] = next(b for b in supported(method, "ranker.backbone"))
    elif setting == "ranker.backbone":
        ranker["backbone"] = value
    elif setting == "train.streaming":
        train["streaming"] = value
    else:
        train["processes"] = 2 if value else 1
    return {"train": train, "ranker": ranker}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_setting_a_method_lacks_is_one_line_naming_the_key_and_the_method(method):
    for setting, value in lacks(method):
        with pytest.raises(ConfigError) as error:
            config_from_dict(setting_values(method, setting, value))
        message = str(error.value)
        assert "\n" not in message and re.match(rf"{re.escape(setting)}: ", message), message
        assert f"train.method: {method}" in message, message
