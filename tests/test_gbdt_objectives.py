"""The boosted ranker's click objectives: gradients and Hessians against central finite differences of each loss,
the Fisher Hessian of the multiplicative BAL form, and agreement with the torch losses the neural rankers use."""
import numpy as np
import pytest
import torch

from finite_differences import central_grad, central_hess_diag
from wpultr.bal.click_model import log_click_likelihood
from wpultr.methods.losses import boosted as obj
from wpultr.methods.losses.lists import listwise_softmax_loss as torch_listwise
from wpultr.methods.losses.lists import weighted_softmax_loss as torch_weighted


def bal_inputs(seed, n=24):
    rng = np.random.default_rng(seed)
    return dict(scores=rng.normal(0, 2, n), page_logits=rng.normal(0, 2.5, n),
                clicks=(rng.random(n) < 0.4).astype(float), weights=rng.uniform(0.2, 3.0, n),
                alpha=float(rng.uniform(0.3, 2.0)), beta=float(rng.normal(0, 1)))


def bal_loss_fn(x, form):
    return lambda f: obj.bal_click_loss(f, x["page_logits"], x["clicks"], x["weights"], x["alpha"], x["beta"], form)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("form", ["multiplicative", "additive"])
def test_bal_gradient_and_exact_hessian_match_finite_differences(form, seed):
    x = bal_inputs(seed)
    args = (x["page_logits"], x["clicks"], x["weights"], x["alpha"], x["beta"], form)
    grad, hess = obj.bal_click_grad_hess(x["scores"], *args)
    loss = bal_loss_fn(x, form)
    np.testing.assert_allclose(grad, central_grad(loss, x["scores"]), rtol=1e-6, atol=1e-8)
    exact = obj.bal_click_exact_hessian(x["scores"], *args)
    np.testing.assert_allclose(exact, central_hess_diag(loss, x["scores"]), rtol=1e-4, atol=1e-5)
    if form == "additive":                   # the exact Hessian is what LightGBM gets
        np.testing.assert_array_equal(hess, exact)


def test_multiplicative_hessian_is_the_positive_fisher_information_where_the_exact_one_is_negative():
    rng = np.random.default_rng(5)
    n = 400
    f, v = rng.normal(0, 3, n), rng.normal(0, 3, n)
    w = rng.uniform(0.5, 2.0, n)
    alpha, beta = 1.3, 0.4
    zeros, ones = np.zeros(n), np.ones(n)
    exact0 = obj.bal_click_exact_hessian(f, v, zeros, w, alpha, beta)
    exact1 = obj.bal_click_exact_hessian(f, v, ones, w, alpha, beta)
    assert (exact0 < 0).sum() > n // 10      # the case the bound is for does occur
    _, fisher = obj.bal_click_grad_hess(f, v, zeros, w, alpha, beta)
    _, fisher_clicked = obj.bal_click_grad_hess(f, v, ones, w, alpha, beta)
    np.testing.assert_array_equal(fisher, fisher_clicked)        # the expected Hessian does not depend on c
    assert (fisher > 0).all()
    s, t = 1 / (1 + np.exp(-(alpha * f + beta))), 1 / (1 + np.exp(-v))
    p = s * t
    np.testing.assert_allclose(fisher, p * exact1 + (1 - p) * exact0, rtol=1e-9, atol=1e-12)   # E_c[exact]


def test_multiplicative_objective_is_stable_at_extreme_logits():
    f = np.array([-60.0, -5.0, 0.0, 5.0, 60.0, 60.0])
    v = np.array([60.0, 60.0, -60.0, 60.0, 60.0, -60.0])
    for c in (np.zeros(6), np.ones(6)):
        g, h = obj.bal_click_grad_hess(f, v, c, None, 1.0, 0.0)
        assert np.isfinite(g).all() and np.isfinite(h).all() and (h >= 0).all()
        assert np.isfinite(obj.bal_click_loss(f, v, c, None, 1.0, 0.0))


@pytest.mark.parametrize("form", ["multiplicative", "additive"])
def test_bal_loss_is_the_click_models_weighted_negative_log_likelihood(form):
    x = bal_inputs(7, n=50)
    u = torch.as_tensor(x["alpha"] * x["scores"] + x["beta"])
    ll = log_click_likelihood(u, torch.as_tensor(x["page_logits"]), torch.as_tensor(x["clicks"]), form)
    expected = -float((torch.as_tensor(x["weights"]) * ll).sum())
    assert obj.bal_click_loss(x["scores"], x["page_logits"], x["clicks"], x["weights"], x["alpha"], x["beta"],
                              form) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pointwise_logistic_gradient_and_hessian_match_finite_differences(seed):
    rng = np.random.default_rng(seed)
    f, c, w = rng.normal(0, 2, 30), (rng.random(30) < 0.3).astype(float), rng.uniform(0.1, 4.0, 30)
    loss = lambda z: obj.pointwise_logistic_loss(z, c, w)   # noqa: E731
    grad, hess = obj.pointwise_logistic_grad_hess(f, c, w)
    np.testing.assert_allclose(grad, central_grad(loss, f), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(hess, central_hess_diag(loss, f), rtol=1e-4, atol=1e-5)


def sessions(seed):
    """Sessions of lengths 1..9 (rows contiguous), a few without any click, random weights."""
    rng = np.random.default_rng(seed)
    sizes = np.array([1, 3, 9, 2, 5, 7, 4, 6])
    n = int(sizes.sum())
    clicks = (rng.random(n) < 0.35).astype(float)
    clicks[1:4] = 0.0                                 # the session of 3 has no click
    return rng.normal(0, 2, n), clicks, sizes, rng.uniform(0.2, 3.0, n)


def as_lists(sizes):
    """(lay, mask): `lay` puts a per-row array into the (sessions, K) layout of the torch losses, 0-padded."""
    k = int(sizes.max())
    rows = np.full((len(sizes), k), -1)
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    for s, (start, size) in enumerate(zip(starts, sizes, strict=True)):
        rows[s, :size] = np.arange(start, start + size)
    mask = rows >= 0

    def lay(a):
        out = np.zeros(rows.shape)
        out[mask] = a[rows[mask]]
        return torch.as_tensor(out)

    return lay, torch.as_tensor(mask)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("objective, weighted", [("listwise_softmax", False), ("listwise_softmax", True),
                                                 ("weighted_softmax", True)])
def test_session_softmax_gradient_and_diagonal_hessian_match_finite_differences(seed, objective, weighted):
    f, c, sizes, w = sessions(seed)
    w = w if weighted else None
    loss_of, grad_hess = getattr(obj, f"{objective}_sum"), getattr(obj, f"{objective}_grad_hess")
    loss = lambda z: loss_of(z, c, sizes, w)   # noqa: E731
    grad, hess = grad_hess(f, c, sizes, w)
    np.testing.assert_allclose(grad, central_grad(loss, f), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(hess, central_hess_diag(loss, f), rtol=1e-4, atol=1e-5)
    assert (grad[1:4] == 0).all() and (hess[1:4] == 0).all()          # no click, no signal


def test_listwise_loss_matches_the_torch_loss_summed_over_sessions_with_a_click():
    f, c, sizes, w = sessions(4)
    lay, mask = as_lists(sizes)
    has_click = np.add.reduceat(c, np.r_[0, np.cumsum(sizes)[:-1]]) > 0
    mean = float(torch_listwise(lay(f), lay(c), mask, lay(w)))
    assert obj.listwise_softmax_sum(f, c, sizes, w) == pytest.approx(mean * has_click.sum(), rel=1e-9)


def test_listwise_rejects_groups_that_do_not_cover_the_rows():
    with pytest.raises(ValueError, match="group_sizes"):
        obj.listwise_softmax_grad_hess(np.zeros(5), np.zeros(5), np.array([2, 2]))
    with pytest.raises(ValueError, match="group_sizes"):
        obj.listwise_softmax_sum(np.zeros(2), np.zeros(2), np.array([2, 0]))


def test_weighted_softmax_keeps_each_clicks_weight_across_sessions():
    """Doubling one session's weights doubles its share of the loss (the naive listwise loss would not change)."""
    f, c, sizes, w = sessions(4)
    c[:1] = 1.0                                                        # the one-row session has a click: loss 0
    doubled = w.copy()
    doubled[4:13] *= 2.0                                               # the session of 9
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    one = lambda ww: obj.weighted_softmax_sum(f[4:13], c[4:13], sizes[2:3], ww[4:13])   # noqa: E731
    assert obj.weighted_softmax_sum(f, c, sizes, doubled) == pytest.approx(
        obj.weighted_softmax_sum(f, c, sizes, w) + one(w), rel=1e-12)
    assert starts[2] == 4
    # and equals the torch IPW softmax loss times the total click weight
    lay, mask = as_lists(sizes)
    mean = float(torch_weighted(lay(f), lay(c), mask, lay(w)))
    assert obj.weighted_softmax_sum(f, c, sizes, w) == pytest.approx(mean * float((c * w).sum()), rel=1e-9)
