"""The terminal's view of a run (tables for people; each command's `--json` prints the data as it is): the test
metrics, the click metrics on held-out sessions, an ingest summary and the runner's stage lines. Standard library
only (`wpultr evaluate` on stored metrics loads no pandas)."""
from __future__ import annotations

from typing import Any

from ..tables import fixed, number, table

GROUPS = ("all", "high", "tail")


def metrics_text(metrics: dict[str, Any], title: str = "test queries (annotated, held out by query)") -> str:
    """One row per metric, one column per query group (all / high-frequency / tail), 4 decimals."""
    groups = [g for g in GROUPS if isinstance(metrics.get(g), dict)]
    if not groups:
        return "no metrics yet"
    names = [k for k in metrics[groups[0]] if k != "n_queries"]
    header = ["metric"] + [f"{g} ({metrics[g].get('n_queries', '?')} queries)" for g in groups]
    rows = [[name] + [fixed(metrics[g].get(name)) for g in groups] for name in names]
    return f"{title}\n{table(header, rows)}"


def click_metrics_text(clicks: dict[str, Any]) -> str:
    """Each click model's log-likelihood and perplexity on held-out sessions, overall and by position."""
    models = clicks["models"]
    positions = list(dict.fromkeys(k for m in models.values() for k in m["perplexity"]["by_position"]))
    header = ["model", "log-lik", "perplexity"] + [f"@{k}" for k in positions]
    rows = [[name, fixed(m["log_likelihood"]), fixed(m["perplexity"]["overall"])]
            + [fixed(m["perplexity"]["by_position"].get(k)) for k in positions] for name, m in models.items()]
    return (f"click models on {clicks['sessions']} held-out sessions, {clicks['rows']} shown results "
            f"(perplexity: lower is better, 1 is perfect; @k: at position k)\n{table(header, rows)}")


def ingest_text(summary: dict[str, Any]) -> str:
    """An ingest summary: the counts as a two-column table, then quarantined lines by reason."""
    scalars = [[k.replace("_", " "), v] for k, v in summary.items()
               if not isinstance(v, (dict, list)) and v is not None]
    text = table(["ingest", "value"], scalars)
    reasons = summary.get("reasons") or {}
    if reasons:
        text += "\n\nquarantined lines by reason\n" + table(["reason", "lines"], sorted(reasons.items()))
    files = summary.get("files")
    if isinstance(files, list) and files and isinstance(files[0], dict):
        keys = [k for k in files[0] if not isinstance(files[0][k], (dict, list))]
        text += "\n\nfiles\n" + table(keys, [[f.get(k) for k in keys] for f in files])
    return text


def _info_cell(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_info_cell(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_info_cell(v) for v in value[:8]) + (f", … {len(value) - 8} more" if len(value) > 8 else "")
    return number(value)


def stage_line(name: str, seconds: float, info: dict[str, Any], width: int = 11) -> str:
    """'[wpultr] train       7.5 s  train rows 23867 · valid rows 600 · shipped epoch 2': the stage's record as
    words, nested records summarised (a dict's 'reason' or 'message' when it has one)."""
    parts = []
    for key, value in info.items():
        if isinstance(value, dict):
            brief = value.get("message") or value.get("reason") or value.get("status")
            if brief is None:
                brief = _info_cell(value)
            value = brief
        parts.append(f"{key.replace('_', ' ')} {_info_cell(value) if not isinstance(value, str) else value}")
    detail = " · ".join(parts)
    if len(detail) > 160:
        detail = detail[:157] + "…"
    return f"[wpultr] {name:<{width}} {seconds:6.1f} s  {detail}".rstrip()
