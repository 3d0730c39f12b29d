"""How the ranker trains (run config key `train`): the method, its loss, epochs, device, precision, streaming and
DDP ranks; which combinations a method supports is its spec's (settings/methods.py), checked by the run config."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, Literal

from ..errors import require
from .checks import finite as _finite
from .checks import int_at_least as _int_at_least
from .methods import DEFAULT_LOSS, METHODS, check_installed
from .methods import LOSS_NAMES as TRAIN_LOSSES

_METRIC = re.compile(r"(DCG|ERR|nDCG)@[1-9][0-9]*|MAP")


@dataclass
class TrainConfig:
    KEY: ClassVar[str] = "train"

    method: str = "naive"                 # a name of wpultr.settings.methods.METHODS
    loss: Literal[TRAIN_LOSSES] = DEFAULT_LOSS   # lambdarank: a backbone that boosts (lightgbm) only
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

