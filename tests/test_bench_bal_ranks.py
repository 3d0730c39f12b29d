"""bench/bal_ranks.py's bookkeeping (the script itself spawns DDP ranks and is run by hand, docs/benchmarks.md)."""
from __future__ import annotations

import pytest
import torch

from bench_scripts import load_bench_script
from wpultr.methods.base import FitResult


@pytest.fixture(scope="module")
def bench():
    return load_bench_script("bal_ranks")


def test_step_seconds_average_bal_epochs_and_ignore_the_warm_up(bench):
    history = [{"phase": "warmup", "seconds": 9.0},
               {"phase": "bal", "step_seconds": {"score": 1.0, "graph": 4.0, "weights": 2.0, "click_model": 1.0,
                                                 "ranker": 6.0}},
               {"phase": "bal", "step_seconds": {"score": 3.0, "graph": 2.0, "weights": 2.0, "click_model": 3.0,
                                                 "ranker": 4.0}}]
    steps = bench.step_seconds(FitResult(None, history, {}))
    assert steps == {"score": 2.0, "graph": 3.0, "weights": 2.0, "click_model": 2.0, "ranker": 5.0}
    assert bench.step_seconds(FitResult(None, [{"phase": "warmup"}, {"epoch": 1}], {})) == {}


def test_rank_exact_reports_the_largest_differences(bench, one_torch_thread):
    import pandas as pd

    from wpultr.rankers.mlp import MLPRanker
    test = pd.DataFrame({"features": [[0.1, 0.2], [0.3, -0.5], [1.0, 2.0]], "query_id": ["a", "a", "b"]})
    torch.manual_seed(0)
    one = MLPRanker.for_table(test, [4], 0.0)
    many = MLPRanker.for_table(test, [4], 0.0)
    many.load_state_dict(one.state_dict())
    with torch.no_grad():
        many.net[0].bias += 0.25
    exact = bench.rank_exact(FitResult(one, [], {}, []), FitResult(many, [], {}, []), test)
    assert exact["max_parameter_difference"] == pytest.approx(0.25)
    assert exact["max_test_score_difference"] > 0 and exact["same_graphs"]
