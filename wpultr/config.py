"""One validated config describes a whole run (allRank's habit): dataclasses with defaults.

Every section is a dataclass that checks its own keys when it is built (`__post_init__`, raising
ConfigError with the dotted key from its `KEY` and the allowed values); the sections of other
packages (`data.simulate`, `discovery`, `bal`) do the same in their own modules. This module only
composes them, checks what spans sections (RunConfig), and reads YAML: `load_config(path)` parses it
with the safe loader, bounded in nesting and alias expansion (`safe_yaml`), rejects unknown keys and wrong types,
and checks what the run asks of this machine (`check_machine`); `to_dict` gives back the resolved config written
beside a run, `changed_keys` what differs between two in what they compute (`cluster.*` aside).

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
import os
import re
import string
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal
from collections.abc import Mapping

import yaml

from .errors import ConfigError, SchemaError, brief, cut, require
from .schema import BAIDU_PAGE_FEATURES, EMBEDDING_PAGE_FEATURES, PageFeature, page_features_from_config
from .settings.bal import BalConfig
from .settings.checks import finite as _finite, int_at_least as _int_at_least, int_in as _int_in
from .settings.discovery import DiscoveryConfig
from .settings.dla import DLAConfig
from .settings.identifiability import IdentifiabilityConfig
from .settings.lbd import LBDConfig
from .settings.lightgbm import LightGBMConfig
from .settings.methods import DEFAULT_BACKBONE, DEFAULT_LOSS, METHODS, check_installed, check_supported
from .settings.pairwise import PairwiseConfig
from .settings.pairwise_debias import PairwiseDebiasConfig
from .settings.propensity import PropensityConfig
from .settings.prs import PRSConfig
from .settings.regression_em import RegressionEMConfig
from .settings.embeddings import EmbeddingsConfig
from .settings.simulate import SimulateConfig
from .settings.xgboost import XGBoostConfig
from .rundir.safe_yaml import MAX_YAML_DEPTH, MAX_YAML_NODES, safe_yaml
from .storage import check_url, is_url, normalised, working_copy_dir

__all__ = ["BERT_SPECIAL_TOKENS", "BertConfig", "ClusterConfig", "ConfigError", "DataConfig",
           "EvalConfig", "MOVED_KEYS", "RankerConfig", "RunConfig", "TrainConfig", "changed_keys", "check_machine",
           "config_from_dict", "dump_config", "from_mapping", "load_config", "parse_overrides", "read_yaml_mapping",
           "results_config", "safe_yaml", "set_dotted", "to_dict", "MAX_YAML_DEPTH", "MAX_YAML_NODES"]

BERT_SPECIAL_TOKENS = ("pad", "cls", "sep", "mask", "unk")   # ids a BERT checkpoint's vocabulary must give
MAX_NAME_LENGTH = 128
# What a saved ranker may declare (rankers.mlp / rankers.bert check a loaded config.json against the same numbers),
# so a run never trains what export, evaluate and score would refuse.
MAX_WIDTH = 65_536                     # width of one hidden layer (an MLP head's, BERT's intermediate size)
MAX_LAYERS = 32                        # hidden layers of an MLP head
MAX_TOKENS = 8192                      # tokens per (query, document) input of BERT
MAX_BERT_HIDDEN = 8192                 # a BERT encoder's hidden size
MAX_BERT_LAYERS = 96                   # a BERT encoder's layers
MAX_BERT_HEADS = 256                   # a BERT encoder's attention heads
TRAINING_BYTES_PER_PARAMETER = 16      # float32 weight, its gradient and Adam's two moments
# A config is a few hundred values: YAML beyond MAX_YAML_NODES / MAX_YAML_DEPTH (rundir/safe_yaml.py) is refused.
EXECUTION_SECTIONS = ("cluster",)      # where a run executes, not what it computes: a resume may change them
RUN_DIR_FIELDS = ("name", "seed")                          # the placeholders run_dir may hold
TRAIN_LOSSES = ("pointwise", "listwise", "lambdarank")    # train.loss; lambdarank: the LightGBM backbone only
# ranker.backbone; embedding: one learned score per doc_id (rankers/embedding.py)
BACKBONES = ("mlp", "bert", "lightgbm", "embedding")
_HOST = r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)"
_SCHEDULER = re.compile(rf"((tcp|tls|ws|wss|ucx)://)?{_HOST}:(?P<port>[0-9]{{1,5}})/?|inproc://\S+")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_METRIC = re.compile(r"(DCG|ERR|nDCG)@[1-9][0-9]*|MAP")


@dataclass
class ClusterConfig:
    KEY: ClassVar[str] = "cluster"

    scheduler: str | None = None          # address of an existing Dask scheduler; None = LocalCluster
    n_workers: int = 2
    threads_per_worker: int = 1
    memory_limit: str = "4GiB"            # per LocalCluster worker: a size ("4GiB", "500MB") or "auto"
    connect_timeout: float = 10.0         # seconds to reach `scheduler` before giving up
    no_worker_timeout: float = 60.0       # seconds a stage may wait on a cluster with no workers
    rank_workers: list[str] | None = None  # with `scheduler`: the workers (names or addresses) DDP ranks may run on
    rank_resources: dict[str, float] | None = None  # with `scheduler`: what a rank's worker must hold, e.g. {GPU: 1}
    worker_profiling: bool = False        # Dask's statistical profiler on the LocalCluster's workers (it samples every
    #                                       thread's stack each 10 ms: about a sixth of an ingest's CPU); true for the
    #                                       dashboard's profile page. An external cluster's workers keep their own
    #                                       setting

    def __post_init__(self) -> None:
        k = self.KEY
        require(self.scheduler is None or _scheduler_address(self.scheduler), f"{k}.scheduler",
                "null (a LocalCluster) or a scheduler address: tcp://host:port, tls://host:port, host:port "
                "or inproc://…", self.scheduler)
        require(_int_at_least(self.n_workers, 1), f"{k}.n_workers", "an integer >= 1", self.n_workers)
        require(_int_at_least(self.threads_per_worker, 1), f"{k}.threads_per_worker", "an integer >= 1",
                self.threads_per_worker)
        require(self.memory_limit == "auto" or _size(self.memory_limit) > 0, f"{k}.memory_limit",
                "a size such as '4GiB' or '500MB', or 'auto'", self.memory_limit)
        require(_finite(self.connect_timeout, 0, low_open=True), f"{k}.connect_timeout", "a number of seconds > 0",
                self.connect_timeout)
        require(_finite(self.no_worker_timeout, 0, low_open=True), f"{k}.no_worker_timeout",
                "a number of seconds > 0", self.no_worker_timeout)
        require(self.rank_workers is None or (isinstance(self.rank_workers, list) and self.rank_workers
                                               and all(isinstance(w, str) and w for w in self.rank_workers)),
                f"{k}.rank_workers", "null or a list of Dask worker names or addresses", self.rank_workers)
        require(self.rank_resources is None or (isinstance(self.rank_resources, dict) and all(
            isinstance(n, str) and _finite(v, 0, low_open=True) for n, v in self.rank_resources.items())),
                f"{k}.rank_resources", "null or a mapping of Dask worker resource names to amounts > 0, e.g. {GPU: 1}",
                self.rank_resources)


def _scheduler_address(address: str) -> bool:
    """`address` looks like a Dask scheduler address (checked by its form only: no network call)."""
    match = _SCHEDULER.fullmatch(address.strip())
    return bool(match) and (match.group("port") is None or 1 <= int(match.group("port")) <= 65535)


def _size(text: Any) -> int:
    """Bytes of a size string ('4GiB'); 0 when it is not one."""
    from dask.utils import parse_bytes      # here: the config (and the rankers that read its bounds) load without Dask
    try:
        return int(parse_bytes(text)) if isinstance(text, str) else 0
    except (ValueError, TypeError):
        return 0


SOURCES = ("simulate", "baidu", "baidu_embeddings", "parquet")   # data.source: where the sessions come from
_BAIDU_DEFAULT_PAGE_FEATURES = {f.name: f.kind.value for f in BAIDU_PAGE_FEATURES}


@dataclass
class DataConfig:
    KEY: ClassVar[str] = "data"

    source: Literal[SOURCES] = "simulate"
    train: list[str] = field(default_factory=list)        # files / globs of session logs
    annotations: str | None = None                       # annotation file (Baidu) or table
    heldout: list[str] = field(default_factory=list)      # baidu_embeddings: session files kept out of training,
    #                                                       scored label-free (metrics.json "clicks"; study: part 0)
    valid_fraction: float = 0.1                          # of annotated queries, held out for model selection
    page_features: dict[str, str] = field(
        default_factory=lambda: {f.name: f.kind.value for f in BAIDU_PAGE_FEATURES})
    max_sessions: int | None = None                      # read at most this many sessions (None: all)
    partition_rows: int = 200_000                        # rows per Parquet partition written by ingest
    simulate: SimulateConfig = field(default_factory=SimulateConfig)
    embeddings: EmbeddingsConfig = field(default_factory=EmbeddingsConfig)
    # source simulate: "unbiased" redraws every click with no bias (each shown result examined, clicked for its
    # relevance: simulate/unbiased.py), the unbiased-click ceiling an experiment sets beside the debiasers
    clicks: Literal["logged", "unbiased"] = "logged"

    def __post_init__(self) -> None:
        k = self.KEY
        require(self.source in SOURCES, f"{k}.source", f"one of {', '.join(map(repr, SOURCES))}", self.source)
        require(all(isinstance(t, str) and t.strip() for t in self.train), f"{k}.train",
                "a list of non-empty file paths or globs", self.train)
        require(self.source == "simulate" or bool(self.train), f"{k}.train",
                f"at least one log path for source {self.source!r}", self.train)
        require(self.annotations is None or (isinstance(self.annotations, str) and self.annotations.strip() != ""),
                f"{k}.annotations", "null or a file path", self.annotations)
        if self.source == "baidu_embeddings" and self.page_features == _BAIDU_DEFAULT_PAGE_FEATURES:
            # the gzip logs' default names serp_max_show_height, which the embedding datasets do not carry
            self.page_features = {f.name: f.kind.value for f in EMBEDDING_PAGE_FEATURES}
        for source in ("baidu", "baidu_embeddings"):
            require(self.source != source or self.annotations is not None, f"{k}.annotations",
                    f"the annotation file for source {source!r}", self.annotations)
        require(all(isinstance(t, str) and t.strip() for t in self.heldout), f"{k}.heldout",
                "a list of non-empty file paths or globs", self.heldout)
        require(not self.heldout or self.source == "baidu_embeddings", f"{k}.heldout",
                "[] unless data.source is 'baidu_embeddings' (other sources hold sessions out with "
                "evaluation.heldout_sessions)", self.heldout)
        for key, path in ([(f"{k}.train", t) for t in self.train] + [(f"{k}.heldout", t) for t in self.heldout]
                          + [(f"{k}.annotations", self.annotations)]):
            if is_url(path):   # fsspec URL: a known protocol whose package is installed
                check_url(path, key)
        require(_finite(self.valid_fraction, 0.0, 1.0), f"{k}.valid_fraction", "in [0, 1)", self.valid_fraction)
        require(self.max_sessions is None or _int_at_least(self.max_sessions, 1), f"{k}.max_sessions",
                "null (every session) or an integer >= 1", self.max_sessions)
        require(_int_at_least(self.partition_rows, 1), f"{k}.partition_rows", "an integer >= 1",
                self.partition_rows)
        require(self.clicks in ("logged", "unbiased"), f"{k}.clicks", "'logged' or 'unbiased'", self.clicks)
        require(self.clicks == "logged" or self.source == "simulate", f"{k}.clicks",
                "'logged' unless data.source is 'simulate' (unbiased clicks are drawn from the simulator's truth)",
                self.clicks)

    def __setattr__(self, name: str, value: Any) -> None:
        """Setting `page_features` parses it, there and only there: every reader takes `parsed_page_features`."""
        if name == "page_features":
            try:
                parsed = page_features_from_config(value, f"{self.KEY}.page_features")
            except SchemaError as e:
                raise ConfigError(str(e)) from None
            object.__setattr__(self, "parsed_page_features", parsed)
        object.__setattr__(self, name, value)

    parsed_page_features: ClassVar[tuple[PageFeature, ...]]   # set with page_features (not a config key)

    def declared_page_features(self) -> list[str]:
        """Names of the declared page features."""
        return [f.name for f in self.parsed_page_features]


@dataclass
class BertConfig:
    KEY: ClassVar[str] = "ranker.bert"

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

    def __post_init__(self) -> None:
        k = self.KEY
        require(self.path is None or (isinstance(self.path, str) and self.path.strip() != ""), f"{k}.path",
                "null (a tiny encoder built in process) or a local directory", self.path)
        # [CLS] q [SEP] t [SEP] a [SEP]: four special tokens and at least one query token
        require(_int_in(self.max_length, 5, MAX_TOKENS), f"{k}.max_length", f"an integer in [5, {MAX_TOKENS}]",
                self.max_length)
        tokens = self.special_tokens
        require(tokens is None or (set(tokens) == set(BERT_SPECIAL_TOKENS)
                                   and all(_int_at_least(v, 0) for v in tokens.values())
                                   and len(set(tokens.values())) == len(tokens)),
                f"{k}.special_tokens", f"null or distinct ids >= 0 for exactly {', '.join(BERT_SPECIAL_TOKENS)}",
                tokens)
        for name, high in (("hidden_size", MAX_BERT_HIDDEN), ("num_hidden_layers", MAX_BERT_LAYERS),
                           ("num_attention_heads", MAX_BERT_HEADS), ("intermediate_size", MAX_WIDTH)):
            require(_int_in(getattr(self, name), 1, high), f"{k}.{name}", f"an integer in [1, {high}]",
                    getattr(self, name))
        require(self.hidden_size % self.num_attention_heads == 0, f"{k}.hidden_size",
                f"a multiple of num_attention_heads ({self.num_attention_heads})", self.hidden_size)


@dataclass
class RankerConfig:
    KEY: ClassVar[str] = "ranker"

    backbone: Literal[BACKBONES] = DEFAULT_BACKBONE   # lightgbm: a booster (the methods whose spec says so)
    head: list[int] = field(default_factory=lambda: [512, 256, 128])   # BAL §4.1: MLP 512-256-128
    dropout: float = 0.1
    bert: BertConfig = field(default_factory=BertConfig)
    lightgbm: LightGBMConfig = field(default_factory=LightGBMConfig)

    def __post_init__(self) -> None:
        k = self.KEY
        require(self.backbone in BACKBONES, f"{k}.backbone", f"one of {', '.join(map(repr, BACKBONES))}",
                self.backbone)
        require(len(self.head) <= MAX_LAYERS and all(_int_in(h, 1, MAX_WIDTH) for h in self.head), f"{k}.head",
                f"a list of at most {MAX_LAYERS} layer widths in [1, {MAX_WIDTH}] (empty: a linear head)", self.head)
        require(_finite(self.dropout, 0.0, 1.0), f"{k}.dropout", "in [0, 1)", self.dropout)


def check_machine(cfg: "RunConfig", own_cluster: bool = True) -> "RunConfig":
    """`cfg`, or ConfigError when it asks this machine for more than it has: processes or threads beyond its cores
    (a setting's default always allowed), an MLP head whose training state exceeds its memory.

    Checked where a config is to run here (load_config, run_pipeline), never where a saved one is read (a run
    trained on a larger machine can still be evaluated and exported on a smaller one). The LocalCluster's size only
    with `own_cluster` (the run starts one) and no `cluster.scheduler`: an external cluster's workers are its own.
    """
    import psutil
    cores = os.cpu_count() or 1
    local = own_cluster and cfg.cluster.scheduler is None
    for key, value, default in (("cluster.n_workers", cfg.cluster.n_workers if local else 1, ClusterConfig.n_workers),
                                ("cluster.threads_per_worker", cfg.cluster.threads_per_worker if local else 1, 1),
                                # with a scheduler the ranks run on its workers (methods/training/ranks.py)
                                ("train.processes", cfg.train.processes if cfg.cluster.scheduler is None else 1, 1)):
        high = max(cores, default)
        require(value <= high, key, f"an integer in [1, {high}] (this machine's cores)", value)
    need, have = head_training_bytes(cfg.ranker.head), int(psutil.virtual_memory().total)
    require(cfg.ranker.backbone == "lightgbm" or need <= have, "ranker.head", f"layer widths whose training state "
            f"fits this machine's {have / 2 ** 30:.1f} GiB of memory (this head needs {need / 2 ** 30:.1f} GiB)",
            cfg.ranker.head)
    bert = cfg.ranker.bert
    if cfg.ranker.backbone == "bert" and bert.path is None:    # a checkpoint's size is its own config's
        need = bert_training_bytes(bert)
        require(need <= have, "ranker.bert", f"hidden_size, num_hidden_layers and intermediate_size whose training "
                f"state fits this machine's {have / 2 ** 30:.1f} GiB of memory (hidden_size {bert.hidden_size}, "
                f"num_hidden_layers {bert.num_hidden_layers}, intermediate_size {bert.intermediate_size} need "
                f"{need / 2 ** 30:.1f} GiB)", f"{bert.hidden_size}/{bert.num_hidden_layers}/{bert.intermediate_size}")
    return cfg


def bert_training_bytes(bert: BertConfig) -> int:
    """Bytes the in-process BERT encoder's weights take in training (weights, gradients, Adam's moments): per layer
    self-attention (4 h² + 4 h), the feed-forward pair (2 h i + i + h) and two layer norms (4 h), plus the position
    embeddings; the token embeddings (vocabulary × h) aside, so this is a lower bound."""
    h, i = bert.hidden_size, bert.intermediate_size
    layer = 4 * h * h + 4 * h + 2 * h * i + i + h + 4 * h
    return TRAINING_BYTES_PER_PARAMETER * (bert.num_hidden_layers * layer + (bert.max_length + 2) * h)


def head_training_bytes(head: list[int]) -> int:
    """Bytes an MLP head's weights take in training (weights, gradients, Adam's moments), its input layer aside."""
    widths = [*head, 1]
    return TRAINING_BYTES_PER_PARAMETER * sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))


@dataclass
class TrainConfig:
    KEY: ClassVar[str] = "train"

    method: str = "naive"                 # a name of wpultr.settings.methods.METHODS
    loss: Literal["pointwise", "listwise", "lambdarank"] = DEFAULT_LOSS   # lambdarank: LightGBM backbone only
    epochs: int = 3
    warmup_epochs: int = 0                # BAL §4.1 warm-up: naive click loss (+ masked LM for BERT)
    mlm_probability: float = 0.15
    mlm_weight: float = 1.0
    select_metric: str = "DCG@10"         # validation metric that picks the epoch kept
    batch_size: int = 256
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    device: Literal["cpu", "cuda", "auto"] = "auto"
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"   # the ranker's passes (rankers/precision): auto is
    #                                       bf16 on a CUDA device that supports it, fp32 elsewhere; fp16 (with a
    #                                       gradient scaler) needs CUDA
    streaming: bool = False               # batches streamed from the sessions' Parquet partitions
    #                                       (methods/training/streaming; the methods whose spec says so,
    #                                       settings.methods, with the mlp backbone)
    processes: int = 1                    # > 1: data-parallel DDP ranks on loopback (methods/training/distributed;
    #                                       the methods whose spec says so)

    def __post_init__(self) -> None:
        k = self.KEY
        require(_int_at_least(self.processes, 1), f"{k}.processes", "an integer >= 1", self.processes)
        require(self.method in METHODS, f"{k}.method", f"one of {', '.join(map(repr, sorted(METHODS)))}",
                self.method)
        check_installed(self.method)      # a method of an optional extra: the pip command when it is missing
        require(self.loss in TRAIN_LOSSES, f"{k}.loss", ", ".join(map(repr, TRAIN_LOSSES)), self.loss)
        require(_int_at_least(self.epochs, 1), f"{k}.epochs", "> 0", self.epochs)
        require(_int_at_least(self.warmup_epochs, 0), f"{k}.warmup_epochs", ">= 0", self.warmup_epochs)
        require(_finite(self.mlm_probability, 0.0, 1.0, low_open=True), f"{k}.mlm_probability", "in (0, 1)",
                self.mlm_probability)
        require(_finite(self.mlm_weight, 0.0), f"{k}.mlm_weight", "a finite number >= 0", self.mlm_weight)
        require(isinstance(self.select_metric, str) and bool(_METRIC.fullmatch(self.select_metric)),
                f"{k}.select_metric", "DCG@k, ERR@k or nDCG@k with k in evaluation.ks, or MAP", self.select_metric)
        require(_int_at_least(self.batch_size, 1), f"{k}.batch_size", "> 0", self.batch_size)
        require(_finite(self.learning_rate, 0.0, low_open=True), f"{k}.learning_rate", "a finite number > 0",
                self.learning_rate)
        require(_finite(self.weight_decay, 0.0), f"{k}.weight_decay", "a finite number >= 0", self.weight_decay)
        require(self.device in ("cpu", "cuda", "auto"), f"{k}.device", "one of 'cpu', 'cuda', 'auto'", self.device)
        require(self.precision in ("auto", "fp32", "bf16", "fp16"), f"{k}.precision",
                "one of 'auto', 'fp32', 'bf16', 'fp16'", self.precision)
        require(not (self.precision == "fp16" and self.device == "cpu"), f"{k}.precision",
                "'auto', 'fp32' or 'bf16' with train.device 'cpu' ('fp16' needs a CUDA device)", self.precision)


@dataclass
class EvalConfig:
    KEY: ClassVar[str] = "evaluation"

    ks: list[int] = field(default_factory=lambda: [1, 3, 5, 10])
    discover_graph: bool = True           # discover the click graph under the trained ranker (methods that learn none)
    heldout_sessions: float = 0.0         # share of sessions the split stage holds out of training for the label-free
                                          # click metrics (metrics.json "clicks"); 0: none, training as before

    def __post_init__(self) -> None:
        require(bool(self.ks) and all(_int_at_least(k, 1) for k in self.ks) and len(set(self.ks)) == len(self.ks),
                f"{self.KEY}.ks", "a non-empty list of distinct cutoffs >= 1", self.ks)
        require(_finite(self.heldout_sessions, 0.0, 0.5), f"{self.KEY}.heldout_sessions",
                "a share of sessions in [0, 0.5)", self.heldout_sessions)


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
        if t.loss == "lambdarank" and self.ranker.backbone != "lightgbm":
            raise ConfigError("train.loss: 'lambdarank' (LambdaMART's λ-gradients as the booster's objective) needs "
                              "ranker.backbone 'lightgbm'; allowed values here: 'pointwise', 'listwise' (got backbone "
                              f"{self.ranker.backbone!r})")
        if self.train.streaming and self.ranker.backbone != "mlp":
            raise ConfigError(f"ranker.backbone: train.streaming: true trains the 'mlp' backbone only (its "
                              f"standardisation merges over partitions), got {self.ranker.backbone!r}; allowed values "
                              "with streaming: 'mlp' (or set train.streaming: false)")
        if self.ranker.backbone == "lightgbm" and self.train.processes > 1:   # (the embedding ranker's ranks
            #   each read the whole table in memory, so each builds the one document vocabulary)
            raise ConfigError(f"ranker.backbone: 'lightgbm' trains with lightgbm.dask on the run's cluster instead, "
                              f"got train.processes {self.train.processes}; allowed values with train.processes > 1: "
                              "'mlp', 'bert', 'embedding' (or set train.processes: 1)")
        if self.train.streaming and self.data.max_sessions is not None:
            raise ConfigError(f"data.max_sessions: must be null with train.streaming: true (every session of the "
                              f"partitions is streamed), got {self.data.max_sessions!r}; to train on a sample, add "
                              f"--set train.streaming=false (or drop data.max_sessions to stream them all)")
        if self.train.method == "bal" and self.train.loss in ("listwise", "lambdarank") \
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
# The flat `baselines` section split per method (issue 33): old dotted key -> where it lives now.
MOVED_KEYS: dict[str, str] = {
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
    check_moved_keys(values or {})
    return absolute_paths(from_mapping(RunConfig, values or {}))


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
