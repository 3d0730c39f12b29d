"""The methods by name, each with its spec of what it supports, importable without torch (the config validates
`train.method`, `train.loss`, `ranker.backbone`, `train.streaming` and `train.processes` against it)."""
from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from importlib.util import find_spec
from typing import Any

from ..errors import ConfigError

NEURAL = ("mlp", "bert", "embedding")   # the backbones the shared trainer builds (training.build_ranker)
DEFAULT_LOSS, DEFAULT_BACKBONE = "pointwise", "mlp"    # train.loss and ranker.backbone when a config names neither
WARMUP_LOSSES = ("pointwise", "listwise")              # the shared warm-up's click losses (warmup.warm_up)


@dataclass(frozen=True)
class MethodSpec:
    """What a method supports, declared once: the config checks `train.*` and `ranker.backbone` against it.

    `losses`: the `train.loss` values its own training step honours; () when it has a loss of its own (then
    `train.loss` picks only the shared warm-up's click loss, so it stays at its default unless `warmup` and
    `train.warmup_epochs` > 0). `backbones`: the `ranker.backbone` values it trains; () when it grows a model of its
    own and reads no `ranker.backbone` (which then stays at its default). `streaming`: `train.streaming` fits it
    from the partitions; `processes`: `train.processes` > 1 runs it as DDP ranks.
    """

    target: str                              # "module:Class" relative to wpultr.methods, imported on first use
    losses: tuple[str, ...] = ()
    backbones: tuple[str, ...] = NEURAL
    warmup: bool = True                      # runs the shared warm-up, whose click loss is train.loss
    streaming: bool = False
    processes: bool = False


_OWN_BOOSTER: dict[str, Any] = {"backbones": ()}   # grows its own booster: no ranker.backbone
# name -> spec (BAL lives in wpultr.bal).
METHODS: dict[str, MethodSpec] = {
    # clicks as labels (BAL Eq. 3)
    "naive": MethodSpec("naive:Naive", ("pointwise", "listwise", "lambdarank"), (*NEURAL, "lightgbm"),
                        streaming=True, processes=True),
    # inverse propensity weighting, position propensities
    "ipw": MethodSpec("ipw:IPW", ("pointwise", "listwise"), processes=True),
    "regression_em": MethodSpec("regression_em:RegressionEM", processes=True),                    # Wang et al. 2018
    # dual learning algorithm, Ai et al. 2018
    "dla": MethodSpec("dla:DLA", processes=True),
    # Unbiased LambdaMART's t+/t- ratios, Hu et al. 2019
    "pairwise_debias": MethodSpec("pairwise_debias:PairwiseDebias", processes=True),
    # plain lambdarank on clicks
    "lightgbm_lambdarank": MethodSpec("lightgbm_rank:LightGBMLambdaRank", warmup=False, **_OWN_BOOSTER),
    # LightGBM's position-aware lambdarank
    "lightgbm_position": MethodSpec("lightgbm_rank:LightGBMPositionLambdaRank", warmup=False, **_OWN_BOOSTER),
    # PRS/PNS/IPS pair weights, Wang et al. 2020
    "propensity_pairs": MethodSpec("propensity_pairs:PropensityPairs", processes=True),
    # PRS-LambdaMART, LightGBM objective
    "propensity_lambdamart": MethodSpec("propensity_lambdamart:PropensityLambdaMART", **_OWN_BOOSTER),
    # unbiased pairwise loss, A matrix (004 Eq. 10)
    "pairwise_framework": MethodSpec("pairwise_framework:PairwiseFramework", processes=True),
    # Robust Unbiased LambdaMART (004 Eq. 26)
    "robust_lambdamart": MethodSpec("pairwise_framework:RobustUnbiasedLambdaMART", **_OWN_BOOSTER),
    # Hu et al. 2019 as a LightGBM objective
    "unbiased_lambdamart": MethodSpec("pairwise_framework:UnbiasedLambdaMART", **_OWN_BOOSTER),
    # XGBoost's unbiased LambdaMART (optional extra)
    "xgboost_unbiased": MethodSpec("xgboost_rank:XGBoostUnbiased", warmup=False, **_OWN_BOOSTER),
    # whole-page BAL (variants: config `bal.graph`, `bal.features`)
    "bal": MethodSpec("..bal.method:BAL", ("pointwise", "listwise", "lambdarank"), (*NEURAL, "lightgbm"),
                      streaming=True, processes=True),
    "lbd": MethodSpec("lbd:LBD", processes=True),            # Lipschitz and Bernoulli decoupling, Chen et al. 2022
    # the ranker trained on the simulator's true labels (no warm-up)
    "oracle": MethodSpec("oracle:Oracle", ("pointwise", "listwise"), warmup=False, processes=True),
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


def supported(name: str, setting: str, warmup_epochs: int = 0) -> tuple[Any, ...]:
    """The values of `setting` (train.loss, ranker.backbone, train.streaming, train.processes > 1) that method `name`
    supports: what its spec declares, or the setting's default where the method does not read it."""
    spec = METHODS[name]
    if setting == "train.loss":
        if spec.losses:
            return spec.losses
        return WARMUP_LOSSES if spec.warmup and warmup_epochs > 0 else (DEFAULT_LOSS,)
    if setting == "ranker.backbone":
        return spec.backbones or (DEFAULT_BACKBONE,)
    if setting == "train.streaming":
        return (False, True) if spec.streaming else (False,)
    return (False, True) if spec.processes else (False,)      # train.processes > 1


def check_supported(name: str, loss: str, backbone: str, streaming: bool, processes: int,
                    warmup_epochs: int) -> None:
    """ConfigError naming the setting and train.method when method `name`'s spec does not support it."""
    def show(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    for setting, value, shown in (("train.loss", loss, loss), ("ranker.backbone", backbone, backbone),
                                  ("train.streaming", streaming, show(streaming)),
                                  ("train.processes", processes > 1, str(processes))):
        allowed = supported(name, setting, warmup_epochs)
        if value not in allowed:
            listed = ", ".join("1" if setting == "train.processes" else show(a) for a in allowed)
            raise ConfigError(f"{setting}: {shown} is not supported by train.method: {name} (supports: {listed})")


def get_method(name: str) -> Any:
    """A new instance of the method registered under `name`; an unknown name lists the known ones, a method whose
    optional package is missing says how to install it."""
    if name not in METHODS:
        raise ConfigError(f"train.method: {name!r} is not allowed; allowed values: {', '.join(sorted(METHODS))}")
    check_installed(name)
    module, cls = METHODS[name].target.split(":")
    return getattr(import_module(module if module.startswith(".") else f".{module}", METHODS_PACKAGE), cls)()
