"""The BERT ranker (BAL §4.1): a transformers encoder over [CLS] query [SEP] title [SEP] abstract [SEP], MLP head
on [CLS].

The encoder is a `BertForMaskedLM` so that one module serves both the ranking score and the
masked-LM part of the warm-up (`mlm_loss`, BAL §4.1: MLM plus the naive click loss of Eq. 3). It is
built from a local checkpoint directory (`from_pretrained(path, local_files_only=True)`) or from a
config in process (its hidden and attention dropout is `ranker.dropout`, as the head's); nothing is
fetched from a hub. Segment ids are 0 for [CLS] query [SEP] and 1 for the document part.

Token ids: logs carry ids of the checkpoint's vocabulary (as Baidu-ULTR does), so they pass
through unchanged and the special ids come from `special_tokens`. For an encoder built in process
the specials are appended after the largest id seen in training (pad, cls, sep, mask, unk), and ids
beyond the vocabulary map to unk.

With `cache_embeddings` the encoder is frozen and `prepare` encodes every distinct (query, document)
text once; training then updates only the head on the cached [CLS] vectors — the practical CPU mode.
"""
from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import BertConfig as HFBertConfig
from transformers import BertForMaskedLM
from transformers.activations import ACT2FN

from ..errors import ExportError
from ..memory import large_blocks_kept
from ..schema import ABSTRACT_TOKENS, QUERY_TOKENS, TITLE_TOKENS, SchemaError
from ..settings.ranker import BERT_SPECIAL_TOKENS, MAX_BERT_HEADS, MAX_BERT_HIDDEN, MAX_BERT_LAYERS, MAX_TOKENS
from .base import CLS_VECTORS, IGNORE_INDEX, Arg, Inputs, Ranker, check_args
from .mlp import MAX_LAYERS, MAX_WIDTH, mlp

INPUT_IDS, TOKEN_TYPES, ATTENTION = "input_ids", "token_type_ids", "attention_mask"
SPECIAL_NAMES = BERT_SPECIAL_TOKENS      # defined with the (torch-free) config that validates them
MAX_LENGTH = MAX_TOKENS       # tokens per (query, document) input: inputs are (rows, max_length) matrices

# What a saved encoder config may hold (the keys `_json_config` writes), with the range each may take.
BERT_CONFIG_ARGS = {
    "vocab_size": Arg("int", 8, 1 << 22),
    "hidden_size": Arg("int", 1, MAX_BERT_HIDDEN),      # the bounds of the config's ranker.bert, too
    "num_hidden_layers": Arg("int", 1, MAX_BERT_LAYERS),
    "num_attention_heads": Arg("int", 1, MAX_BERT_HEADS),
    "intermediate_size": Arg("int", 1, MAX_WIDTH),
    "hidden_act": Arg("str"),
    "hidden_dropout_prob": Arg("float", 0.0, 1.0, high_open=True),
    "attention_probs_dropout_prob": Arg("float", 0.0, 1.0, high_open=True),
    "max_position_embeddings": Arg("int", 4, MAX_LENGTH),
    "type_vocab_size": Arg("int", 2, 16),
    "initializer_range": Arg("float", 0.0, 10.0),
    "layer_norm_eps": Arg("float", 1e-30, 1.0),
    "pad_token_id": Arg("int", 0, 1 << 22, nullable=True, required=False),
}


def appended_specials(raw_vocab_size: int) -> dict[str, int]:
    """Special ids placed after the raw vocabulary, for an encoder built in process."""
    return {name: raw_vocab_size + i for i, name in enumerate(SPECIAL_NAMES)}


def max_token_id(frame: pd.DataFrame) -> int:
    """The largest token id in the query, title and abstract columns (-1 if there is none)."""
    largest = -1
    for column in (QUERY_TOKENS, TITLE_TOKENS, ABSTRACT_TOKENS):
        if column in frame.columns:
            for tokens in frame[column].to_numpy():
                if tokens is not None and len(tokens):
                    largest = max(largest, int(np.max(tokens)))
    return largest


def _tokens(cell: Any) -> np.ndarray:
    return np.zeros(0, dtype=np.int64) if cell is None else np.asarray(cell, dtype=np.int64)


def build_inputs(frame: pd.DataFrame, max_length: int, special: dict[str, int], vocab_size: int) -> Inputs:
    """[CLS] q [SEP] t [SEP] a [SEP] per row, padded to `max_length`; the abstract is cut first, then the title."""
    for column in (QUERY_TOKENS, TITLE_TOKENS):
        if column not in frame.columns:
            raise SchemaError(f"the bert ranker needs token-id columns {QUERY_TOKENS}, {TITLE_TOKENS}"
                              f"[, {ABSTRACT_TOKENS}]; present: {list(frame.columns)}")
    n = len(frame)
    ids = np.full((n, max_length), special["pad"], dtype=np.int64)
    types = np.zeros((n, max_length), dtype=np.int64)
    mask = np.zeros((n, max_length), dtype=np.int64)
    queries = frame[QUERY_TOKENS].to_numpy()
    titles = frame[TITLE_TOKENS].to_numpy()
    abstracts = frame[ABSTRACT_TOKENS].to_numpy() if ABSTRACT_TOKENS in frame.columns else [None] * n
    budget = max_length - 4                                # [CLS] and three [SEP]
    for i in range(n):
        q, t, a = _tokens(queries[i]), _tokens(titles[i]), _tokens(abstracts[i])
        q = q[: max(budget // 2, 1)]
        t = t[: max(budget - len(q), 0)]
        a = a[: max(budget - len(q) - len(t), 0)]
        row = np.concatenate([[special["cls"]], q, [special["sep"]], t, [special["sep"]], a, [special["sep"]]])
        row = row[:max_length]
        first_segment = min(len(q) + 2, max_length)
        ids[i, : len(row)] = row
        types[i, first_segment: len(row)] = 1
        mask[i, : len(row)] = 1
    outside = (ids >= vocab_size) | (ids < 0)
    ids[outside] = special["unk"]
    return {INPUT_IDS: torch.from_numpy(ids), TOKEN_TYPES: torch.from_numpy(types), ATTENTION: torch.from_numpy(mask)}


def trimmed(mask: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """`tensors` (rows, max_length) cut after the last column `mask` attends in any row: every input is padded to
    max_length, and the encoder's outputs at the attended tokens do not depend on columns that are padding in every
    row, so a batch of short inputs costs its longest, not max_length (the [CLS] vector is the same)."""
    attended = torch.nonzero(mask.any(0))
    width = int(attended[-1]) + 1 if len(attended) else 1
    return tuple(t[:, :width] for t in tensors)


class BertRanker(Ranker):
    """score = MLP head ([CLS] vector of the BERT encoder)."""

    kind = "bert"
    ARGS = {"bert_config": Arg("object"), "special_tokens": Arg("object"),
            "head": Arg("int_list", 1, MAX_WIDTH, max_items=MAX_LAYERS),
            "dropout": Arg("float", 0.0, 1.0, high_open=True), "max_length": Arg("int", 4, MAX_LENGTH),
            "freeze_encoder": Arg("bool"), "cache_embeddings": Arg("bool"),
            "checkpoint": Arg("str", nullable=True, required=False)}

    @classmethod
    def checked_args(cls, args: Any, where: str) -> dict[str, Any]:
        """The generic checks, then the encoder config's own fields and how they bound the rest: special
        ids inside the vocabulary, max_length within the position embeddings, heads dividing the width."""
        args = super().checked_args(args, where)
        config = check_args(args["bert_config"], BERT_CONFIG_ARGS, f"{where}.bert_config")
        vocab = config["vocab_size"]
        if config["hidden_act"] not in ACT2FN:
            raise ExportError(f"{where}.bert_config.hidden_act is {config['hidden_act']!r}, expected one of "
                              f"{sorted(ACT2FN)}")
        if config["hidden_size"] % config["num_attention_heads"]:
            raise ExportError(f"{where}.bert_config: hidden_size {config['hidden_size']} is not a multiple of "
                              f"num_attention_heads {config['num_attention_heads']}")
        if config.get("pad_token_id") is not None and config["pad_token_id"] >= vocab:
            raise ExportError(f"{where}.bert_config.pad_token_id is {config['pad_token_id']}, expected < "
                              f"vocab_size {vocab}")
        special = check_args(args["special_tokens"], {name: Arg("int", 0, vocab - 1) for name in SPECIAL_NAMES},
                             f"{where}.special_tokens")
        if args["max_length"] > config["max_position_embeddings"]:
            raise ExportError(f"{where}.max_length is {args['max_length']}, expected <= "
                              f"bert_config.max_position_embeddings ({config['max_position_embeddings']})")
        return {**args, "bert_config": config, "special_tokens": special}

    @classmethod
    def optional_tensor(cls, name: str) -> bool:
        """transformers ties the MLM decoder to the word embeddings, so a file may leave it out."""
        return name.endswith("decoder.weight") or name.endswith("decoder.bias")

    def __init__(self, bert_config: dict[str, Any], special_tokens: dict[str, int],
                 head: Sequence[int] = (512, 256, 128), dropout: float = 0.1, max_length: int = 64,
                 freeze_encoder: bool = False, cache_embeddings: bool = False, checkpoint: str | None = None):
        super().__init__()
        missing = [s for s in SPECIAL_NAMES if s not in special_tokens]
        if missing:
            raise ValueError(f"ranker.bert.special_tokens: missing {missing}; needs {list(SPECIAL_NAMES)}")
        self.bert_config, self.special = dict(bert_config), {k: int(special_tokens[k]) for k in SPECIAL_NAMES}
        self.head_sizes, self.dropout, self.max_length = [int(h) for h in head], float(dropout), int(max_length)
        self.freeze_encoder = bool(freeze_encoder or cache_embeddings)
        self.cache_embeddings, self.checkpoint = bool(cache_embeddings), checkpoint
        self.encoder = BertForMaskedLM(HFBertConfig(**self.bert_config))
        self.head = mlp(self.encoder.config.hidden_size, self.head_sizes, 1, self.dropout)
        self._apply_freeze()

    @classmethod
    def build(cls, frame: pd.DataFrame, *, path: str | None, head: Sequence[int], dropout: float, max_length: int,
              freeze_encoder: bool, cache_embeddings: bool, special_tokens: dict[str, int] | None,
              tiny: dict[str, int]) -> BertRanker:
        """From a local checkpoint directory (`path`, which keeps its own encoder dropout) or a tiny in-process
        config sized for `frame`'s tokens, whose hidden and attention dropout is the head's `dropout`."""
        if path is not None:
            directory = Path(path)
            if not directory.is_dir():
                raise FileNotFoundError(f"ranker.bert.path: {path!r} is not a local checkpoint directory")
            if special_tokens is None:
                raise ValueError("ranker.bert.special_tokens: a checkpoint's pad/cls/sep/mask/unk ids are needed "
                                 "with ranker.bert.path")
            pretrained = BertForMaskedLM.from_pretrained(str(directory), local_files_only=True)
            ranker = cls(pretrained.config.to_dict(), special_tokens, head, dropout, max_length, freeze_encoder,
                         cache_embeddings, checkpoint=str(directory))
            ranker.encoder.load_state_dict(pretrained.state_dict())
            ranker._apply_freeze()
            return ranker
        raw_vocab = max(max_token_id(frame) + 1, 1)
        special = special_tokens or appended_specials(raw_vocab)
        vocab = max(max(special.values()) + 1, raw_vocab)
        config = {"vocab_size": vocab, "pad_token_id": special["pad"], "max_position_embeddings": max(max_length, 8),
                  "type_vocab_size": 2, "hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout,
                  **tiny}
        return cls(config, special, head, dropout, max_length, freeze_encoder, cache_embeddings)

    def _apply_freeze(self) -> None:
        for p in self.encoder.parameters():
            p.requires_grad_(not self.freeze_encoder)

    def batch_allocations(self) -> AbstractContextManager[None]:
        """Freed blocks of up to 32 MiB kept in the heap while batches run (memory.large_blocks_kept): each of a batch's
        activations is megabytes, and under the train stage's policy (large blocks mapped) or a Dask worker's each
        was a fresh mmap faulted in again every batch — 1.1 GB zeroed per batch of the demo, a quarter of its CPU."""
        return large_blocks_kept()

    def scoring_order(self, inputs: Inputs) -> np.ndarray | None:
        """Rows by input length (stable), so each scoring batch runs up to its own longest input (`trimmed`) with
        little padding: BAL re-scores every row each epoch, and a batch of random rows costs its longest one's
        length for every row. Cached [CLS] vectors cost alike: no reordering."""
        if ATTENTION not in inputs:
            return None
        return np.argsort(inputs[ATTENTION].sum(1).numpy(), kind="stable")

    def init_args(self) -> dict[str, Any]:
        return {"bert_config": _json_config(self.encoder.config), "special_tokens": self.special,
                "head": self.head_sizes, "dropout": self.dropout, "max_length": self.max_length,
                "freeze_encoder": self.freeze_encoder, "cache_embeddings": self.cache_embeddings,
                "checkpoint": self.checkpoint}

    # ----------------------------------------------------------------------------------------
    def prepare(self, frame: pd.DataFrame) -> Inputs:
        tokens = build_inputs(frame, self.max_length, self.special, self.encoder.config.vocab_size)
        if not self.cache_embeddings:
            return tokens
        return {CLS_VECTORS: self.encode_distinct(tokens)}

    @torch.no_grad()
    def encode_distinct(self, tokens: Inputs, batch_size: int = 256) -> torch.Tensor:
        """[CLS] vectors of every row, running the frozen encoder once per distinct input."""
        ids = tokens[INPUT_IDS].numpy()
        _, first, inverse = np.unique(ids, axis=0, return_index=True, return_inverse=True)
        was_training = self.training
        self.eval()
        device = self.device
        vectors = []
        for start in range(0, len(first), batch_size):
            rows = torch.as_tensor(first[start: start + batch_size])
            batch = {k: v.index_select(0, rows).to(device) for k, v in tokens.items()}
            vectors.append(self.cls_vector(batch).float().cpu())
        self.train(was_training)
        distinct = torch.cat(vectors) if vectors else torch.zeros(0, self.encoder.config.hidden_size)
        return distinct.index_select(0, torch.as_tensor(inverse.reshape(-1)))

    def cls_vector(self, inputs: Inputs) -> torch.Tensor:
        """The encoder's [CLS] vector of each row, run on the batch's columns up to its longest input (`trimmed`)."""
        ids, types, mask = trimmed(inputs[ATTENTION], inputs[INPUT_IDS], inputs[TOKEN_TYPES], inputs[ATTENTION])
        return self.encoder.bert(input_ids=ids, token_type_ids=types, attention_mask=mask).last_hidden_state[:, 0]

    def forward(self, inputs: Inputs) -> torch.Tensor:
        cls = inputs[CLS_VECTORS] if CLS_VECTORS in inputs else self.cls_vector(inputs)
        with torch.autocast(cls.device.type, enabled=False):   # the head in fp32 under any autocast: scores keep
            return self.head(cls.float()).squeeze(-1)           # their resolution (Ranker.runs_mixed_precision)

    def runs_mixed_precision(self) -> bool:
        """The encoder runs under autocast when it runs (not over cached [CLS] vectors); the head stays fp32."""
        return not self.cache_embeddings

    # ----------------------------------------------------------------------------------------
    def mlm_masking(self, inputs: Inputs, probability: float, generator: torch.Generator
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(masked ids, labels) of a batch by BERT's recipe: each maskable token is chosen with `probability`, and
        of the chosen 80% become [MASK], 10% a random id, 10% stay; labels hold the chosen ids, IGNORE_INDEX elsewhere.

        The draws are three (rows, max_length) CPU tensors from `generator`, so rows [a, b) of one batch's masking
        are what a DDP rank holding those rows of it takes (methods/training/distributed: the ranks mask as one
        process)."""
        if CLS_VECTORS in inputs:
            raise ValueError("masked-LM warm-up needs token inputs; it cannot run in cache_embeddings mode")
        ids = inputs[INPUT_IDS]
        special_ids = torch.tensor(sorted(self.special.values()), device=ids.device)
        can_mask = (inputs[ATTENTION] == 1) & ~torch.isin(ids, special_ids)
        draw = torch.rand(ids.shape, generator=generator).to(ids.device)
        chosen = can_mask & (draw < probability)
        labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
        action = torch.rand(ids.shape, generator=generator).to(ids.device)
        random_ids = torch.randint(0, self.encoder.config.vocab_size, ids.shape, generator=generator).to(ids.device)
        masked = torch.where(chosen & (action < 0.8), torch.full_like(ids, self.special["mask"]), ids)
        masked = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, masked)
        return masked, labels

    def mlm_loss_sum(self, inputs: Inputs, masked: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The masked-LM cross-entropy summed over the labelled tokens of `masked` (the batch's ids after
        `mlm_masking`); the prediction head runs on those tokens only. With none labelled it is a zero that still
        reaches the prediction head, so a DDP rank whose rows drew no mask gives it a (zero) gradient too."""
        masked, labels, types, mask = trimmed(inputs[ATTENTION], masked, labels, inputs[TOKEN_TYPES],
                                              inputs[ATTENTION])
        hidden = self.encoder.bert(input_ids=masked, token_type_ids=types, attention_mask=mask).last_hidden_state
        chosen = labels != IGNORE_INDEX
        logits = self.encoder.cls(hidden[chosen])
        return torch.nn.functional.cross_entropy(logits.float(), labels[chosen], reduction="sum")

    def mlm_loss(self, inputs: Inputs, probability: float, generator: torch.Generator) -> torch.Tensor:
        """Masked-LM loss on a batch: the mean cross-entropy over its masked tokens (`mlm_masking`); 0, and no
        encoder pass, when no token was chosen."""
        masked, labels = self.mlm_masking(inputs, probability, generator)
        count = int((labels != IGNORE_INDEX).sum())
        if not count:
            return torch.zeros((), device=masked.device)
        return self.mlm_loss_sum(inputs, masked, labels) / count

    def score_modules(self) -> dict[str, torch.nn.Module]:
        """The submodules the score reads: the encoder body and the head, not the masked-LM prediction head
        (which only the warm-up reads; a DDP phase all-reduces the gradients of exactly what it reads)."""
        return {"encoder": self.encoder.bert, "head": self.head}


def _json_config(config: HFBertConfig) -> dict[str, Any]:
    """The encoder config as plain JSON values, without transformers' bookkeeping keys."""
    keep = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
            "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id")
    values = config.to_dict()
    return {k: values[k] for k in keep if k in values}
