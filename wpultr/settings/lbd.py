"""Settings of LBD (run config key `lbd`), torch-free so loading a config stays fast.

LBD's ablations (LBD paper §6.1) are values of `lbd.variant`, not copies of the method:

| variant     | λ (Lipschitz, `gradient_penalty`) | t (Bernoulli, `drop_probability`) |
|-------------|-----------------------------------|-----------------------------------|
| `lbd`       | as set                            | as set                            |
| `lips`      | as set                            | 0                                 |
| `ber`       | 0                                 | as set                            |
| `unlimited` | 0                                 | 0                                 |
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ..errors import require

VARIANTS = ("lbd", "lips", "ber", "unlimited")


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class LBDConfig:
    """LBD's penalty weight λ, drop probability t, the ablation and the observation model ô_p(x)."""

    KEY: ClassVar[str] = "lbd"           # dotted key of this section in a run config (names its errors)

    variant: Literal["lbd", "lips", "ber", "unlimited"] = "lbd"
    gradient_penalty: float = 0.001      # λ of L_gp(x) = λ Σ_i ‖∇ₓ ô_i(x)‖₂ (Lipschitz decoupling, §5); the
    #                                      paper's grid {1, 100, 10⁴} is on its own loss scale, not this one
    drop_probability: float = 0.1        # t: γ ~ Bernoulli(1 − t) per shown result (Bernoulli decoupling, §4.3)
    observation_hidden: list[int] = field(default_factory=lambda: [64, 32])   # ô's MLP widths (empty: linear)
    observation_learning_rate: float = 0.02   # Adam step of ô: its per-position biases must move by ~log(v_1/v_n)
    #                                           within a few epochs, as DLA's propensity logits do

    def __post_init__(self) -> None:
        k = self.KEY
        require(self.variant in VARIANTS, f"{k}.variant", f"one of {', '.join(map(repr, VARIANTS))}", self.variant)
        require(_number(self.gradient_penalty) and self.gradient_penalty >= 0, f"{k}.gradient_penalty",
                "a finite number >= 0", self.gradient_penalty)
        require(_number(self.drop_probability) and 0.0 <= self.drop_probability < 1.0, f"{k}.drop_probability",
                "a number in [0, 1)", self.drop_probability)
        require(isinstance(self.observation_hidden, list) and all(
            isinstance(h, int) and not isinstance(h, bool) and 1 <= h <= 65_536 for h in self.observation_hidden)
            and len(self.observation_hidden) <= 32, f"{k}.observation_hidden",
            "a list of at most 32 layer widths in [1, 65536] (empty: a linear model)", self.observation_hidden)
        require(_number(self.observation_learning_rate) and self.observation_learning_rate > 0,
                f"{k}.observation_learning_rate", "a finite number > 0", self.observation_learning_rate)

    def effective(self) -> tuple[float, float]:
        """(λ, t) the variant trains with: `lips` drops t, `ber` drops λ, `unlimited` drops both (§6.1)."""
        lam = 0.0 if self.variant in ("ber", "unlimited") else float(self.gradient_penalty)
        t = 0.0 if self.variant in ("lips", "unlimited") else float(self.drop_probability)
        return lam, t
