"""Influence estimators (BAL Eq. 6–7) on densities whose truth is known."""
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from wpultr.bal.influence import (
    ConditionalDensity,
    InfluenceConfig,
    categorical_frequencies,
    fit_influence_estimators,
    load_influence_estimators,
    save_influence_estimators,
)
from wpultr.causal.biases import BiasReport, ConfoundedFeature
from wpultr.schema import RELEVANCE_SCORE

R = RELEVANCE_SCORE


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def linear_gaussian(n: int, seed: int) -> pd.DataFrame:
    """x | r ~ N(2r + 1, 0.5²), r ~ N(0, 1)."""
    rng = np.random.default_rng(seed)
    r = rng.normal(size=n)
    return pd.DataFrame({R: r, "click": rng.integers(0, 2, n), "x": 2 * r + 1 + 0.5 * rng.normal(size=n)})


@pytest.fixture(scope="module")
def gaussian_fit():
    return ConditionalDensity("continuous", [R], seed=0).fit(linear_gaussian(5000, 0), "x")


# softmax table of p(x | r) over codes 0..3 (0 = unknown, never drawn): logits A + B r
A = np.array([-9.0, 0.3, 0.0, -0.5])
B = np.array([0.0, -1.2, 0.0, 1.0])


def softmax_table(r: np.ndarray) -> np.ndarray:
    logits = A[None, :] + B[None, :] * np.asarray(r)[:, None]
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def categorical_data(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    r = rng.normal(size=n)
    cdf = softmax_table(r).cumsum(axis=1)
    x = (rng.random(n)[:, None] > cdf).sum(axis=1)
    return pd.DataFrame({R: r, "x": x})


def mixed_parents(n: int, seed: int) -> pd.DataFrame:
    """y | r, m ~ N(mu[m] + 0.5 r, 0.3²) with a categorical parent m (codes 1..3)."""
    rng = np.random.default_rng(seed)
    r = rng.normal(size=n)
    m = rng.integers(1, 4, n)
    mu = np.array([0.0, -2.0, 0.0, 3.0])
    return pd.DataFrame({R: r, "m": m, "y": mu[m] + 0.5 * r + 0.3 * rng.normal(size=n)})


# ---------------------------------------------------------------------------------------------
def test_gaussian_head_recovers_mean_and_std(gaussian_fit):
    grid = pd.DataFrame({R: np.linspace(-1.2, 1.2, 13), "x": 0.0})
    params = gaussian_fit.predict_params(grid)
    np.testing.assert_allclose(params["mean"], 2 * grid[R] + 1, atol=0.15)
    np.testing.assert_allclose(params["std"], 0.5, rtol=0.15)
    assert not gaussian_fit.history_["closed_form"]


def test_gaussian_mean_log_prob_matches_the_true_density(gaussian_fit):
    fresh = linear_gaussian(20_000, 1)
    truth = norm.logpdf(fresh["x"], 2 * fresh[R] + 1, 0.5).mean()
    assert truth == pytest.approx(-0.5 * math.log(2 * math.pi * 0.25) - 0.5, abs=0.02)
    assert gaussian_fit.score(fresh) == pytest.approx(truth, abs=0.03)
    # the unconditional density is far worse: the parent carries the information
    marginal = ConditionalDensity("continuous", [], seed=0).fit(linear_gaussian(5000, 0), "x")
    assert marginal.score(fresh) < truth - 1.0


def test_log_prob_is_a_density_in_the_features_own_units():
    df = linear_gaussian(2000, 2)
    scaled = df.assign(x=10.0 * df["x"] - 3.0)
    cfg = InfluenceConfig(epochs=5)
    a = ConditionalDensity("continuous", [R], config=cfg, seed=3).fit(df, "x").log_prob(df)
    b = ConditionalDensity("continuous", [R], config=cfg, seed=3).fit(scaled, "x").log_prob(scaled)
    np.testing.assert_allclose(b, a - math.log(10.0), atol=1e-4)   # Jacobian of x ↦ 10x − 3


def test_categorical_head_recovers_a_known_softmax_table():
    model = ConditionalDensity("categorical", [R], n_categories=4, seed=0).fit(categorical_data(8000, 0), "x")
    r = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])
    proba = model.predict_params(pd.DataFrame({R: r, "x": 1}))["proba"]
    assert proba.shape == (5, 4)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(proba, softmax_table(r), atol=0.06)
    assert proba[:, 0].max() < 0.01                       # code 0 never occurs
    fresh = categorical_data(20_000, 1)
    truth = np.log(softmax_table(fresh[R])[np.arange(len(fresh)), fresh["x"]]).mean()
    assert model.score(fresh) == pytest.approx(truth, abs=0.02)


def test_categorical_parent_enters_one_hot():
    model = ConditionalDensity("continuous", [R, "m"], parent_categories={"m": 4},
                               seed=0).fit(mixed_parents(6000, 0), "y")
    grid = pd.DataFrame({R: np.tile([-1.0, 0.0, 1.0], 3), "m": np.repeat([1, 2, 3], 3), "y": 0.0})
    params = model.predict_params(grid)
    expected = np.array([0.0, -2.0, 0.0, 3.0])[grid["m"]] + 0.5 * grid[R]
    np.testing.assert_allclose(params["mean"], expected, atol=0.12)
    np.testing.assert_allclose(params["std"], 0.3, rtol=0.2)


def test_unconditional_density_is_the_closed_form_mle():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"x": rng.normal(3.0, 2.0, 500), "k": rng.choice([1, 2, 3], 500, p=[0.2, 0.3, 0.5])})
    gauss = ConditionalDensity("continuous", [], seed=0).fit(df, "x")
    np.testing.assert_allclose(gauss.log_prob(df), norm.logpdf(df["x"], df["x"].mean(), df["x"].std(ddof=0)), atol=1e-9)
    assert gauss.history_["closed_form"] and gauss.net_ is None
    cat = ConditionalDensity("categorical", (), n_categories=5, seed=0).fit(df, "k")
    counts = np.bincount(df["k"], minlength=5) + 0.5
    np.testing.assert_allclose(cat.predict_params(df.head(1))["proba"][0], counts / counts.sum())
    np.testing.assert_allclose(cat.log_prob(df), np.log(counts / counts.sum())[df["k"]])
    np.testing.assert_allclose(np.exp(categorical_frequencies(np.array([1, 1, 2]), 3, 0.0)), [0, 2 / 3, 1 / 3])


def test_same_seed_same_model_and_early_stopping_keeps_the_best_epoch():
    df = linear_gaussian(1500, 3)
    cfg = InfluenceConfig(epochs=40, patience=3)
    a = ConditionalDensity("ordinal", [R, "click"], config=cfg, seed=7).fit(df, "x")
    b = ConditionalDensity("ordinal", [R, "click"], config=cfg, seed=7).fit(df, "x")
    c = ConditionalDensity("ordinal", [R, "click"], config=cfg, seed=8).fit(df, "x")
    np.testing.assert_array_equal(a.log_prob(df), b.log_prob(df))
    assert not np.array_equal(a.log_prob(df), c.log_prob(df))
    h = a.history_
    assert 1 <= h["best_epoch"] <= h["epochs_run"] <= 40
    assert h["valid_nll"][h["best_epoch"] - 1] == min(h["valid_nll"])
    assert h["n_valid"] == 150 and h["n_train"] == 1350


def test_save_load_round_trip_gives_identical_log_probs(tmp_path):
    cfg = InfluenceConfig(epochs=5)
    df = mixed_parents(800, 4).assign(k=lambda d: np.random.default_rng(0).integers(1, 4, len(d)))
    models = {
        "gauss": ConditionalDensity("continuous", [R, "m"], parent_categories={"m": 4}, config=cfg,
                                    seed=1).fit(df, "y"),
        "cat": ConditionalDensity("categorical", [R, "m"], n_categories=4, parent_categories={"m": 4},
                                  config=cfg, seed=1).fit(df, "k"),
        "marginal": ConditionalDensity("categorical", [], n_categories=4, config=cfg).fit(df, "k"),
        "marginal_gauss": ConditionalDensity("continuous", [], config=cfg).fit(df, "y"),
    }
    for name, model in models.items():
        model.save(tmp_path / name)
        assert not any(p.suffix in (".pkl", ".pt", ".pickle") for p in (tmp_path / name).iterdir())
        json.loads((tmp_path / name / "density.json").read_text())
        loaded = ConditionalDensity.load(tmp_path / name)
        np.testing.assert_array_equal(loaded.log_prob(df), model.log_prob(df))
        assert loaded.parents == model.parents and loaded.kind == model.kind


def test_fit_influence_estimators_fits_the_models_each_case_needs(tmp_path):
    rng = np.random.default_rng(0)
    n = 600
    df = pd.DataFrame({R: rng.normal(size=n), "click": rng.integers(0, 2, n), "pos": rng.normal(size=n),
                       "media": rng.integers(1, 3, n), "height": rng.normal(size=n)})
    report = BiasReport((ConfoundedFeature("pos", (R,), 1), ConfoundedFeature("media", (R, "height"), 2)),
                        ("pos", "media"), (R, "pos", "media"))
    kinds = {"pos": "ordinal", "media": "categorical", "height": "continuous"}
    cfg = InfluenceConfig(epochs=2)
    auto = fit_influence_estimators(df, report, kinds, cfg, seed=0, n_categories={"media": 4})
    assert list(auto) == ["pos", "media"]
    assert auto["pos"].denominator.parents == (R,) and auto["pos"].numerator.parents == ()
    assert auto["media"].denominator.parents == (R, "height") and auto["media"].numerator is None
    assert auto["media"].denominator.n_categories_ == 4 and auto["media"].case == 2
    model = fit_influence_estimators(df, report, kinds, InfluenceConfig(epochs=2, numerator="model"), seed=0)
    assert model["media"].numerator.parents == ("height",)
    assert model["media"].denominator.n_categories_ == 3                    # inferred: max code + 1
    perm = fit_influence_estimators(df, report, kinds, InfluenceConfig(epochs=2, numerator="permutation"), seed=0)
    assert perm["pos"].numerator is None and perm["media"].numerator is None

    save_influence_estimators(auto, tmp_path / "influence")
    loaded = load_influence_estimators(tmp_path / "influence")
    assert list(loaded) == list(auto)
    for name in auto:
        np.testing.assert_array_equal(loaded[name].denominator.log_prob(df), auto[name].denominator.log_prob(df))
        assert loaded[name].to_dict() == auto[name].to_dict()
    np.testing.assert_array_equal(loaded["pos"].numerator.log_prob(df), auto["pos"].numerator.log_prob(df))

    with pytest.raises(KeyError, match="'media'"):
        fit_influence_estimators(df, report, {"pos": "ordinal", "height": "continuous"}, cfg)


def test_errors_name_what_is_wrong():
    df = mixed_parents(200, 5)
    cfg = InfluenceConfig(epochs=1)
    with pytest.raises(RuntimeError, match="not fitted"):
        ConditionalDensity("continuous", [R]).log_prob(df)
    with pytest.raises(KeyError, match="'missing'"):
        ConditionalDensity("continuous", [R, "missing"], config=cfg).fit(df, "y")
    model = ConditionalDensity("continuous", [R, "m"], parent_categories={"m": 4}, config=cfg).fit(df, "y")
    with pytest.raises(ValueError, match=r"'m' row 3 is 7"):
        model.log_prob(df.assign(m=[1, 2, 3, 7] + [1] * (len(df) - 4)))
    with pytest.raises(ValueError, match=r"'y' row 1 is nan"):
        model.log_prob(df.assign(y=[0.0, np.nan] + [0.0] * (len(df) - 2)))
    with pytest.raises(ValueError, match="kind 'nominal'"):
        ConditionalDensity("nominal", [R])
    with pytest.raises(ValueError, match="influence.patience"):
        InfluenceConfig(patience=0)
    with pytest.raises(ValueError, match="own parents"):
        ConditionalDensity("continuous", [R, "y"]).fit(df, "y")


def test_warm_start_begins_where_the_last_fit_ended_and_ignores_a_different_model():
    df = linear_gaussian(3000, 5)
    cfg = InfluenceConfig(epochs=60, patience=4, batch_size=512, learning_rate=3e-3)   # a slow fresh start to beat
    cold = ConditionalDensity("continuous", [R], config=cfg, seed=1).fit(df, "x")
    moved = df.assign(**{R: df[R] + 0.05 * np.random.default_rng(6).normal(size=len(df))})   # r̂ moved a little
    warm = ConditionalDensity("continuous", [R], config=cfg, seed=2).fit(moved, "x", warm_start=cold)
    fresh = ConditionalDensity("continuous", [R], config=cfg, seed=2).fit(moved, "x")
    assert warm.history_["warm_start"] and not fresh.history_["warm_start"]
    # its first epoch is already near the end of a cold fit, where a fresh net starts far off
    assert warm.history_["valid_nll"][0] < fresh.history_["valid_nll"][0] - 0.2
    assert warm.history_["valid_nll"][0] < min(fresh.history_["valid_nll"]) + 0.15
    other = ConditionalDensity("continuous", [R, "click"], config=cfg, seed=2).fit(moved, "x", warm_start=cold)
    assert not other.history_["warm_start"]                            # other parents: starts from scratch


def _density_with_orders(kind: str, seed: int, n: int):
    """A density of x given (r̂, h, m) fitted on n rows, the rows and three permutations of them."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({R: rng.normal(size=n), "h": rng.normal(size=n), "m": rng.integers(0, 3, n)})
    frame["x"] = rng.integers(0, 4, n) if kind == "categorical" else frame[R] + rng.normal(size=n)
    density = ConditionalDensity(kind, [R, "h", "m"], 4 if kind == "categorical" else None, {"m": 3},
                                 InfluenceConfig(epochs=3), 0).fit(frame, "x")
    return density, frame, [rng.permutation(n) for _ in range(3)]


@pytest.mark.parametrize("kind", ["continuous", "categorical"])
def test_log_prob_permuted_equals_log_prob_on_permuted_copies(kind):
    """BAL's permutation numerator builds the design matrix once: the numbers are those of copies with r̂ reordered."""
    density, frame, orders = _density_with_orders(kind, 3, 400)
    expected = [density.log_prob(frame.assign(**{R: frame[R].to_numpy()[o]})) for o in orders]
    np.testing.assert_array_equal(density.log_prob_permuted(frame, R, orders), np.stack(expected))
    with pytest.raises(ValueError, match="not a numeric parent"):
        density.log_prob_permuted(frame, "m", orders)


@pytest.mark.parametrize("kind", ["continuous", "categorical"])
def test_weight_parts_from_one_design_matrix_are_the_separate_densities(kind):
    """BAL's permutation weights read the denominator and the K permuted numerators off one design matrix per
    chunk: the same numbers as log_prob and the mean of log_prob over copies with r̂ reordered."""
    from wpultr.bal.influence import FeatureInfluence
    from wpultr.bal.weights import log_mean_exp, permutation_log_weight_parts
    density, frame, orders = _density_with_orders(kind, 5, 300)
    estimator = FeatureInfluence("x", 2, (R, "h", "m"), density, None)
    log_den, log_num = permutation_log_weight_parts(estimator, frame, orders)
    r = frame[R].to_numpy()
    np.testing.assert_array_equal(log_den, density.log_prob(frame))
    permuted = [density.log_prob(frame.assign(**{R: r[o]})) for o in orders]
    np.testing.assert_array_equal(log_num, log_mean_exp(np.stack(permuted), axis=0))


@pytest.mark.parametrize("kind", ["continuous", "categorical"])
def test_a_density_of_r_hat_alone_runs_its_network_once_per_distinct_score(kind, monkeypatch):
    """p(x | r̂) over many impressions of few documents (one r̂ each) evaluates the network on the distinct scores and
    gathers: the log-probs, permuted numerators included, equal one network pass over every row."""
    from wpultr.bal import influence
    rng = np.random.default_rng(11)
    scores = rng.normal(size=300)                       # 300 documents, 20 000 impressions
    frame = pd.DataFrame({R: scores[rng.integers(0, 300, 20_000)]})
    frame["x"] = rng.integers(0, 4, len(frame)) if kind == "categorical" else frame[R] + rng.normal(size=len(frame))
    density = ConditionalDensity(kind, [R], 4 if kind == "categorical" else None, None,
                                 InfluenceConfig(epochs=2), 0).fit(frame, "x")
    orders = [rng.permutation(len(frame)) for _ in range(2)]
    assert influence.distinct_inputs(density._inputs(frame))[0].shape == (300, 1)
    seen = []
    network = density._network_params
    monkeypatch.setattr(density, "_network_params", lambda X: seen.append(len(X)) or network(X))
    fast, fast_permuted = density.log_prob(frame), density.log_prob_permuted(frame, R, orders, observed=True)
    assert seen == [300, 300]                           # never a pass over the 20 000 rows
    monkeypatch.setattr(influence, "DISTINCT_SHARE", 0.0)   # the path every row takes without it
    np.testing.assert_array_equal(fast, density.log_prob(frame))
    np.testing.assert_array_equal(fast_permuted, density.log_prob_permuted(frame, R, orders, observed=True))
    assert seen[2:] == [20_000, 20_000, 20_000, 20_000]


def test_distinct_inputs_only_for_one_column_with_few_values():
    from wpultr.bal.influence import distinct_inputs
    many = np.random.default_rng(0).normal(size=(10_000, 1))
    assert distinct_inputs(many) is None                               # every value distinct: no gain
    assert distinct_inputs(np.repeat(many[:10], 1000, axis=0)[:, [0, 0]]) is None   # two columns
    assert distinct_inputs(np.repeat(many[:10], 100, axis=0)) is None  # 1 000 rows: one pass is cheap
    values, inverse = distinct_inputs(np.repeat(many[:10], 1000, axis=0))
    assert values.shape == (10, 1) and np.array_equal(values[inverse, 0], np.repeat(many[:10, 0], 1000))
