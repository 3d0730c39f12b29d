"""One validated config describes a whole run (allRank's habit): dataclasses with defaults.

`load_config(path)` parses YAML safely, rejects unknown keys and wrong values with the dotted
key and the allowed values, and `to_dict` gives back the resolved config written beside a run.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml

from .causal.discovery_config import DiscoveryConfig, validate_discovery_config
from .methods.bal_config import BalConfig
from .schema import BAIDU_PAGE_FEATURES
from .simulate.spec import SimulateConfig, validate_simulate_config


class ConfigError(ValueError):
    """A config key has a value wpultr cannot use; the message names the key and what is allowed."""


@dataclass
class ClusterConfig:
    scheduler: str | None = None          # address of an existing Dask scheduler; None = LocalCluster
    n_workers: int = 2
    threads_per_worker: int = 1
    memory_limit: str = "4GiB"            # per LocalCluster worker


@dataclass
class DataConfig:
    source: Literal["simulate", "baidu", "parquet"] = "simulate"
    train: list[str] = field(default_factory=list)        # files / globs of session logs
    annotations: str | None = None                       # annotation file (Baidu) or table
    valid_fraction: float = 0.1                          # of annotated queries, held out for model selection
    page_features: dict[str, str] = field(
        default_factory=lambda: {f.name: f.kind.value for f in BAIDU_PAGE_FEATURES})
    max_sessions: int | None = None
    partition_rows: int = 200_000                        # rows per Parquet partition written by ingest
    simulate: SimulateConfig = field(default_factory=SimulateConfig)


@dataclass
class BertConfig:
    path: str | None = None               # local config or checkpoint directory (never a hub name)
    max_length: int = 64
    freeze_encoder: bool = False
    cache_embeddings: bool = False        # frozen encoder; each query-document encoded once, head trained on the cache
    special_tokens: dict[str, int] | None = None   # pad/cls/sep/mask/unk ids of a checkpoint's vocabulary
    # used only when `path` is None: a tiny config built in process, for tests and CPU demos
    hidden_size: int = 32
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    intermediate_size: int = 64


@dataclass
class RankerConfig:
    backbone: Literal["mlp", "bert"] = "mlp"
    head: list[int] = field(default_factory=lambda: [512, 256, 128])   # BAL §4.1: MLP 512-256-128
    dropout: float = 0.1
    bert: BertConfig = field(default_factory=BertConfig)


@dataclass
class TrainConfig:
    method: str = "naive"                 # a name of wpultr.methods.base.METHODS (checked up front)
    loss: Literal["pointwise", "listwise"] = "pointwise"
    epochs: int = 3
    warmup_epochs: int = 0                # BAL §4.1 warm-up: naive click loss (+ masked LM for BERT)
    mlm_probability: float = 0.15
    mlm_weight: float = 1.0
    select_metric: str = "DCG@10"         # validation metric that picks the epoch kept
    batch_size: int = 256
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    device: Literal["cpu", "cuda", "auto"] = "auto"


@dataclass
class BaselinesConfig:
    """Settings of the position-based baselines (IPW, Regression-EM, DLA, pairwise debiasing, LightGBM)."""

    propensity_source: Literal["auto", "randomisation", "harvest", "table"] = "auto"
    propensity_table: dict[str, float] | None = None   # position -> propensity (relative to position 1)
    propensity_clip: float = 0.05
    randomisation_sessions: int = 20000                # RandPair sessions simulated for IPW's propensities
    harvest_iterations: int = 200
    rem_step_size: float = 0.1
    rem_sample_labels: bool = False
    dla_ranker_loss_weight: float = 1.0
    dla_propensity_learning_rate: float = 0.02
    dla_max_weight: float = 20.0
    pairwise_regularization_p: float = 1.0
    pairwise_step_size: float = 0.1
    lightgbm_rounds: int = 200
    lightgbm_learning_rate: float = 0.05
    lightgbm_num_leaves: int = 31
    lightgbm_min_data_in_leaf: int = 20
    lightgbm_position_bias_regularization: float = 0.0
    lightgbm_num_threads: int = 0                      # 0 = LightGBM's default (all cores)
    lightgbm_eval_points: int = 10


@dataclass
class EvalConfig:
    ks: list[int] = field(default_factory=lambda: [1, 3, 5, 10])
    discover_graph: bool = True           # discover the click graph under the trained ranker (methods that learn none)


@dataclass
class RunConfig:
    name: str = "run"
    seed: int = 0
    run_dir: str = "runs/{name}"
    data: DataConfig = field(default_factory=DataConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    ranker: RankerConfig = field(default_factory=RankerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    evaluation: EvalConfig = field(default_factory=EvalConfig)
    discovery: DiscoveryConfig = field(default_factory=DiscoveryConfig)
    baselines: BaselinesConfig = field(default_factory=BaselinesConfig)
    bal: BalConfig = field(default_factory=BalConfig)

    @property
    def resolved_run_dir(self) -> Path:
        return Path(self.run_dir.format(name=self.name))


# ---------------------------------------------------------------------------------------------
def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check `value` against the annotation `tp`, returning it converted; raise ConfigError naming `key`."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        if value is None:
            return tp()
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return _build(tp, value, key)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: {value!r} is not allowed; allowed values: {', '.join(map(repr, args))}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{key}: unexpected value {value!r}")
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return {str(k): (_coerce(v, args[1], f"{key}.{k}") if args[1] is not Any else v) for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported config type {_type_name(tp)}")


def _build(cls: type, values: Mapping[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(f"unknown config key(s) {', '.join(where + u for u in unknown)}; "
                          f"allowed keys{' under ' + prefix if prefix else ''}: {', '.join(sorted(names))}")
    kwargs = {name: _coerce(v, hints[name], f"{prefix}.{name}" if prefix else name) for name, v in values.items()}
    try:
        return cls(**kwargs)
    except ValueError as e:   # a section's own __post_init__ check: name it by its full dotted key
        if isinstance(e, ConfigError):
            raise
        message = str(e)
        if prefix and not message.startswith(prefix):
            section = prefix.rsplit(".", 1)[-1]
            message = f"{prefix}.{message[len(section) + 1:]}" if message.startswith(section + ".") \
                else f"{prefix}: {message}"
        raise ConfigError(message) from None


def _check_ranges(cfg: RunConfig) -> None:
    positive = {
        "train.epochs": cfg.train.epochs, "train.batch_size": cfg.train.batch_size,
        "cluster.n_workers": cfg.cluster.n_workers, "cluster.threads_per_worker": cfg.cluster.threads_per_worker,
        "data.partition_rows": cfg.data.partition_rows, "data.simulate.n_queries": cfg.data.simulate.n_queries,
        "data.simulate.n_sessions": cfg.data.simulate.n_sessions,
        "data.simulate.results_per_page": cfg.data.simulate.results_per_page,
    }
    for key, value in positive.items():
        if value <= 0:
            raise ConfigError(f"{key}: must be > 0, got {value}")
    if not 0.0 <= cfg.data.valid_fraction < 1.0:
        raise ConfigError(f"data.valid_fraction: must be in [0, 1), got {cfg.data.valid_fraction}")
    from .methods.registry import METHODS
    if cfg.train.method not in METHODS:
        raise ConfigError(f"train.method: {cfg.train.method!r} is not allowed; allowed values: "
                          f"{', '.join(map(repr, sorted(METHODS)))}")
    if cfg.train.warmup_epochs < 0:
        raise ConfigError(f"train.warmup_epochs: must be >= 0, got {cfg.train.warmup_epochs}")
    if not 0.0 < cfg.train.mlm_probability < 1.0:
        raise ConfigError(f"train.mlm_probability: must be in (0, 1), got {cfg.train.mlm_probability}")
    allowed_metrics = [f"{m}@{k}" for m in ("DCG", "ERR", "nDCG") for k in cfg.evaluation.ks] + ["MAP"]
    if cfg.train.select_metric not in allowed_metrics:
        raise ConfigError(f"train.select_metric: {cfg.train.select_metric!r} is not allowed; allowed values: "
                          f"{', '.join(allowed_metrics)}")
    if cfg.ranker.bert.special_tokens is not None:
        from .rankers.bert import SPECIAL_NAMES
        missing = [n for n in SPECIAL_NAMES if n not in cfg.ranker.bert.special_tokens]
        if missing:
            raise ConfigError(f"ranker.bert.special_tokens: missing {missing}; needs ids for {', '.join(SPECIAL_NAMES)}")
    if cfg.train.learning_rate <= 0:
        raise ConfigError(f"train.learning_rate: must be > 0, got {cfg.train.learning_rate}")
    if any(k <= 0 for k in cfg.evaluation.ks):
        raise ConfigError(f"evaluation.ks: cutoffs must be > 0, got {cfg.evaluation.ks}")
    if cfg.data.source in ("baidu", "parquet") and not cfg.data.train:
        raise ConfigError(f"data.train: source {cfg.data.source!r} needs at least one log path")
    if cfg.data.source == "baidu" and not cfg.data.annotations:
        raise ConfigError("data.annotations: source 'baidu' needs the annotation file")
    from .schema import page_features_from_config, SchemaError
    try:
        declared = page_features_from_config(cfg.data.page_features, "data.page_features")
    except SchemaError as e:
        raise ConfigError(str(e)) from None
    if cfg.data.source == "simulate":
        validate_simulate_config(cfg.data.simulate)
    validate_discovery_config(cfg.discovery)
    names = [f.name for f in declared]
    unknown = [f for f in cfg.bal.features or [] if f not in names]
    if unknown:
        raise ConfigError(f"bal.features: {unknown} are not declared page features; allowed values: {', '.join(names)}")
    if cfg.bal.graph == "position" and "position" not in (cfg.bal.features or names):
        raise ConfigError("bal.graph: 'position' needs the page feature 'position' among bal.features")


def config_from_dict(values: Mapping[str, Any] | None) -> RunConfig:
    cfg = _build(RunConfig, values or {}, "")
    _check_ranges(cfg)
    return cfg


def read_yaml_mapping(path: str | Path, what: str = "config") -> dict[str, Any]:
    """A YAML file's top-level mapping, read with the safe loader; errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such {what} file")
    try:
        values = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(values, Mapping):
        raise ConfigError(f"{path}: top level must be a mapping of {what} keys")
    return dict(values)


def parse_overrides(items: list[str] | None, example: str = "train.epochs=2") -> dict[str, Any]:
    """`KEY=VALUE` command-line overrides as {dotted key: YAML-parsed value}."""
    overrides: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. {example}")
        key, value = item.split("=", 1)
        overrides[key.strip()] = yaml.safe_load(value)
    return overrides


def load_config(path: str | Path, overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """Read a YAML run config with the safe loader; `overrides` are dotted keys (``train.epochs``)."""
    values = read_yaml_mapping(path)
    for dotted, v in (overrides or {}).items():
        set_dotted(values, dotted, v)
    return config_from_dict(values)


def set_dotted(values: dict, dotted: str, value: Any) -> None:
    node = values
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{dotted}: {part!r} is not a section")
    node[parts[-1]] = value


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def dump_config(cfg: RunConfig) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)
