"""The run report's pictures, from the files a run wrote (no system binary: matplotlib and hand-written SVG).

* `causal_graph` — every epoch's graph (epoch_<k>/graph.json) as inline SVG (`graph_svg`), each page feature →
  click edge labelled with its evidence;
* `examination` — BAL's learned examination σ(v) by position and by each categorical page feature's level with
  95 % intervals (history: `click_model.examination_table`), or a position-based method's propensities (bias.json),
  beside the simulator's true examination when the logs were simulated;
* `weights` — BAL's importance weights: their distribution and effective sample size per epoch;
* `training` — the training losses and the validation metric per epoch.

A figure whose data the run lacks is kept as a one-line note (`Figure.note`, nothing drawn), never an error.
"""
from __future__ import annotations

import html
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..causal.graph import GRAPH_FILE, DiscoveredGraph, GraphFileError, epoch_dir, graph_epochs
from ..rundir import layout as L
from ..rundir.epochs import epoch_label, history_entries, is_graph_epoch, shipped_graph_epoch
from ..rundir.files import read_json
from .graph_svg import LEGEND, graph_svg, no_edge_notes
from .plots import colors, new_figure, png_bytes

log = logging.getLogger(__name__)

VALID_METRIC = "DCG@10"


@dataclass(frozen=True)
class Figure:
    """One picture of the report: inline SVG or PNG bytes, or neither and a note saying why it is left out."""

    key: str
    title: str
    svg: str = ""
    png: bytes = b""
    note: str = ""

    @property
    def drawn(self) -> bool:
        return bool(self.svg or self.png)


def _json(root: Path, rel: str) -> Any:
    path = root / rel
    return read_json(path) if path.exists() else None


def _bal_epochs(root: Path) -> list[dict[str, Any]]:
    """The history's BAL epochs (phase "bal"), in order, in the one numbering; [] for another method or no history."""
    return [e for e in history_entries(root) if is_graph_epoch(e)]


def _shipped_epoch(root: Path) -> int | None:
    return shipped_graph_epoch(root)


# ---------------------------------------------------------------------------------------------
# The causal graph of every epoch
# ---------------------------------------------------------------------------------------------
def causal_graph_figure(root: Path) -> Figure:
    """One SVG per epoch on one layout, with the candidate click edges each graph left out listed under it."""
    title = "Causal graph of every epoch"
    graphs = []
    for k in graph_epochs(root):
        try:
            graphs.append((k, DiscoveredGraph.load(epoch_dir(root, k) / GRAPH_FILE)))
        except (OSError, ValueError, GraphFileError) as error:
            log.warning("report: epoch %d's graph left out (%s)", k, error)
    if not graphs:
        return Figure("causal_graph", title, note="no epoch_<k>/graph.json in the run (no graph was learned)")
    nodes = list(dict.fromkeys(n for _, g in graphs for n in g.nodes))
    panels = []
    chosen = _shipped_epoch(root)
    for k, graph in graphs:
        notes = no_edge_notes(graph)
        caption = ("<p class='no-edge'>No edge into click: " + "; ".join(html.escape(n) for n in notes) + "</p>"
                   if notes else "")
        label = f"epoch {k} (shipped)" if k == chosen else f"epoch {k}"
        panels.append(f"<div class='graph-panel' data-epoch='{k}'>{graph_svg(graph, label, f'g{k}', nodes)}"
                      f"{caption}</div>")
    return Figure("causal_graph", title, svg="<div class='graphs'>" + "".join(panels) + "</div>",
                  note=LEGEND + ". Hover an edge for its stability and evidence.")


# ---------------------------------------------------------------------------------------------
# The learned examination
# ---------------------------------------------------------------------------------------------
def true_examination(root: Path) -> dict[int, float] | None:
    """The simulator's mean examination probability by position relative to position 1 (None: not simulated)."""
    from ..schema import POSITION  # lazy: +0.9 s (pandas, pyarrow)
    from ..simulate.generate import EXAMINATION_PROB  # lazy: +0.9 s (pandas, pyarrow)
    path = root / L.TRUTH_DIR / L.TRUTH_SESSIONS
    if not path.exists():
        return None
    import pandas as pd  # lazy: +0.9 s (pandas, pyarrow)
    truth = pd.read_parquet(path, columns=[POSITION, EXAMINATION_PROB])
    by_position = truth.groupby(POSITION)[EXAMINATION_PROB].mean().sort_index()
    return {int(k): float(v / by_position.iloc[0]) for k, v in by_position.items()}


def level_names(root: Path, feature: str, n_codes: int) -> Callable[[str], str]:
    """Code → the level's own value, from the page encoder's vocabulary (codes 1..K, 0 unknown) when it has the
    run's number of codes; 'code c' otherwise."""
    from ..features.encoders import ENCODER_JSON  # lazy: +0.9 s (pandas, pyarrow)
    state = _json(root, f"{L.PAGE_ENCODER}/{ENCODER_JSON}") or {}
    vocabulary = next((f["state"].get("vocabulary") for f in state.get("features", []) if f.get("name") == feature),
                      None)
    if vocabulary is None or len(vocabulary) + 1 != n_codes:
        return lambda code: f"code {code}"
    return lambda code: "unknown" if code == "0" else str(vocabulary[int(code) - 1])


def _relative_curve(table: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Positions, relative examination and (2, n) interval half-widths (None without intervals) of a table."""
    keys = sorted(table, key=int)
    x = np.array([int(k) for k in keys])
    if isinstance(table[keys[0]], dict):
        y = np.array([table[k]["relative"] for k in keys])
        err = np.array([[y[i] - table[k]["low"] for i, k in enumerate(keys)],
                        [table[k]["high"] - y[i] for i, k in enumerate(keys)]])
        return x, y, np.clip(err, 0, None)
    return x, np.array([float(table[k]) for k in keys]), None


def examination_figure(root: Path) -> Figure:
    """BAL's examination per epoch by position (intervals on the last epoch's), its last epoch's by level of each
    categorical page feature; or a position-based method's propensities; the simulator's truth beside them."""
    title = "Learned examination"
    curves: list[tuple[str, dict[str, Any]]] = []
    levels: dict[str, Any] = {}
    interval = ""
    epochs = _bal_epochs(root)
    chosen = _shipped_epoch(root)
    shown = next((e for e in epochs if e.get("epoch") == chosen), epochs[-1] if epochs else None)
    for e in epochs:                          # the shipped epoch's curve last: drawn on top, with its intervals
        if e is shown:
            continue
        table = (e.get("train") or {}).get("examination")
        by_position = table["by_position"] if table else (e.get("train") or {}).get("examination_by_position")
        if by_position:
            curves.append((f"epoch {e['epoch']}", by_position))
    if shown is not None:
        table = (shown.get("train") or {}).get("examination")
        by_position = table["by_position"] if table else (shown.get("train") or {}).get("examination_by_position")
        if by_position:
            curves.append((f"epoch {shown['epoch']} (shipped)", by_position))
        if table:
            corrected = set((shown.get("biases") or {}).get("page_feature_biases") or ())
            levels = {f: t for f, t in (table.get("levels") or {}).items() if f in corrected}
            interval = table.get("interval", "")
    bias = _json(root, L.BIAS) or {}
    if not curves and bias.get("propensities"):
        curves.append((f"{bias.get('method', 'method')} propensities θ_k/θ_1", bias["propensities"]))
        title = "Learned position propensities"
    if not curves:
        method = (bias.get("method") or (_json(root, L.HISTORY) or {}).get("method") or "this method")
        return Figure("examination", title, note=f"{method} learns no examination or position propensities")
    levels = {f: t for f, t in levels.items() if len(t.get("codes", {})) > 1}
    fig = new_figure(5.5 + 3.2 * len(levels), 3.8)
    axes = fig.subplots(1, 1 + len(levels), squeeze=False)[0]
    ax = axes[0]
    for i, ((label, table), colour) in enumerate(zip(curves, colors(len(curves)), strict=True)):
        x, y, err = _relative_curve(table)
        last = i == len(curves) - 1
        if last and err is not None:
            ax.errorbar(x, y, yerr=err, color=colour, marker="o", markersize=4, capsize=3, linewidth=2,
                        label=f"{label} (95% interval)")
        else:
            ax.plot(x, y, color=colour, marker="o", markersize=3, linewidth=2 if last else 1,
                    alpha=1.0 if last else 0.55, label=label)
    truth = true_examination(root)
    if truth:
        ax.plot(list(truth), list(truth.values()), color="black", linestyle="--", linewidth=1.5,
                label="simulator's truth")
    ax.set_xlabel("position")
    ax.set_ylabel("examination relative to position 1")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("by position", fontsize=10)
    for ax, (feature, table) in zip(axes[1:], levels.items(), strict=True):
        _level_panel(ax, feature, table, level_names(root, feature, table.get("n_codes", 0)), shown["epoch"])
    note = (f"Error bars: {interval}; they leave out the uncertainty of the rest of the click model. "
            if interval else "No intervals: the run recorded point estimates only. ")
    if levels:
        note += "By level: the mean over the rows shown with that level (whatever their position). "
    recorded = set((((shown or {}).get("train") or {}).get("examination") or {}).get("levels") or {})
    if recorded - set(levels):
        note += (f"Not drawn by level: {', '.join(sorted(recorded - set(levels)))} (not corrected in the shipped "
                 f"epoch {shown['epoch']}: no effect found within documents, or not testable there).")
    return Figure("examination", title, png=png_bytes(fig), note=note)


def _level_panel(ax, feature: str, table: dict[str, Any], name: Callable[[str], str], epoch: int) -> None:
    """Bars of the shipped epoch's examination by level relative to the most shown level, with intervals."""
    codes = table["codes"]
    keys = sorted(codes, key=int)
    y = np.array([codes[k]["relative"] for k in keys])
    err = np.clip(np.array([[y[i] - codes[k]["low"] for i, k in enumerate(keys)],
                            [codes[k]["high"] - y[i] for i, k in enumerate(keys)]]), 0, None)
    reference = max(keys, key=lambda k: codes[k]["rows"])
    ax.bar(range(len(keys)), y, yerr=err, capsize=3, color="#8fb3d9")
    ax.set_xticks(range(len(keys)), [name(k) for k in keys], rotation=45 if len(keys) > 6 else 0, fontsize=8)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel(feature)
    ax.set_ylabel(f"relative to {name(reference)} (most shown)")
    ax.set_title(f"by {feature} (epoch {epoch}, shipped)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)


# ---------------------------------------------------------------------------------------------
# Importance weights
# ---------------------------------------------------------------------------------------------
def weights_figure(root: Path) -> Figure:
    """Histograms of log10 w per epoch and the effective sample size (share of rows) per epoch."""
    title = "Importance weights"
    epochs = [(e.get("bal_epoch"), e.get("weights") or {}) for e in _bal_epochs(root)]
    if not epochs:
        return Figure("weights", title, note="not a BAL run: no importance weights")
    weighted = [(k, w) for k, w in epochs if w.get("confounded")]
    if not weighted:
        return Figure("weights", title, note="no page feature was confounded in any epoch: every weight is 1")
    with_histogram = [(k, w["histogram"]) for k, w in weighted if w.get("histogram")]
    fig = new_figure(4.5 * (1 + bool(with_histogram)) + 1, 3.6)
    axes = fig.subplots(1, 1 + bool(with_histogram), squeeze=False)[0]
    for (k, h), colour in zip(with_histogram, colors(len(with_histogram)), strict=True):
        axes[0].stairs(h["counts"], h["log10_edges"], color=colour, label=f"epoch {k}", linewidth=1.4)
    if with_histogram:
        axes[0].set_xlabel("log10 importance weight (mean 1, capped)")
        axes[0].set_ylabel("rows")
        axes[0].set_title("distribution", fontsize=10)
        axes[0].legend(fontsize=7)
        axes[0].grid(alpha=0.3)
    ax = axes[-1]                                     # every epoch: one with nothing confounded has ESS = rows
    ks = [k for k, _ in epochs]
    x = np.arange(len(ks))
    ess = [w.get("ess_fraction", np.nan) for _, w in epochs]
    ax.bar(x - 0.2, ess, 0.4, label="ESS / rows", color="#1f4e79")
    ax.bar(x + 0.2, [w.get("ess_fraction_unclipped", e) for (_, w), e in zip(epochs, ess, strict=True)], 0.4,
           label="ESS / rows before the cap", color="#8fb3d9")
    ax.plot(x, [w.get("share_clipped", 0.0) for _, w in epochs], color="#a23b3b", marker="o",
            label="share of rows at the cap")
    ax.set_xticks(x, [str(k) for k in ks])
    ax.set_xlabel("epoch")
    ax.set_ylim(0, 1.05)
    ax.set_title("effective sample size", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    confounded = sorted({f for _, w in weighted for f in w["confounded"]})
    unweighted = [str(k) for k, w in epochs if not w.get("confounded")]
    note = (f"Confounded page features reweighted: {', '.join(confounded)}"
            + (f"; nothing confounded (every weight 1) in epoch {', '.join(unweighted)}" if unweighted else "")
            + ". ESS: Kish's (Σw)²/Σw².")
    return Figure("weights", title, png=png_bytes(fig), note=note)


# ---------------------------------------------------------------------------------------------
# Training and validation curves
# ---------------------------------------------------------------------------------------------
def _is_loss(key: str) -> bool:
    return "loss" in key or key.endswith("nll")


def training_figure(root: Path, metric: str = VALID_METRIC) -> Figure:
    """The training losses (every numeric training statistic named *loss* or *nll*) and the validation metric
    per epoch, warm-up epochs shaded."""
    title = "Training and validation curves"
    epochs = history_entries(root)
    if not epochs:
        return Figure("training", title, note="no training history (train/history.json)")
    x = np.arange(len(epochs), dtype=float)           # in training order; ticks named in the one numbering
    ticks = [epoch_label(e).replace("warm-up ", "w").replace("epoch ", "") for e in epochs]
    losses = list(dict.fromkeys(k for e in epochs for k, v in (e.get("train") or {}).items()
                                if _is_loss(k) and isinstance(v, (int, float))))
    valid = np.array([(e.get("valid") or {}).get(metric, np.nan) for e in epochs], dtype=float)
    fig = new_figure(10, 3.6)
    left, right = fig.subplots(1, 2)
    for key, colour in zip(losses, colors(len(losses)), strict=True):
        y = [(e.get("train") or {}).get(key, np.nan) for e in epochs]
        left.plot(x, np.asarray(y, dtype=float), marker="o", markersize=3, color=colour, label=key)
    right.plot(x, valid, marker="o", markersize=3, color="#1f4e79", label=f"validation {metric}")
    chosen = _shipped_epoch(root)
    for xi, e in zip(x, epochs, strict=True):
        if e.get("phase") != "warmup" and e.get("epoch") == chosen and np.isfinite(valid[int(xi)]):
            right.plot([xi], [valid[int(xi)]], marker="*", markersize=12, color="#a23b3b", linestyle="none",
                       label="shipped")
    for ax in (left, right):
        warm = [xi for xi, e in zip(x, epochs, strict=True) if e.get("phase") == "warmup"]
        if warm:
            ax.axvspan(min(warm) - 0.5, max(warm) + 0.5, color="grey", alpha=0.15, label="warm-up")
        ax.set_xlabel("epoch (w: warm-up)")
        ax.set_xticks(x, ticks)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    left.set_ylabel("training loss (mean per batch)")
    right.set_ylabel(f"validation {metric}")
    left.set_title("training", fontsize=10)
    right.set_title(f"validation {metric}", fontsize=10)
    note = "" if np.isfinite(valid).any() else f"No validation {metric}: the run had no validation queries."
    return Figure("training", title, png=png_bytes(fig), note=note)


def run_figures(root: Path) -> list[Figure]:
    """Every figure of the run report, in `FIGURE_KEYS` order (those without data as notes)."""
    return [build(Path(root)) for build in BUILDERS.values()]


BUILDERS: dict[str, Callable[[Path], Figure]] = {"causal_graph": causal_graph_figure, "examination": examination_figure,
                                                 "weights": weights_figure, "training": training_figure}
FIGURE_KEYS = tuple(BUILDERS)   # the report's figures, in its order
