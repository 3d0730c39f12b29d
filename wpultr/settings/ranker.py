"""The ranker (run config key `ranker`, with `ranker.bert`; `ranker.lightgbm` in settings/lightgbm.py), and the
bounds a saved ranker is checked against (rankers.mlp / rankers.bert read the same numbers), so a run never trains
what export, evaluate and score would refuse."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ..errors import require
from .checks import finite as _finite
from .checks import int_at_least as _int_at_least
from .checks import int_in as _int_in
from .lightgbm import LightGBMConfig
from .methods import BACKBONE_NAMES as BACKBONES
from .methods import DEFAULT_BACKBONE

BERT_SPECIAL_TOKENS = ("pad", "cls", "sep", "mask", "unk")   # ids a BERT checkpoint's vocabulary must give
MAX_WIDTH = 65_536                     # width of one hidden layer (an MLP head's, BERT's intermediate size)
MAX_LAYERS = 32                        # hidden layers of an MLP head
MAX_TOKENS = 8192                      # tokens per (query, document) input of BERT
MAX_BERT_HIDDEN = 8192                 # a BERT encoder's hidden size
MAX_BERT_LAYERS = 96                   # a BERT encoder's layers
MAX_BERT_HEADS = 256                   # a BERT encoder's attention heads
TRAINING_BYTES_PER_PARAMETER = 16      # float32 weight, its gradient and Adam's two moments


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
