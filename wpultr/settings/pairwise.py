"""Settings of the general pairwise framework (run config key `pairwise`; paper 004), torch-free.

`pairwise.joint_model` says how positions are examined together, which fixes the joint examination
probabilities of the A matrix (Eq. 9): `independent` (Eq. 21), `continuous` (no skipping, §4) or
`row_skipping` on a grid of `grid_columns` results per row, skipping a row with `skip_row` (γ) and going
on after a result with `continue_prob` (C) (Eqs. 22–24). Individual propensities come from
`propensity.source` as for IPW. `lambda_weight` picks the booster's pair factor: `ndcg` is
Robust Unbiased LambdaMART (Eq. 26), `none` the unbiased pairwise loss (Eq. 10) itself as the objective.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

from ..errors import require

JOINT_MODELS = ("independent", "continuous", "row_skipping")     # the joint examination models (joint_examination)
LAMBDA_WEIGHTS = ("ndcg", "none")


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class PairwiseConfig:
    """The joint examination model of the A matrix, its grid parameters, σ and the booster's lambda weighting."""

    KEY: ClassVar[str] = "pairwise"      # dotted key of this section in a run config (names its errors)

    joint_model: Literal["independent", "continuous", "row_skipping"] = "continuous"
    grid_columns: int = 2                # row_skipping: results per row of the grid
    skip_row: float = 0.2                # row_skipping: γ, the chance to skip a row
    continue_prob: float = 0.9           # row_skipping: C, the chance to go on after a result
    sigma: float = 1.0                   # σ of the pair loss log(1 + e^{−σ(s_i − s_j)}) (Eq. 5)
    lambda_weight: Literal["ndcg", "none"] = "ndcg"   # robust_lambdamart: |ΔNDCG| (Eq. 26) or none (Eq. 10)

    def __post_init__(self) -> None:
        k = self.KEY
        require(self.joint_model in JOINT_MODELS, f"{k}.joint_model", f"one of {', '.join(map(repr, JOINT_MODELS))}",
                self.joint_model)
        require(isinstance(self.grid_columns, int) and not isinstance(self.grid_columns, bool)
                and self.grid_columns >= 1, f"{k}.grid_columns", "an integer >= 1", self.grid_columns)
        require(_number(self.skip_row) and 0.0 <= self.skip_row < 1.0, f"{k}.skip_row", "a number in [0, 1)",
                self.skip_row)
        require(_number(self.continue_prob) and 0.0 < self.continue_prob <= 1.0, f"{k}.continue_prob",
                "a number in (0, 1]", self.continue_prob)
        require(_number(self.sigma) and self.sigma > 0, f"{k}.sigma", "a finite number > 0", self.sigma)
        require(self.lambda_weight in LAMBDA_WEIGHTS, f"{k}.lambda_weight",
                f"one of {', '.join(map(repr, LAMBDA_WEIGHTS))}", self.lambda_weight)
