"""The run's HTML report: one self-contained page with what was ingested, how training went and the metrics."""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..causal.graph import WITHIN_DOCUMENT_HEADER, graph_epochs, load_epoch_graph, within_document_rows
from ..identifiability.html import section as identifiability_section
from ..rundir import layout as L
from ..rundir.epochs import epoch_label, history_entries, shipped_graph_epoch
from ..rundir.files import RunDir, read_json, write_text
from ..settings.methods import learns_graph
from .figures import run_figures
from .page import PAGE_STYLE, _cell, _table, page, png_img  # noqa: F401 - the page shell, as every page imports it
from .verdict import verdict

if TYPE_CHECKING:
    from .figures import Figure


def metrics_table(metrics: dict[str, Any]) -> str:
    """Rows = the metrics, columns = the query groups (all / high / tail, with their query counts): narrow at any
    number of metrics, as `wpultr evaluate` prints it."""
    groups = [g for g in ("all", "high", "tail") if isinstance(metrics.get(g), dict)]
    if not groups:
        return "<p>No metrics yet.</p>"
    names = [k for k in metrics[groups[0]] if k != "n_queries"]
    rows = [[name] + [metrics[g].get(name, "") for g in groups] for name in names]
    return _table(rows, ["metric"] + [f"{g} ({metrics[g].get('n_queries', '?')} queries)" for g in groups])


def history_table(epochs: list[dict[str, Any]], valid_metrics: tuple[str, ...] = ("DCG@10", "ERR@10")):
    """One row per epoch: its phase, seconds, the training statistics and the validation metrics."""
    train_keys = list(dict.fromkeys(k for e in epochs for k, v in (e.get("train") or {}).items()
                                    if not isinstance(v, (dict, list))))     # tables (examination) are figures
    header = ["epoch", "phase", "seconds"] + train_keys + [f"valid {m}" for m in valid_metrics]
    rows = [[epoch_label(e), e.get("phase", "train"), e.get("seconds", "")]
            + [(e.get("train") or {}).get(k, "") for k in train_keys]
            + [(e.get("valid") or {}).get(m, "") for m in valid_metrics] for e in epochs]
    return header, rows


def _section(title: str, body: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>{body}</section>"


def _optional_json(run: RunDir, rel: str) -> Any:
    path = run.path(rel)
    return read_json(path) if path.exists() else None


def click_edges_section(root: Path) -> str:
    """How sure the shipped epoch's graph (the latest when it has none) is of each page feature → click edge
    (within-document effects); '' when no graph or no within-document evidence."""
    epochs = graph_epochs(root)
    if not epochs:
        return ""
    chosen = shipped_graph_epoch(root)
    k, graph = load_epoch_graph(root, chosen if chosen in epochs else None)
    rows = within_document_rows(graph.meta)
    if not rows:
        return ""
    return _section(f"Page feature → click edges (epoch {k}): how sure the graph is",
                    _table(rows, WITHIN_DOCUMENT_HEADER))


def figure_html(figure: Figure) -> str:
    """A drawn figure as `<figure data-figure=key>` (inline SVG or an embedded PNG, then its note); one left out
    as a one-line `<p class='omitted' data-figure=key>` saying why."""
    key, title = html.escape(figure.key), html.escape(figure.title)
    if not figure.drawn:
        return f"<p class='omitted' data-figure='{key}'>{title}: left out — {html.escape(figure.note)}.</p>"
    picture = figure.svg or png_img(figure.png, figure.title)
    note = f"<p class='figure-note'>{html.escape(figure.note)}</p>" if figure.note else ""
    return f"<figure data-figure='{key}'><figcaption>{title}</figcaption>{picture}{note}</figure>"


def figures_section(root: Path) -> str:
    """The run's pictures (`report.figures`): graph, examination, weights, training curves."""
    return _section("Figures", "".join(figure_html(f) for f in run_figures(root)))


def click_metrics_section(metrics: dict[str, Any] | None) -> str:
    """Label-free: each click model's log-likelihood and perplexity (overall, by position) on held-out sessions
    (metrics.json "clicks"); '' when the run held none out."""
    clicks = (metrics or {}).get("clicks")
    if not clicks:
        return ""
    models = clicks["models"]
    positions = list(dict.fromkeys(k for m in models.values() for k in m["perplexity"]["by_position"]))
    rows = [[name, m["log_likelihood"], m["perplexity"]["overall"]]
            + [m["perplexity"]["by_position"].get(k, "") for k in positions] for name, m in models.items()]
    note = (f"<p>{clicks['sessions']} held-out sessions, {clicks['rows']} shown results; perplexity: lower is "
            "better, 1 is perfect, 2 a coin flip.</p>")
    return _section("Click metrics on held-out sessions (no labels)",
                    note + _table(rows, ["model", "log-likelihood", "perplexity"] + [f"@{k}" for k in positions]))


def render_report(run: RunDir, baseline: str | None = None) -> str:
    """The page: the verdict first (with `baseline`, paired tests against that run), then metrics, figures, input,
    training, evidence, identifiability, stages in the order they ran, the method's config and versions."""
    parts = [f"<h1>wpultr run <code>{html.escape(run.root.name)}</code></h1>"]
    metrics = _optional_json(run, L.METRICS)
    parts.append(verdict(run.root, baseline).html())
    parts.append(_section("Metrics on held-out annotated queries", metrics_table(metrics or {})))
    parts.append(click_metrics_section(metrics))
    parts.append(figures_section(run.root))
    ingest = _optional_json(run, L.INGEST_SUMMARY)
    if ingest:
        rows = [[k, v] for k, v in ingest.items() if k not in ("columns", "reasons", "files")]
        body = _table(rows, ["ingest", "value"])
        reasons = ingest.get("reasons") or {}
        if reasons:
            body += "<h3>Quarantined lines by reason</h3>" + _table(sorted(reasons.items()), ["reason", "lines"])
        parts.append(_section("Input", body))
    history = history_entries(run.root)
    if history:
        header, rows = history_table(history)
        parts.append(_section("Training", _table(rows, header)))
    parts.append(click_edges_section(run.root))
    parts.append(identifiability_section(run.root))   # '' when no pre-flight ran
    stage_rows = []
    for name in L.STAGE_NAMES:                         # in the order they ran
        rec = run.path(L.STAGES_DIR) / f"{name}.json"
        if rec.exists():
            record = read_json(rec)
            stage_rows.append([record["stage"], record["seconds"], record["finished_at"]])
    parts.append(_section("Stages", _table(stage_rows, ["stage", "seconds", "finished"])))
    config = run.path(L.CONFIG_FILE)
    if config.exists():
        parts.append(_section("Config (as resolved)", config_html(config.read_text())))
    versions = _optional_json(run, L.VERSIONS_FILE)
    if versions:
        parts.append(_section("Versions", f"<pre>{html.escape(json.dumps(versions, indent=2))}</pre>"))
    return page(f"wpultr {run.root.name}", "".join(parts))


# the sections every run reads; a method's own section is added by name (train.method), discovery for graph learners
_RUN_SECTIONS = ("name", "seed", "run_dir", "data", "cluster", "ranker", "train", "evaluation", "identifiability")


def config_html(text: str) -> str:
    """The resolved config: the sections this run reads, then the other methods' sections folded away (they hold
    defaults this run never read)."""
    try:
        values = yaml.safe_load(text)
    except yaml.YAMLError:
        values = None
    if not isinstance(values, dict):
        return f"<pre>{html.escape(text)}</pre>"
    method = str((values.get("train") or {}).get("method", ""))
    used = set(_RUN_SECTIONS) | {method} | ({"discovery"} if learns_graph(method) or (values.get("evaluation") or {})
                                              .get("discover_graph", True) else set())
    mine = {k: v for k, v in values.items() if k in used}
    others = {k: v for k, v in values.items() if k not in used}
    dump = lambda d: html.escape(yaml.safe_dump(d, sort_keys=False, allow_unicode=True))  # noqa: E731
    body = f"<pre>{dump(mine)}</pre>"
    if others:
        body += (f"<details><summary>Other methods' sections ({', '.join(map(html.escape, others))}): defaults this "
                 f"run did not read</summary><pre>{dump(others)}</pre></details>")
    return body


def write_report(run: RunDir, baseline: str | None = None) -> Path:
    path = run.path(L.REPORT)
    write_text(path, render_report(run, baseline))
    return path
