"""What the evaluate stage measures (run config key `evaluation`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..errors import require
from .checks import finite as _finite
from .checks import int_at_least as _int_at_least


@dataclass
class EvalConfig:
    KEY: ClassVar[str] = "evaluation"

    ks: list[int] = field(default_factory=lambda: [1, 3, 5, 10])
    discover_graph: bool = True           # discover the click graph under the trained ranker (methods that learn none)
    heldout_sessions: float = 0.0         # share of sessions the split stage holds out of training for the label-free
                                          # click metrics (metrics.json "clicks"); 0: none, training as before

    def __post_init__(self) -> None:
        require(bool(self.ks) and all(_int_at_least(k, 1) for k in self.ks) and len(set(self.ks)) == len(self.ks),
                f"{self.KEY}.ks", "a non-empty list of distinct cutoffs >= 1", self.ks)
        require(_finite(self.heldout_sessions, 0.0, 0.5), f"{self.KEY}.heldout_sessions",
                "a share of sessions in [0, 0.5)", self.heldout_sessions)

