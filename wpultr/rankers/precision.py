"""Mixed precision of the rankers' passes (`train.precision`): the precision a device runs, the autocast that
applies it to a transformer encoder (the scoring heads stay fp32: `Ranker.runs_mixed_precision`), and fp16's
gradient scaler.

`auto` is bf16 on a CUDA device that supports it (its tensor cores run bf16 at many times the fp32 rate; bf16
keeps fp32's exponent range, so no loss scaling is needed) and fp32 anywhere else. fp16 needs a CUDA device and
runs with a `torch.amp.GradScaler` (its narrow range underflows small gradients otherwise); on a CPU it is
refused. The weights and the optimiser's state stay fp32 in every mode: autocast only runs the matrix products
(and what torch lists with them) in the lower precision, and the scores are handed to the losses as fp32.
"""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

from ..errors import ConfigError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def bf16_supported(device: torch.device) -> bool:
    """Whether `device` runs bf16 autocast: every CPU torch supports (slowly, but exactly as specified); a CUDA
    device from Ampere on."""
    return device.type != "cuda" or torch.cuda.is_bf16_supported()


def resolve_precision(name: str, device: torch.device | str) -> str:
    """The precision (`fp32`, `bf16` or `fp16`) `train.precision: name` runs on `device`; a ConfigError naming the
    key when the device cannot run it."""
    device = torch.device(device)
    if name not in PRECISIONS:
        raise ConfigError(f"train.precision: {name!r} is not one of {', '.join(map(repr, PRECISIONS))}")
    if name == "auto":
        return "bf16" if device.type == "cuda" and bf16_supported(device) else "fp32"
    if name == "fp16" and device.type != "cuda":
        raise ConfigError(f"train.precision: 'fp16' needs a CUDA device (its gradient scaler and kernels are the "
                          f"GPU's), the training device is {device.type!r}; use 'bf16' or 'fp32' there")
    if name == "bf16" and not bf16_supported(device):
        raise ConfigError(f"train.precision: 'bf16' is not supported by {torch.cuda.get_device_name(device)}; "
                          "use 'fp16' or 'fp32' on it")
    return name


def autocast(device: torch.device | str, precision: str) -> AbstractContextManager[object]:
    """The autocast context of `precision` (a resolved one) on `device`; nothing for fp32."""
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=AUTOCAST_DTYPES[precision])


def grad_scaler(device: torch.device | str, precision: str) -> torch.amp.GradScaler | None:
    """fp16's dynamic loss scaler on `device`; None for fp32 and bf16, which need none."""
    return torch.amp.GradScaler(torch.device(device).type) if precision == "fp16" else None


def scoring_precision(name: str, device: torch.device | str) -> str:
    """The precision a saved ranker is scored in on `device` under `train.precision: name`: the training's, but fp32
    where the device cannot run it (an fp16-trained ranker scored on a CPU: fp32 is its exact score there)."""
    try:
        return resolve_precision(name, device)
    except ConfigError:
        return "fp32"
