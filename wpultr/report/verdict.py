"""A run's verdict: what it found and whether to ship (issue 44), read from the run directory alone.

The biases found (each page feature → click edge of the shipped epoch's graph with its within-document effect and
interval), what was corrected and what could not be, identifiability in one sentence with the action it implies,
the shipped ranker's test metrics, its click model against the per-position CTR baseline on held-out sessions and,
given a baseline run, paired t-tests against it over the test queries both scored. Warnings in plain words when the
click model loses to CTR, the ranker to its baseline, or the warm-up to the method's own epochs. Printed at the end
of `wpultr run` and by `wpultr verdict`, and the first section of the report."""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..causal.graph import GraphFileError, deciding_p, graph_epochs, load_epoch_graph
from ..rundir import layout as L
from ..rundir.epochs import is_graph_epoch, shipped, shipped_graph_epoch, shipped_line
from ..rundir.files import read_json
from ..settings.methods import learns_graph
from ..tables import fixed, pvalue, table
from .page import _table

HEADLINE = ("DCG@10", "nDCG@10", "ERR@10")
PAIRED = ("DCG@5", "DCG@10", "nDCG@10", "ERR@10")
ALPHA = 0.05


@dataclass
class Verdict:
    """The verdict's parts: `lines` (sentences), `tables` ((title, header, rows)), `warnings`; `data` for --json."""
    lines: list[str] = field(default_factory=list)
    tables: list[tuple] = field(default_factory=list)   # (title, header, rows[, left-aligned columns])
    warnings: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        out = ["Verdict", "-------", *self.lines]
        for title, header, rows, *left in self.tables:
            out += ["", title, table(header, rows, left[0] if left else 1, indent="  ")]
        if self.warnings:
            out += [""] + [f"WARNING: {w}" for w in self.warnings]
        else:
            out += ["", "no warnings: nothing here argues against shipping"]
        return "\n".join(out)

    def html(self) -> str:
        parts = ["".join(f"<p>{html.escape(s)}</p>" for s in self.lines)]
        parts += [f"<h3>{html.escape(t[0])}</h3>{_table(t[2], t[1])}" for t in self.tables]
        if self.warnings:
            parts.append("<ul class='warnings'>" + "".join(f"<li><strong>Warning:</strong> {html.escape(w)}</li>"
                                                           for w in self.warnings) + "</ul>")
        else:
            parts.append("<p class='no-warnings'>No warnings: nothing here argues against shipping.</p>")
        return "<section class='verdict'><h2>Verdict</h2>" + "".join(parts) + "</section>"

    def to_dict(self) -> dict[str, Any]:
        return {**self.data, "lines": self.lines, "warnings": self.warnings}


def _json(root: Path, rel: str) -> Any:
    path = root / rel
    return read_json(path) if path.exists() else None


def verdict(root: str | Path, baseline: str | None = None) -> Verdict:
    """The verdict of the finished run at `root`; `baseline`: a run directory to test the ranker against."""
    root = Path(root)
    v = Verdict()
    bias = _json(root, L.BIAS) or {}
    method = bias.get("method") or (_json(root, L.HISTORY) or {}).get("method")
    record = shipped(root)
    v.lines.append(shipped_line(record, method, notes=False))
    v.data.update(method=method, shipped=record)
    if record and record.get("warmup_better") is not None:
        v.warnings.append(f"the warm-up ranker (naive click loss) scored {record['warmup_better']:.4f} validation "
                          f"{record['metric']}, better than every {method} epoch ({record['value']:.4f} shipped): "
                          "on these logs the debiasing has not paid for its variance")
    _biases(root, bias, record, v)
    _identifiability(root, v)
    metrics = _json(root, L.METRICS) or {}
    _test_metrics(metrics, v)
    _click_models(metrics, method, v)
    if baseline is not None:
        _against_baseline(root, baseline, v)
    return v


def _biases(root: Path, bias: dict[str, Any], record: dict[str, Any] | None, v: Verdict) -> None:
    """The shipped epoch's click evidence: each page feature's decision and within-document effect."""
    epochs = graph_epochs(root)
    if not epochs:
        return
    k = shipped_graph_epoch(root)
    try:
        k, graph = load_epoch_graph(root, k if k in epochs else None)
    except (GraphFileError, OSError, ValueError):
        return
    rows, found = [], []
    for e in graph.meta.get("click_evidence") or []:
        if e.get("by_prior") or e["node"] == "relevance_score":
            continue
        w = e.get("within_document") or {}
        effect = "; ".join(f"{lv['level']} {lv['ratio']:.2f} [{lv['ci95'][0]:.2f}, {lv['ci95'][1]:.2f}]"
                           for lv in w.get("levels", [])) or "-"
        verdict_ = e.get("verdict") or ("edge" if e.get("in_graph") else "no edge")
        rows.append([e["node"], verdict_, effect, pvalue(deciding_p(e))])     # p of the test that decided the edge
        if verdict_ == "edge":
            found.append(e["node"])
    history = [e for e in (_json(root, L.HISTORY) or {}).get("epochs", []) if is_graph_epoch(e)]
    entry = next((e for e in history if e.get("bal_epoch") == k), None)
    corrected = list(((entry or {}).get("biases") or {}).get("page_feature_biases") or [])
    set_aside = list((bias.get("separability") or {}).get("set_aside") or [])
    v.data.update(graph_epoch=k, biases_found=found, corrected=corrected, not_corrected=set_aside)
    if rows:
        v.tables.append((f"page feature -> click in epoch {k}'s graph (within-document click-rate ratio, 95% "
                         "interval)", ["page feature", "decision", "effect", "p (decided)"], rows, 2))
    if learns_graph(bias.get("method")):
        text = f"corrected: {', '.join(corrected) or 'nothing (no page-feature bias found)'}"
        if set_aside:
            text += (f"; not corrected: {', '.join(set_aside)} (fixed for the same document, so its effect on clicks "
                     "cannot be told from relevance)")
        v.lines.append(text)
    elif found:
        v.lines.append(f"page-feature biases found: {', '.join(found)} (this method corrects "
                       f"{'position only' if bias.get('propensities') else 'none of them'})")


def _identifiability(root: Path, v: Verdict) -> None:
    record = _json(root, L.IDENTIFIABILITY)
    if not record or not record.get("checked"):
        return
    factors = ", ".join(record.get("factors") or [])
    if record.get("connected"):
        v.lines.append(f"identifiable: the bias factors ({factors}) are linked by documents shown at several of "
                       "their values, so relevance can be told from them; nothing to do")
        return
    share = record.get("largest_click_share")
    v.lines.append(f"not identifiable: the bias factors ({factors}) fall into {record.get('n_components')} "
                   "groups no document links"
                   + (f" (the largest holds {share:.0%} of clicks)" if isinstance(share, float) else "")
                   + "; relevance is compared fairly only within a group. Action: set identifiability.on_disconnected"
                     " to merge or intervene, or drop a factor from data.page_features, and run again")
    v.data["identifiable"] = False


def _test_metrics(metrics: dict[str, Any], v: Verdict) -> None:
    groups = [g for g in ("all", "high", "tail") if isinstance(metrics.get(g), dict)]
    if not groups:
        return
    names = [m for m in HEADLINE if m in metrics[groups[0]]]
    rows = [[f"{g} ({metrics[g].get('n_queries')} queries)"] + [fixed(metrics[g].get(m)) for m in names]
            for g in groups]
    v.tables.append(("shipped ranker on the test queries", ["queries", *names], rows))
    v.data["test"] = {g: {m: metrics[g].get(m) for m in names} for g in groups}


def _click_models(metrics: dict[str, Any], method: str | None, v: Verdict) -> None:
    clicks = metrics.get("clicks")
    if not clicks:
        v.lines.append("no held-out sessions (evaluation.heldout_sessions: 0): the click model is not checked "
                       "against the per-position CTR baseline")
        return
    models = clicks["models"]
    ctr = models.get("ctr")
    own = {name: m for name, m in models.items() if name not in ("ctr", "truth")}
    rows = [[name, fixed(m["log_likelihood"]), fixed(m["perplexity"]["overall"])] for name, m in models.items()]
    v.tables.append((f"click models on {clicks['sessions']} held-out sessions (perplexity: lower is better)",
                     ["model", "log-likelihood", "perplexity"], rows))
    if ctr is None:
        return
    for name, m in own.items():
        mine, base = m["perplexity"]["overall"], ctr["perplexity"]["overall"]
        v.data.setdefault("click_model_vs_ctr", {})[name] = {"perplexity": mine, "ctr": base}
        if mine > base:
            v.warnings.append(f"the {name} click model predicts held-out clicks worse than the per-position CTR "
                              f"baseline (perplexity {mine:.4f} vs {base:.4f}): the biases it learned do not "
                              "generalise; trust its examination and weights less")


def _against_baseline(root: Path, baseline: str, v: Verdict) -> None:
    """Paired t-tests over the test queries both runs scored (`report.compare`), one row per metric."""
    from .compare import compare_runs  # lazy: +0.9 s (pandas, pyarrow)
    comparison = compare_runs([baseline, str(root)])
    label, base = comparison.labels[1], comparison.labels[0]
    rows, tests = [], {}
    for metric in [m for m in PAIRED if m in comparison.metrics]:
        p, diff, n = comparison.test(label, metric)
        significant = p == p and p < ALPHA
        rows.append([metric, fixed(comparison.mean(base, metric)), fixed(comparison.mean(label, metric)),
                     f"{diff:+.4f}", pvalue(p), "*" if significant else ""])
        tests[metric] = {"baseline": comparison.mean(base, metric), "run": comparison.mean(label, metric),
                         "difference": diff, "p": p, "queries": n}
        if significant and diff < 0:
            v.warnings.append(f"the ranker is significantly worse than the baseline {base} on {metric} "
                              f"({diff:+.4f}, paired t-test p {pvalue(p)} over {n} queries): ship the baseline")
    v.tables.append((f"against the baseline {base} on {comparison.n_queries} shared test queries (paired t-test; "
                     f"* p < {ALPHA})", ["metric", base, label, "Δ", "p", ""], rows))
    if tests and not any(t["p"] == t["p"] and t["p"] < ALPHA and t["difference"] > 0 for t in tests.values()):
        v.lines.append(f"against {base}: no significant gain on any of {', '.join(tests)}")
    v.data["baseline"] = {"run": baseline, "tests": tests}

