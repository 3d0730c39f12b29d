"""What every ranker is: a torch module from prepared inputs to one score per row, saved without pickle.

A ranker turns a table (sessions or annotations) into tensors once (`prepare`), then scores any
subset of its rows (`forward(take(inputs, rows))`). Saving writes `config.json` (the kind and the
constructor arguments) and `model.safetensors`; `load_ranker` rebuilds the module from the JSON and
loads the tensors with safetensors, so nothing is ever unpickled.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Mapping

import numpy as np
import pandas as pd
import torch
from safetensors.torch import load_file, save_file

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
RANKER_FORMAT = "wpultr.ranker/1"

Inputs = dict[str, torch.Tensor]


class Ranker(torch.nn.Module):
    """Base of every ranker: `prepare` a table once, `forward` a batch of prepared rows to scores (B,)."""

    kind: ClassVar[str]

    def prepare(self, frame: pd.DataFrame) -> Inputs:
        """Every row of `frame` as tensors (CPU), indexable along the first dimension."""
        raise NotImplementedError

    def forward(self, inputs: Inputs) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def init_args(self) -> dict[str, Any]:
        """The JSON-serialisable constructor arguments that rebuild this module's shape."""
        raise NotImplementedError

    # ----------------------------------------------------------------------------------------
    def save(self, directory: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
        """Write config.json and model.safetensors into `directory` (created)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        save_file(_untied(state), str(directory / WEIGHTS_FILE))
        config = {"format": RANKER_FORMAT, "kind": self.kind, "args": self.init_args(), **(extra or {})}
        (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True))
        return directory

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device


def _untied(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses tensors that share storage (tied embeddings): give each its own copy."""
    seen: dict[int, str] = {}
    out = {}
    for name, tensor in state.items():
        ptr = tensor.untyped_storage().data_ptr()
        out[name] = tensor.clone() if ptr in seen else tensor
        seen.setdefault(ptr, name)
    return out


def take(inputs: Inputs, rows: np.ndarray | torch.Tensor, device: torch.device | str | None = None) -> Inputs:
    """The prepared inputs of `rows`, moved to `device`."""
    index = torch.as_tensor(rows, dtype=torch.long)
    return {k: v.index_select(0, index).to(device) if device is not None else v.index_select(0, index)
            for k, v in inputs.items()}


def n_rows(inputs: Inputs) -> int:
    return int(next(iter(inputs.values())).shape[0])


def ranker_classes() -> dict[str, type[Ranker]]:
    """Every ranker kind by name (imported here so that loading needs only this module)."""
    from .lightgbm import LightGBMRanker
    from .bert import BertRanker
    from .mlp import MLPRanker
    return {MLPRanker.kind: MLPRanker, BertRanker.kind: BertRanker, LightGBMRanker.kind: LightGBMRanker}


def read_ranker_config(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{directory}: no {CONFIG_FILE}; not a saved wpultr ranker")
    config = json.loads(path.read_text())
    if config.get("format") != RANKER_FORMAT:
        raise ValueError(f"{path}: format {config.get('format')!r}, expected {RANKER_FORMAT!r}")
    return config


def load_ranker(directory: str | Path, device: str | torch.device = "cpu") -> Ranker:
    """Rebuild a saved ranker from config.json and load its safetensors weights (no pickle)."""
    config = read_ranker_config(directory)
    classes = ranker_classes()
    if config["kind"] not in classes:
        raise ValueError(f"{directory}/{CONFIG_FILE}: kind {config['kind']!r} is not one of {sorted(classes)}")
    ranker = classes[config["kind"]](**config["args"])
    state = load_file(str(Path(directory) / WEIGHTS_FILE))
    missing, unexpected = ranker.load_state_dict(state, strict=False)
    if unexpected or [m for m in missing if not _tied_copy(ranker, m)]:
        raise ValueError(f"{directory}/{WEIGHTS_FILE}: weights do not fit the {config['kind']} ranker "
                         f"(missing {missing}, unexpected {unexpected})")
    return ranker.to(device).eval()


def _tied_copy(ranker: Ranker, name: str) -> bool:
    """A parameter absent from the file is acceptable only if transformers ties it to another one."""
    return name.endswith("decoder.weight") or name.endswith("decoder.bias")


@torch.no_grad()
def score_inputs(ranker: Ranker, inputs: Inputs, batch_size: int = 1024) -> np.ndarray:
    """Scores of every prepared row, in order, in eval mode."""
    was_training = ranker.training
    ranker.eval()
    out = []
    device = ranker.device
    total = n_rows(inputs)
    for start in range(0, total, batch_size):
        rows = np.arange(start, min(start + batch_size, total))
        out.append(ranker(take(inputs, rows, device)).float().cpu().numpy())
    ranker.train(was_training)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


def score_frame(ranker: Ranker, frame: pd.DataFrame, batch_size: int = 1024) -> np.ndarray:
    """Scores of every row of `frame` (sessions or annotations)."""
    return score_inputs(ranker, ranker.prepare(frame), batch_size)


def resolve_device(name: str) -> torch.device:
    """`auto` takes CUDA when present; asking for CUDA without it is an error naming the key."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        from ..config import ConfigError
        raise ConfigError("train.device: 'cuda' requested but no CUDA device is available; use 'cpu' or 'auto'")
    return torch.device(name)
