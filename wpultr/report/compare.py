"""`wpultr compare RUN [RUN …]`: finished runs' metrics side by side on the test queries they all share.

Each run's `eval/per_query.parquet` is restricted to the queries every run scored (keyed by
`schema.query_key`, the id alone when a table lacks the key), every later run is compared with the first
by the paired t-test the experiment tables use (`metrics.paired_test`), and the result is a terminal table
and, on request, a self-contained HTML page with the per-query differences plotted.
"""
from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import RunDirError
from ..evaluation.metrics import paired_test
from ..rundir.files import atomic_path
from ..rundir.layout import PER_QUERY
from ..rundir.ownership import output_of
from ..schema import BUCKET, QUERY_ID, QUERY_KEY
from ..storage import readable_run_dir
from ..tables import fixed, pvalue, table
from .page import _table, page, png_img
from .plots import new_figure, png_bytes

PAGE_MARK = "<!-- wpultr compare -->"    # the first line of every page this command writes
PAGE = output_of("wpultr compare --html")  # what --html may replace: a page this command wrote (its manifest)
PLOTTED = "DCG@10"                       # the metric whose per-query differences the page plots (when present)
_NOT_METRICS = {QUERY_ID, QUERY_KEY, BUCKET}


@dataclass
class Comparison:
    """The runs (labels in the order given; the first is the baseline) on their shared queries."""
    labels: list[str]
    key: str                                # the column queries are matched by
    metrics: list[str]                      # metric columns every run has, in the first run's order
    per_query: dict[str, pd.DataFrame]      # label -> its rows of the shared queries, sorted by key

    @property
    def n_queries(self) -> int:
        return len(self.per_query[self.labels[0]])

    def mean(self, label: str, metric: str) -> float:
        return float(self.per_query[label][metric].mean())

    def test(self, label: str, metric: str) -> tuple[float, float, int]:
        """(p, mean difference label − first, queries) of the paired t-test against the first run."""
        return paired_test(self.per_query[label], self.per_query[self.labels[0]], metric, "all")


def _labels(runs: Sequence[str]) -> list[str]:
    """Each run's directory name, or the run as given where two names clash."""
    names = [Path(str(r).rstrip("/")).name for r in runs]
    return [n if names.count(n) == 1 else str(r) for n, r in zip(names, runs, strict=True)]


def _read_per_query(run: str) -> pd.DataFrame:
    with readable_run_dir(run, "RUN", include=(PER_QUERY,)) as local:
        path = local / PER_QUERY
        if not path.is_file():
            raise FileNotFoundError(f"{run}: no {PER_QUERY} (has the run's evaluate stage finished?)")
        return pd.read_parquet(path)


def compare_runs(runs: Sequence[str]) -> Comparison:
    """Read every run's per-query metrics and keep the queries all of them scored; RunDirError (one line)
    when a run shares none with the first, or when fewer than two runs are given."""
    if len(runs) < 2:
        raise RunDirError("compare: give at least two run directories (the first is the baseline)")
    labels = _labels(runs)
    tables = {label: _read_per_query(str(run)) for label, run in zip(labels, runs, strict=True)}
    key = QUERY_KEY if all(QUERY_KEY in t.columns for t in tables.values()) else QUERY_ID
    first = tables[labels[0]]
    shared = set(first[key])
    for label, run in zip(labels[1:], runs[1:], strict=True):
        if not shared & set(tables[label][key]):
            raise RunDirError(f"{run}: shares no test query with {runs[0]} (by {key}); "
                              f"compare runs evaluated on the same annotations")
        shared &= set(tables[label][key])
    if not shared:
        raise RunDirError(f"{', '.join(map(str, runs))}: no test query is shared by all of them (by {key})")
    metrics = [c for c in first.columns if c not in _NOT_METRICS and pd.api.types.is_numeric_dtype(first[c])
               and all(c in t.columns for t in tables.values())]
    per_query = {label: t[t[key].isin(shared)].sort_values(key, kind="stable").reset_index(drop=True)
                 for label, t in tables.items()}
    return Comparison(labels, key, metrics, per_query)


ALPHA = 0.05      # a row whose paired test against the first run has p below this is marked significant


def table_rows(c: Comparison) -> tuple[list[str], list[list[str]]]:
    """(header, rows): per metric each run's mean, then each later run's difference from the first, its p and '*'
    when p < ALPHA; every number to 4 decimals, p to 3 (below 0.001: '<0.001')."""
    header = ["metric", *c.labels]
    for label in c.labels[1:]:
        header += [f"Δ {label}", f"p {label}", ""]
    rows = []
    for metric in c.metrics:
        row = [metric, *(fixed(c.mean(label, metric)) for label in c.labels)]
        for label in c.labels[1:]:
            p, diff, _ = c.test(label, metric)
            row += ["-" if np.isnan(diff) else f"{diff:+.4f}", pvalue(p), "*" if p < ALPHA else ""]
        rows.append(row)
    return header, rows


def format_text(c: Comparison) -> str:
    """The comparison as an aligned terminal table, significant differences marked '*'."""
    header, rows = table_rows(c)
    intro = (f"{c.n_queries} test queries shared by all {len(c.labels)} runs (matched by {c.key}); "
             f"Δ and p: paired t-test against {c.labels[0]}; * p < {ALPHA}")
    return "\n".join([intro, "", table(header, rows)])


def to_dict(c: Comparison) -> dict:
    """The comparison for machines (`wpultr compare --json`): per metric each run's mean and each later run's test."""
    out = {"baseline": c.labels[0], "runs": c.labels, "queries": c.n_queries, "matched_by": c.key, "metrics": {}}
    for metric in c.metrics:
        entry = {"mean": {label: c.mean(label, metric) for label in c.labels}, "tests": {}}
        for label in c.labels[1:]:
            p, diff, n = c.test(label, metric)
            entry["tests"][label] = {"difference": None if np.isnan(diff) else diff,
                                     "p": None if np.isnan(p) else p, "queries": n,
                                     "significant": bool(p < ALPHA)}
        out["metrics"][metric] = entry
    return out


def _differences_png(c: Comparison, metric: str) -> bytes:
    """Sorted per-query differences (run − first) of `metric`, one panel per later run, as PNG bytes."""
    later = c.labels[1:]
    fig = new_figure(7, 2.4 * len(later))
    base = c.per_query[c.labels[0]][metric].to_numpy(float)
    for i, label in enumerate(later):
        ax = fig.add_subplot(len(later), 1, i + 1)
        diff = np.sort(c.per_query[label][metric].to_numpy(float) - base)
        ax.bar(np.arange(len(diff)), diff, width=1.0, color=np.where(diff >= 0, "tab:green", "tab:red"))
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_title(f"{label} − {c.labels[0]}: {metric} per query (sorted; mean {diff.mean():+.3f})", fontsize=9)
        ax.set_xlabel("query (sorted by difference)")
        ax.set_ylabel(f"Δ {metric}")
    return png_bytes(fig)


def render_html(c: Comparison) -> str:
    """A self-contained page: the table and the per-query difference figure (PNG embedded as base64)."""
    header, rows = table_rows(c)
    metric = PLOTTED if PLOTTED in c.metrics else c.metrics[0]
    runs = ", ".join(f"<code>{html.escape(label)}</code>" for label in c.labels)
    body = (f"<h1>wpultr compare</h1>"
            f"<p>Runs {runs} on the {c.n_queries} test queries they share (matched by {html.escape(c.key)}); "
            f"Δ and p: paired t-test against <code>{html.escape(c.labels[0])}</code>; * p &lt; {ALPHA}.</p>"
            f"{_table(rows, header)}"
            f"<h2>Per-query differences ({html.escape(metric)})</h2>"
            f"<p>{png_img(_differences_png(c, metric), f'per-query {metric} differences')}</p>")
    return f"{PAGE_MARK}\n{page('wpultr compare', body)}"


def write_html(c: Comparison, path: Path, inputs: Sequence[str] = ()) -> Path:
    """Write the page atomically; an existing `path` is replaced only when this command wrote it."""
    with atomic_path(path, PAGE, inputs, "--html") as tmp:
        tmp.write_text(render_html(c))
    return path

