"""The methods by name, each with its spec of what it supports, importable without torch (the config validates
`train.method`, `train.loss`, `ranker.backbone`, `train.streaming` and `train.processes` against it)."""
from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from importlib.util import find_spec
from typing import Any

from ..errors import ConfigError


@dataclass(frozen=True)
class LossSpec:
    """What a `train.loss` is, declared once (its torch and numpy forms: methods/losses, `CLICK_LOSSES`, whose names a
    test binds to `LOSSES`)."""

    boosted_only: bool = False   # λ-gradients as a booster's objective: needs a backbone that `boosts`
    per_list: bool = False       # ranks a session's list instead of fitting p(click) per row: a whole-page click model
    #                              divides each click by the page's examination instead of fitting the product


@dataclass(frozen=True)
class BackboneSpec:
    """What a `ranker.backbone` can do, declared once (rankers/registry builds and loads each, and a test binds its
    kinds to `BACKBONES`)."""

    boosts: bool = False         # a booster grown by LightGBM (lightgbm.dask on the run's cluster), not the shared
    #                              trainer's parameters: no DDP ranks, no memory bound on an MLP head
    streams: bool = False        # `train.streaming`: its standardisation merges over the partitions
    reads_tokens: bool = False   # scores the query and document tokens (BERT), not the dense features
    document_only: bool = False  # scores a document by its doc_id alone (one learned score per document)

    @property
    def reads_features(self) -> bool:
        """Scores the dense feature vector (`features`, lexical ones made from tokens when a log has none)."""
        return not (self.reads_tokens or self.document_only)


LOSSES: dict[str, LossSpec] = {
    "pointwise": LossSpec(),                                   # σ(score) fitted to clicks, row by row
    "listwise": LossSpec(per_list=True),                       # softmax cross-entropy over a session's list
    "lambdarank": LossSpec(boosted_only=True, per_list=True),  # LambdaMART's λ-gradients
}
LOSS_NAMES = tuple(LOSSES)                             # train.loss, torch-free (config.TRAIN_LOSSES)
BACKBONES: dict[str, BackboneSpec] = {
    "mlp": BackboneSpec(streams=True),
    "bert": BackboneSpec(reads_tokens=True),
    "lightgbm": BackboneSpec(boosts=True),
    "embedding": BackboneSpec(document_only=True),            # one learned score per doc_id (rankers/embedding.py)
}
BACKBONE_NAMES = tuple(BACKBONES)                      # ranker.backbone (config.BACKBONES)
NEURAL = tuple(name for name, b in BACKBONES.items() if not b.boosts)   # what the shared trainer builds
DEFAULT_LOSS, DEFAULT_BACKBONE = "pointwise", "mlp"    # train.loss and ranker.backbone when a config names neither
WARMUP_LOSSES = ("pointwise", "listwise")              # the shared warm-up's click losses (warmup.warm_up)
BIAS_FACTORS = ("none", "position", "graph")           # MethodSpec.bias_factors
WHOLE_PAGE = "bal"      # MethodSpec.click_model of σ(u)·σ(v) (`bal.click_model`): its name in the click metrics


@dataclass(frozen=True)
class MethodSpec:
    """What a method supports, declared once: the config checks `train.*` and `ranker.backbone` against it.

    `losses`: the `train.loss` values its own training step honours; () when it has a loss of its own (then
    `train.loss` picks only the shared warm-up's click loss, so it stays at its default unless `warmup` and
    `train.warmup_epochs` > 0). `backbones`: the `ranker.backbone` values it trains; () when it grows a model of its
    own and reads no `ranker.backbone` (which then stays at its default). `streaming`: `train.streaming` fits it
    from the partitions; `processes`: `train.processes` > 1 runs it as DDP ranks.

    `bias_factors`: what the train stage's identifiability pre-flight checks — "position" (it learns or uses
    position propensities), "graph" (the page features its click graph sees: `bal.graph`, `bal.features`), "none".
    `learns_graph`: it discovers a click graph every epoch (its graphs are per epoch, the discover stage's settings
    are its own, an experiment's figure 3 and claims read it). `click_model`: the name, in the click metrics, of the
    click model it fits itself from its history (σ(u)·σ(v): "bal"); None when it has none or its bias.json's
    propensities give a position-based one. `streamed_fit`: "module:function" (relative to wpultr.methods, like
    `target`; `streamed_fit(name)` imports it) that fits the method from the partitions when `train.streaming` is on,
    preparing its own rows — the train stage calls `function(sessions_path, valid, cfg, run_root)` and gets back
    `(FitResult, identifiability report)`; None: the shared streaming trainer feeds its ranker step
    (methods/training/distributed.fit_streamed).
    """

    target: str                              # "module:Class" relative to wpultr.methods, imported on first use
    losses: tuple[str, ...] = ()
    backbones: tuple[str, ...] = NEURAL
    warmup: bool = True                      # runs the shared warm-up, whose click loss is train.loss
    streaming: bool = False
    processes: bool = False
    bias_factors: str = "none"               # one of BIAS_FACTORS
    learns_graph: bool = False
    click_model: str | None = None
    streamed_fit: str | None = None          # "module:function" under wpultr.methods, imported on first use

    def __post_init__(self) -> None:
        if self.bias_factors not in BIAS_FACTORS:
            raise ValueError(f"MethodSpec.bias_factors: {self.bias_factors!r} is not one of {BIAS_FACTORS}")
        unknown = sorted(set(self.losses) - set(LOSSES)) + sorted(set(self.backbones) - set(BACKBONES))
        if unknown:
            raise ValueError(f"MethodSpec {self.target}: unknown losses or backbones {unknown}")


_OWN_BOOSTER: dict[str, Any] = {"backbones": ()}   # grows its own booster: no ranker.backbone
_POSITION: dict[str, Any] = {"bias_factors": "position"}   # learns or uses position propensities
# name -> spec (BAL lives in wpultr.bal).
METHODS: dict[str, MethodSpec] = {
    # clicks as labels (BAL Eq. 3)
    "naive": MethodSpec("naive:Naive", LOSS_NAMES, BACKBONE_NAMES, streaming=True, processes=True),
    # inverse propensity weighting, position propensities
    "ipw": MethodSpec("ipw:IPW", ("pointwise", "listwise"), processes=True, **_POSITION),
    "regression_em": MethodSpec("regression_em:RegressionEM", processes=True, **_POSITION),   # Wang et al. 2018
    # dual learning algorithm, Ai et al. 2018
    "dla": MethodSpec("dla:DLA", processes=True, **_POSITION),
    # Unbiased LambdaMART's t+/t- ratios, Hu et al. 2019
    "pairwise_debias": MethodSpec("pairwise_debias:PairwiseDebias", processes=True, **_POSITION),
    # plain lambdarank on clicks
    "lightgbm_lambdarank": MethodSpec("lightgbm_rank:LightGBMLambdaRank", warmup=False, **_OWN_BOOSTER),
    # LightGBM's position-aware lambdarank
    "lightgbm_position": MethodSpec("lightgbm_rank:LightGBMPositionLambdaRank", warmup=False, **_OWN_BOOSTER,
                                    **_POSITION),
    # PRS/PNS/IPS pair weights, Wang et al. 2020
    "propensity_pairs": MethodSpec("propensity_pairs:PropensityPairs", processes=True, **_POSITION),
    # PRS-LambdaMART, LightGBM objective
    "propensity_lambdamart": MethodSpec("propensity_lambdamart:PropensityLambdaMART", **_OWN_BOOSTER, **_POSITION),
    # unbiased pairwise loss, A matrix (004 Eq. 10)
    "pairwise_framework": MethodSpec("pairwise_framework:PairwiseFramework", processes=True, **_POSITION),
    # Robust Unbiased LambdaMART (004 Eq. 26)
    "robust_lambdamart": MethodSpec("pairwise_framework:RobustUnbiasedLambdaMART", **_OWN_BOOSTER, **_POSITION),
    # Hu et al. 2019 as a LightGBM objective
    "unbiased_lambdamart": MethodSpec("pairwise_framework:UnbiasedLambdaMART", **_OWN_BOOSTER, **_POSITION),
    # XGBoost's unbiased LambdaMART (optional extra)
    "xgboost_unbiased": MethodSpec("xgboost_rank:XGBoostUnbiased", warmup=False, **_OWN_BOOSTER, **_POSITION),
    # whole-page BAL (variants: config `bal.graph`, `bal.features`)
    "bal": MethodSpec("..bal.method:BAL", LOSS_NAMES, BACKBONE_NAMES, streaming=True, processes=True,
                      bias_factors="graph", learns_graph=True, click_model=WHOLE_PAGE,
                      streamed_fit="..bal.streamed:fit_streamed"),
    "lbd": MethodSpec("lbd:LBD", processes=True, **_POSITION), # Lipschitz and Bernoulli decoupling, Chen et al. 2022
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


def spec(name: str) -> MethodSpec:
    """The spec of method `name`; an unknown name lists the known ones (a run directory of another version)."""
    if name not in METHODS:
        raise ConfigError(f"train.method: {name!r} is not allowed; allowed values: {', '.join(sorted(METHODS))}")
    return METHODS[name]


def learns_graph(name: str | None) -> bool:
    """Method `name` discovers a click graph every epoch (False for None or a name this version does not know)."""
    return name in METHODS and METHODS[name].learns_graph


def _resolve(target: str) -> Any:
    module, attribute = target.split(":")
    return getattr(import_module(module if module.startswith(".") else f".{module}", METHODS_PACKAGE), attribute)


def streamed_fit(name: str) -> Any:
    """The function that fits method `name` from the partitions with rows of its own (MethodSpec.streamed_fit), or
    None when the shared streaming trainer fits it."""
    target = spec(name).streamed_fit
    return _resolve(target) if target else None


def get_method(name: str) -> Any:
    """A new instance of the method registered under `name`; an unknown name lists the known ones, a method whose
    optional package is missing says how to install it."""
    target = spec(name).target
    check_installed(name)
    return _resolve(target)()
