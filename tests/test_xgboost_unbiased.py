"""XGBoost's unbiased LambdaMART (`train.method: xgboost_unbiased`): a run on a real LocalCluster, export → score,
tampered models, the groups in logged-position order, early stopping, and the optional extra missing.

World: the simulator's position-based clicks (PBM) on 60 queries with 8 dense features that carry relevance, so a
booster on clicks must rank well above chance and XGBoost's clicked-side bias ratio t+ must fall with position.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from ranking_bars import random_ranker_dcg10
from wpultr.cli import app
from wpultr.config import config_from_dict
from wpultr.errors import ConfigError, ExportError
from wpultr.methods.training.trainer import SessionLists
from wpultr.methods.xgboost_rank import Groups
from wpultr.pipeline.runner import run_pipeline
from wpultr.rankers.base import CONFIG_FILE, WEIGHTS_FILE
from wpultr.rankers.registry import load_ranker
from wpultr.rankers.xgboost import MODEL_JSON_FILE
from wpultr.rundir import layout as L
from wpultr.schema import POSITION, SESSION_ID
from wpultr.settings import methods as registry
from wpultr.settings.methods import get_method
from wpultr.settings.simulate import SimulateConfig
from wpultr.settings.xgboost import XGBoostConfig
from wpultr.simulate import simulate

WORLD = {"n_queries": 60, "docs_per_query": 12, "results_per_page": 8, "n_sessions": 2000,
         "n_annotated_queries": 40, "vocab_size": 300, "n_dense_features": 8, "user_model": "pbm"}
XGB = {"rounds": 60, "eval_every": 10, "early_stopping_rounds": 20, "num_threads": 1}
MARGIN = 2.0     # over a random ranking's DCG@10 of the same judged rows


def xgb_config(tmp: Path | None = None, **section) -> dict:
    values = {"name": "xgb", "seed": 2, "data": {"source": "simulate", "valid_fraction": 0.3, "simulate": WORLD},
              "train": {"method": "xgboost_unbiased"}, "xgboost": {**XGB, **section},
              "evaluation": {"discover_graph": False}, "cluster": {"n_workers": 2}}
    if tmp is not None:
        values["run_dir"] = str(tmp / "{name}")
    return values


@pytest.fixture(scope="module")
def xgb_run(tmp_path_factory, dask_client):
    tmp = tmp_path_factory.mktemp("xgb_run")
    return tmp, run_pipeline(config_from_dict(xgb_config(tmp)), client=dask_client)


@pytest.fixture(scope="module")
def logs():
    return simulate(SimulateConfig(**WORLD), seed=5)


def fit(frame: pd.DataFrame, valid: pd.DataFrame | None, **section):
    return get_method("xgboost_unbiased").fit(frame, valid, config_from_dict(xgb_config(**section)))


# --------------------------------------------------------------------------------------------- the run
@pytest.mark.e2e
def test_a_run_trains_the_booster_learns_position_bias_and_ranks(xgb_run):
    _, result = xgb_run
    run = result.run_dir
    saved = json.loads((run / L.RANKER_DIR / CONFIG_FILE).read_text())
    assert saved["kind"] == "xgboost"
    bias = json.loads((run / L.BIAS).read_text())
    assert bias["method"] == "xgboost_unbiased" and bias["params"]["lambdarank_unbiased"] is True
    assert bias["lambdarank_param"]["lambdarank_unbiased"] == 1       # as XGBoost itself reports it
    assert bias["position_gap_sessions"] == 0
    identifiability = json.loads((run / L.IDENTIFIABILITY).read_text())
    assert identifiability["checked"] and identifiability["factors"] == [POSITION]   # it models position
    t_plus = bias["position_bias_t_plus"]
    assert sorted(map(int, t_plus)) == list(range(1, 9))            # one ratio per logged position
    assert t_plus["1"] == 1.0 and t_plus["8"] < 0.5 * t_plus["2"]     # PBM: clicks thin out down the page
    history = json.loads((run / L.HISTORY).read_text())["epochs"]
    assert [h["rounds"] for h in history][:3] == [10, 20, 30] and all(h["valid"] for h in history)
    assert 1 <= bias["best_rounds"] <= bias["rounds"] <= XGB["rounds"]
    assert load_ranker(run / L.RANKER_DIR).booster.num_boosted_rounds() == bias["best_rounds"]
    test = pd.read_parquet(run / L.TEST_SCORES)
    assert result.metrics["all"]["DCG@10"] > random_ranker_dcg10(test) + MARGIN


# --------------------------------------------------------------------------------------------- tampering
def _tamper_model_json(directory: Path, data: bytes) -> None:
    state = load_file(str(directory / WEIGHTS_FILE))
    state["model_json"] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    save_file(state, str(directory / WEIGHTS_FILE))
    config = json.loads((directory / CONFIG_FILE).read_text())
    config["args"]["model_bytes"] = len(data)
    (directory / CONFIG_FILE).write_text(json.dumps(config))


def _set_n_features(directory: Path, n: int) -> None:
    config = json.loads((directory / CONFIG_FILE).read_text())
    config["args"]["n_features"] = n
    (directory / CONFIG_FILE).write_text(json.dumps(config))


TAMPERS = {
    "model JSON garbage": (lambda d: _tamper_model_json(d, b'{"learner": "not a model at all"}'),
                           "not an XGBoost model"),
    "model not JSON": (lambda d: _tamper_model_json(d, bytes(range(256)) * 4), "not an XGBoost JSON model"),
    "model cut short": (lambda d: _tamper_model_json(d, (d / MODEL_JSON_FILE).read_bytes()[:5000]),
                        "not an XGBoost model"),
    "features differ from the model": (lambda d: _set_n_features(d, 3), "reads 8 features"),
}


@pytest.mark.e2e
@pytest.mark.parametrize("case", sorted(TAMPERS))
def test_a_tampered_xgboost_ranker_is_one_export_error(case, xgb_run, tmp_path):
    _, result = xgb_run
    ranker = tmp_path / "ranker"
    shutil.copytree(result.run_dir / L.RANKER_DIR, ranker)
    load_ranker(ranker)                                   # the untouched copy loads
    tamper, expected = TAMPERS[case]
    tamper(ranker)
    with pytest.raises(ExportError) as err:
        load_ranker(ranker)
    message = str(err.value)
    assert "\n" not in message and str(ranker / WEIGHTS_FILE) in message and expected in message, message


@pytest.mark.e2e
def test_wpultr_score_refuses_a_tampered_xgboost_export_in_one_line(xgb_run, tmp_path):
    _, result = xgb_run
    exported = tmp_path / "model"
    assert CliRunner().invoke(app, ["export", str(result.run_dir), "--out", str(exported)]).exit_code == 0
    _tamper_model_json(exported, b'{"learner": "not a model at all"}')
    out = CliRunner().invoke(app, ["score", str(exported), str(result.run_dir / L.ANNOTATIONS),
                                   "--out", str(tmp_path / "s.parquet")])
    assert out.exit_code == 2
    last = out.output.strip().splitlines()[-1]
    assert last.startswith("error: ") and str(exported) in last, out.output


# --------------------------------------------------------------------------------------------- groups
def test_groups_are_sessions_in_logged_position_order_whatever_the_row_order(logs):
    shuffled = logs.sessions.sample(frac=1.0, random_state=3).reset_index(drop=True)
    lists = SessionLists.from_frame(shuffled)
    groups = Groups.of(lists, np.arange(len(lists)))
    positions = shuffled[POSITION].to_numpy()[groups.rows]
    sessions = shuffled[SESSION_ID].to_numpy()[groups.rows]
    assert (np.diff(groups.qid) >= 0).all()                                   # XGBoost: qid non-decreasing
    starts = np.flatnonzero(np.r_[True, np.diff(groups.qid) > 0])
    assert (pd.Series(sessions).groupby(groups.qid).nunique() == 1).all()     # one session per group
    index_in_group = np.arange(len(groups.qid)) - np.repeat(starts, np.diff(np.r_[starts, len(groups.qid)]))
    np.testing.assert_array_equal(positions, index_in_group + 1)              # XGBoost's position = the logged one


def test_shuffled_input_rows_give_the_same_booster(logs):
    shuffled = logs.sessions.sample(frac=1.0, random_state=7).reset_index(drop=True)
    valid = logs.annotations
    first = fit(logs.sessions, valid, rounds=20, early_stopping="none")
    second = fit(shuffled, valid, rounds=20, early_stopping="none")
    assert first.ranker.model_bytes() == second.ranker.model_bytes()
    assert first.bias["position_bias_t_plus"] == second.bias["position_bias_t_plus"]


# --------------------------------------------------------------------------------------------- early stopping
def test_early_stopping_modes(logs):
    fixed = fit(logs.sessions, logs.annotations, rounds=30, early_stopping="none")
    assert [h["rounds"] for h in fixed.history] == [10, 20, 30] and fixed.history[0]["valid"] is None
    assert fixed.bias["best_rounds"] == fixed.bias["rounds"] == 30
    assert fixed.ranker.booster.num_boosted_rounds() == 30
    held = fit(logs.sessions, None, rounds=30, early_stopping="clicks", valid_sessions_fraction=0.2)
    n_held = held.history[0]["valid"]["n_queries"]                # held-out sessions are the queries
    assert 0.15 * WORLD["n_sessions"] < n_held < 0.25 * WORLD["n_sessions"]
    assert held.bias["early_stopping"] == "clicks"
    best = max(held.history, key=lambda h: (h["valid"]["DCG@10"], -h["rounds"]))
    assert held.bias["best_rounds"] == best["rounds"] == held.ranker.booster.num_boosted_rounds()
    none = fit(logs.sessions, None, rounds=20, early_stopping="annotations")     # no annotations: fixed rounds
    assert none.bias["early_stopping"] == "none" and none.bias["best_rounds"] == 20


# --------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("key, bad", [("rounds", 0), ("learning_rate", 0.0), ("max_depth", 0),
                                      ("objective", "rank:map"), ("lambdarank_pair_method", "all"),
                                      ("lambdarank_num_pair_per_sample", 0), ("lambdarank_bias_norm", -1.0),
                                      ("early_stopping", "valid"), ("valid_sessions_fraction", 1.0),
                                      ("num_threads", -1)])
def test_xgboost_settings_are_validated_by_dotted_key(key, bad):
    with pytest.raises(ConfigError, match=rf"^xgboost\.{key}: "):
        config_from_dict({"xgboost": {key: bad}})
    assert XGBoostConfig().objective == "rank:ndcg"


def test_the_method_without_its_package_names_the_pip_command(monkeypatch, tmp_path):
    monkeypatch.setitem(registry.EXTRAS, "xgboost_unbiased", ("wpultr_no_such_package", "xgboost"))
    with pytest.raises(ConfigError) as err:
        config_from_dict({"train": {"method": "xgboost_unbiased"}})
    assert str(err.value) == ("train.method: 'xgboost_unbiased' needs the optional package wpultr_no_such_package, "
                              "which is not installed: pip install 'wpultr[xgboost]'")
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  method: xgboost_unbiased\n")
    out = CliRunner().invoke(app, ["run", str(path)])
    assert out.exit_code == 2 and out.output.strip().splitlines()[-1] == f"error: {err.value}"


BLOCKED = textwrap.dedent("""
    import sys
    class Blocked:
        def find_spec(self, name, path=None, target=None):
            if name == "xgboost" or name.startswith("xgboost."):
                raise ModuleNotFoundError(f"No module named {name!r}")
    sys.meta_path.insert(0, Blocked())
    from wpultr.errors import WpultrError
    from wpultr.config import config_from_dict
    from wpultr.rankers.registry import load_ranker
    for attempt in (lambda: config_from_dict({"train": {"method": "xgboost_unbiased"}}),
                    lambda: load_ranker(sys.argv[1])):
        try:
            attempt()
        except WpultrError as error:
            print(type(error).__name__, error)
""")


@pytest.mark.e2e
def test_without_xgboost_installed_config_and_loading_say_how_to_install_it(logs, tmp_path):
    fit(logs.sessions, None, rounds=5, early_stopping="none").ranker.save(tmp_path / "ranker")
    out = subprocess.run([sys.executable, "-c", BLOCKED, str(tmp_path / "ranker")], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], timeout=300)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2, out.stdout + out.stderr
    assert lines[0].startswith("ConfigError train.method: 'xgboost_unbiased' needs the optional package xgboost")
    assert lines[1].startswith(f"ExportError {tmp_path / 'ranker' / WEIGHTS_FILE}: needs the optional package xgboost")
    assert all(line.endswith("pip install 'wpultr[xgboost]'") for line in lines)
