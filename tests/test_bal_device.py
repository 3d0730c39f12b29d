"""BAL's own networks on the training device (issue 43 part 4): `bal.influence.device: train` fits the influence
estimators where the ranker trains, and the click model fits and runs on the device it is moved to. On a CPU both are
the CPU path exactly; on a CUDA device (the GPU machine) they learn the CPU's model within float rounding."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from wpultr.bal.click_model import ClickModel, PageInputs
from wpultr.bal.influence import InfluenceConfig, fit_influence_estimators
from wpultr.bal.weights import importance_weights
from wpultr.causal.biases import BiasReport, ConfoundedFeature
from wpultr.schema import CLICK, RELEVANCE_SCORE
from wpultr.settings.bal import ClickModelConfig
from wpultr.settings.bal_weighting import WeightConfig

R = RELEVANCE_SCORE
pytestmark = pytest.mark.usefixtures("one_torch_thread")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the GPU machine)")


def nodes(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    """r̂, a confounded position (numeric) and media type (categorical, codes 1..3) depending on it, clicks."""
    rng = np.random.default_rng(seed)
    r = rng.normal(size=n)
    media = 1 + (rng.random(n) < 0.3 + 0.2 * (r > 0)).astype(int) + (rng.random(n) < 0.2).astype(int)
    pos = 0.8 * r + rng.normal(size=n)
    click = (rng.random(n) < 1 / (1 + np.exp(-(r - 0.3 * pos)))).astype(int)
    return pd.DataFrame({R: r, "pos": pos, "media": media, CLICK: click})


REPORT = BiasReport((ConfoundedFeature("pos", (R,), 1), ConfoundedFeature("media", (R, "pos"), 2)),
                    ("pos", "media"), (R, "pos", "media"))
KINDS = {"pos": "ordinal", "media": "categorical"}


def estimators(device, config_device: str = "train"):
    return fit_influence_estimators(nodes(), REPORT, KINDS, InfluenceConfig(epochs=5, device=config_device), seed=3,
                                    n_categories={"media": 4}, device=device)


def click_model(device) -> tuple[ClickModel, dict]:
    frame = nodes()
    torch.manual_seed(0)
    model = ClickModel(PageInputs(("pos",), ("media",), (4,)), ClickModelConfig(epochs=2)).to(device)
    weights = np.linspace(0.5, 1.5, len(frame))
    stats = model.fit(frame[R].to_numpy(), frame, frame[CLICK].to_numpy(), weights, torch.Generator().manual_seed(1))
    return model, stats


def test_train_means_the_device_bal_passes_and_the_cpu_alone():
    on_train = estimators("cpu")
    assert {str(p.device) for e in on_train.values() for d in (e.denominator, e.numerator) if d is not None
            and d.net_ is not None for p in d.net_.parameters()} == {"cpu"}
    alone = estimators(None)                              # fitted outside a run: "train" is the CPU
    explicit = estimators(None, "cpu")
    frame = nodes()
    w = [importance_weights(frame, e, WeightConfig(), seed=3).weights for e in (on_train, alone, explicit)]
    assert np.array_equal(w[0], w[1]) and np.array_equal(w[0], w[2])


@cuda
def test_the_networks_on_a_gpu_learn_the_cpus_model():
    frame = nodes()
    cpu, gpu = estimators("cpu"), estimators("cuda")
    assert next(gpu["media"].denominator.net_.parameters()).is_cuda
    # the same draws and initial weights; the devices' float rounding may tip early stopping by an epoch
    for name in cpu:
        np.testing.assert_allclose(gpu[name].denominator.log_prob(frame), cpu[name].denominator.log_prob(frame),
                                   atol=0.05)
    w_cpu, w_gpu = (importance_weights(frame, e, WeightConfig(), seed=3).weights for e in (cpu, gpu))
    np.testing.assert_allclose(w_gpu, w_cpu, rtol=0.05, atol=0.01)
    (m_cpu, s_cpu), (m_gpu, s_gpu) = click_model("cpu"), click_model("cuda")
    assert m_gpu.scale.is_cuda and s_gpu["click_model_nll"] == pytest.approx(s_cpu["click_model_nll"], rel=1e-3)
    np.testing.assert_allclose(m_gpu.page_logits(frame), m_cpu.page_logits(frame), rtol=1e-3, atol=1e-3)
