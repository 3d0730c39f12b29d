"""Settings of the whole-page click simulator, validated as part of the run config."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SimulateConfig:
    """Whole-page click simulator settings (see wpultr.simulate)."""
    n_queries: int = 200
    docs_per_query: int = 20
    n_sessions: int = 4000
    n_annotated_queries: int = 100
    results_per_page: int = 10
    vocab_size: int = 2000
    n_dense_features: int = 16
    zipf_exponent: float = 1.1
    logging_noise: float = 1.0            # std of the noise the logging ranker adds to relevance
    user_model: str = "whole_page"
    user_model_params: dict[str, Any] = field(default_factory=dict)
    n_context_factors: int = 0
