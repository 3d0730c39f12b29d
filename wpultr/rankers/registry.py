"""The ranker kinds by name, and loading a saved ranker: the one module that knows every subclass.

`base.py` is the abstract ranker and its helpers; this module sits above it and the kinds
(mlp, bert, lightgbm, xgboost, embedding), so that no ranker module imports another.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from ..errors import ConfigError, ExportError
from ..settings.methods import BACKBONES, METHODS
from .base import (
    CONFIG_FILE,
    MAX_CONFIG_BYTES,
    RANKER_FORMAT,
    SAFETENSORS_DTYPES,
    WEIGHTS_FILE,
    Ranker,
    brief,
    read_json_bounded,
    read_safetensors_header,
)
from .embedding import EmbeddingRanker
from .lightgbm import LightGBMRanker
from .mlp import MLPRanker
from .xgboost import XGBoostRanker

BERT = "bert"      # BertRanker.kind, named here so that loading the registry imports no transformers


def _bert_class() -> type[Ranker]:
    from .bert import BertRanker  # lazy: +3.7 s (transformers), paid otherwise by every MLP rank, scorer and worker
    return BertRanker


def _classes() -> dict[str, Callable[[], type[Ranker]]]:
    return {MLPRanker.kind: lambda: MLPRanker, BERT: _bert_class, LightGBMRanker.kind: lambda: LightGBMRanker,
            XGBoostRanker.kind: lambda: XGBoostRanker, EmbeddingRanker.kind: lambda: EmbeddingRanker}


RANKER_KINDS: tuple[str, ...] = tuple(_classes())


def ranker_class(kind: str) -> type[Ranker]:
    """The ranker class of kind `kind` (one of RANKER_KINDS), its module imported on first use."""
    return _classes()[kind]()


def ranker_classes() -> dict[str, type[Ranker]]:
    """Every ranker kind by name (imports every kind's module, BERT's too)."""
    return {kind: ranker_class(kind) for kind in RANKER_KINDS}


def _bert(r: Any, train: Any) -> Ranker:
    b = r.bert
    tiny = {"hidden_size": b.hidden_size, "num_hidden_layers": b.num_hidden_layers,
            "num_attention_heads": b.num_attention_heads, "intermediate_size": b.intermediate_size}
    return _bert_class().build(train, path=b.path, head=r.head, dropout=r.dropout, max_length=b.max_length,
                            freeze_encoder=b.freeze_encoder, cache_embeddings=b.cache_embeddings,
                            special_tokens=b.special_tokens, tiny=tiny)


# ranker.backbone -> how the shared trainer builds it from the `ranker` section and the training table; a backbone
# that boosts (settings.methods.BACKBONES) has none: the methods that boost it grow it themselves
BUILDERS: dict[str, Callable[[Any, Any], Ranker]] = {
    MLPRanker.kind: lambda r, train: MLPRanker.for_table(train, r.head, r.dropout),
    EmbeddingRanker.kind: lambda r, train: EmbeddingRanker.for_table(train),
    BERT: _bert,
}


def build_ranker(cfg: Any, train: Any) -> Ranker:
    """The ranker `ranker.backbone` names, sized for (and standardised on) the training table `train`, its initial
    weights drawn from the run's seed."""
    name = cfg.ranker.backbone
    if BACKBONES[name].boosts:   # a booster has no parameters for the shared trainer: its methods boost it
        boosting = sorted(m for m, s in METHODS.items() if name in s.backbones)
        raise ConfigError(f"ranker.backbone: {name!r} trains with train.method {' or '.join(map(repr, boosting))} "
                          f"only, got train.method {cfg.train.method!r}; use a backbone of "
                          f"{', '.join(repr(n) for n in BACKBONES if n in BUILDERS)} for it")
    torch.manual_seed(cfg.seed)
    return BUILDERS[name](cfg.ranker, train)


def read_ranker_config(directory: str | Path) -> dict[str, Any]:
    """config.json of a saved ranker, its format version, kind and the shape of its fields checked."""
    path = Path(directory) / CONFIG_FILE
    config = read_json_bounded(path, MAX_CONFIG_BYTES, "expected a saved wpultr ranker's config")
    if not isinstance(config, dict):
        raise ExportError(f"{path}: holds {brief(config)}, expected a JSON object")
    if config.get("format") != RANKER_FORMAT:
        raise ExportError(f"{path}: format {brief(config.get('format'))}, expected {brief(RANKER_FORMAT)} "
                          f"(a ranker saved by another wpultr version, or not a wpultr ranker)")
    if config.get("kind") not in RANKER_KINDS:
        raise ExportError(f"{path}: kind {brief(config.get('kind'))} is not one of {sorted(RANKER_KINDS)}")
    return config


def check_saved_ranker(directory: str | Path) -> tuple[type[Ranker], dict[str, Any]]:
    """Check a saved ranker without building it: config fields, then the weights' tensor names, dtypes and
    shapes against those of the module the config describes (built on the meta device: nothing allocated)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ExportError(f"{directory}: no such directory; expected a saved ranker ({CONFIG_FILE} + {WEIGHTS_FILE})")
    link = next((p for p in directory.iterdir() if p.is_symlink()), None)
    if link is not None:    # a saved ranker is plain files: a link could lead its reads anywhere
        raise ExportError(f"{link}: a symlink in a saved ranker; a ranker holds plain files only")
    config = read_ranker_config(directory)
    cls = ranker_class(config["kind"])
    args = cls.checked_args(config.get("args"), f"{directory / CONFIG_FILE}: args")
    try:
        with torch.device("meta"):
            skeleton = cls(**args)
    except (ValueError, TypeError, RuntimeError) as error:
        raise ExportError(f"{directory / CONFIG_FILE}: args do not describe a {cls.kind} ranker "
                          f"({type(error).__name__}: {str(error)[:160]})") from None
    expected = {name: (t.dtype, tuple(t.shape)) for name, t in skeleton.state_dict().items()}
    weights = directory / WEIGHTS_FILE
    found = read_safetensors_header(weights)
    unexpected = sorted(set(found) - set(expected))
    missing = sorted(n for n in set(expected) - set(found) if not cls.optional_tensor(n))
    if unexpected or missing:
        raise ExportError(f"{weights}: tensors do not fit the {cls.kind} ranker its {CONFIG_FILE} describes "
                          f"(missing {brief(missing)}, unexpected {brief(unexpected)})")
    for name, (dtype, shape) in found.items():
        want_dtype, want_shape = expected[name]
        if SAFETENSORS_DTYPES[dtype] != want_dtype or shape != want_shape:
            want = next((k for k, v in SAFETENSORS_DTYPES.items() if v == want_dtype), str(want_dtype))
            raise ExportError(f"{weights}: tensor {name!r} is {dtype} {list(shape)}, the config implies "
                              f"{want} {list(want_shape)}")
    return cls, args


def load_ranker(directory: str | Path, device: str | torch.device = "cpu") -> Ranker:
    """Rebuild a saved ranker from config.json and load its safetensors weights (no pickle), everything
    checked first (`check_saved_ranker`): a tampered or truncated directory is one ExportError."""
    cls, args = check_saved_ranker(directory)
    weights = Path(directory) / WEIGHTS_FILE
    ranker = cls(**args)
    try:
        state = load_file(str(weights))
    except Exception as error:  # safetensors raises its own error type; the header was checked already
        raise ExportError(f"{weights}: safetensors could not read it ({type(error).__name__}: {error})") from None
    _check_finite(state, weights)
    ranker.load_state_dict(state, strict=False)
    ranker.check_loaded(str(weights))
    load_files = getattr(ranker, "load_files", None)     # a ranker with files beside its weights (a vocabulary)
    if load_files is not None:
        load_files(Path(directory))
    return ranker.to(device).eval()


def _check_finite(state: dict[str, torch.Tensor], weights: Path) -> None:
    """ExportError naming the file and tensor when a floating-point weight is nan or ±inf: it scores nothing."""
    for name, tensor in state.items():
        if tensor.is_floating_point():
            bad = int((~torch.isfinite(tensor)).sum())
            if bad:
                raise ExportError(f"{weights}: tensor {name!r} holds {bad} non-finite values (nan or inf); the "
                                  f"weights are damaged")
