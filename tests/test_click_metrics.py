"""Label-free evaluation: click log-likelihood and perplexity of held-out sessions (Hager et al., SIGIR 2024)."""
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit
from typer.testing import CliRunner

from tiny_runs import tiny_run
from wpultr.evaluation.click_metrics import by_position, fit_logistic_calibration, position_ctr
from wpultr.evaluation.metrics import click_log_likelihood, click_perplexity
from wpultr.io.split import heldout_session_mask
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate


def test_formulas_against_a_hand_computation():
    clicks, p, positions = [1, 0, 0, 1], [0.5, 0.25, 0.8, 0.9], [1, 2, 1, 2]
    # position 1: sessions (c=1, p=.5) and (c=0, p=.8): mean log2 likelihood (log2 .5 + log2 .2)/2 = log2(.1)/2
    # position 2: (c=0, p=.25) and (c=1, p=.9): (log2 .75 + log2 .9)/2 = log2(.675)/2
    ppl = click_perplexity(clicks, p, positions)
    assert ppl["by_position"]["1"] == pytest.approx(math.sqrt(10.0))           # 2^(−log2(.1)/2)
    assert ppl["by_position"]["2"] == pytest.approx(1 / math.sqrt(0.675))
    assert ppl["overall"] == pytest.approx((math.sqrt(10.0) + 1 / math.sqrt(0.675)) / 2)
    assert ppl["sessions_by_position"] == {"1": 2, "2": 2}
    assert click_log_likelihood(clicks, p) == pytest.approx(math.log(0.5 * 0.75 * 0.2 * 0.9) / 4)
    # a perfect model has perplexity 1 (probabilities clipped, so only nearly) and a coin flip 2
    assert click_perplexity([1, 0], [1.0, 0.0], [1, 1])["overall"] == pytest.approx(1.0, abs=1e-5)
    assert click_perplexity([1, 0, 1], [0.5] * 3, [1, 2, 3])["overall"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="0 or 1"):
        click_log_likelihood([2], [0.5])


@pytest.fixture(scope="module")
def simulated():
    """Simulated logs split by session into training and held-out halves, with the true click probabilities."""
    logs = simulate(SimulateConfig(n_queries=60, docs_per_query=15, n_annotated_queries=12, vocab_size=500,
                                   n_dense_features=8, n_sessions=6000), seed=5)
    rows = logs.sessions.merge(logs.truth_sessions[["session_id", "position", "click_prob", "true_label",
                                                    "examination_prob"]], on=["session_id", "position"])
    held = heldout_session_mask(rows["session_id"].to_numpy(), 0.5, seed=5)
    return rows[~held].reset_index(drop=True), rows[held].reset_index(drop=True)


def _ll_rows(clicks, p):
    p = np.clip(p, 1e-6, 1 - 1e-6)     # as the metrics clip
    return clicks * np.log(p) + (1 - clicks) * np.log1p(-p)


def test_the_true_click_model_is_the_floor_on_simulated_logs(simulated):
    train, heldout = simulated
    c, pos = heldout["click"].to_numpy(float), heldout["position"].to_numpy()
    truth = heldout["click_prob"].to_numpy()
    ctr_table = position_ctr(train["click"].to_numpy(), train["position"].to_numpy())
    ctr = by_position(ctr_table, pos)
    # a fitted position-based model that even knows the true grade: θ_k·σ(a·grade + b), θ_k the CTR curve over its
    # top, (a, b) fitted on the training half's clicks
    theta = {k: v / max(ctr_table.values()) for k, v in ctr_table.items()}
    a, b = fit_logistic_calibration(train["click"].to_numpy(), by_position(theta, train["position"].to_numpy()),
                                    train["true_label"].to_numpy(float))
    fitted = by_position(theta, pos) * expit(a * heldout["true_label"].to_numpy(float) + b)
    ppl_truth, ppl_ctr = click_perplexity(c, truth, pos), click_perplexity(c, ctr, pos)
    assert ppl_truth["overall"] < ppl_ctr["overall"]
    assert click_log_likelihood(c, truth) > click_log_likelihood(c, ctr)
    assert ppl_truth["by_position"]["1"] < ppl_ctr["by_position"]["1"]     # where relevance decides most clicks
    assert click_perplexity(c, fitted, pos)["overall"] < ppl_ctr["overall"]  # knowing relevance helps
    for p in (ctr, fitted):     # but no model beats the truth's log-likelihood by more than 3 standard errors
        diff = _ll_rows(c, np.clip(p, 1e-6, 1 - 1e-6)) - _ll_rows(c, truth)
        assert diff.mean() <= 3 * diff.std() / np.sqrt(len(diff))
        assert click_perplexity(c, p, pos)["overall"] >= ppl_truth["overall"] * 0.99


def test_logistic_calibration_recovers_a_position_based_model():
    rng = np.random.default_rng(0)
    scores, exam = rng.normal(size=40_000) * 3 + 7, rng.choice([1.0, 0.6, 0.3], size=40_000)
    clicks = (rng.random(40_000) < exam * expit(0.8 * scores - 6.0)).astype(float)
    a, b = fit_logistic_calibration(clicks, exam, scores)
    assert a == pytest.approx(0.8, rel=0.1) and b == pytest.approx(-6.0, rel=0.1)


def test_heldout_sessions_are_chosen_by_id_alone():
    ids = np.arange(20_000, dtype=np.int64)
    held = heldout_session_mask(ids, 0.2, seed=3)
    assert 0.18 < held.mean() < 0.22
    assert (heldout_session_mask(ids[::-1], 0.2, seed=3) == held[::-1]).all()     # order and partitions do not matter
    assert (heldout_session_mask(ids, 0.2, seed=4) != held).any()
    assert not heldout_session_mask(ids, 0.0, seed=3).any()


# ---------------------------------------------------------------------------------------------
# A tiny run end to end: the held-out split, metrics.json "clicks", the report, `wpultr evaluate --clicks`
# ---------------------------------------------------------------------------------------------
def _run(tmp_path, client, method, **evaluation):
    return tiny_run(tmp_path, client, method, epochs=1, **evaluation)


@pytest.fixture(scope="module")
def bal_run(tmp_path_factory, dask_client):
    return _run(tmp_path_factory.mktemp("clicks"), dask_client, "bal", heldout_sessions=0.25)


@pytest.mark.e2e
def test_a_run_holds_sessions_out_and_reports_their_click_metrics(bal_run):
    from wpultr.io.parquet import read_table
    from wpultr.rundir.layout import HELDOUT_SESSIONS_DIR, SESSIONS_DIR
    held = read_table(bal_run / HELDOUT_SESSIONS_DIR, columns=["session_id"])["session_id"].unique()
    trained = read_table(bal_run / SESSIONS_DIR, columns=["session_id"])["session_id"].unique()
    assert len(held) and not set(held) & set(trained)                       # held out of training, whole sessions
    assert 0.15 < len(held) / (len(held) + len(trained)) < 0.35
    clicks = json.loads((bal_run / "metrics.json").read_text())["clicks"]
    assert clicks["sessions"] == len(held)
    assert set(clicks["models"]) == {"ctr", "bal", "truth"}
    fitted = clicks["fitted"]["bal"]
    assert 0 < fitted["level"] <= 1 and fitted["alpha"] > 0
    for model in clicks["models"].values():
        ppl = model["perplexity"]
        assert ppl["overall"] == pytest.approx(np.mean(list(ppl["by_position"].values())))
        assert 1 <= ppl["overall"] < 2 and model["log_likelihood"] < 0
    assert clicks["models"]["truth"]["perplexity"]["overall"] < clicks["models"]["ctr"]["perplexity"]["overall"]
    report = (bal_run / "report.html").read_text()
    assert "Click metrics on held-out sessions" in report and "<td>truth</td>" in report


@pytest.mark.e2e
def test_wpultr_evaluate_clicks_end_to_end(bal_run, tmp_path):
    from wpultr.cli import app
    from wpultr.rundir.layout import HELDOUT_SESSIONS_DIR
    stored = json.loads((bal_run / "metrics.json").read_text())["clicks"]
    result = CliRunner().invoke(app, ["evaluate", str(bal_run), "--clicks", str(bal_run / HELDOUT_SESSIONS_DIR)])
    assert result.exit_code == 0, result.output
    table = result.output                            # a table for people, the JSON with --json
    assert table.startswith("shipped: BAL epoch") and "{" not in table
    assert "perplexity" in table and "truth" in table and "bal" in table
    as_json = CliRunner().invoke(app, ["evaluate", str(bal_run), "--clicks", str(bal_run / HELDOUT_SESSIONS_DIR),
                                       "--json"])
    printed = json.loads(as_json.output)
    for name in ("ctr", "bal", "truth"):    # the same sessions and fit as the evaluate stage's
        assert printed["models"][name]["perplexity"]["overall"] == pytest.approx(
            stored["models"][name]["perplexity"]["overall"], rel=1e-4)
    one_file = tmp_path / "heldout.parquet"          # a single Parquet table works too
    from wpultr.io.parquet import read_table
    read_table(bal_run / HELDOUT_SESSIONS_DIR).to_parquet(one_file)
    assert CliRunner().invoke(app, ["evaluate", str(bal_run), "--clicks", str(one_file)]).exit_code == 0
    missing = CliRunner().invoke(app, ["evaluate", str(bal_run), "--clicks", str(tmp_path / "nope.parquet")])
    assert missing.exit_code == 2 and "nope.parquet" in missing.output
    pd.DataFrame({"session_id": [1], "click": [0]}).to_parquet(tmp_path / "bad.parquet")
    bad = CliRunner().invoke(app, ["evaluate", str(bal_run), "--clicks", str(tmp_path / "bad.parquet")])
    assert bad.exit_code == 2 and "position" in bad.output


@pytest.mark.e2e
@pytest.mark.parametrize("method", ["dla", "regression_em"])
def test_a_position_based_method_gets_its_click_model(tmp_path, dask_client, method):
    run = _run(tmp_path, dask_client, method, heldout_sessions=0.25, discover_graph=False)
    clicks = json.loads((run / "metrics.json").read_text())["clicks"]
    assert set(clicks["models"]) == {"ctr", "position_based", "truth"}
    fitted = clicks["fitted"]["position_based"]
    assert fitted["method"] == method
    if method == "dla":            # listwise scores: a logistic calibration over propensities relative to position 1
        assert fitted["calibration"]["a"] >= 0 and fitted["propensities"]["1"] == pytest.approx(1.0)
    else:                          # REM: its own θ_k and γ = σ(score), nothing fitted
        bias = json.loads((run / "train" / "bias.json").read_text())
        assert fitted["propensities"] == pytest.approx(bias["theta"]) and fitted["level"] == 1.0
