"""A tiny simulated pipeline run (40 queries, 600 sessions, an MLP of one layer) for the tests that read a run's
files."""
from __future__ import annotations

from pathlib import Path


def tiny_run(tmp_path: Path, client, method: str, epochs: int = 1, **evaluation) -> Path:
    """Run `method` end to end on a tiny simulated log under tmp_path/<method>; `evaluation` overrides that section."""
    from wpultr.config import config_from_dict
    from wpultr.pipeline.runner import run_pipeline
    cfg = config_from_dict({
        "name": method, "seed": 3, "run_dir": str(tmp_path / "{name}"),
        "data": {"source": "simulate", "valid_fraction": 0.3,
                 "simulate": {"n_queries": 40, "n_sessions": 600, "n_annotated_queries": 20}},
        "ranker": {"backbone": "mlp", "head": [16]},
        "train": {"epochs": epochs, "batch_size": 64, "method": method},
        "evaluation": evaluation,
        "discovery": {"n_sessions": 150, "n_bootstrap": 1}})
    return run_pipeline(cfg, client=client).run_dir
