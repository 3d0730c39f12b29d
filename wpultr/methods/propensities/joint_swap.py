"""Joint examination probabilities ψ(k1, k2) from a swap intervention (paper 004 §3.3, Eqs. 16–20).

Each experiment session draws a pair of positions 3 ≤ k1 < k2 ≤ K and, with probability 1/2, swaps the
results there with those at positions 1 and 2 (1 ↔ k1, 2 ↔ k2). Under the examination hypothesis a pair
of results co-clicked at (k1, k2) was co-examined with probability ψ(k1, k2) and at (1, 2) with ψ(1, 2),
whatever their relevance, and the swap makes which pair sits where independent of relevance, so

    ψ(k1, k2) / ψ(1, 2) = [P_noswap(c_k1 c_k2) + P_swap(c_k1 c_k2)] / [P_swap(c_1 c_2) + P_noswap(c_1 c_2)]

(Eq. 19 with both arms' co-clicks, as the RandPair estimate in propensities/position.py uses both arms), and
ψ(1, 2) = θ(2) when position 1 is always examined (Eq. 20). θ̂(2) comes from a RandPair experiment.
The sessions are simulated by `propensities.position.simulate_swaps`, the path RandPair itself runs on.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ...errors import ConfigError
from ...schema import CLICK, POSITION, SESSION_ID, SchemaError
from .position import RANDPAIR_SWAPPED, randpair_estimate, simulate_randpair, simulate_swaps

if TYPE_CHECKING:
    from ...settings.simulate import SimulateConfig

SWAP_K1 = "swap_k1"          # the position swapped with position 1
SWAP_K2 = "swap_k2"          # the position swapped with position 2
PAIR_SWAP_STREAM = 0x50415752  # the pair-swap experiment's own SeedSequence tag ("PAWR")


def swap_pairs(k: int) -> list[tuple[int, int]]:
    """Every (k1, k2) with 3 ≤ k1 < k2 ≤ k: the pairs a swap with (1, 2) can measure."""
    return [(a, b) for a in range(3, k + 1) for b in range(a + 1, k + 1)]


def simulate_pair_swaps(cfg: SimulateConfig, seed: int, n_sessions: int,
                        pairs: Sequence[tuple[int, int]] | None = None) -> pd.DataFrame:
    """The pair-swap experiment on the simulated engine of `simulate(cfg, seed)`: one row per shown result with
    session_id, query_id, position, click, swap_k1, swap_k2, randpair_swapped; (k1, k2) uniform over `pairs`."""
    k = cfg.results_per_page
    pairs = list(pairs) if pairs is not None else swap_pairs(k)
    if not pairs:
        raise ConfigError(f"data.simulate.results_per_page: a pair swap needs at least 4 positions, got {k}")
    table = np.asarray(pairs, dtype=np.int64)
    if table.ndim != 2 or table.shape[1] != 2 or (table[:, 0] < 3).any() or (table[:, 0] >= table[:, 1]).any() \
            or (table[:, 1] > k).any():
        raise ValueError(f"pairs must be (k1, k2) with 3 <= k1 < k2 <= {k}, got {pairs}")

    def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        chosen = table[rng.integers(0, len(table), size=n)]
        pivots = np.tile(np.array([1, 2], dtype=np.int64), (n, 1))
        return pivots, chosen, {SWAP_K1: chosen[:, 0], SWAP_K2: chosen[:, 1]}

    return simulate_swaps(cfg, seed, n_sessions, draw, stream=PAIR_SWAP_STREAM)


def _co_clicks(frame: pd.DataFrame) -> pd.DataFrame:
    """Per session: k1, k2, swapped, x = c_k1·c_k2 and y = c_1·c_2."""
    for column in (SESSION_ID, POSITION, CLICK, SWAP_K1, SWAP_K2, RANDPAIR_SWAPPED):
        if column not in frame.columns:
            raise SchemaError(f"sessions: the pair-swap estimate needs column {column!r}; "
                              f"present: {list(frame.columns)}")
    f = frame[[SESSION_ID, POSITION, CLICK, SWAP_K1, SWAP_K2, RANDPAIR_SWAPPED]]
    clicked = f[CLICK].to_numpy() > 0
    pos = f[POSITION].to_numpy()
    keys = f[SESSION_ID].to_numpy()
    at = {name: pd.Series(clicked & mask, index=keys).groupby(level=0).any()
          for name, mask in (("k1", pos == f[SWAP_K1].to_numpy()), ("k2", pos == f[SWAP_K2].to_numpy()),
                             ("p1", pos == 1), ("p2", pos == 2))}
    head = f.groupby(SESSION_ID)[[SWAP_K1, SWAP_K2, RANDPAIR_SWAPPED]].first()
    return pd.DataFrame({"k1": head[SWAP_K1], "k2": head[SWAP_K2], "swapped": head[RANDPAIR_SWAPPED],
                         "x": (at["k1"] & at["k2"]).astype(float), "y": (at["p1"] & at["p2"]).astype(float)})


def joint_swap_estimate(frame: pd.DataFrame, theta_2: float) -> dict[str, Any]:
    """ψ̂(k1, k2) = θ̂(2) · ratio of co-click rates (module docstring, Eqs. 19–20) and its delta-method standard error.

    Returns {"joint": {"k1,k2": ψ̂}, "stderr": {...}, "sessions": {...}, "theta_2": θ̂(2)}; the standard
    error counts the co-click sampling only (θ̂(2) taken as known).
    """
    sessions = _co_clicks(frame)
    out: dict[str, Any] = {"joint": {}, "stderr": {}, "sessions": {}, "theta_2": float(theta_2)}
    for (k1, k2), group in sessions.groupby(["k1", "k2"]):
        num = den = var_num = var_den = cov = 0.0
        for _, arm in group.groupby("swapped"):
            n = len(arm)
            x, y = arm["x"].to_numpy(), arm["y"].to_numpy()
            num, den = num + x.mean(), den + y.mean()
            if n > 1:
                var_num += x.var(ddof=1) / n
                var_den += y.var(ddof=1) / n
                cov += np.cov(x, y, ddof=1)[0, 1] / n
        key = f"{int(k1)},{int(k2)}"
        out["sessions"][key] = int(len(group))
        if den > 0:
            ratio = num / den
            rel_var = (var_num / num ** 2 if num > 0 else 0.0) + var_den / den ** 2 - (
                2 * cov / (num * den) if num > 0 else 0.0)
            out["joint"][key] = float(theta_2 * ratio)
            out["stderr"][key] = float(theta_2 * ratio * np.sqrt(max(rel_var, 0.0)))
    return out


def estimate_joint_examination(cfg: SimulateConfig, seed: int, n_sessions: int, randpair_sessions: int,
                               pairs: Sequence[tuple[int, int]] | None = None) -> dict[str, Any]:
    """θ̂(2) from a simulated RandPair experiment, then ψ̂ from a simulated pair-swap experiment (Eqs. 16–20)."""
    theta = randpair_estimate(simulate_randpair(cfg, seed, randpair_sessions))["propensities"]
    if "2" not in theta:
        raise ConfigError("the RandPair experiment gave no estimate for position 2; raise its number of sessions")
    result = joint_swap_estimate(simulate_pair_swaps(cfg, seed, n_sessions, pairs), theta["2"])
    return {**result, "theta": theta}
