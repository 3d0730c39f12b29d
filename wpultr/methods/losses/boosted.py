"""Click losses of a boosted ranker as pure numpy functions: each loss and its gradient and Hessian in the score
(the numpy side of `losses`' table; the torch side on list tensors is `lists.py`).

A LightGBM booster trained by a custom objective needs, per training row, g = ∂L/∂f and h ≈ ∂²L/∂f²
of the loss L in the row's raw score f. Four losses are provided, each as `*_loss` (a float, the
sum over rows; the listwise ones `*_sum`, beside the torch means of the same name
in `lists.py`) and `*_grad_hess` (two float64 arrays, one value per row):

* `bal_click_*`: BAL's ranker step (WWW 2024, Eq. 10 with the page path blocked, §3.3). The click model
  p(c | r̂, x) = σ(u)·σ(v) (multiplicative) or σ(u + v) (additive), u = α·r̂ + β, is held fixed:
  α = softplus(a), β = b and the page logits v = g_φ(x) are constants, so the only variable is r̂ = f.
* `pointwise_logistic_*`: naive pointwise click loss (BAL Eq. 3 with Δ = binary cross-entropy).
* `listwise_softmax_*`: naive listwise click loss, softmax cross-entropy of each session's scores
  against its normalised (weighted) clicks; sessions are contiguous row groups of `group_sizes`.
* `weighted_softmax_*`: the IPW softmax loss, each click weighted by its own ω and not normalised per
  session (BAL's listwise ranker step, ω = importance weight / page examination σ(v)).

The Hessians handed to LightGBM are positive (its Newton step divides by their leaf sums):
* multiplicative BAL, c = 0: the exact second derivative of −log(1 − σ(u)σ(v)) is negative where
  1 − 2s + t·s² < 0 (s = σ(u), t = σ(v)), so the Fisher information (the expected Hessian over
  c ~ Bernoulli(p), Fisher scoring / IRLS) is used for every row: α²·p(1−s)²/(1−p) > 0.
  `bal_click_exact_hessian` gives the exact one, for tests and for comparison.
* additive BAL and pointwise: the exact Hessian, σ(z)(1−σ(z)) ≥ 0.
* listwise: the diagonal of the exact per-session Hessian diag(p) − p·pᵀ, i.e. p_j(1 − p_j) ≥ 0;
  the off-diagonal terms are dropped (a tree's leaf values are fitted per row).
All losses are sums over rows or sessions (not means): a Newton leaf value −ΣG/ΣH is unchanged by a
common scale, and sums keep LightGBM's `min_sum_hessian_in_leaf` meaningful per row.
"""
from __future__ import annotations

import numpy as np

FORMS = ("multiplicative", "additive")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """σ(x) without overflow for large |x|."""
    out = np.empty_like(x, dtype=np.float64)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    out[~pos] = e / (1.0 + e)
    return out


def _log_sigmoid(x: np.ndarray) -> np.ndarray:
    """log σ(x) = −log(1 + e^{−x}), stable."""
    return -np.logaddexp(0.0, -x)


def _as_arrays(*arrays: object) -> list[np.ndarray]:
    return [np.asarray(a, dtype=np.float64) for a in arrays]


def _weights(weights: np.ndarray | None, n: int) -> np.ndarray:
    return np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)


def _check_form(form: str) -> None:
    if form not in FORMS:
        raise ValueError(f"click model form {form!r} is not one of {', '.join(FORMS)}")


# --------------------------------------------------------------------------------------------- BAL
def log_no_click(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """log(1 − σ(u)σ(v)), stably: log(e^{−u} + e^{−v} + e^{−u−v}) − log(1 + e^{−u}) − log(1 + e^{−v})."""
    return np.logaddexp(np.logaddexp(-u, -v), -u - v) - np.logaddexp(0.0, -u) - np.logaddexp(0.0, -v)


def bal_click_loss(scores: np.ndarray, page_logits: np.ndarray, clicks: np.ndarray, weights: np.ndarray | None,
                   alpha: float, beta: float, form: str = "multiplicative") -> float:
    """L(f) = −Σ_i w_i log p(c_i | u_i, v_i), u = α·f + β, v fixed (Eq. 10, ranker step, page path blocked)."""
    _check_form(form)
    f, v, c = _as_arrays(scores, page_logits, clicks)
    w = _weights(weights, len(f))
    u = alpha * f + beta                                                        # relevance term u(r̂)
    if form == "additive":
        z = u + v                                                               # p = σ(u + v)
        ll = c * _log_sigmoid(z) + (1 - c) * _log_sigmoid(-z)
    else:
        log_p1 = _log_sigmoid(u) + _log_sigmoid(v)                              # log σ(u)σ(v)
        ll = c * log_p1 + (1 - c) * log_no_click(u, v)
    return float(-(w * ll).sum())


def bal_click_grad_hess(scores: np.ndarray, page_logits: np.ndarray, clicks: np.ndarray, weights: np.ndarray | None,
                        alpha: float, beta: float, form: str = "multiplicative") -> tuple[np.ndarray, np.ndarray]:
    """∂L/∂f and a positive Hessian of `bal_click_loss` per row (Fisher information for the multiplicative form)."""
    _check_form(form)
    f, v, c = _as_arrays(scores, page_logits, clicks)
    w = _weights(weights, len(f))
    u = alpha * f + beta                                                        # ∂u/∂f = α (chain rule below)
    if form == "additive":
        q = _sigmoid(u + v)                                                     # p = σ(u + v)
        grad = w * alpha * (q - c)                                              # −∂ll/∂u = p − c
        hess = w * alpha ** 2 * q * (1 - q)                                     # exact: σ(z)(1 − σ(z))
        return grad, hess
    s, s_bar = _sigmoid(u), _sigmoid(-u)                                        # s = σ(u), 1 − s
    t, t_bar = _sigmoid(v), _sigmoid(-v)                                        # t = σ(v), 1 − t
    p = s * t                                                                   # p = σ(u)σ(v)
    one_minus_p = s_bar + s * t_bar                                             # 1 − p = (1 − s) + s(1 − t), stable
    ratio = s_bar / one_minus_p                                                 # (1 − s)/(1 − p) ∈ (0, 1]
    grad = -w * alpha * ratio * (c - p)                                         # ∂ll/∂u = (1 − s)(c − p)/(1 − p)
    hess = w * alpha ** 2 * p * s_bar * ratio                                   # Fisher (∂p/∂u)²/p(1−p) = p(1−s)²/(1−p)
    return grad, hess


def bal_click_exact_hessian(scores: np.ndarray, page_logits: np.ndarray, clicks: np.ndarray,
                            weights: np.ndarray | None, alpha: float, beta: float,
                            form: str = "multiplicative") -> np.ndarray:
    """The exact ∂²L/∂f² of `bal_click_loss` per row; multiplicative form: it can be negative when c = 0."""
    _check_form(form)
    f, v, c = _as_arrays(scores, page_logits, clicks)
    w = _weights(weights, len(f))
    u = alpha * f + beta
    if form == "additive":
        q = _sigmoid(u + v)
        return w * alpha ** 2 * q * (1 - q)
    s, s_bar = _sigmoid(u), _sigmoid(-u)
    t, t_bar = _sigmoid(v), _sigmoid(-v)
    one_minus_p = s_bar + s * t_bar
    h1 = s * s_bar                                                              # c = 1: −∂²log σ(u)/∂u² = s(1 − s)
    h0 = t * s * s_bar * (1 - 2 * s + t * s * s) / one_minus_p ** 2             # c = 0: −∂²log(1 − st)/∂u²
    return w * alpha ** 2 * (c * h1 + (1 - c) * h0)


# --------------------------------------------------------------------------------------------- naive, pointwise
def pointwise_logistic_loss(scores: np.ndarray, clicks: np.ndarray, weights: np.ndarray | None = None) -> float:
    """L(f) = Σ_i w_i BCE(σ(f_i), c_i), the naive pointwise click loss (BAL Eq. 3)."""
    f, c = _as_arrays(scores, clicks)
    w = _weights(weights, len(f))
    return float(-(w * (c * _log_sigmoid(f) + (1 - c) * _log_sigmoid(-f))).sum())


def pointwise_logistic_grad_hess(scores: np.ndarray, clicks: np.ndarray,
                                 weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """g = w(σ(f) − c), h = w σ(f)(1 − σ(f)) (exact, ≥ 0)."""
    f, c = _as_arrays(scores, clicks)
    w = _weights(weights, len(f))
    q = _sigmoid(f)
    return w * (q - c), w * q * (1 - q)


# --------------------------------------------------------------------------------------------- naive, listwise
def _group_starts(group_sizes: np.ndarray, n: int) -> np.ndarray:
    sizes = np.asarray(group_sizes, dtype=np.int64)
    if (sizes < 1).any() or int(sizes.sum()) != n:
        raise ValueError(f"group_sizes must be >= 1 and sum to the number of rows ({n}), got sum {int(sizes.sum())}")
    return np.r_[0, np.cumsum(sizes)[:-1]]


def _session_softmax(f: np.ndarray, sizes: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """softmax(f) within each session and its log, stable (the session maximum is subtracted)."""
    shifted = f - np.repeat(np.maximum.reduceat(f, starts), sizes)
    log_z = np.log(np.add.reduceat(np.exp(shifted), starts))
    log_p = shifted - np.repeat(log_z, sizes)
    return np.exp(log_p), log_p


def _session_targets(c: np.ndarray, w: np.ndarray, sizes: np.ndarray,
                     starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """y_j = c_j w_j / Σ_session c w (0 in sessions without a click) and which rows' sessions have a click."""
    cw = c * w
    totals = np.repeat(np.add.reduceat(cw, starts), sizes)
    has_click = totals > 0
    return np.where(has_click, cw / np.where(has_click, totals, 1.0), 0.0), has_click


def listwise_softmax_sum(scores: np.ndarray, clicks: np.ndarray, group_sizes: np.ndarray,
                          weights: np.ndarray | None = None) -> float:
    """L(f) = Σ_sessions −Σ_j y_j log softmax(f)_j, y = normalised (weighted) clicks; click-less sessions add 0."""
    f, c = _as_arrays(scores, clicks)
    w = _weights(weights, len(f))
    sizes = np.asarray(group_sizes, dtype=np.int64)
    starts = _group_starts(sizes, len(f))
    _, log_p = _session_softmax(f, sizes, starts)
    y, _ = _session_targets(c, w, sizes, starts)
    return float(-(y * log_p).sum())


def listwise_softmax_grad_hess(scores: np.ndarray, clicks: np.ndarray, group_sizes: np.ndarray,
                               weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """g_j = p_j − y_j and h_j = p_j(1 − p_j), the diagonal of diag(p) − ppᵀ; 0 in sessions without a click."""
    f, c = _as_arrays(scores, clicks)
    w = _weights(weights, len(f))
    sizes = np.asarray(group_sizes, dtype=np.int64)
    starts = _group_starts(sizes, len(f))
    p, _ = _session_softmax(f, sizes, starts)                                   # p = softmax over the session
    y, has_click = _session_targets(c, w, sizes, starts)                        # Σ_j y_j = 1 where has_click
    grad = np.where(has_click, p - y, 0.0)                                      # ∂/∂f_j (−Σ y log p) = p_j Σy − y_j
    hess = np.where(has_click, p * (1 - p), 0.0)                                # diagonal of the exact Hessian
    return grad, hess


def weighted_softmax_sum(scores: np.ndarray, clicks: np.ndarray, group_sizes: np.ndarray,
                          weights: np.ndarray) -> float:
    """L(f) = −Σ_j c_j ω_j log softmax(f)_j over each session: the IPW softmax loss, each click keeping its
    own weight ω (not normalised per session, which would re-weight sessions: see lists.weighted_softmax_loss)."""
    f, c, w = _as_arrays(scores, clicks, weights)
    sizes = np.asarray(group_sizes, dtype=np.int64)
    starts = _group_starts(sizes, len(f))
    _, log_p = _session_softmax(f, sizes, starts)
    return float(-(c * w * log_p).sum())


def weighted_softmax_grad_hess(scores: np.ndarray, clicks: np.ndarray, group_sizes: np.ndarray,
                               weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """g_j = W p_j − c_j ω_j and h_j = W p_j(1 − p_j), W = Σ_session c ω: the gradient and Hessian diagonal."""
    f, c, w = _as_arrays(scores, clicks, weights)
    sizes = np.asarray(group_sizes, dtype=np.int64)
    starts = _group_starts(sizes, len(f))
    p, _ = _session_softmax(f, sizes, starts)
    total = np.repeat(np.add.reduceat(c * w, starts), sizes)                    # W of each row's session
    return total * p - c * w, total * p * (1 - p)
