"""The dense MLP ranker standardises its inputs with training statistics and keeps them through save/load."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file, save_file

from wpultr.config import config_from_dict
from wpultr.errors import ExportError
from wpultr.evaluation.metrics import per_query
from wpultr.methods.losses.lists import listwise_softmax_loss
from wpultr.methods.training.trainer import Trainer, build_ranker
from wpultr.rankers.base import WEIGHTS_FILE, score_frame
from wpultr.rankers.registry import load_ranker
from wpultr.schema import CLICK, FEATURES, LABEL, POSITION, QUERY_ID, SESSION_ID

N_QUERIES, N_DOCS, N_FEATURES = 120, 10, 4


def labelled(seed: int, transform) -> pd.DataFrame:
    """Queries of N_DOCS documents whose graded label follows feature 0 minus feature 1 squared (2, 3 are noise)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N_QUERIES * N_DOCS, N_FEATURES)).astype(np.float64)
    labels = np.digitize(x[:, 0] - x[:, 1] ** 2 + 0.3 * rng.normal(size=len(x)), [-1.0, 0.0, 0.8])
    x = transform(x)
    query = np.repeat(np.arange(N_QUERIES), N_DOCS)
    return pd.DataFrame({QUERY_ID: query, SESSION_ID: query, POSITION: np.tile(np.arange(1, N_DOCS + 1), N_QUERIES),
                         CLICK: 0, FEATURES: list(x.astype(np.float32)), LABEL: labels})


def scaled(x: np.ndarray) -> np.ndarray:
    out = x.copy()
    out[:, 0] = out[:, 0] * 1000.0 + 1e4
    return out


def trained(transform) -> tuple[float, torch.nn.Module, pd.DataFrame]:
    """Test DCG@10 of an MLP trained on the labels (listwise softmax on gains) of data under `transform`."""
    train, test = labelled(0, transform), labelled(1, transform)
    cfg = config_from_dict({"seed": 0, "ranker": {"backbone": "mlp", "head": [16], "dropout": 0.0},
                            "train": {"epochs": 8, "batch_size": 8, "learning_rate": 3e-3, "device": "cpu"}})
    trainer = Trainer(build_ranker(cfg, train), train, None, cfg)
    gains = trainer.lists.gather(np.exp2(train[LABEL].to_numpy(np.float32)) - 1.0)
    ranker = trainer.fit(lambda s, b: listwise_softmax_loss(s, b.extras["gain"], b.mask), extras={"gain": gains})
    scores = score_frame(ranker, test)
    return float(per_query(test.assign(score=scores), "score")["DCG@10"].mean()), ranker, test


@pytest.fixture(scope="module")
def runs():
    return {"plain": trained(lambda x: x), "scaled": trained(scaled)}


def test_scaled_and_shifted_feature_is_learned_as_well_as_unscaled(runs):
    (plain, _, test), (big, ranker, _) = runs["plain"], runs["scaled"]
    ideal = float(per_query(test.assign(score=test[LABEL].astype(float)), "score")["DCG@10"].mean())
    shuffled = float(per_query(test.assign(score=np.random.default_rng(2).random(len(test))), "score")["DCG@10"].mean())
    assert plain > shuffled + 0.6 * (ideal - shuffled)        # the unscaled problem is learned at all
    assert big == pytest.approx(plain, abs=0.05)   # ... and the scaled one as well (unstandardised: ~0.2 lower)
    assert float(ranker.mean[0]) == pytest.approx(1e4, rel=1e-3)
    assert float(ranker.scale[0]) == pytest.approx(1000.0, rel=0.1)


def test_standardisation_round_trips_through_save_and_load(tmp_path, runs):
    _, ranker, test = runs["scaled"]
    ranker.save(tmp_path / "ranker")
    loaded = load_ranker(tmp_path / "ranker")
    assert torch.equal(loaded.mean, ranker.mean) and torch.equal(loaded.scale, ranker.scale)
    assert float(loaded.mean[0]) != 0.0 and float(loaded.scale[0]) != 1.0   # not the constructor's defaults
    np.testing.assert_allclose(score_frame(loaded, test), score_frame(ranker, test), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,value", [("scale", 0.0), ("scale", -1.0), ("scale", float("nan")),
                                        ("mean", float("inf"))])
def test_load_rejects_an_unusable_standardisation(tmp_path, runs, name, value):
    _, ranker, _ = runs["plain"]
    directory = ranker.save(tmp_path / "ranker")
    weights = tmp_path / "ranker" / WEIGHTS_FILE
    state = load_file(str(weights))
    state[name][2] = value
    save_file(state, str(weights))
    # a non-finite value is caught by load_ranker's check of every tensor, a zero/negative scale by the MLP's own
    with pytest.raises(ExportError, match=rf"'{name}' (value 2 is|holds 1 non-finite)"):
        load_ranker(directory)
