"""The bar a trained ranker must clear in tests: what a random ranking of the same judged rows scores."""
import numpy as np
import pandas as pd

from wpultr.evaluation.metrics import evaluate


def random_ranker_dcg10(scored: pd.DataFrame, draws: int = 20, seed: int = 0) -> float:
    """Mean DCG@10 (wpultr.evaluation.metrics) of `draws` uniformly random rankings of the same judged rows: the bar
    a trained ranker must clear, since any scorer, a random one included, gets DCG@10 > 0."""
    rng = np.random.default_rng(seed)
    return float(np.mean([evaluate(scored.assign(score=rng.random(len(scored))), "score", ks=(10,))["all"]["DCG@10"]
                          for _ in range(draws)]))
