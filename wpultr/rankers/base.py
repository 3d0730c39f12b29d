"""What every ranker is: a torch module from prepared inputs to one score per row, saved without pickle.

A ranker turns a table (sessions or annotations) into tensors once (`prepare`), then scores any
subset of its rows (`forward(take(inputs, rows))`). Saving writes `config.json` (the kind and the
constructor arguments) and `model.safetensors`; `registry.load_ranker` rebuilds the module from the JSON and
loads the tensors with safetensors, so nothing is ever unpickled.

A saved ranker may come from anywhere (`wpultr score` reads exported directories), so loading
trusts nothing: file sizes are bounded, every constructor argument is type- and range-checked
(each ranker declares its `ARGS`), and the safetensors header's tensor names, dtypes and shapes are
compared with those of the module the arguments describe (built on the meta device, which
allocates nothing) before the module is built for real. Every failure is one `ExportError`.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch
from safetensors.torch import save_file

from ..errors import ConfigError, ExportError, cut
from .precision import autocast

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
RANKER_FORMAT = "wpultr.ranker/1"
MAX_CONFIG_BYTES = 1 << 20            # config.json: a few kB in practice
MAX_WEIGHTS_BYTES = 16 << 30          # model.safetensors: a BERT-large in float32 is ~1.3 GiB
MAX_HEADER_BYTES = 100 << 20          # the safetensors format's own bound on its JSON header
# safetensors dtype names and the torch dtypes wpultr's rankers hold.
SAFETENSORS_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool}

Inputs = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Arg:
    """The type and range of one constructor argument in a saved config.json (checked before use).

    kind: "int", "float", "bool", "str", "int_list" (a list of ints of at most `max_items`), or "object"
    (a JSON object checked by the ranker's own `checked_args`). Numbers must lie in [low, high]
    (`high_open`: [low, high)); `nullable` admits null; `required=False` lets the key be absent.
    """

    kind: str
    low: float = -math.inf
    high: float = math.inf
    high_open: bool = False
    max_items: int = 64
    nullable: bool = False
    required: bool = True

    def allowed(self) -> str:
        if self.kind in ("bool", "str", "object"):
            text = {"bool": "true or false", "str": "a string", "object": "a JSON object"}[self.kind]
        else:
            what = "an integer" if self.kind in ("int", "int_list") else "a number"
            text = f"{what} in [{_number(self.low)}, {_number(self.high)}{')' if self.high_open else ']'}"
            if self.kind == "int_list":
                text = f"a list of at most {self.max_items} items, each {text}"
        return text + (" or null" if self.nullable else "")

    def check(self, value: Any, where: str) -> Any:
        """`value` if it fits this argument; ExportError naming `where`, the value and what is allowed otherwise."""
        if value is None and self.nullable:
            return None
        if self.kind == "int_list":
            if not isinstance(value, list) or len(value) > self.max_items:
                raise ExportError(f"{where} is {brief(value)}, expected {self.allowed()}")
            item = Arg("int", self.low, self.high, self.high_open)
            return [item.check(v, f"{where}[{i}]") for i, v in enumerate(value)]
        ok = {"int": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
              "bool": lambda v: isinstance(v, bool),
              "str": lambda v: isinstance(v, str) and len(v) <= 4096,
              "object": lambda v: isinstance(v, dict)}[self.kind](value)
        if ok and self.kind in ("int", "float"):
            ok = self.low <= value and (value < self.high if self.high_open else value <= self.high)
        if not ok:
            raise ExportError(f"{where} is {brief(value)}, expected {self.allowed()}")
        return float(value) if self.kind == "float" else value


CLS_VECTORS = "cls_vectors"     # BERT inputs: the [CLS] vectors of distinct rows, cached (rankers.bert)
IGNORE_INDEX = -100              # a masked-LM label position that counts for no loss (rankers.bert)

def _number(x: float) -> str:
    return "-inf" if x == -math.inf else "inf" if x == math.inf else f"{x:g}" if isinstance(x, float) else str(x)


def brief(value: Any) -> str:
    """A config value as JSON (the form it was saved in), cut as every message's value is (`errors.cut`)."""
    return cut(json.dumps(value) if isinstance(value, (dict, list, str, int, float, bool, type(None))) else repr(value))


def check_args(values: Any, spec: Mapping[str, Arg], where: str) -> dict[str, Any]:
    """Every key of `values` checked against `spec` (unknown keys and missing required ones rejected)."""
    if not isinstance(values, dict):
        raise ExportError(f"{where} is {brief(values)}, expected a JSON object with keys {sorted(spec)}")
    unknown = sorted(set(values) - set(spec))
    if unknown:
        raise ExportError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(spec)}")
    missing = sorted(k for k, arg in spec.items() if arg.required and k not in values)
    if missing:
        raise ExportError(f"{where}: missing key(s) {missing}")
    return {k: spec[k].check(v, f"{where}.{k}") for k, v in values.items()}


class Ranker(torch.nn.Module):
    """Base of every ranker: `prepare` a table once, `forward` a batch of prepared rows to scores (B,)."""

    kind: ClassVar[str]
    ARGS: ClassVar[Mapping[str, Arg]] = {}   # the constructor arguments a saved config.json may hold

    @classmethod
    def checked_args(cls, args: Any, where: str) -> dict[str, Any]:
        """The constructor arguments of a saved config, type- and range-checked (ExportError otherwise)."""
        return check_args(args, cls.ARGS, where)

    def check_loaded(self, where: str) -> None:
        """Checks that need the loaded tensors (a ranker holding a model text parses it); ExportError otherwise."""

    @classmethod
    def optional_tensor(cls, name: str) -> bool:
        """A tensor the weights file may leave out (tied to another one, e.g. BERT's MLM decoder)."""
        return False

    def prepare(self, frame: pd.DataFrame) -> Inputs:
        """Every row of `frame` as tensors (CPU), indexable along the first dimension."""
        raise NotImplementedError

    def forward(self, inputs: Inputs) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def init_args(self) -> dict[str, Any]:
        """The JSON-serialisable constructor arguments that rebuild this module's shape."""
        raise NotImplementedError

    def batch_allocations(self) -> AbstractContextManager[None]:
        """The C allocator's policy while batches run through this ranker (`score_inputs`, the trainer's epochs): none
        by default; a ranker whose batch tensors are megabytes keeps freed blocks for reuse (rankers.bert)."""
        return nullcontext()

    def runs_mixed_precision(self) -> bool:
        """Whether `train.precision`'s autocast runs this ranker's passes: a transformer encoder's (rankers.bert), whose
        matrix products are nearly all its cost. The scoring layers of every ranker — a small MLP's all — run in fp32:
        in bf16 a score keeps 8 bits, and the scores of one query, close together, would tie (DCG@10 of the tiny BERT
        17.5 in fp32, 12.1 with its head in bf16: bench/precision.py, seed 0)."""
        return False

    def scoring_order(self, inputs: Inputs) -> np.ndarray | None:
        """The order `score_inputs` takes the prepared rows in (None: as they are); a ranker whose batch costs what its
        longest row does groups rows of like length (rankers.bert). Each row's score is the same in any order."""
        return None

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


def checked_file_size(path: Path, max_bytes: int, what: str) -> int:
    """The size of `path`, a regular file of at most `max_bytes`; ExportError (saying `what` it should be) otherwise."""
    if not path.exists():
        raise ExportError(f"{path}: missing; {what}")
    if not path.is_file():
        raise ExportError(f"{path}: not a regular file; {what}")
    size = path.stat().st_size
    if size > max_bytes:
        raise ExportError(f"{path}: {size} bytes, more than the {max_bytes} allowed; {what}")
    return size


def read_json_bounded(path: Path, max_bytes: int, what: str) -> Any:
    """A JSON file of at most `max_bytes`, parsed strictly (no NaN/Infinity); ExportError otherwise."""
    checked_file_size(path, max_bytes, what)
    try:
        return json.loads(path.read_bytes().decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ExportError(f"{path}: not valid JSON ({type(error).__name__}: {str(error)[:120]}); {what}") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def read_safetensors_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each tensor's (dtype, shape) from a safetensors file's header, the file's size and layout checked
    (bounded size, offsets that tile the data exactly): a truncated or foreign file is an ExportError."""
    size = checked_file_size(path, MAX_WEIGHTS_BYTES, "expected the ranker's weights (safetensors)")
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        length = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
        if not 2 <= length <= min(MAX_HEADER_BYTES, size - 8):
            raise ExportError(f"{path}: not a safetensors file (its first 8 bytes do not give a header length "
                              f"that fits the file's {size} bytes)")
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ExportError(f"{path}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise ExportError(f"{path}: not a safetensors file (its header is not a JSON object)")
    header.pop("__metadata__", None)
    data_bytes, tensors, spans = size - 8 - length, {}, []
    for name, entry in header.items():
        ok = (isinstance(entry, dict) and entry.get("dtype") in SAFETENSORS_DTYPES
              and isinstance(entry.get("shape"), list) and len(entry["shape"]) <= 8
              and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2 ** 40 for d in entry["shape"])
              and isinstance(entry.get("data_offsets"), list) and len(entry["data_offsets"]) == 2
              and all(isinstance(o, int) and not isinstance(o, bool) for o in entry["data_offsets"]))
        if not ok:
            raise ExportError(f"{path}: tensor {name!r} has a malformed header entry {brief(entry)}")
        begin, end = entry["data_offsets"]
        itemsize = torch.empty(0, dtype=SAFETENSORS_DTYPES[entry["dtype"]]).element_size()
        if not 0 <= begin <= end or end - begin != math.prod(entry["shape"]) * itemsize:
            raise ExportError(f"{path}: tensor {name!r} has offsets {entry['data_offsets']} that do not hold "
                              f"its {entry['dtype']} shape {entry['shape']}")
        tensors[name] = (entry["dtype"], tuple(entry["shape"]))
        spans.append((begin, end))
    position = 0
    for begin, end in sorted(spans):
        if begin != position:
            break
        position = end
    if position != data_bytes:
        raise ExportError(f"{path}: the tensors' data does not fill the file exactly ({data_bytes} data bytes, "
                          f"tensors laid out up to byte {position}): truncated or tampered with")
    return tensors


def score_inputs(ranker: Ranker, inputs: Inputs, batch_size: int = 1024, precision: str = "fp32") -> np.ndarray:
    """Scores (float32) of every prepared row, in order, in eval mode, under torch.inference_mode and the autocast of
    `precision` (a resolved `train.precision`, rankers.precision: the training's own, so scores match its passes)."""
    was_training = ranker.training
    ranker.eval()
    device = ranker.device
    precision = precision if ranker.runs_mixed_precision() else "fp32"
    total = n_rows(inputs)
    order = ranker.scoring_order(inputs)
    order = np.arange(total) if order is None else order
    out = np.zeros(total, dtype=np.float32)
    with ranker.batch_allocations(), torch.inference_mode(), autocast(device, precision):
        for start in range(0, total, batch_size):
            rows = order[start: start + batch_size]
            out[rows] = ranker(take(inputs, rows, device)).float().cpu().numpy()
    ranker.train(was_training)
    return out


def score_frame(ranker: Ranker, frame: pd.DataFrame, batch_size: int = 1024, precision: str = "fp32") -> np.ndarray:
    """Scores of every row of `frame` (sessions or annotations), under `precision`'s autocast (score_inputs)."""
    return score_inputs(ranker, ranker.prepare(frame), batch_size, precision)


NO_CUDA = "train.device: 'cuda' requested but no CUDA device is available; use 'cpu' or 'auto'"


def resolve_device(name: str) -> torch.device:
    """`auto` takes CUDA when present; asking for CUDA without it is an error naming the key."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(NO_CUDA)
    return torch.device(name)
