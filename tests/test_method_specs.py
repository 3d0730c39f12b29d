"""Each method's spec (`methods.registry.METHODS`): every combination it declares loads, every other one fails when
the config loads with one ConfigError naming the setting and train.method (issue 33: `train.loss: listwise` with
`train.method: dla` was accepted and ignored)."""
from __future__ import annotations

import re
from importlib.util import find_spec
from typing import Any

import numpy as np
import pytest

from wpultr.config import BACKBONES, TRAIN_LOSSES, config_from_dict
from wpultr.errors import ConfigError
from wpultr.rankers.base import score_frame
from wpultr.schema import POSITION, SESSION_ID
from wpultr.settings.methods import BACKBONES as BACKBONE_SPECS
from wpultr.settings.methods import EXTRAS, LOSSES, METHODS, get_method, supported
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate
from wpultr.simulate.generate import TRUE_LABEL

DOMAINS: dict[str, tuple[Any, ...]] = {"train.loss": TRAIN_LOSSES, "ranker.backbone": BACKBONES,
                                       "train.streaming": (False, True), "train.processes": (False, True)}


def values(method: str, setting: str, value: Any, warmup_epochs: int = 0) -> dict[str, Any]:
    """The smallest config mapping that sets `setting` to `value` for `method` (other settings left compatible)."""
    train: dict[str, Any] = {"method": method, "warmup_epochs": warmup_epochs}
    ranker: dict[str, Any] = {}
    if setting == "train.loss":
        train["loss"] = value
        if value == "lambdarank":                  # a loss-level rule: LambdaMART's λ-gradients grow a booster
            ranker["backbone"] = "lightgbm"
    elif setting == "ranker.backbone":
        ranker["backbone"] = value
    elif setting == "train.streaming":
        train["streaming"] = value
    else:
        train["processes"] = 2 if value else 1
    return {"train": train, "ranker": ranker}


def declared() -> list[tuple[str, str, Any, int]]:
    """Every (method, setting, value, train.warmup_epochs) its spec supports: with and without a warm-up."""
    return [(m, s, v, n) for n in (0, 1) for m in METHODS for s in DOMAINS for v in supported(m, s, n)]


def undeclared() -> list[tuple[str, str, Any]]:
    return [(m, s, v) for m in METHODS for s, domain in DOMAINS.items() for v in domain
            if v not in supported(m, s)]


@pytest.mark.parametrize("method, setting, value, warmup_epochs", declared())
def test_a_declared_combination_loads(method: str, setting: str, value: Any, warmup_epochs: int) -> None:
    cfg = config_from_dict(values(method, setting, value, warmup_epochs))
    assert cfg.train.method == method


@pytest.mark.parametrize("method, setting, value", undeclared())
def test_an_undeclared_combination_fails_naming_both_keys(method: str, setting: str, value: Any) -> None:
    allowed = ", ".join("1" if setting == "train.processes" else str(a).lower() if isinstance(a, bool) else str(a)
                        for a in supported(method, setting))
    with pytest.raises(ConfigError, match=rf"^{re.escape(setting)}: \S+ is not supported by train\.method: "
                                          rf"{method} \(supports: {re.escape(allowed)}\)$"):
        config_from_dict(values(method, setting, value))


SIM = SimulateConfig(n_queries=20, docs_per_query=8, n_sessions=200, n_annotated_queries=12, results_per_page=6,
                     n_dense_features=4)
SMALL = {"ranker": {"head": [8], "lightgbm": {"rounds": 4, "rounds_per_epoch": 2, "min_data_in_leaf": 2,
                                              "num_threads": 1}},
         "xgboost": {"rounds": 4, "eval_every": 2, "early_stopping": "none", "num_threads": 1}}


@pytest.fixture(scope="module")
def logs(one_torch_thread):
    return simulate(SIM, seed=2)


def fitted_scores(method: str, logs: Any, forced: tuple[str, Any] | None = None) -> tuple[str, np.ndarray]:
    """(ranker kind, scores of the annotated rows) of `method` fitted in memory for 1 epoch, `forced` set past the
    config's check, as a config written before the check (or a caller that skips it) would set it."""
    cfg = config_from_dict({**SMALL, "train": {"method": method, "epochs": 1, "batch_size": 64, "device": "cpu"}})
    if forced is not None:
        section, key = forced[0].split(".")
        setattr(getattr(cfg, section), key, forced[1])
    sessions = logs.sessions.merge(logs.truth_sessions[[SESSION_ID, POSITION, TRUE_LABEL]], on=[SESSION_ID, POSITION])
    result = get_method(method).fit(sessions, logs.annotations, cfg)   # the oracle reads the true labels
    return result.ranker.kind, np.asarray(score_frame(result.ranker, logs.annotations), np.float64)


# the methods whose spec refuses a train.loss or a ranker.backbone (the others: test_method_contract's refusals)
REFUSING = sorted(m for m in METHODS if any(v not in supported(m, s) for s in ("train.loss", "ranker.backbone")
                                             for v in DOMAINS[s]))


@pytest.mark.parametrize("method", REFUSING)
def test_a_loss_or_backbone_a_spec_refuses_is_one_the_method_cannot_honour(method: str, logs: Any) -> None:
    """The spec against the method's behaviour, not against itself: each loss and backbone the spec refuses is, set
    past the config, either refused by the method too or ignored — the same ranker, score for score, as without it
    (a method with a loss of its own, a booster that reads no ranker.backbone). A refusal of something the method
    would honour — a different model — fails here."""
    if method in EXTRAS and find_spec(EXTRAS[method][0]) is None:
        pytest.skip(f"{method} needs the optional package {EXTRAS[method][0]}")
    default = fitted_scores(method, logs)
    # λ-gradients need a backbone that boosts: a method that trains none refuses that loss for its backbones' sake
    boosts = any(BACKBONE_SPECS[b].boosts for b in METHODS[method].backbones)
    for setting in ("train.loss", "ranker.backbone"):
        refused = [v for v in DOMAINS[setting] if v not in supported(method, setting)
                   and not (setting == "train.loss" and LOSSES[v].boosted_only and not boosts)]
        if not refused:
            continue
        value = refused[0]               # one refused value per setting keeps the fits few
        try:
            kind, scores = fitted_scores(method, logs, (setting, value))
        except (ConfigError, ValueError):
            continue                     # the method refuses it too
        assert kind == default[0], (setting, value)
        np.testing.assert_array_equal(scores, default[1], err_msg=f"{method} honours {setting}: {value}")


def test_a_method_with_its_own_loss_refuses_listwise_without_a_warm_up() -> None:
    with pytest.raises(ConfigError) as err:
        config_from_dict({"train": {"method": "dla", "loss": "listwise"}})
    assert str(err.value) == "train.loss: listwise is not supported by train.method: dla (supports: pointwise)"
    # with a warm-up, train.loss is the shared warm-up's click loss (warmup.warm_up): honoured, so allowed
    assert config_from_dict({"train": {"method": "dla", "loss": "listwise",
                                       "warmup_epochs": 1}}).train.loss == "listwise"
    with pytest.raises(ConfigError, match="^ranker.backbone: bert is not supported by train.method: "
                                          "lightgbm_lambdarank \\(supports: mlp\\)$"):
        config_from_dict({"train": {"method": "lightgbm_lambdarank"}, "ranker": {"backbone": "bert"}})


def test_the_backbones_a_config_names_are_the_ranker_kinds_the_registry_builds():
    """`ranker.backbone` is validated without torch (settings.methods.BACKBONES); rankers.registry builds each one
    that does not boost (the shared trainer's) and loads every one."""
    from wpultr.rankers.registry import BUILDERS, ranker_classes
    assert set(BACKBONES) <= set(ranker_classes())
    assert set(BUILDERS) == {name for name, spec in BACKBONE_SPECS.items() if not spec.boosts}


def test_a_method_spec_names_only_known_losses_backbones_and_bias_factors() -> None:
    from wpultr.settings.methods import MethodSpec
    with pytest.raises(ValueError, match="unknown losses or backbones"):
        MethodSpec("naive:Naive", ("pairwise",))
    with pytest.raises(ValueError, match="bias_factors"):
        MethodSpec("naive:Naive", bias_factors="media")
