"""The paper's tables from an experiment's run directories: mean ± std over seeds, paired significance.

* Table 1: DCG@k and ERR@k over all test queries, one row per method (BAL Table 1).
* Table 2: DCG@k on high-frequency (buckets 0–4) and tail (5–9) test queries (BAL Table 2).
* Table 3: DCG@k of the BAL ablations the experiment names (BAL Table 3).

A cell is the mean over the seeds whose run finished of that run's `metrics.json` value, ± the sample
standard deviation over those seeds (ddof = 1; a single seed shows the mean alone). `seeds` counts them.

Significance: for each seed, a paired t-test (scipy.stats.ttest_rel) over the test queries both runs
scored — the same queries, since the split is a function of the seed — between the method's and the
baseline's (Naive's) per-query metric (`eval/per_query.parquet`; Table 2 restricts the queries to the
bucket group). A cell is marked ↑ (significantly better) when p < alpha with a positive mean
difference in a majority (rule `majority`, the default: more than half) or in every (rule `all`) of
the seeds both runs finished, ↓ likewise for worse. The best mean of each column is bold.
"""
from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..evaluation.metrics import paired_test
from ..rundir.files import read_json, write_text
from ..rundir.layout import METRICS, PER_QUERY
from .spec import EXPERIMENT_OUTPUT

BETTER, WORSE = "↑", "↓"


@dataclass(frozen=True)
class Column:
    group: str        # all | high | tail: which test queries (metrics.json section)
    metric: str       # DCG@k, ERR@k, ...

    @property
    def name(self) -> str:
        return self.metric if self.group == "all" else f"{self.metric} {self.group}"


class SettingResults:
    """The finished runs of one setting: (label, seed) -> run directory, with cached reads."""

    def __init__(self, runs: dict[tuple[str, int], Path]):
        self.runs = dict(runs)

    def seeds(self, label: str) -> list[int]:
        return sorted(s for (lab, s) in self.runs if lab == label)

    def has(self, label: str) -> bool:
        return bool(self.seeds(label))

    def metrics(self, label: str, seed: int) -> dict[str, Any]:
        return _read_metrics(str(self.runs[(label, seed)]))

    def per_query(self, label: str, seed: int) -> pd.DataFrame:
        return _read_per_query(str(self.runs[(label, seed)]))


@lru_cache(maxsize=512)
def _read_metrics(run_dir: str) -> dict[str, Any]:
    return read_json(Path(run_dir) / METRICS)


@lru_cache(maxsize=128)
def _read_per_query(run_dir: str) -> pd.DataFrame:
    return pd.read_parquet(Path(run_dir) / PER_QUERY)


def clear_cache() -> None:
    _read_metrics.cache_clear()
    _read_per_query.cache_clear()


@dataclass
class Table:
    """One table: rows = method labels, columns = (query group, metric); means, stds, marks."""
    name: str
    title: str
    columns: list[Column]
    rows: list[str] = field(default_factory=list)
    n_seeds: dict[str, int] = field(default_factory=dict)
    mean: dict[tuple[str, str], float] = field(default_factory=dict)        # (label, column name)
    std: dict[tuple[str, str], float] = field(default_factory=dict)
    mark: dict[tuple[str, str], str] = field(default_factory=dict)          # ↑, ↓ or ""
    sig_seeds: dict[tuple[str, str], str] = field(default_factory=dict)     # "better/worse/compared"
    baseline: str | None = None
    legend: str = ""
    missing: list[str] = field(default_factory=list)                        # labels asked for, no finished run
    lower_is_better: set[str] = field(default_factory=set)                  # columns whose best is the smallest mean

    def best(self, column: str) -> float | None:
        values = [self.mean[(r, column)] for r in self.rows if not math.isnan(self.mean[(r, column)])]
        if not values:
            return None
        return min(values) if column in self.lower_is_better else max(values)

    def cell(self, label: str, column: str, bold: str = "**") -> str:
        mean, std = self.mean[(label, column)], self.std[(label, column)]
        if math.isnan(mean):
            return "n/a"
        text = f"{mean:.3f}" if math.isnan(std) else f"{mean:.3f} ± {std:.3f}"
        if self.mark.get((label, column)):
            text += f" {self.mark[(label, column)]}"
        best = self.best(column)
        if best is not None and len(self.rows) > 1 and mean == best:
            text = f"{bold}{text}{bold}" if bold else text
        return text

    def frame(self) -> pd.DataFrame:
        """The CSV form: one row per label; per column its mean, std, mark and significant seeds."""
        rows = []
        for label in self.rows:
            row: dict[str, Any] = {"label": label, "seeds": self.n_seeds[label]}
            for c in self.columns:
                row[f"{c.name} mean"] = self.mean[(label, c.name)]
                row[f"{c.name} std"] = self.std[(label, c.name)]
                row[f"{c.name} sig"] = self.mark.get((label, c.name), "")
                row[f"{c.name} sig_seeds"] = self.sig_seeds.get((label, c.name), "")
            rows.append(row)
        return pd.DataFrame(rows)

    def to_markdown(self) -> str:
        header = ["method", "seeds"] + [c.name for c in self.columns]
        lines = [f"### {self.title}", "", "| " + " | ".join(header) + " |",
                 "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
        for label in self.rows:
            cells = [label, str(self.n_seeds[label])] + [self.cell(label, c.name) for c in self.columns]
            lines.append("| " + " | ".join(cells) + " |")
        if not self.rows:
            lines.append("| (no finished runs) |" + " |" * (len(header) - 1))
        lines += ["", self.legend]
        if self.missing:
            lines += ["", f"No finished run for: {', '.join(self.missing)}."]
        return "\n".join(lines) + "\n"

    def to_html(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in ["method", "seeds"] + [c.name for c in self.columns])
        body = []
        for label in self.rows:
            cells = [f"<td style='text-align:left'>{html.escape(label)}</td>", f"<td>{self.n_seeds[label]}</td>"]
            for c in self.columns:
                text = html.escape(self.cell(label, c.name, bold=""))
                best = self.best(c.name)
                if best is not None and len(self.rows) > 1 and self.mean[(label, c.name)] == best:
                    text = f"<b>{text}</b>"
                title = self.sig_seeds.get((label, c.name), "")
                cells.append(f"<td title='better/worse/compared seeds: {html.escape(title)}'>{text}</td>"
                             if title else f"<td>{text}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        note = f"<p class='legend'>{html.escape(self.legend)}</p>"
        if self.missing:
            note += f"<p class='legend'>No finished run for: {html.escape(', '.join(self.missing))}.</p>"
        return (f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{note}")

    def write(self, directory: Path) -> tuple[Path, Path]:
        md, csv = directory / f"{self.name}.md", directory / f"{self.name}.csv"
        write_text(md, self.to_markdown(), EXPERIMENT_OUTPUT, "out_dir")
        write_text(csv, self.frame().to_csv(index=False), EXPERIMENT_OUTPUT, "out_dir")
        return md, csv


def significance_rows(results: SettingResults, label: str, baseline: str, columns: Sequence[Column],
                      ) -> list[dict[str, Any]]:
    """Per seed both runs finished, per column: p, mean difference and queries compared."""
    rows = []
    for seed in sorted(set(results.seeds(label)) & set(results.seeds(baseline))):
        m, b = results.per_query(label, seed), results.per_query(baseline, seed)
        for c in columns:
            if c.metric not in m.columns or c.metric not in b.columns:
                continue
            p, diff, n = paired_test(m, b, c.metric, c.group)
            rows.append({"label": label, "baseline": baseline, "seed": seed, "group": c.group, "metric": c.metric,
                         "column": c.name, "p": p, "mean_diff": diff, "n_queries": n})
    return rows


def _mark(rows: list[dict[str, Any]], alpha: float, rule: str) -> tuple[str, str]:
    n = len(rows)
    better = sum(1 for r in rows if r["p"] < alpha and r["mean_diff"] > 0)
    worse = sum(1 for r in rows if r["p"] < alpha and r["mean_diff"] < 0)
    need = n if rule == "all" else n // 2 + 1
    mark = ""
    if n and better >= need:
        mark = BETTER
    elif n and worse >= need:
        mark = WORSE
    return mark, f"{better}/{worse}/{n}"


def build_table(name: str, title: str, results: SettingResults, labels: Sequence[str], columns: Sequence[Column],
                baseline: str | None, alpha: float = 0.05, rule: str = "majority",
                significance_log: list[dict[str, Any]] | None = None) -> Table:
    """Mean ± std over seeds of each label's metrics.json, and significance against `baseline`."""
    table = Table(name=name, title=title, columns=list(columns), baseline=baseline)
    for label in labels:
        seeds = results.seeds(label)
        if not seeds:
            table.missing.append(label)
            continue
        table.rows.append(label)
        table.n_seeds[label] = len(seeds)
        for c in columns:
            values = [_metric_value(results.metrics(label, s), c) for s in seeds]
            values = np.array([v for v in values if v is not None], dtype=float)
            table.mean[(label, c.name)] = float(values.mean()) if values.size else float("nan")
            table.std[(label, c.name)] = float(values.std(ddof=1)) if values.size > 1 else float("nan")
        if baseline and label != baseline and results.has(baseline):
            rows = significance_rows(results, label, baseline, columns)
            if significance_log is not None:
                significance_log.extend({"table": name, **r} for r in rows)
            for c in columns:
                mark, counts = _mark([r for r in rows if r["column"] == c.name], alpha, rule)
                table.mark[(label, c.name)] = mark
                table.sig_seeds[(label, c.name)] = counts
    rule_text = "a majority of" if rule == "majority" else "all"
    table.legend = (f"mean ± sample std over seeds. {BETTER}/{WORSE}: significantly better/worse than "
                    f"{baseline} (paired t-test over test queries, p < {alpha:g}) in {rule_text} seeds; "
                    f"best mean per column in bold." if baseline else "mean ± sample std over seeds.")
    return table


def _metric_value(metrics: dict[str, Any], column: Column) -> float | None:
    group = metrics.get(column.group) or {}
    value = group.get(column.metric)
    return None if value is None else float(value)


def table_columns(ks: Sequence[int]) -> dict[str, list[Column]]:
    """The columns of Tables 1–3 for cutoffs `ks` (BAL: 1, 3, 5, 10)."""
    return {
        "table1": [Column("all", f"DCG@{k}") for k in ks] + [Column("all", f"ERR@{k}") for k in ks],
        "table2": [Column(g, f"DCG@{k}") for k in ks for g in ("high", "tail")],
        "table3": [Column("all", f"DCG@{k}") for k in ks],
    }


TITLES = {
    "table1": "Table 1: DCG@k and ERR@k on the test queries",
    "table2": "Table 2: DCG@k on high-frequency (buckets 0–4) and tail (5–9) test queries",
    "table3": "Table 3: BAL and the variants that mitigate one bias",
}


# ---------------------------------------------------------------------------------------------
# A metric against the settings (LBD Fig. 3: nDCG@10 against the coupling level η)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SettingColumn:
    """One setting of a sweep: its x value and the column title."""
    setting: str
    x: float
    name: str


def build_sweep_table(name: str, title: str, results: dict[str, SettingResults], labels: Sequence[str],
                      metric: str, points: dict[str, float], x_label: str) -> Table:
    """Rows: labels; columns: the settings of `points` in ascending x; cells: mean ± std over seeds of the
    setting's metrics.json value (all test queries). No significance marks: settings are different logs."""
    columns = [SettingColumn(s, float(x), f"{x_label}={float(x):g}")
               for s, x in sorted(points.items(), key=lambda item: item[1])]
    table = Table(name=name, title=title, columns=columns)   # type: ignore[arg-type]
    for label in labels:
        seeds = {c.setting: results[c.setting].seeds(label) if c.setting in results else [] for c in columns}
        if not any(seeds.values()):
            table.missing.append(label)
            continue
        table.rows.append(label)
        table.n_seeds[label] = max(len(s) for s in seeds.values())
        for c in columns:
            values = [_metric_value(results[c.setting].metrics(label, s), Column("all", metric))
                      for s in seeds[c.setting]]
            values = np.array([v for v in values if v is not None], dtype=float)
            table.mean[(label, c.name)] = float(values.mean()) if values.size else float("nan")
            table.std[(label, c.name)] = float(values.std(ddof=1)) if values.size > 1 else float("nan")
    table.legend = (f"{metric} on all test queries, mean ± sample std over seeds, per setting; "
                    "best mean per column in bold.")
    return table
