"""The identifiability graph as a PNG: nodes coloured by connected component, edges where documents are shared.

Drawn with matplotlib's object API (no pyplot, no display). Position is the x axis when it is a
factor; the other factors' value tuples spread the nodes along y; a single non-position factor is
laid out on a circle.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ..rundir.files import atomic_path
from ..rundir.ownership import output_of
from .factor_graph import IdentifiabilityGraph

MAX_LABELLED_NODES = 60
FIGURE = output_of("wpultr identifiability check --figure")   # what --figure may replace: its own earlier figure


def _layout(ig: IdentifiabilityGraph) -> tuple[np.ndarray, np.ndarray, str, str]:
    n = len(ig.nodes)
    if "position" in ig.factors:
        i = ig.factors.index("position")
        x = np.array([float(node[i]) for node in ig.nodes])
        rest = [tuple(str(v) for j, v in enumerate(node) if j != i) for node in ig.nodes]
        levels = sorted(set(rest))
        y = np.array([levels.index(r) for r in rest], dtype=float)
        others = [f for f in ig.factors if f != "position"]
        return x, y, "position", ", ".join(others)
    angle = 2 * np.pi * np.arange(n) / max(n, 1)
    return np.cos(angle), np.sin(angle), "", ""


def plot_graph(ig: IdentifiabilityGraph, path: Path, title: str | None = None) -> Path:
    """Draw `ig` to `path` (PNG, written atomically; an existing path is replaced only when this command wrote it,
    rundir.ownership); returns the path. Labels are data values: never parsed as mathtext."""
    matplotlib.rcParams["text.parse_math"] = False
    x, y, xlabel, ylabel = _layout(ig)
    levels = int(y.max()) + 1 if len(y) and ylabel else 1
    fig = Figure(figsize=(min(4 + 0.45 * len(set(x.tolist())), 14), min(2.2 + 0.5 * levels, 10)), dpi=100,
                 layout="constrained")
    ax = fig.add_subplot()
    edges = ig.edges.tocoo()
    if edges.nnz:
        widths = 0.4 + 1.6 * np.log1p(edges.data) / np.log1p(edges.data.max())
        span = max(float(np.ptp(x)), 1.0)
        for a, b, w in zip(edges.row, edges.col, widths, strict=True):
            # an arc, higher for farther nodes, so an edge never hides behind the nodes between its ends
            s = np.linspace(0.0, 1.0, 24)
            lift = 0.35 * abs(x[b] - x[a]) / span * np.sin(np.pi * s)
            ax.plot(x[a] + (x[b] - x[a]) * s, y[a] + (y[b] - y[a]) * s + lift, color="0.6", linewidth=float(w),
                    zorder=1)
    colours = [f"C{c % 10}" for c in ig.component]
    sizes = 40 + 200 * np.sqrt(ig.impressions / max(ig.impressions.max(), 1))
    ax.scatter(x, y, s=sizes, c=colours, edgecolors="black", linewidths=0.5, zorder=2)
    if len(ig.nodes) <= MAX_LABELLED_NODES:
        for node, (px, py) in enumerate(zip(x, y, strict=True)):
            ax.annotate(str(ig.component[node]), (px, py), ha="center", va="center", fontsize=7, zorder=3)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ylabel:
        rest_levels = sorted({tuple(str(v) for j, v in enumerate(n) if ig.factors[j] != "position") for n in ig.nodes})
        ax.set_yticks(range(len(rest_levels)), [", ".join(r) for r in rest_levels])
    else:
        ax.set_yticks([])
    ax.set_title(title or f"Identifiability graph over {', '.join(ig.factors)}: {ig.n_components} component(s) "
                          "(colour and number = component)", fontsize=9)
    with atomic_path(Path(path), FIGURE, key="--figure") as tmp:
        fig.savefig(tmp, format="png")
    return Path(path)
