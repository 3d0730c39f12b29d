"""Gather an experiment: tables (Markdown + CSV), figures (PNG) and one self-contained HTML report.

Layout under the experiment directory:
```
experiment.yaml  runs.json  runs.csv  report.html  tables.md  claims.md  significance.csv
tables/<setting>/table1.{md,csv}  table2.*  table3.*
figures/<setting>/fig4.png  fig4.csv  fig5.png  fig3_<label>.png
tables/sweep_<group>.{md,csv}  figures/sweep_<group>.png   (tables.sweep: a metric against the settings)
runs/<setting>/<label>/seed_<s>/   (one run directory each)
```
"""
from __future__ import annotations

import html
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from ..errors import RunDirError
from ..report.html import page, png_img
from ..rundir.files import check_output, write_text
from ..rundir.layout import REPORT
from . import figures as F
from .claims import Claim, claims_html, claims_markdown, setting_claims
from .identifiability_tables import identifiability_tables
from .paper_tables import TITLES, SettingResults, Table, build_sweep_table, build_table, clear_cache, table_columns
from .spec import EXPERIMENT_FILE, EXPERIMENT_OUTPUT, RUNS_CSV, RUNS_JSON, Experiment, RunRecord, slug

REPORT_FILE = "report.html"
TABLES_MD = "tables.md"
SIGNIFICANCE_CSV = "significance.csv"
CLAIMS_MD = "claims.md"        # the claims section of tables.md alone (`wpultr experiment` prints it)
# out_dir's own files
TOP_FILES = (EXPERIMENT_FILE, RUNS_JSON, RUNS_CSV, REPORT_FILE, TABLES_MD, SIGNIFICANCE_CSV, CLAIMS_MD)


def check_outputs(exp: Experiment, config: Path) -> None:
    """RunDirError (one line naming the file) before any run starts when out_dir holds a file of the experiment's
    own names that `wpultr experiment` did not write (or the experiment's YAML itself): nothing the user wrote
    there is replaced (rundir.ownership)."""
    if exp.out_dir.exists() and not exp.out_dir.is_dir():
        raise RunDirError(f"out_dir {exp.out_dir}: exists and is not a directory; choose another out_dir")
    for name in TOP_FILES:
        check_output(exp.out_dir / name, EXPERIMENT_OUTPUT, [config], "out_dir")


@dataclass
class SettingOutputs:
    setting: str
    tables: dict[str, Table] = field(default_factory=dict)
    figures: dict[str, Path] = field(default_factory=dict)       # fig4, fig5, fig3:<label>
    notes: dict[str, str] = field(default_factory=dict)          # per figure: what was drawn or why not
    claims: list[Claim] = field(default_factory=list)            # what Table 1 claims, and whether it shows


def _results(exp: Experiment, records: Sequence[RunRecord], setting: str) -> SettingResults:
    return SettingResults({(r.label, r.seed): Path(r.run_dir) for r in records
                           if r.setting == setting and r.succeeded})


def _ks(exp: Experiment) -> list[int]:
    for r in exp.runs:
        if r.config:
            return list(r.config["evaluation"]["ks"])
    return [1, 3, 5, 10]


def gather_setting(exp: Experiment, records: Sequence[RunRecord], setting: str,
                   significance_log: list[dict[str, Any]]) -> SettingOutputs:
    out = SettingOutputs(setting)
    results = _results(exp, records, setting)
    spec = exp.spec
    columns = table_columns(_ks(exp))
    table_dir = exp.out_dir / "tables" / setting
    figure_dir = exp.out_dir / "figures" / setting
    out.claims = setting_claims(exp, setting, results, exp.labels_for("table1"))
    for name in ("table1", "table2", "table3"):
        labels = exp.labels_for(name)
        if name == "table3" and not labels:
            continue
        table = build_table(name, TITLES[name], results, labels, columns[name], exp.baseline,
                            spec.significance.alpha, spec.significance.rule, significance_log)
        table.write(table_dir)
        out.tables[name] = table

    # Fig. 4
    fig4_labels = exp.labels_for("fig4")
    data, what = F.fig4_data(results, fig4_labels, exp.baseline, spec.tables.fig4_original, spec.tables.fig4_positions)
    if data.empty:
        out.notes["fig4"] = "no finished run to draw from"
    else:
        write_text(figure_dir / "fig4.csv", data.to_csv(index=False), EXPERIMENT_OUTPUT, "out_dir")
        out.figures["fig4"] = F.plot_fig4(data, fig4_labels, figure_dir / "fig4.png",
                                          f"Fig. 4 ({setting}): re-ranked position of the original top documents")
        out.notes["fig4"] = what + "; new position = rank among all annotated documents of the query."

    # Fig. 5
    fig5_labels = exp.labels_for("fig5")
    if fig5_labels:
        k_cols = [c for c in columns["table1"]]
        fig5 = build_table("fig5", "Fig. 5", results, fig5_labels, k_cols, None)
        if fig5.rows:
            out.figures["fig5"] = F.plot_fig5(fig5, figure_dir / "fig5.png",
                                              f"Fig. 5 ({setting}): {', '.join(fig5.rows)}")
        missing = f" No finished run for: {', '.join(fig5.missing)}." if fig5.missing else ""
        out.notes["fig5"] = ("bars: mean over seeds, error bars: std over seeds." if fig5.rows
                             else "nothing to draw.") + missing
    else:
        out.notes["fig5"] = "no labels chosen (tables.fig5)."

    # Fig. 3
    fig3_labels = exp.labels_for("fig3")
    drawn, absent = [], []
    for label in fig3_labels:
        path = None
        for seed in results.seeds(label):
            path = F.plot_fig3(results.runs[(label, seed)], figure_dir / f"fig3_{slug(label)}.png",
                               f"Fig. 3 ({setting}): {label}, seed {seed} — click-model graph per epoch")
            if path:
                out.figures[f"fig3:{label}"] = path
                drawn.append(f"{label} (seed {seed})")
                break
        if path is None:
            absent.append(label)
    if not fig3_labels:
        out.notes["fig3"] = "no BAL run in this experiment (no method with train.method: bal), so no graphs to draw."
    else:
        out.notes["fig3"] = (f"graphs of {', '.join(drawn)}." if drawn else "") + (
            f" No finished run with epoch_<k>/graph.json for: {', '.join(absent)}." if absent else "")
    return out


def gather_sweeps(exp: Experiment, records: Sequence[RunRecord]) -> list[tuple[Table, Path | None]]:
    """Each `tables.sweep` group: the metric against the settings' x values, as a table and a line figure
    (tables/sweep_<group>.{md,csv}, figures/sweep_<group>.png)."""
    sweep = exp.spec.tables.sweep
    labels = sweep.labels if sweep.labels is not None else exp.labels
    out = []
    for group, points in sweep.groups.items():
        results = {s: _results(exp, records, s) for s in points}
        table = build_sweep_table(f"sweep_{group}", f"{sweep.metric} against {sweep.x_label} ({group})", results,
                                  labels, sweep.metric, points, sweep.x_label)
        table.write(exp.out_dir / "tables")
        figure = F.plot_sweep(table, exp.out_dir / "figures" / f"sweep_{group}.png", sweep.metric, sweep.x_label,
                              f"{sweep.metric} against {sweep.x_label} ({group})") if table.rows else None
        out.append((table, figure))
    return out


def write_experiment_report(exp: Experiment, records: Sequence[RunRecord]) -> Path:
    """Write every table, figure and `report.html` of the experiment; returns the report's path."""
    clear_cache()
    significance_log: list[dict[str, Any]] = []
    sweeps = gather_sweeps(exp, records) + identifiability_tables(exp, records)   # [] without truth
    outputs = [gather_setting(exp, records, s, significance_log) for s in exp.settings]
    sig = pd.DataFrame(significance_log)
    write_text(exp.out_dir / SIGNIFICANCE_CSV, sig.to_csv(index=False) if len(sig) else "", EXPERIMENT_OUTPUT,
               "out_dir")
    md = [f"# Experiment {exp.name}", ""] + [t.to_markdown() for t, _ in sweeps]
    for out in outputs:
        if len(outputs) > 1:
            md += [f"## Setting {out.setting}", ""]
        md += ([claims_markdown(out.claims)] if out.claims else []) + [t.to_markdown() for t in out.tables.values()]
    write_text(exp.out_dir / TABLES_MD, "\n".join(md), EXPERIMENT_OUTPUT, "out_dir")
    write_text(exp.out_dir / CLAIMS_MD, "\n".join((f"## Setting {out.setting}\n\n" if len(outputs) > 1 else "")
                                                  + claims_markdown(out.claims) for out in outputs if out.claims),
               EXPERIMENT_OUTPUT, "out_dir")
    path = exp.out_dir / REPORT_FILE
    write_text(path, render_html(exp, records, outputs, sweeps), EXPERIMENT_OUTPUT, "out_dir")
    return path


def _img(path: Path) -> str:
    return png_img(path.read_bytes(), path.name)


def _runs_table(exp: Experiment, records: Sequence[RunRecord]) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("setting", "method", "seed", "status", "seconds", "run"))
    rows = []
    for r in records:
        link = Path(os.path.relpath(r.run_dir, exp.out_dir))
        report = link / REPORT
        cell = f"<a href='{html.escape(str(report))}'>{html.escape(str(link))}</a>" if r.succeeded else \
            html.escape(str(link))
        seconds = f"{r.seconds:.1f}" if r.seconds is not None else ""
        rows.append(f"<tr class='{r.status}'><td>{html.escape(r.setting)}</td><td>{html.escape(r.label)}</td>"
                    f"<td>{r.seed}</td><td>{r.status}</td><td>{seconds}</td>"
                    f"<td style='text-align:left'>{cell}</td></tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _failures(records: Sequence[RunRecord]) -> str:
    failed = [r for r in records if not r.succeeded]
    if not failed:
        return "<p>Every run finished.</p>"
    rows = "".join(f"<tr><td>{html.escape(r.setting)}</td><td>{html.escape(r.label)}</td><td>{r.seed}</td>"
                   f"<td>{r.status}</td><td style='text-align:left'><code>{html.escape(r.error or '')}</code></td></tr>"
                   for r in failed)
    return (f"<p>{len(failed)} of {len(records)} runs did not finish; their methods are left out of the tables "
            f"(a failed run keeps <code>failure.txt</code> with the traceback in its directory).</p>"
            f"<table><thead><tr><th>setting</th><th>method</th><th>seed</th><th>status</th><th>error</th></tr>"
            f"</thead><tbody>{rows}</tbody></table>")


def render_html(exp: Experiment, records: Sequence[RunRecord], outputs: Sequence[SettingOutputs],
                sweeps: Sequence[tuple[Table, Path | None]] = ()) -> str:
    ok = sum(r.succeeded for r in records)
    parts = [f"<h1>wpultr experiment <code>{html.escape(exp.name)}</code></h1>",
             f"<p>{len(exp.labels)} methods × {len(exp.spec.seeds)} seeds × {len(exp.settings)} setting(s): "
             f"{ok} of {len(records)} runs finished. Baseline for significance: <b>{html.escape(exp.baseline)}</b> "
             f"(paired t-test over test queries per seed, p &lt; {exp.spec.significance.alpha:g}, "
             f"rule: {exp.spec.significance.rule}).</p>"]
    for table, figure in sweeps:
        parts.append(f"<section><h2>{html.escape(table.title)}</h2>{table.to_html()}"
                     f"{_img(figure) if figure else ''}</section>")
    for out in outputs:
        if len(outputs) > 1:
            parts.append(f"<h2>Setting <code>{html.escape(out.setting)}</code></h2>")
        parts.append(claims_html(out.claims))
        for table in out.tables.values():
            parts.append(f"<section><h3>{html.escape(table.title)}</h3>{table.to_html()}</section>")
        for key, title in (("fig4", "Fig. 4: average position after re-ranking"),
                           ("fig5", "Fig. 5: Naive, BAL and its variants without the click-model design")):
            body = _img(out.figures[key]) if key in out.figures else ""
            note = out.notes.get(key, "")
            parts.append(f"<section><h3>{title}</h3>{body}<p class='legend'>{html.escape(note)}</p></section>")
        graphs = [_img(p) for k, p in out.figures.items() if k.startswith("fig3:")]
        parts.append(f"<section><h3>Fig. 3: the causal graph per epoch</h3>{''.join(graphs)}"
                     f"<p class='legend'>{html.escape(out.notes.get('fig3', ''))}</p></section>")
    parts.append(f"<section><h2>Failed runs</h2>{_failures(records)}</section>")
    parts.append(f"<section><h2>Runs</h2>{_runs_table(exp, records)}</section>")
    config = exp.out_dir / EXPERIMENT_FILE
    text = config.read_text() if config.exists() else yaml.safe_dump({"name": exp.name})
    parts.append(f"<section><h2>Experiment config (as resolved)</h2><pre>{html.escape(text)}</pre></section>")
    return page(f"wpultr experiment {exp.name}", "".join(parts),
                style="body{max-width:80em}.legend{color:#555;font-size:.9em}"
                      "tr.failed td,tr.invalid td{background:#fdecea}")
