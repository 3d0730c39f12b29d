"""The paper's figures from an experiment's run directories, drawn with matplotlib's object API (no pyplot).

Fig. 4 — average new position of the documents at each original top-k position after re-ranking.
  "Original position" (`tables.fig4_original`):
  * `logging` (default): where the logging policy showed the document. For each test query, its annotated
    documents are ordered by their mean position over the logged sessions of that query (read from the
    run's `data/sessions` table: query_id, doc_id, position), documents never shown coming last; queries
    with no logged session are left out. This is the "original ranker" of the logs, the same for every
    method of a seed.
  * `baseline`: the paper's reading (BAL §4.4): the order the baseline (Naive) ranker gives.
  The new position of a document is its 1-based rank among all the query's annotated documents under a
  method's test scores (`eval/scores.parquet`); ties keep the original order. The upper bound re-ranks by
  the true labels, ties again in the original order. Per seed the new positions are averaged over the
  test queries; the curve is the mean over seeds and the band ± the std over seeds.
Fig. 5 — DCG@k and ERR@k bars (mean ± std over seeds) of Naive, BAL, PB-BAL and FB-BAL (or whichever
  labels `tables.fig5` names).
Fig. 3 — the click-model graph BAL discovered at each epoch (`epoch_<k>/graph.json`), all panels drawn
  on one fixed node layout so edges that appear and vanish are easy to follow, with the simulator's true
  graph (`data/truth/truth.json`) as the last panel when the logs were simulated. Drawn with matplotlib
  only, so it works without Graphviz.
"""
from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from matplotlib.patches import FancyArrowPatch

from ..io.parquet import read_table
from ..report.plots import colors as _colors
from ..report.plots import new_figure as _figure
from ..rundir.files import atomic_path
from ..rundir.layout import EPOCH_PREFIX, GRAPH_FILE, SESSIONS_DIR, TEST_SCORES, TRUTH_DIR, TRUTH_JSON
from ..schema import DOC_ID, LABEL, POSITION, QUERY_ID
from .paper_tables import SettingResults, Table
from .spec import EXPERIMENT_OUTPUT

log = logging.getLogger(__name__)

TRUE_LABELS = "True labels"
_DOC_KEY = "_doc"


def save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, EXPERIMENT_OUTPUT, key="out_dir") as tmp:
        fig.savefig(tmp, format="png")
    return path


# ---------------------------------------------------------------------------------------------
# Fig. 4
# ---------------------------------------------------------------------------------------------
def _scores(run_dir: Path) -> pd.DataFrame:
    scores = pd.read_parquet(run_dir / TEST_SCORES)
    if DOC_ID in scores.columns:
        scores[_DOC_KEY] = scores[DOC_ID].astype(str)
    else:  # every run of a seed scores the same annotation table in the same row order
        scores[_DOC_KEY] = scores.groupby(QUERY_ID).cumcount().astype(str)
    return scores


def logging_order(run_dir: Path) -> pd.DataFrame | None:
    """Mean logged position of each (query, doc) from a run's sessions table; None without doc ids."""
    sessions_dir = run_dir / SESSIONS_DIR
    try:
        sessions = read_table(sessions_dir, columns=[QUERY_ID, DOC_ID, POSITION])
    except (OSError, pa.ArrowInvalid) as error:   # no sessions table, or no doc_id column (Baidu layout)
        log.info("Fig. 4: no logged order from %s (%s: %s)", sessions_dir, type(error).__name__,
                 str(error).splitlines()[0])
        return None
    sessions[_DOC_KEY] = sessions[DOC_ID].astype(str)
    return (sessions.groupby([QUERY_ID, _DOC_KEY], sort=False)[POSITION].mean()
            .rename("logged_position").reset_index())


def _original_ranks(base: pd.DataFrame, mode: str, logged: pd.DataFrame | None,
                    baseline_scores: pd.DataFrame | None) -> pd.DataFrame:
    """query_id, _doc, label and `orig` (1-based original position; NaN if never shown) for each document."""
    frame = base[[QUERY_ID, _DOC_KEY, LABEL]].copy()
    if mode == "logging":
        frame = frame.merge(logged, on=[QUERY_ID, _DOC_KEY], how="left")
        shown = frame.groupby(QUERY_ID)["logged_position"].transform("count")
        frame = frame[shown > 0]
        frame = frame.sort_values([QUERY_ID, "logged_position", _DOC_KEY], na_position="last", kind="stable")
        frame["orig"] = frame.groupby(QUERY_ID).cumcount() + 1.0
        frame.loc[frame["logged_position"].isna(), "orig"] = np.nan
    else:
        frame = frame.merge(baseline_scores[[QUERY_ID, _DOC_KEY, "score"]], on=[QUERY_ID, _DOC_KEY])
        frame = frame.sort_values([QUERY_ID, "score", _DOC_KEY], ascending=[True, False, True], kind="stable")
        frame["orig"] = frame.groupby(QUERY_ID).cumcount() + 1.0
    frame["_order"] = frame.groupby(QUERY_ID).cumcount()      # full original order, for tie-breaking
    return frame.drop(columns=[c for c in ("logged_position", "score") if c in frame.columns])


def _new_position_curve(original: pd.DataFrame, key: pd.Series, positions: int) -> pd.Series:
    """Mean (over queries) new rank of the documents at original positions 1..positions; key: higher first."""
    frame = original.assign(_key=key.to_numpy())
    frame = frame.sort_values([QUERY_ID, "_key", "_order"], ascending=[True, False, True], kind="stable")
    frame["new"] = frame.groupby(QUERY_ID).cumcount() + 1
    top = frame[frame["orig"] <= positions]
    return top.groupby("orig")["new"].mean().reindex(np.arange(1, positions + 1, dtype=float))


def fig4_data(results: SettingResults, labels: Sequence[str], baseline: str, mode: str = "logging",
              positions: int = 10) -> tuple[pd.DataFrame, str]:
    """Long table (label, seed, original_position, new_position, n_queries) and a note on what was used."""
    rows: list[dict[str, Any]] = []
    notes = []
    all_seeds = sorted({s for (_, s) in results.runs})
    used_mode = mode
    for seed in all_seeds:
        present = [lab for lab in labels if (lab, seed) in results.runs]
        if not present:
            continue
        seed_mode = mode
        logged = None
        if mode == "logging":
            source = baseline if (baseline, seed) in results.runs else present[0]
            logged = logging_order(results.runs[(source, seed)])
            if logged is None:
                seed_mode = "baseline"
                notes.append(f"seed {seed}: sessions carry no doc_id; original order = {baseline}'s ranking")
        baseline_scores = None
        if seed_mode == "baseline":
            if (baseline, seed) not in results.runs:
                notes.append(f"seed {seed}: no finished {baseline} run, left out")
                continue
            baseline_scores = _scores(results.runs[(baseline, seed)])
            used_mode = "baseline"
        scores = {lab: _scores(results.runs[(lab, seed)]) for lab in present}
        original = _original_ranks(scores[present[0]], seed_mode, logged, baseline_scores)
        n_queries = int(original[QUERY_ID].nunique())
        curves = {TRUE_LABELS: _new_position_curve(original, original[LABEL].astype(float), positions)}
        for label in present:
            s = original[[QUERY_ID, _DOC_KEY]].merge(scores[label][[QUERY_ID, _DOC_KEY, "score"]],
                                                     on=[QUERY_ID, _DOC_KEY], how="left")
            curves[label] = _new_position_curve(original, s["score"].fillna(-np.inf), positions)
        for label, curve in curves.items():
            for pos, value in curve.items():
                rows.append({"label": label, "seed": seed, "original_position": int(pos),
                             "new_position": float(value), "n_queries": n_queries})
    what = ("original position = mean position at which the logging policy showed the document in the logged "
            "sessions (test queries with at least one session)" if used_mode == "logging" else
            f"original position = rank given by the {baseline} ranker")
    return pd.DataFrame(rows, columns=["label", "seed", "original_position", "new_position", "n_queries"]), \
        "; ".join([what] + notes)


def summarize_curves(data: pd.DataFrame) -> pd.DataFrame:
    """Mean and std over seeds of each label's new position at each original position."""
    if data.empty:
        return pd.DataFrame(columns=["label", "original_position", "mean", "std", "seeds"])
    grouped = data.groupby(["label", "original_position"], sort=False)["new_position"]
    out = grouped.agg(mean="mean", std=lambda v: float(np.std(v, ddof=1)) if v.notna().sum() > 1 else 0.0,
                      seeds="count").reset_index()
    return out


def plot_fig4(data: pd.DataFrame, labels: Sequence[str], path: Path, title: str = "") -> Path:
    summary = summarize_curves(data)
    fig = _figure(7.5, 5)
    ax = fig.add_subplot()
    order = [lab for lab in labels if lab in set(summary["label"])] + [TRUE_LABELS]
    colors = _colors(len(order))
    for label, color in zip(order, colors, strict=True):
        part = summary[summary["label"] == label].sort_values("original_position")
        if part.empty:
            continue
        x, y, sd = part["original_position"], part["mean"], part["std"].fillna(0.0)
        style = dict(color="black", linestyle="--", linewidth=2.2) if label == TRUE_LABELS else \
            dict(color=color, linewidth=1.6, marker="o", markersize=3)
        ax.plot(x, y, label=label + (" (upper bound)" if label == TRUE_LABELS else ""), **style)
        ax.fill_between(x, y - sd, y + sd, color=style["color"], alpha=0.12, linewidth=0)
    if not summary.empty:
        positions = int(summary["original_position"].max())
        ax.plot([1, positions], [1, positions], color="grey", linewidth=0.8, linestyle=":", label="unchanged")
        ax.set_xticks(range(1, positions + 1))
    ax.set_xlabel("original position")
    ax.set_ylabel("average position after re-ranking")
    ax.set_title(title or "Fig. 4: re-ranked position of the original top documents")
    ax.legend(fontsize=8, ncols=2)
    ax.grid(alpha=0.3)
    return save(fig, path)


# ---------------------------------------------------------------------------------------------
# Fig. 5
# ---------------------------------------------------------------------------------------------
def plot_fig5(table: Table, path: Path, title: str = "") -> Path:
    """Grouped bars: one group per metric, one bar per label, error bars = std over seeds."""
    metric_sets = [[c.name for c in table.columns if c.name.startswith(p)] for p in ("DCG@", "ERR@")]
    metric_sets = [m for m in metric_sets if m]
    fig = _figure(5.0 * len(metric_sets) + 1, 4.5)
    axes = fig.subplots(1, len(metric_sets), squeeze=False)[0]
    colors = _colors(len(table.rows))
    width = 0.8 / max(1, len(table.rows))
    for ax, metrics in zip(axes, metric_sets, strict=True):
        x = np.arange(len(metrics))
        for i, (label, color) in enumerate(zip(table.rows, colors, strict=True)):
            means = [table.mean[(label, m)] for m in metrics]
            stds = [0.0 if math.isnan(table.std[(label, m)]) else table.std[(label, m)] for m in metrics]
            ax.bar(x + (i - (len(table.rows) - 1) / 2) * width, means, width, yerr=stds, capsize=2,
                   color=color, label=label)
        ax.set_xticks(x, metrics)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title or "Fig. 5: Naive, BAL and BAL without the click-model design")
    return save(fig, path)


# ---------------------------------------------------------------------------------------------
# A metric against the settings (tables.sweep; LBD Fig. 3)
# ---------------------------------------------------------------------------------------------
def plot_sweep(table: Table, path: Path, metric: str, x_label: str, title: str = "") -> Path:
    """One line per label over the settings' x values (table columns are `tables.SettingColumn`s), with a
    band of ± the std over seeds."""
    fig = _figure(6.5, 4.5)
    ax = fig.subplots()
    xs = np.array([c.x for c in table.columns], dtype=float)
    for label, color in zip(table.rows, _colors(len(table.rows)), strict=True):
        mean = np.array([table.mean[(label, c.name)] for c in table.columns])
        std = np.nan_to_num(np.array([table.std[(label, c.name)] for c in table.columns]))
        ax.plot(xs, mean, marker="o", color=color, label=label)
        ax.fill_between(xs, mean - std, mean + std, color=color, alpha=0.15)
    ax.set_xlabel(x_label)
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(title or f"{metric} against {x_label}")
    return save(fig, path)


# ---------------------------------------------------------------------------------------------
# Fig. 3
# ---------------------------------------------------------------------------------------------


def epoch_graphs(run_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """(title, graph JSON) for each epoch_<k>/graph.json of a run, ascending k."""
    found = []
    for path in run_dir.glob(f"{EPOCH_PREFIX}*/{GRAPH_FILE}"):
        suffix = path.parent.name[len(EPOCH_PREFIX):]
        if suffix.isdigit():
            found.append((int(suffix), path))
    graphs = []
    for epoch, path in sorted(found):
        try:
            graphs.append((f"epoch {epoch}", json.loads(path.read_text())))
        except (OSError, json.JSONDecodeError):
            continue
    return graphs


def true_graph(run_dir: Path) -> dict[str, Any] | None:
    """The simulator's generating graph, its relevance node renamed as discovered graphs name it."""
    path = run_dir / TRUTH_DIR / TRUTH_JSON
    if not path.exists():
        return None
    try:
        graph = json.loads(path.read_text()).get("graph")
    except (OSError, json.JSONDecodeError):
        return None
    if not graph:
        return None
    rename = {graph.get("relevance_node", "relevance"): "relevance_score"}
    return {"nodes": [rename.get(n, n) for n in graph["nodes"]],
            "edges": [{**e, "from": rename.get(e["from"], e["from"]), "to": rename.get(e["to"], e["to"])}
                      for e in graph["edges"]]}


def _layout(nodes: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Relevance on the left, click on the right, the page features on an arc between them."""
    first = [n for n in nodes if n in ("relevance_score", "relevance")]
    last = [n for n in nodes if n == "click"]
    middle = [n for n in nodes if n not in first and n not in last]
    pos = {n: (0.0, 0.0) for n in first}
    pos.update({n: (1.0, 0.0) for n in last})
    for i, node in enumerate(middle):
        angle = math.pi * (i + 1) / (len(middle) + 1)
        pos[node] = (0.5 - 0.42 * math.cos(angle), 0.5 * math.sin(angle) * (1 if i % 2 == 0 else -1))
    return pos


def draw_graph(ax, graph: dict[str, Any], pos: dict[str, tuple[float, float]], title: str) -> None:
    for edge in graph.get("edges", []):
        a, b = edge.get("from"), edge.get("to")
        if a not in pos or b not in pos:
            continue
        kind = edge.get("type", "directed")
        style = {"directed": "-|>", "undirected": "-", "bidirected": "<|-|>"}.get(kind, "-")
        color = {"directed": "#1f4e79", "undirected": "#777777", "bidirected": "#a23b3b"}.get(kind, "#777777")
        ax.add_patch(FancyArrowPatch(pos[a], pos[b], arrowstyle=style, mutation_scale=12, color=color,
                                     linewidth=1.3, linestyle="--" if edge.get("enforced") else "-",
                                     shrinkA=16, shrinkB=16, connectionstyle="arc3,rad=0.08"))
    for node, (x, y) in pos.items():
        ax.text(x, y, node.replace("_", "_\n") if len(node) > 12 else node, ha="center", va="center", fontsize=7,
                bbox=dict(boxstyle="round,pad=0.3", facecolor="#fff7d6" if node in ("click",) else "#e8f0fb",
                          edgecolor="#555555", linewidth=0.6))
    ax.set_xlim(-0.2, 1.2)
    ax.set_ylim(-0.65, 0.65)
    ax.set_title(title, fontsize=9)
    ax.axis("off")


def plot_fig3(run_dir: Path, path: Path, title: str = "") -> Path | None:
    """One panel per epoch graph (and the true graph); None when the run holds no epoch graph."""
    panels = epoch_graphs(run_dir)
    if not panels:
        return None
    truth = true_graph(run_dir)
    if truth:
        panels.append(("true graph (simulator)", truth))
    nodes: list[str] = []
    for _, graph in panels:
        nodes += [n for n in graph.get("nodes", []) if n not in nodes]
    pos = _layout(nodes)
    cols = min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig = _figure(3.6 * cols, 2.9 * rows + 0.4)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, (name, graph) in zip(axes, panels, strict=False):
        draw_graph(ax, graph, pos, name)
    for ax in axes[len(panels):]:
        ax.axis("off")
    fig.suptitle(title or "Fig. 3: the click-model graph per epoch")
    fig.supxlabel("blue →: directed   grey —: undirected   red ↔: bidirected   dashed: put there by a prior",
                  fontsize=8)
    return save(fig, path)
