"""One validated config describes a whole run (allRank's habit): dataclasses with defaults.

Every section is a dataclass in `wpultr/settings/` (one module per section) that checks its own keys when it
is built (`__post_init__`, raising ConfigError with the dotted key from its `KEY` and the allowed values). This
module only composes them, checks what spans sections (RunConfig), migrates moved keys (MOVED_KEYS) and reads
YAML: `load_config(path)` parses it with the safe loader, bounded in nesting and alias expansion (`safe_yaml`),
rejects unknown keys and wrong types, and checks what the run asks of this machine (`check_machine`); `to_dict`
gives back the resolved config written beside a run, `changed_keys` what differs between two in what they compute
(`cluster.*` aside).

Paths (`data.train`, `data.annotations`, `data.simulate.letor_path`, `ranker.bert.path`, `run_dir`):
a relative path written in a YAML config file is relative to that file's directory, so
`wpultr run path/to/run.yaml` means the same files from any working directory; one given with --set
or in a mapping is relative to the current working directory. Either way it is made absolute when the
config is loaded, on the client, so Dask workers started in other directories read and write the same
files. A URL (`s3://…`) is kept.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import os
import re
import string
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import psutil
import yaml

from .errors import ConfigError, brief, cut, require
from .rundir.safe_yaml import MAX_YAML_DEPTH, MAX_YAML_NODES, safe_yaml
from .settings.bal import BalConfig
from .settings.checks import int_at_least as _int_at_least
from .settings.cluster import ClusterConfig
from .settings.data import SOURCES, DataConfig
from .settings.discovery import DiscoveryConfig
from .settings.dla import DLAConfig
from .settings.evaluation import EvalConfig
from .settings.identifiability import IdentifiabilityConfig
from .settings.lbd import LBDConfig
from .settings.methods import BACKBONES as BACKBONE_SPECS
from .settings.methods import LOSSES, METHODS, WHOLE_PAGE, check_supported
from .settings.pairwise import PairwiseConfig
from .settings.pairwise_debias import PairwiseDebiasConfig
from .settings.propensity import PropensityConfig
from .settings.prs import PRSConfig
from .settings.ranker import (
    BACKBONES,
    BERT_SPECIAL_TOKENS,
    MAX_LAYERS,
    MAX_WIDTH,
    BertConfig,
    RankerConfig,
    bert_training_bytes,
    head_training_bytes,
)
from .settings.regression_em import RegressionEMConfig
from .settings.train import TRAIN_LOSSES, TrainConfig
from .settings.xgboost import XGBoostConfig
from .storage import check_url, is_url, normalised, working_copy_dir

__all__ = ["BACKBONES", "BERT_SPECIAL_TOKENS", "BertConfig", "ClusterConfig", "ConfigError", "DataConfig",
           "EvalConfig", "MAX_LAYERS", "MAX_WIDTH", "MOVED_KEYS", "RankerConfig", "RunConfig", "SOURCES",
           "TRAIN_LOSSES", "TrainConfig", "bert_training_bytes", "changed_keys", "check_machine", "config_from_dict",
           "dump_config", "from_mapping", "head_training_bytes", "load_config", "parse_overrides",
           "read_yaml_mapping", "results_config", "safe_yaml", "set_dotted", "to_dict", "MAX_YAML_DEPTH",
           "MAX_YAML_NODES"]

MAX_NAME_LENGTH = 128
# A config is a few hundred values: YAML beyond MAX_YAML_NODES / MAX_YAML_DEPTH (rundir/safe_yaml.py) is refused.
EXECUTION_SECTIONS = ("cluster",)      # where a run executes, not what it computes: a resume may change them
RUN_DIR_FIELDS = ("name", "seed")                          # the placeholders run_dir may hold
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
log = logging.getLogger(__name__)


def check_machine(cfg: RunConfig, own_cluster: bool = True) -> RunConfig:
    """`cfg`, or ConfigError when it asks this machine for more than it has: processes or threads beyond its cores
    (a setting's default always allowed), an MLP head whose training state exceeds its memory.

    Checked where a config is to run here (load_config, run_pipeline), never where a saved one is read (a run
    trained on a larger machine can still be evaluated and exported on a smaller one). The LocalCluster's size only
    with `own_cluster` (the run starts one) and no `cluster.scheduler`: an external cluster's workers are its own.
    """
    cores = os.cpu_count() or 1
    local = own_cluster and cfg.cluster.scheduler is None
    for key, value, default in (("cluster.n_workers", cfg.cluster.n_workers if local else 1, ClusterConfig.n_workers),
                                ("cluster.threads_per_worker", cfg.cluster.threads_per_worker if local else 1, 1),
                                # with a scheduler the ranks run on its workers (methods/training/ranks.py)
                                ("train.processes", cfg.train.processes if cfg.cluster.scheduler is None else 1, 1)):
        high = max(cores, default)
        require(value <= high, key, f"an integer in [1, {high}] (this machine's cores)", value)
    need, have = head_training_bytes(cfg.ranker.head), int(psutil.virtual_memory().total)
    backbone = BACKBONE_SPECS[cfg.ranker.backbone]
    require(backbone.boosts or need <= have, "ranker.head", f"layer widths whose training state "
            f"fits this machine's {have / 2 ** 30:.1f} GiB of memory (this head needs {need / 2 ** 30:.1f} GiB)",
            cfg.ranker.head)
    bert = cfg.ranker.bert
    if backbone.reads_tokens and bert.path is None:    # a checkpoint's size is its own config's
        need = bert_training_bytes(bert)
        require(need <= have, "ranker.bert", f"hidden_size, num_hidden_layers and intermediate_size whose training "
                f"state fits this machine's {have / 2 ** 30:.1f} GiB of memory (hidden_size {bert.hidden_size}, "
                f"num_hidden_layers {bert.num_hidden_layers}, intermediate_size {bert.intermediate_size} need "
                f"{need / 2 ** 30:.1f} GiB)", f"{bert.hidden_size}/{bert.num_hidden_layers}/{bert.intermediate_size}")
    return cfg



@dataclass
class RunConfig:
    """A whole run; checks the run's name, seed and directory and what spans sections."""

    name: str = "run"                     # one path component: the run directory's name under runs/
    seed: int = 0
    run_dir: str = "runs/{name}"          # may hold {name} and {seed}
    data: DataConfig = field(default_factory=DataConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    ranker: RankerConfig = field(default_factory=RankerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    evaluation: EvalConfig = field(default_factory=EvalConfig)
    discovery: DiscoveryConfig = field(default_factory=DiscoveryConfig)
    propensity: PropensityConfig = field(default_factory=PropensityConfig)
    regression_em: RegressionEMConfig = field(default_factory=RegressionEMConfig)
    dla: DLAConfig = field(default_factory=DLAConfig)
    pairwise_debias: PairwiseDebiasConfig = field(default_factory=PairwiseDebiasConfig)
    prs: PRSConfig = field(default_factory=PRSConfig)
    bal: BalConfig = field(default_factory=BalConfig)
    identifiability: IdentifiabilityConfig = field(default_factory=IdentifiabilityConfig)
    lbd: LBDConfig = field(default_factory=LBDConfig)
    pairwise: PairwiseConfig = field(default_factory=PairwiseConfig)
    xgboost: XGBoostConfig = field(default_factory=XGBoostConfig)
    source: ClassVar[Path | None] = None  # the YAML file it was loaded from (set per instance by load_config)

    def __post_init__(self) -> None:
        require(_safe_name(self.name), "name", f"one path component: 1–{MAX_NAME_LENGTH} characters, no '/' or "
                "'\\', not '.' or '..', no space, quote, control or shell character ($`&|;<>*?!(){}[]#~)",
                self.name)
        require(_int_at_least(self.seed, 0) and self.seed < 2 ** 32, "seed", "an integer in [0, 2**32 - 1]",
                self.seed)
        require(_run_dir_template(self.run_dir), "run_dir", "a non-empty path; placeholders allowed: "
                f"{', '.join('{' + f + '}' for f in RUN_DIR_FIELDS)}", self.run_dir)
        if is_url(self.run_dir):
            check_url(self.run_dir, "run_dir")
        allowed_metrics = [f"{m}@{k}" for m in ("DCG", "ERR", "nDCG") for k in self.evaluation.ks] + ["MAP"]
        if self.train.select_metric not in allowed_metrics:
            raise ConfigError(f"train.select_metric: {brief(self.train.select_metric)} is not allowed; allowed values: "
                              f"{', '.join(allowed_metrics)}")
        if self.data.heldout and self.evaluation.heldout_sessions:
            raise ConfigError(f"evaluation.heldout_sessions: must be 0 when data.heldout names the held-out session "
                              f"files, got {self.evaluation.heldout_sessions}")
        names = self.data.declared_page_features()
        unknown = [f for f in self.bal.features or [] if f not in names]
        if unknown:
            raise ConfigError(f"bal.features: {unknown} are not declared page features; allowed values: "
                              f"{', '.join(names)}")
        if self.bal.graph == "position" and "position" not in (self.bal.features or names):
            raise ConfigError("bal.graph: 'position' needs the page feature 'position' among bal.features")
        t = self.train
        check_supported(t.method, t.loss, self.ranker.backbone, t.streaming, t.processes, t.warmup_epochs)
        backbone = BACKBONE_SPECS[self.ranker.backbone]
        if LOSSES[t.loss].boosted_only and not backbone.boosts:
            boosters = [n for n, b in BACKBONE_SPECS.items() if b.boosts]
            per_row = [n for n, loss in LOSSES.items() if not loss.boosted_only]
            raise ConfigError(f"train.loss: {t.loss!r} (LambdaMART's λ-gradients as the booster's objective) needs "
                              f"ranker.backbone {' or '.join(map(repr, boosters))}; allowed values here: "
                              f"{', '.join(map(repr, per_row))} (got backbone {self.ranker.backbone!r})")
        if self.train.streaming and not backbone.streams:
            streams = [n for n, b in BACKBONE_SPECS.items() if b.streams]
            listed = ", ".join(map(repr, streams))
            raise ConfigError(f"ranker.backbone: train.streaming: true trains the {' or '.join(map(repr, streams))} "
                              f"backbone only (its standardisation merges over partitions), got "
                              f"{self.ranker.backbone!r}; allowed values with streaming: {listed} "
                              "(or set train.streaming: false)")
        if backbone.boosts and self.train.processes > 1:   # (the embedding ranker's ranks
            #   each read the whole table in memory, so each builds the one document vocabulary)
            ranks = [n for n, b in BACKBONE_SPECS.items() if not b.boosts]
            raise ConfigError(f"ranker.backbone: {self.ranker.backbone!r} trains with lightgbm.dask on the run's "
                              f"cluster instead, got train.processes {self.train.processes}; allowed values with "
                              f"train.processes > 1: {', '.join(map(repr, ranks))} (or set train.processes: 1)")
        if self.train.streaming and self.data.max_sessions is not None:
            raise ConfigError(f"data.max_sessions: must be null with train.streaming: true (every session of the "
                              f"partitions is streamed), got {self.data.max_sessions!r}; to train on a sample, add "
                              f"--set train.streaming=false (or drop data.max_sessions to stream them all)")
        if METHODS[t.method].click_model == WHOLE_PAGE and LOSSES[t.loss].per_list \
                and self.bal.click_model.form != "multiplicative":
            raise ConfigError(f"bal.click_model.form: BAL's {self.train.loss} ranker step (train.loss) divides each "
                              "click by the page's examination σ(v), which only the multiplicative form has; allowed "
                              f"values with train.loss {self.train.loss}: multiplicative, "
                              f"got {self.bal.click_model.form!r}")

    @property
    def resolved_run_dir(self) -> Path:
        """The local run directory: run_dir itself, or for a URL its working copy (storage.WorkingCopy)."""
        url = self.run_dir_url
        if url:
            return working_copy_dir(url)
        # the final path, not its spelling: 'victim/{name}/..' is victim itself, whether or not {name} exists
        return Path(os.path.abspath(self.run_dir.format(name=self.name, seed=self.seed)))

    @property
    def run_dir_url(self) -> str | None:
        """run_dir with its placeholders filled when it is an fsspec URL (s3://…), else None."""
        # normalised: `file:///d/victim/{name}/..` is `file:///d/victim`, checked as the place written, not as spelled
        return normalised(self.run_dir.format(name=self.name, seed=self.seed)) if is_url(self.run_dir) else None


_SHELL_HOSTILE = set(" \t\"'`$&|;<>*?!(){}[]#~\\")


def _safe_name(name: Any) -> bool:
    """`name` is one safe path component: a run directory can never be its parent or a sibling's, and the path
    printed can be pasted back into a shell (no spaces, quotes or characters a shell expands)."""
    return (isinstance(name, str) and 0 < len(name) <= MAX_NAME_LENGTH and name not in (".", "..")
            and not any(c in "/\\" or c in _SHELL_HOSTILE or ord(c) < 32 or ord(c) == 127 for c in name))


def _run_dir_template(template: Any) -> bool:
    if not isinstance(template, str) or not template.strip() or "\x00" in template:
        return False
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError:
        return False
    return all(f is None or (f in RUN_DIR_FIELDS and not spec and conversion is None)
               for _, f, spec, conversion in fields)


# ---------------------------------------------------------------------------------------------
# Building from a mapping
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
            raise ConfigError(f"{key}: expected a mapping, got {brief(value)}")
        return from_mapping(tp, value, key)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: {brief(value)} is not allowed; allowed values: {', '.join(map(repr, args))}")
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
        raise ConfigError(errors[0] if errors else f"{key}: unexpected value {brief(value)}")
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {brief(value)}")
        return [_coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {brief(value)}")
        return {str(k): (_coerce(v, args[1], f"{key}.{k}") if args[1] is not Any else v) for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {brief(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {brief(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {brief(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {brief(value)}")
        return value
    raise ConfigError(f"{key}: unsupported config type {_type_name(tp)}")


def from_mapping(cls: type, values: Mapping[str, Any], prefix: str = "") -> Any:
    """Build the dataclass `cls` from a mapping: unknown keys and wrong types raise ConfigError under `prefix`;
    the dataclass's own `__post_init__` checks its values (ConfigError naming its dotted key)."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = sorted(set(values) - set(names))
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(f"unknown config key(s) {cut(', '.join(where + str(u) for u in unknown))}; "
                          f"allowed keys{' under ' + prefix if prefix else ''}: {', '.join(sorted(names))}")
    kwargs = {name: _coerce(v, hints[name], f"{prefix}.{name}" if prefix else name) for name, v in values.items()}
    return cls(**kwargs)


# ---------------------------------------------------------------------------------------------
# Paths: absolute on the client
# ---------------------------------------------------------------------------------------------
def _absolute(path: str, base: Path) -> str:
    """`path` made absolute against `base` (a URL or an absolute path is kept as written)."""
    if _URL.match(path):
        return path
    path = os.path.expanduser(path)
    return path if os.path.isabs(path) else os.path.normpath(os.path.join(base, path))


def absolute_paths(cfg: RunConfig, base: str | Path | None = None) -> RunConfig:
    """Make every path of `cfg` absolute against `base` (default: the current working directory), in place.

    Dask workers may run in other directories (or on other machines sharing a filesystem): the config
    they receive must name the same files as on the client.
    """
    base = Path(base) if base is not None else Path.cwd()
    data = cfg.data
    data.train = [_absolute(p, base) for p in data.train]
    data.heldout = [_absolute(p, base) for p in data.heldout]
    if data.annotations is not None:
        data.annotations = _absolute(data.annotations, base)
    if cfg.ranker.bert.path is not None:
        cfg.ranker.bert.path = _absolute(cfg.ranker.bert.path, base)
    letor = data.simulate.letor_path
    if letor is not None:
        data.simulate.letor_path = (_absolute(letor, base) if isinstance(letor, str)
                                    else [_absolute(p, base) for p in letor])
    escaped = str(base).replace("{", "{{").replace("}", "}}")   # run_dir is a format template
    cfg.run_dir = _absolute(cfg.run_dir, Path(escaped))
    return cfg


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------
# Keys that moved: old dotted key -> where it lives now. The flat `baselines` section split per method (issue 33): a
# user's config naming one fails with where it went (check_moved_keys), a saved run's is translated
# (moved_keys_translated). A key moved out of a section that still exists (issue 46: the click tests' threshold is
# discovery's) still loads where it lives now, with a note (moved_keys_read).
MOVED_KEYS: dict[str, str] = {
    "bal.min_within_document_share": "discovery.min_within_document_share",
    **{f"baselines.propensity_{k}": f"propensity.{k}" for k in ("source", "table", "clip")},
    **{f"baselines.{k}": f"propensity.{k}" for k in ("randomisation_sessions", "harvest_iterations")},
    **{f"baselines.rem_{k}": f"regression_em.{k}" for k in ("step_size", "sample_labels")},
    **{f"baselines.dla_{k}": f"dla.{k}" for k in ("ranker_loss_weight", "propensity_learning_rate", "max_weight")},
    **{f"baselines.pairwise_{k}": f"pairwise_debias.{k}" for k in ("regularization_p", "step_size")},
    **{f"baselines.lightgbm_{k}": f"ranker.lightgbm.{k}" for k in (
        "rounds", "learning_rate", "num_leaves", "min_data_in_leaf", "position_bias_regularization", "num_threads",
        "eval_points", "distributed")},
    "baselines.pair_weighting": "prs.weighting", "baselines.prs_clip": "prs.clip",
}


def _pop_dotted(values: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    """(found, value) of `dotted` in the nested mapping `values`, removed from it when found."""
    *parents, leaf = dotted.split(".")
    node: Any = values
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or leaf not in node:
        return False, None
    return True, node.pop(leaf)


def _get_dotted(values: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = values
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def moved_keys_read(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` with each key that moved out of a section that still exists read where it lives now, and a note on
    stderr saying so; ConfigError when both places are given different values."""
    out = copy.deepcopy(dict(values))
    for old, new in MOVED_KEYS.items():
        if old.startswith("baselines."):
            continue
        found, value = _pop_dotted(out, old)
        if not found:
            continue
        present, current = _get_dotted(out, new)
        if present and current != value:
            raise ConfigError(f"{old}: moved to {new}, and both are given ({brief(value)} and {brief(current)}); "
                              f"keep {new} only")
        set_dotted(out, new, value)
        log.warning("note: %s moved to %s (read there; rename it in the config)", old, new)
    return out


def check_moved_keys(values: Mapping[str, Any]) -> None:
    """ConfigError naming where a key of the old `baselines` section lives now (never silently ignored)."""
    old = values.get("baselines")
    if old is None:
        return
    keys = sorted(old) if isinstance(old, Mapping) else []
    for key in keys:
        dotted = f"baselines.{key}"
        if dotted in MOVED_KEYS:
            raise ConfigError(f"{dotted}: moved to {MOVED_KEYS[dotted]} (the baselines section is split per method)")
    raise ConfigError(f"baselines{'.' + cut(str(keys[0])) if keys else ''}: the baselines section is split per "
                      f"method; allowed sections: propensity, regression_em, dla, pairwise_debias, prs, "
                      f"ranker.lightgbm")


# the lambdarank methods read the old baselines.lightgbm_* keys; every other method the ranker.lightgbm ones
_BASELINE_BOOSTERS = ("lightgbm_lambdarank", "lightgbm_position")


def moved_keys_translated(values: Mapping[str, Any]) -> dict[str, Any]:
    """A run directory's config.yaml as written before the baselines section was split: each old key put where it
    lives now (where both spelled a LightGBM knob, the one the run's method read wins), so that run still resumes,
    evaluates and exports. A user's own config gets check_moved_keys' error instead."""
    out = copy.deepcopy(dict(values))
    old = out.pop("baselines", None)
    if not isinstance(old, Mapping):
        return out
    method = (out.get("train") or {}).get("method", "naive")
    backbone_knobs = {f"ranker.lightgbm.{k}" for k in ((out.get("ranker") or {}).get("lightgbm") or {})}
    for key, value in old.items():
        dotted = MOVED_KEYS.get(f"baselines.{key}")
        if dotted is None:
            raise ConfigError(f"baselines.{key}: not a key this version knows (a run directory from another version?)")
        if dotted not in backbone_knobs or method in _BASELINE_BOOSTERS:   # both spelled it: the one the method read
            set_dotted(out, dotted, value)
    return out


def saved_config(path: str | Path) -> RunConfig:
    """The RunConfig a run directory's config.yaml holds (a run written by an earlier version included), read by the
    bounded safe loader: a damaged or hostile file (an alias bomb, a python tag) is one ConfigError naming it."""
    return config_from_dict(moved_keys_translated(read_yaml_mapping(path, "run config")))


def config_from_dict(values: Mapping[str, Any] | None) -> RunConfig:
    """A validated RunConfig from a mapping, its relative paths made absolute against the working directory."""
    values = moved_keys_read(values or {})
    check_moved_keys(values)
    return absolute_paths(from_mapping(RunConfig, values))


def read_yaml_mapping(path: str | Path, what: str = "config") -> dict[str, Any]:
    """A YAML file's top-level mapping, read with the bounded safe loader; errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such {what} file")
    values = safe_yaml(path.read_text(), str(path)) or {}
    if not isinstance(values, Mapping):
        raise ConfigError(f"{path}: top level must be a mapping of {what} keys")
    return dict(values)


def parse_overrides(items: list[str] | None, example: str = "train.epochs=2") -> dict[str, Any]:
    """`KEY=VALUE` command-line overrides as {dotted key: YAML-parsed value}."""
    overrides: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set {brief(item)}: expected KEY=VALUE, e.g. {example}")
        key, value = item.split("=", 1)
        overrides[key.strip()] = safe_yaml(value, f"--set {cut(key.strip())}")
    return overrides


# The path keys of a run config, as they stand in its YAML mapping.
PATH_KEYS: tuple[str, ...] = ("data.train", "data.heldout", "data.annotations", "data.simulate.letor_path",
                             "ranker.bert.path", "run_dir")


def file_relative_paths(values: dict[str, Any], base: Path) -> dict[str, Any]:
    """`values` (a config mapping read from a file in `base`) with its relative paths made absolute there.

    Values of the wrong type are left alone for validation to name.
    """
    escaped = Path(str(base).replace("{", "{{").replace("}", "}}"))   # run_dir is a format template
    for dotted in PATH_KEYS:
        *parents, leaf = dotted.split(".")
        node: Any = values
        for part in parents:
            node = node.get(part) if isinstance(node, Mapping) else None
        if not isinstance(node, dict) or leaf not in node:
            continue
        value = node[leaf]
        where = escaped if dotted == "run_dir" else base
        if isinstance(value, str):
            node[leaf] = _absolute(value, where)
        elif isinstance(value, list):
            node[leaf] = [_absolute(v, where) if isinstance(v, str) else v for v in value]
    return values


def load_config(path: str | Path, overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """Read a YAML run config with the safe loader; `overrides` are dotted keys (``train.epochs``).

    Relative paths in the file are relative to the file's directory; in `overrides`, to the working one. The
    config is to run here: check_machine bounds what it asks of this machine.
    """
    values = file_relative_paths(read_yaml_mapping(path), Path(path).resolve().parent)
    for dotted, v in (overrides or {}).items():
        set_dotted(values, dotted, v)
    cfg = check_machine(config_from_dict(values))
    cfg.source = Path(path).resolve()
    return cfg


def set_dotted(values: dict, dotted: str, value: Any) -> None:
    node = values
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{dotted}: {brief(part)} is not a section")
    node[parts[-1]] = value


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def results_config(cfg: RunConfig) -> dict[str, Any]:
    """The keys of `cfg` that decide what a run computes (all but EXECUTION_SECTIONS), as YAML would give them."""
    values = {k: v for k, v in to_dict(cfg).items() if k not in EXECUTION_SECTIONS}
    return yaml.safe_load(yaml.safe_dump(values, sort_keys=False))


def changed_keys(before: RunConfig, after: RunConfig) -> list[str]:
    """The dotted keys whose values differ between two configs in what they compute (EXECUTION_SECTIONS aside):
    a run directory written under `before` may be resumed under `after` only when there are none."""
    return sorted(_diff_keys(results_config(before), results_config(after)))


def _diff_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = set(a) | set(b)
        return [k for key in keys for k in _diff_keys(a.get(key), b.get(key), f"{prefix}{key}.")]
    return [prefix.rstrip(".")] if a != b else []


def dump_config(cfg: RunConfig) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)
