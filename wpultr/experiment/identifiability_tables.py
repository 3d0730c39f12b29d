"""The Identifiability paper's tables for an experiment whose runs know the truth (simulated logs).

Per setting, Table 1's shape (Identifiability Matters §5.1): rows = methods, columns = MCC, nDCG@k and
click MSE (`metrics.json`'s `truth` section, written by the evaluate stage, and its `all` section),
mean ± std over seeds; and Fig. 3(b)'s shape: MCC against the number of IG components K
(`data.simulate.position_blocks`), one line per method, one figure per corpus. Nothing when no run has
a `truth` section.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import figures as F
from .paper_tables import SettingColumn, SettingResults, Table
from .spec import Experiment, RunRecord

TRUTH = "truth"


@dataclass(frozen=True)
class _Col:
    group: str
    metric: str
    name: str


def _results(records: Sequence[RunRecord], setting: str) -> SettingResults:
    return SettingResults({(r.label, r.seed): Path(r.run_dir) for r in records if r.setting == setting and r.succeeded})


def _value(metrics: dict[str, Any], group: str, metric: str) -> float | None:
    value = (metrics.get(group) or {}).get(metric)
    return None if value is None else float(value)


def _fill(table: Table, results: dict[str, SettingResults], labels: Sequence[str], cells) -> None:
    """cells: column -> (setting, group, metric); mean ± std over the seeds that finished."""
    for label in labels:
        seeds = {c.name: results[s].seeds(label) for c, (s, _, _) in cells.items()}
        if not any(seeds.values()):
            table.missing.append(label)
            continue
        table.rows.append(label)
        table.n_seeds[label] = max(len(v) for v in seeds.values())
        for c, (s, group, metric) in cells.items():
            values = [_value(results[s].metrics(label, seed), group, metric) for seed in seeds[c.name]]
            arr = np.array([v for v in values if v is not None], dtype=float)
            table.mean[(label, c.name)] = float(arr.mean()) if arr.size else float("nan")
            table.std[(label, c.name)] = float(arr.std(ddof=1)) if arr.size > 1 else float("nan")


def _setting_x(exp: Experiment) -> dict[str, tuple[str, float]]:
    """setting -> (corpus, K) from the runs' resolved configs."""
    out: dict[str, tuple[str, float]] = {}
    for run in exp.runs:
        if run.config and run.setting not in out:
            sim = run.config["data"].get("simulate") or {}
            out[run.setting] = (str(sim.get("corpus", "synthetic")), float(sim.get("position_blocks", 1)))
    return out


def k_sweeps(setting_x: dict[str, tuple[str, float]]) -> dict[str, list[tuple[str, float]]]:
    """corpus -> its settings as (setting, K) in K's order, for the corpora whose settings are a sweep over K: two or
    more, each with its own K. Settings that share a K differ in something else (LBD's η, PRS's μ: every one K = 1),
    so a column per K would mix them; those corpora get no MCC-against-K table (each setting keeps its own)."""
    by_corpus: dict[str, dict[str, float]] = {}
    for setting, (corpus, k) in setting_x.items():
        by_corpus.setdefault(corpus, {})[setting] = k
    return {corpus: sorted(points.items(), key=lambda item: item[1]) for corpus, points in by_corpus.items()
            if len(points) >= 2 and len(set(points.values())) == len(points)}


def identifiability_tables(exp: Experiment, records: Sequence[RunRecord]) -> list[tuple[Table, Path | None]]:
    """(table, figure) pairs: one table per setting, then one MCC-against-K figure (as a table) per corpus."""
    results = {s: _results(records, s) for s in exp.settings}
    has_truth = any(_value(res.metrics(label, seed), TRUTH, "MCC") is not None
                    for res in results.values() for (label, seed) in res.runs)
    if not has_truth:
        return []
    ks = [1, 3, 5, 10]
    for run in exp.runs:
        if run.config:
            ks = list(run.config["evaluation"]["ks"])
            break
    out: list[tuple[Table, Path | None]] = []
    for setting in exp.settings:
        columns = ([_Col(TRUTH, "MCC", "MCC")] + [_Col("all", f"nDCG@{k}", f"nDCG@{k}") for k in ks]
                   + [_Col(TRUTH, "click_MSE", "click MSE")])
        table = Table(name=f"identifiability_{setting}", title=f"Identifiability study, setting {setting}: MCC, "
                      "nDCG@k, click MSE", columns=columns,   # type: ignore[arg-type]
                      lower_is_better={"click MSE"})
        _fill(table, results, exp.labels, {c: (setting, c.group, c.metric) for c in columns})
        table.legend = ("MCC (Pearson r of true vs predicted relevance over the training documents) and click MSE "
                        "(true vs predicted click probability, up to one least-squares scale) against the "
                        "simulator's truth; nDCG@k on the test queries; mean ± std over seeds. Bold marks the "
                        "best mean: the largest, the smallest for click MSE.")
        table.write(exp.out_dir / "tables")
        out.append((table, None))
    for corpus, points in k_sweeps(_setting_x(exp)).items():
        columns = [SettingColumn(s, x, f"K={x:g}") for s, x in points]
        table = Table(name=f"identifiability_mcc_{corpus}", title=f"MCC against the IG's components K ({corpus})",
                      columns=columns)   # type: ignore[arg-type]
        _fill(table, results, exp.labels, {c: (c.setting, TRUTH, "MCC") for c in columns})
        table.legend = "MCC, mean ± std over seeds, per number of connected components K of the logs' IG."
        table.write(exp.out_dir / "tables")
        figure = F.plot_sweep(table, exp.out_dir / "figures" / f"identifiability_mcc_{corpus}.png", "MCC",
                              "K (connected components)", table.title) if table.rows else None
        out.append((table, figure))
    return out
