"""One numbering of a run's training epochs, and which epoch's ranker the run shipped (issue 44).

A method's own epochs are numbered 0…N−1 — for BAL the k of `epoch_<k>/graph.json`, `graph show --epoch k` and the
history's `bal_epoch` — and warm-up epochs are named "warm-up 1"…"warm-up W", never numbered with them. The train
stage writes history.json and bias.json in this numbering (`renumber`: each entry keeps its place in training as
`step`), and every output — `run`, `evaluate`, `export`, `graph show`, the report — states the shipped epoch through
`shipped_line` from the record `renumber` puts in bias.json (`shipped`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from . import layout as L
from .files import read_json

WARMUP = "warmup"
GRAPH_EPOCH = "bal"      # the phase of an epoch that discovered its own graph (BAL's epoch_<k>/)
DEFAULT_METRIC = "DCG@10"


def is_warmup(entry: dict[str, Any]) -> bool:
    return entry.get("phase") == WARMUP


def is_graph_epoch(entry: dict[str, Any]) -> bool:
    """A history entry of an epoch that discovered its own graph (BAL's)."""
    return entry.get("phase") == GRAPH_EPOCH


def epoch_label(entry: dict[str, Any]) -> str:
    """'warm-up 1' for a warm-up epoch, 'epoch k' for the method's own (BAL epoch k = epoch_<k>/)."""
    return f"warm-up {entry['epoch'] + 1}" if is_warmup(entry) else f"epoch {entry['epoch']}"


def renumber(history: list[dict[str, Any]], bias: dict[str, Any],
             select_metric: str = DEFAULT_METRIC) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The method's history and bias record in the one numbering: each entry's `epoch` counted within its kind
    (warm-up or the method's own), its place in training kept as `step`; bias `best_epoch` in that numbering and
    `shipped` (epoch, label, metric, value, why). A history already renumbered is returned as it is."""
    if any("step" in e for e in history):
        return history, bias
    out, counts = [], {True: 0, False: 0}
    for step, entry in enumerate(history):
        warm = is_warmup(entry)
        number = entry["bal_epoch"] if entry.get("bal_epoch") is not None else counts[warm]
        counts[warm] += 1
        out.append({**entry, "epoch": number, "step": step})
    bias = dict(bias)
    best = bias.get("best_epoch")
    chosen = None
    if isinstance(best, int) and 0 <= best < len(out) and not is_warmup(out[best]):
        chosen = out[best]
    own = [e for e in out if not is_warmup(e)]
    if chosen is None and own:                  # no validation: the last epoch is what the method returns
        chosen = own[-1] if best is None else chosen
    if chosen is not None:
        bias["best_epoch"] = chosen["epoch"]
    bias["shipped"] = shipped_record(out, chosen, select_metric)
    return out, bias


def shipped_record(history: list[dict[str, Any]], chosen: dict[str, Any] | None,
                   metric: str) -> dict[str, Any]:
    """Why `chosen` was shipped: the best validation `metric` of the method's epochs, or the last without one."""
    own = [e for e in history if not is_warmup(e)]
    if chosen is None:
        return {"epoch": None, "label": "the final model", "metric": None, "value": None,
                "why": "the method records no epochs", "epochs": len(own)}
    value = (chosen.get("valid") or {}).get(metric)
    record = {"epoch": chosen["epoch"], "label": epoch_label(chosen), "metric": metric if value is not None else None,
              "value": value, "epochs": len(own),
              "last": own[-1]["epoch"] if own else None}
    if value is None:
        record["why"] = "the last epoch (no validation queries to choose by)"
    else:
        last = (own[-1].get("valid") or {}).get(metric) if own else None
        record["why"] = (f"best validation {metric} {value:.4f} of {_span(own)}"
                         + (f" (last epoch {last:.4f})" if last is not None and own[-1] is not chosen else ""))
        warm = [(e.get("valid") or {}).get(metric) for e in history if is_warmup(e)]
        warm = [v for v in warm if v is not None]
        if warm and max(warm) > value:
            record["warmup_better"] = max(warm)
    return record


def _span(own: list[dict[str, Any]]) -> str:
    if len(own) == 1:
        return "epoch " + str(own[0]["epoch"])
    return f"epochs {own[0]['epoch']}–{own[-1]['epoch']}"


def shipped(root: str | Path) -> dict[str, Any] | None:
    """The shipped-epoch record of the run at `root` (None: not trained yet). A run trained before the one
    numbering is renumbered as it is read."""
    root = Path(root)
    bias_path, history_path = root / L.BIAS, root / L.HISTORY
    if not bias_path.exists():
        return None
    bias = read_json(bias_path)
    if "shipped" in bias:
        return bias["shipped"]
    history = read_json(history_path).get("epochs", []) if history_path.exists() else []
    return renumber(history, bias)[1]["shipped"]


def shipped_line(record: dict[str, Any] | None, method: str | None = None, notes: bool = True) -> str:
    """'shipped: BAL epoch 0 — best validation DCG@10 25.6055 of epochs 0–2 (last epoch 25.4022)'."""
    if not record:
        return "shipped: nothing yet (the run has not trained)"
    name = f"{method.upper() if method in ('bal', 'dla', 'ipw', 'lbd', 'prs') else method} " if method else ""
    line = f"shipped: {name}{record['label']} — {record['why']}"
    if notes and record.get("warmup_better") is not None:
        line += (f"; the warm-up ranker scored {record['warmup_better']:.4f} on validation, better than every "
                 "epoch of the method")
    return line


def history_entries(root: str | Path) -> list[dict[str, Any]]:
    """history.json's epochs in the one numbering (an older run's renumbered as read)."""
    path = Path(root) / L.HISTORY
    if not path.exists():
        return []
    entries = read_json(path).get("epochs", [])
    return renumber(entries, {})[0]


def shipped_graph_epoch(root: str | Path) -> int | None:
    """The epoch_<k>/ whose graph belongs to the shipped ranker: BAL's shipped epoch (a graph per epoch: its history
    holds GRAPH_EPOCH epochs); None for a method whose graph the discover stage learned once, after training."""
    path = Path(root) / L.HISTORY
    if not path.exists() or not any(is_graph_epoch(e) for e in read_json(path).get("epochs", [])):
        return None
    return (shipped(root) or {}).get("epoch")
