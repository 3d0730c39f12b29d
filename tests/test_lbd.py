"""LBD (Lipschitz and Bernoulli Decoupling, NeurIPS 2022): its parts against closed forms and hand computations,
its ablations as config values, the individual-level simulator it is judged on, and a short end-to-end run
whose exported ranker scores exactly as the run did."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from ranking_bars import random_ranker_dcg10
from wpultr.config import ConfigError, config_from_dict
from wpultr.methods.lbd import (
    ObservationModel,
    bernoulli_mask,
    click_logits,
    gradient_penalty,
    lbd_loss,
    softmax_click_loss,
)
from wpultr.methods.training.trainer import ListBatch
from wpultr.pipeline.runner import run_pipeline
from wpultr.rundir import layout as L
from wpultr.settings.lbd import LBDConfig
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate
from wpultr.simulate.user_models import EYE_TRACKING_EXAMINATION

MARGIN = 2.0     # over a random ranking's DCG@10 on the test queries


def linear_model(n_features: int = 3, n_positions: int = 4, seed: int = 0) -> ObservationModel:
    """ô_p(z) = σ(w_p·z + b_p): no hidden layer, so ∇_z ô_p = σ'(g_p) w_p in closed form."""
    torch.manual_seed(seed)
    return ObservationModel(n_features, n_positions, [], np.zeros(n_features), np.ones(n_features)).double()


def test_gradient_penalty_matches_the_closed_form_of_a_linear_sigmoid_and_is_differentiable():
    model = linear_model()
    z = torch.randn(7, 3, dtype=torch.float64)
    layer = model.net[0]
    penalty = gradient_penalty(model, z)

    def closed_form(weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        o = torch.sigmoid(z @ weight.T + bias)                                   # (N, n)
        return (o * (1 - o) * weight.norm(dim=1)).sum(dim=1)                      # Σ_p σ'(g_p) ‖w_p‖

    expected = closed_form(layer.weight, layer.bias)
    torch.testing.assert_close(penalty, expected)
    # create_graph=True: the penalty's gradient in the parameters is the closed form's gradient
    got = torch.autograd.grad(penalty.sum(), [layer.weight, layer.bias])
    want = torch.autograd.grad(closed_form(layer.weight, layer.bias).sum(), [layer.weight, layer.bias])
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_gradient_penalty_is_zero_for_an_observation_model_that_ignores_the_features():
    model = linear_model()
    with torch.no_grad():
        model.net[0].weight.zero_()                    # ô_p = σ(b_p): a position-based model, 0-Lipschitz
    assert torch.equal(gradient_penalty(model, torch.randn(5, 3, dtype=torch.float64)),
                       torch.zeros(5, dtype=torch.float64))


def test_bernoulli_mask_keeps_one_minus_t_of_the_terms_and_t_zero_keeps_all():
    n = 20_000
    gamma = bernoulli_mask((100, 200), 0.3, torch.Generator().manual_seed(0))
    assert set(gamma.unique().tolist()) == {0.0, 1.0}
    bound = 4 * np.sqrt(0.3 * 0.7 / n)                 # 4 binomial standard deviations
    assert abs(float(gamma.mean()) - 0.7) < bound
    assert torch.equal(bernoulli_mask((100, 200), 0.3, torch.Generator().manual_seed(0)), gamma)   # seeded
    assert torch.equal(bernoulli_mask((3, 4), 0.0, torch.Generator().manual_seed(0)), torch.ones(3, 4))


def test_loss_is_the_hand_computed_softmax_cross_entropy_of_log_r_plus_gamma_log_o():
    model = linear_model(n_features=2, n_positions=3)
    with torch.no_grad():
        model.net[0].weight.copy_(torch.tensor([[0.5, -1.0], [0.0, 2.0], [1.0, 1.0]]))
        model.net[0].bias.copy_(torch.tensor([0.2, -0.3, -1.0]))
    # one list of 3 shown results (positions 1, 2, 3), one of 2 (position 3 padded)
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.5], [0.5, 0.5]], dtype=torch.float64)
    scores = torch.tensor([[0.3, -0.2, 1.0], [0.1, 0.4, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    positions = torch.tensor([[1, 2, 3], [1, 2, 0]])
    clicks = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
    gamma = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    batch = ListBatch(np.arange(2), np.array([[0, 1, 2], [3, 4, -1]]), mask, clicks, positions)

    w, b = model.net[0].weight.detach().numpy(), model.net[0].bias.detach().numpy()
    zs = z.numpy()

    def log_o(row: int, position: int) -> float:
        return float(np.log(1 / (1 + np.exp(-(zs[row] @ w[position - 1] + b[position - 1])))))

    expected_lists = []
    for rows, pos, s, c, g in (([0, 1, 2], [1, 2, 3], [0.3, -0.2, 1.0], [1, 0, 1], [1, 0, 1]),
                               ([3, 4], [1, 2], [0.1, 0.4], [0, 1], [1, 1])):
        logits = np.array([s[i] + g[i] * log_o(rows[i], pos[i]) for i in range(len(rows))])   # log ĉ
        log_softmax = logits - np.log(np.exp(logits).sum())
        expected_lists.append(-(np.array(c) * log_softmax).sum())                            # Eq. 2
    loss, stats = lbd_loss(scores, model, z, batch, 0.0, gamma)
    assert float(loss.detach()) == pytest.approx(np.mean(expected_lists), rel=1e-12)
    assert stats["grad_norm"] == 0.0 and stats["kept"] == pytest.approx(4 / 5)

    # with λ > 0 the penalty of every shown result (padding excluded) is added per list, then averaged
    lam = 0.7
    per_row = gradient_penalty(model, z).detach().numpy()
    loss, _ = lbd_loss(scores, model, z, batch, lam, gamma)
    penalty = np.mean([per_row[[0, 1, 2]].sum(), per_row[[3, 4]].sum()])
    assert float(loss.detach()) == pytest.approx(np.mean(expected_lists) + lam * penalty, rel=1e-12)

    # the pieces agree with the same hand computation
    log_obs = torch.tensor([[log_o(0, 1), log_o(1, 2), log_o(2, 3)], [log_o(3, 1), log_o(4, 2), 0.0]],
                           dtype=torch.float64)
    per_list = softmax_click_loss(click_logits(scores, log_obs, gamma), clicks, mask)
    np.testing.assert_allclose(per_list.numpy(), expected_lists, rtol=1e-12)


@pytest.mark.parametrize("variant, expected", [("lbd", (2.5, 0.3)), ("lips", (2.5, 0.0)), ("ber", (0.0, 0.3)),
                                               ("unlimited", (0.0, 0.0))])
def test_ablations_are_config_values_that_drop_lambda_or_t(variant, expected):
    cfg = config_from_dict({"lbd": {"variant": variant, "gradient_penalty": 2.5, "drop_probability": 0.3}})
    assert cfg.lbd.effective() == expected


def test_bad_lbd_settings_name_the_key():
    with pytest.raises(ConfigError, match=r"^lbd\.variant: must be one of 'lbd', 'lips', 'ber', 'unlimited'"):
        LBDConfig(variant="both")
    with pytest.raises(ConfigError, match=r"^lbd\.drop_probability: must be a number in \[0, 1\)"):
        LBDConfig(drop_probability=1.0)


def test_individual_observation_follows_lbd_section_6_1():
    """o = v_p^max(w·x' + 1, 0): v_p the eye-tracking table, x' the standardised crux features picked by extra
    trees among the informative ones, w in [-η, η]."""
    sim = SimulateConfig(n_queries=40, docs_per_query=10, n_sessions=300, n_annotated_queries=10, vocab_size=300,
                         n_dense_features=12, user_model="lbd", user_model_params={"eta": 0.3, "n_crux": 4})
    logs = simulate(sim, seed=3)
    params = logs.truth["user_model"]["params"]
    crux, w = params["crux_features"], np.asarray(params["crux_weights"])
    assert len(crux) == 4 and max(crux) < 9 and np.all(np.abs(w) <= 0.3)   # the 9 informative columns come first
    df = logs.sessions.merge(logs.truth_sessions, on=["session_id", "position"])
    x = np.stack(df["features"].to_numpy())
    v = np.asarray(EYE_TRACKING_EXAMINATION)[df["position"].to_numpy() - 1]
    exponent = np.log(df["examination_prob"].to_numpy()) / np.log(v)
    assert len(np.unique(np.round(exponent, 9))) > 100                    # individual, not per position
    # where it is not clipped at 0, the exponent w·x' + 1 is affine in the crux features and nothing else
    # (x' standardised with the corpus's statistics: the affine fit absorbs them, the signs stay w's)
    kept = exponent > 1e-6
    x, exponent = x[kept], exponent[kept]
    design = np.column_stack([x[:, crux], np.ones(len(x))])
    coef, *_ = np.linalg.lstsq(design, exponent, rcond=None)
    np.testing.assert_allclose(design @ coef, exponent, atol=1e-6)
    assert np.all(np.sign(coef[:4]) == np.sign(w))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, dask_client, one_torch_thread):
    tmp = tmp_path_factory.mktemp("lbd")
    out = {}
    for method in ("lbd", "oracle"):
        cfg = config_from_dict({
            "name": method, "seed": 0, "run_dir": str(tmp / "{name}"),
            "data": {"valid_fraction": 0.4, "simulate": {
                "n_queries": 60, "docs_per_query": 10, "n_sessions": 1500, "n_annotated_queries": 40,
                "vocab_size": 300, "n_dense_features": 8, "user_model": "lbd", "user_model_params": {"eta": 0.2}}},
            "ranker": {"head": [32], "dropout": 0.0},
            "train": {"method": method, "loss": "listwise" if method == "oracle" else "pointwise",   # lbd: its own
                      "epochs": 3, "batch_size": 64, "learning_rate": 0.003, "device": "cpu"},
            "lbd": {"gradient_penalty": 0.01, "drop_probability": 0.2, "observation_hidden": [16]},
            "evaluation": {"discover_graph": False}, "cluster": {"n_workers": 2}})
        out[method] = run_pipeline(cfg, client=dask_client)
    return out


@pytest.mark.e2e
@pytest.mark.parametrize("method", ["lbd", "oracle"])
def test_short_fit_beats_a_random_ranker(method, runs):
    result = runs[method]
    run = result.run_dir
    test = pd.read_parquet(run / L.TEST_SCORES)
    assert result.metrics["all"]["DCG@10"] > random_ranker_dcg10(test) + MARGIN
    bias = json.loads((run / L.BIAS).read_text())
    if method == "lbd":
        assert (bias["variant"], bias["gradient_penalty"], bias["drop_probability"]) == ("lbd", 0.01, 0.2)
        observed = bias["observation_by_position"]
        assert len(observed) == 10 and observed[0] > observed[-1]      # learned: the top is examined more
    else:   # the oracle never trains on the labels of the queries it is scored on
        assert bias["test_query_rows_left_out"] > 0 and bias["rows"] > 0


def test_sweep_table_and_figure_put_each_setting_at_its_x(tmp_path):
    """`tables.sweep`: a metric against the settings' x values, mean ± std over seeds (LBD Fig. 3)."""
    from wpultr.experiment.figures import plot_sweep
    from wpultr.experiment.paper_tables import SettingResults, build_sweep_table
    values = {("b", "A"): [0.5, 0.7], ("a", "A"): [0.9, 0.9], ("b", "B"): [0.8, 0.8]}   # B has no run in "a"
    results: dict[str, dict] = {"a": {}, "b": {}}
    for (setting, label), per_seed in values.items():
        for seed, value in enumerate(per_seed):
            run = tmp_path / setting / label / str(seed)
            run.mkdir(parents=True)
            (run / L.METRICS).write_text(json.dumps({"all": {"nDCG@10": value}}))
            results[setting][(label, seed)] = run
    table = build_sweep_table("sweep_x", "t", {s: SettingResults(r) for s, r in results.items()}, ["A", "B", "C"],
                              "nDCG@10", {"b": 0.6, "a": 0.0}, "η")
    assert [c.name for c in table.columns] == ["η=0", "η=0.6"] and table.rows == ["A", "B"] and table.missing == ["C"]
    assert (table.mean[("A", "η=0.6")] == pytest.approx(0.6)
            and table.std[("A", "η=0.6")] == pytest.approx(np.std([0.5, 0.7], ddof=1)))
    assert np.isnan(table.mean[("B", "η=0")]) and table.mean[("B", "η=0.6")] == pytest.approx(0.8)
    assert "| A | 2 | **0.900 ± 0.000** | 0.600 ± 0.141 |" in table.to_markdown()
    assert plot_sweep(table, tmp_path / "sweep.png", "nDCG@10", "η").stat().st_size > 0


def test_reproduce_config_expands_to_both_families_and_checks_its_sweep(tmp_path):
    from wpultr.experiment.spec import experiment_from_dict, load_experiment
    config = Path(__file__).resolve().parents[1] / "pipelines" / "reproduce" / "lbd.yaml"
    exp = load_experiment(config)
    assert len(exp.runs) == 7 * 10 * len(exp.spec.seeds)
    letor = [r for r in exp.runs if r.setting == "letor_eta0.4" and r.label == "LBD-Ber"][0].config
    assert (letor["data"]["simulate"]["corpus"] == "letor"
            and letor["data"]["simulate"]["user_model_params"]["eta"] == 0.4)
    assert letor["train"]["method"] == "lbd" and letor["lbd"]["variant"] == "ber"
    assert letor["data"]["simulate"]["letor_path"].endswith("data/letor-sample/rank.train")
    values = yaml.safe_load(config.read_text())
    values["tables"]["sweep"]["groups"]["simulator"]["sim_eta9"] = 9.0
    with pytest.raises(ConfigError, match=r"tables\.sweep\.groups\.simulator\.sim_eta9: is not a setting"):
        experiment_from_dict(values)
