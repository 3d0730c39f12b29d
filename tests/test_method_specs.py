"""Each method's spec (`methods.registry.METHODS`): every combination it declares loads, every other one fails when
the config loads with one ConfigError naming the setting and train.method (issue 33: `train.loss: listwise` with
`train.method: dla` was accepted and ignored)."""
from __future__ import annotations

import re
from typing import Any

import pytest

from wpultr.config import BACKBONES, TRAIN_LOSSES, config_from_dict
from wpultr.errors import ConfigError
from wpultr.settings.methods import METHODS, supported

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


def test_every_method_but_naive_refuses_something() -> None:
    """Only naive and BAL train every loss, backbone and mode (their specs; cross-key rules such as a booster's
    single process aside); every other method has a combination that must fail."""
    assert {m for m, _, _ in undeclared()} == set(METHODS) - {"naive", "bal"}


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
