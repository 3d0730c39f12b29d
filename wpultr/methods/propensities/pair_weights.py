"""Weights of a pair (clicked i, non-clicked j) from position propensities θ (Wang, Wang, Wang, SIGIR 2020).

With θ_k the examination propensity of position k (relative to position 1, clipped below at
`propensity.clip` as IPW's are), the pair's weight under each scheme (`prs.weighting`):

* ``ips``:   1 / θ_{k(i)}                      IPS on the clicked document only (Eq. 6)
* ``pns``:   θ_{k(j)}                          propensity-weighted negative samples (§4.1, Eq. 8)
* ``prs``:   min(γ, θ_{k(j)} / θ_{k(i)})       propensity ratio scoring (Eq. 9), clipped at γ (Eq. 11)
* ``naive``: 1                                 clicks as relevance, non-clicks as irrelevance

γ is `prs.clip` (the paper's γ = 1). PRS's expectation keeps only relevant-vs-examined-irrelevant
pairs (Eq. 10): an unclicked j counts in proportion to the chance it was examined, so an unexamined relevant
j is not pushed down as a negative.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...settings.prs import WEIGHTINGS
from .position import as_table, propensity_array, resolve_propensities

if TYPE_CHECKING:
    import pandas as pd

    from ...config import RunConfig



def ips_weights(theta_i: np.ndarray) -> np.ndarray:
    """1 / θ_i per pair (Eq. 6)."""
    return 1.0 / np.asarray(theta_i, dtype=np.float64)


def pns_weights(theta_j: np.ndarray) -> np.ndarray:
    """θ_j per pair (§4.1, Eq. 8): PRS with the clicked document's propensity set to 1."""
    return np.asarray(theta_j, dtype=np.float64).copy()


def prs_weights(theta_i: np.ndarray, theta_j: np.ndarray, gamma: float) -> np.ndarray:
    """min(γ, θ_j / θ_i) per pair (Eq. 9 clipped as Eq. 11)."""
    ratio = np.asarray(theta_j, dtype=np.float64) / np.asarray(theta_i, dtype=np.float64)
    return np.minimum(gamma, ratio)


def pair_weights(kind: str, theta_i: np.ndarray, theta_j: np.ndarray, gamma: float) -> np.ndarray:
    """The weight of each pair (clicked i, non-clicked j) under scheme `kind`, from θ at their positions."""
    if kind == "prs":
        return prs_weights(theta_i, theta_j, gamma)
    if kind == "pns":
        return pns_weights(theta_j)
    if kind == "ips":
        return ips_weights(theta_i)
    if kind == "naive":
        return np.ones(np.broadcast(np.asarray(theta_i), np.asarray(theta_j)).shape)
    raise ValueError(f"prs.weighting: {kind!r} is not one of {', '.join(WEIGHTINGS)}")


def weight_table(kind: str, theta: np.ndarray, gamma: float) -> np.ndarray:
    """(K+1, K+1) table W[k_i, k_j] of pair weights by (clicked position, non-clicked position); `theta` is
    indexed by position (index 0 unused, as `propensities.position.propensity_array` returns it)."""
    theta = np.asarray(theta, dtype=np.float64)
    return np.broadcast_to(pair_weights(kind, theta[:, None], theta[None, :], gamma), (len(theta),) * 2).copy()


def resolve_pair_weights(train: pd.DataFrame, config: RunConfig,
                         n_positions: int) -> tuple[np.ndarray, dict[str, Any]]:
    """The (K+1, K+1) weight table of `prs.weighting` for positions 1..n_positions, and what it came
    from: θ as IPW gets it (`propensity.source`, clipped at `propensity.clip`), γ = prs_clip."""
    kind, gamma = str(config.prs.weighting), float(config.prs.clip)
    clip = float(config.propensity.clip)
    if kind == "naive":                                      # needs no propensities: none are estimated
        return weight_table(kind, np.ones(n_positions + 1), gamma), {"pair_weighting": kind}
    estimated, info = resolve_propensities(train, config)
    theta = propensity_array(estimated, n_positions, clip)
    return weight_table(kind, theta, gamma), {
        "pair_weighting": kind, "prs_clip": gamma, "clip": clip, "propensities": as_table(theta[1:]),
        "estimated": estimated, **info}
