"""The methods by name, importable without torch (the config validates `train.method` against it)."""
from __future__ import annotations

from importlib import import_module
from importlib.util import find_spec
from typing import Any

from ..errors import ConfigError

# name -> "module:Class" relative to wpultr.methods (BAL lives in wpultr.bal), imported on first use.
METHODS: dict[str, str] = {
    "naive": "naive:Naive",                                  # clicks as labels (BAL Eq. 3)
    "ipw": "ipw:IPW",                                        # inverse propensity weighting, position propensities
    "regression_em": "regression_em:RegressionEM",           # Wang et al. 2018
    "dla": "dla:DLA",                                        # dual learning algorithm, Ai et al. 2018
    "pairwise_debias": "pairwise_debias:PairwiseDebias",     # Unbiased LambdaMART's t+/t- ratios, Hu et al. 2019
    "lightgbm_lambdarank": "lightgbm_rank:LightGBMLambdaRank",           # plain lambdarank on clicks
    "lightgbm_position": "lightgbm_rank:LightGBMPositionLambdaRank",     # LightGBM's position-aware lambdarank
    "propensity_pairs": "propensity_pairs:PropensityPairs",         # PRS/PNS/IPS pair weights, Wang et al. 2020
    "propensity_lambdamart": "propensity_lambdamart:PropensityLambdaMART",   # PRS-LambdaMART, LightGBM objective
    "pairwise_framework": "pairwise_framework:PairwiseFramework",         # unbiased pairwise loss, A matrix (004 Eq. 10)
    "robust_lambdamart": "pairwise_framework:RobustUnbiasedLambdaMART",   # Robust Unbiased LambdaMART (004 Eq. 26)
    "unbiased_lambdamart": "pairwise_framework:UnbiasedLambdaMART",       # Hu et al. 2019 as a LightGBM objective
    "xgboost_unbiased": "xgboost_rank:XGBoostUnbiased",      # XGBoost's unbiased LambdaMART (optional extra)
    "bal": "..bal.method:BAL",                               # whole-page BAL (variants: config `bal.graph`, `bal.features`)
    "lbd": "lbd:LBD",                                        # Lipschitz and Bernoulli decoupling, Chen et al. 2022
    "oracle": "oracle:Oracle",                               # the ranker trained on the simulator's true labels
}
# name -> (the optional package it imports, the wpultr extra that installs it)
METHODS_PACKAGE = "wpultr.methods"   # the names above are relative to it, looked up by name (no import upward)

EXTRAS: dict[str, tuple[str, str]] = {"xgboost_unbiased": ("xgboost", "xgboost")}


def install_hint(extra: str) -> str:
    """The command that installs wpultr's optional `extra`."""
    return f"pip install 'wpultr[{extra}]'"


def check_installed(name: str) -> None:
    """ConfigError naming train.method when the method `name` needs an optional package that is not installed."""
    if name not in EXTRAS:
        return
    package, extra = EXTRAS[name]
    try:
        found = find_spec(package) is not None
    except (ImportError, ValueError):   # a finder that refuses it, or a module entry left empty
        found = False
    if not found:
        raise ConfigError(f"train.method: {name!r} needs the optional package {package}, which is not installed: "
                          f"{install_hint(extra)}")


def get_method(name: str) -> Any:
    """A new instance of the method registered under `name`; an unknown name lists the known ones, a method whose
    optional package is missing says how to install it."""
    if name not in METHODS:
        raise ConfigError(f"train.method: {name!r} is not allowed; allowed values: {', '.join(sorted(METHODS))}")
    check_installed(name)
    module, cls = METHODS[name].split(":")
    return getattr(import_module(module if module.startswith(".") else f".{module}", METHODS_PACKAGE), cls)()
