"""`wpultr identifiability check RUN_OR_SESSIONS --factors position,media_type [--json]` (mounted by wpultr/cli.py).

Reads a run directory's ingested sessions (`data/sessions`; the run directory may be an fsspec URL, whose
sessions and config are pulled into its reader copy) or a local sessions Parquet file or directory,
builds the identifiability graph over the factor columns and prints its components, their sizes, the
share of clicks in the largest, the cheapest interventions and the merges that would connect it.
"""
from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any

import typer

from ..cli_support import user_errors
from ..rundir.files import check_output
from ..rundir.layout import CONFIG_FILE, SESSIONS_DIR
from ..rundir.ownership import output_path
from ..storage import is_url, readable_run_dir

identifiability_app = typer.Typer(add_completion=False, no_args_is_help=True,
                                  help="Can these logs separate bias factors from relevance? (Identifiability Matters)")


class OnDisconnected(str, Enum):
    report = "report"
    fail = "fail"


def _sessions_and_kinds(path: Path) -> tuple[Any, dict[str, str]]:
    """(sessions frame, declared page-feature kinds) of a run directory or a sessions table."""
    from ..io.parquet import read_table  # lazy: +0.9 s (pandas, pyarrow)
    if (path / SESSIONS_DIR).exists():
        kinds: dict[str, str] = {}
        config = path / CONFIG_FILE
        if config.exists():
            from ..config import read_yaml_mapping  # lazy: +0.9 s (pandas, pyarrow)
            data = read_yaml_mapping(config, "run config").get("data")    # bounded safe loader: one line if hostile
            kinds = dict((data if isinstance(data, dict) else {}).get("page_features") or {})
        return read_table(path / SESSIONS_DIR), kinds
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such run directory or sessions table")
    return read_table(path), {}


def format_report(report: dict[str, Any]) -> str:
    """The check as a readable table."""
    lines = [f"bias factors: {', '.join(report['factors'])}   nodes {report['n_nodes']}   edges {report['n_edges']}   "
             f"documents {report['n_documents']}",
             f"components: {report['n_components']} "
             f"({'connected: identifiable' if report['connected'] else 'DISCONNECTED: not identifiable'})"
             f"   share of clicks in the largest: {report['largest_click_share']:.3f}", "",
             f"{'component':>9}  {'size':>5}  {'impressions':>11}  {'click share':>11}  nodes"]
    for c in report["components"]:
        nodes = "; ".join(c["nodes"][:12]) + (f", … ({c['size'] - 12} more)" if c["size"] > 12 else "")
        lines.append(f"{c['component']:>9}  {c['size']:>5}  {c['impressions']:>11}  {c['click_share']:>11.3f}  {nodes}")
    if report.get("interventions"):
        lines += ["", "cheapest interventions (swap the document under the target; Eq. 3-6, MST):",
                  f"  {'query':<12} {'document':<34} {'from':<20} {'to':<20} cost"]
        lines += [f"  {str(s['query_id']):<12} {str(s['doc_id']):<34} {s['from_node']:<20} {s['to_node']:<20} "
                  f"{s['cost']:.4g}" for s in report["interventions"]]
    if report.get("merges"):
        lines += ["", "merges that connect it (shared observation; Eq. 7-8, MST):"]
        lines += [f"  {m['a']}  <->  {m['b']}   cost {m['cost']:.4g}" for m in report["merges"]]
    return "\n".join(lines)


@identifiability_app.command("check")
@user_errors
def check_command(
        path: str = typer.Argument(..., help="a run directory (reads data/sessions; a path or an fsspec URL) or a "
                                             "sessions Parquet file/dir"),
        factors: str = typer.Option("position", "--factors", "-f", help="bias factor columns, comma-separated"),
        as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
        figure: str | None = typer.Option(None, "--figure", help="also draw the graph to this PNG (a path or a "
                                                                    "file:// URL; an existing file is replaced only if "
                                                                    "this command drew it)"),
        swap_sessions: int = typer.Option(200, "--swap-sessions", min=1,
                                          help="sessions each intervention will be shown in (N of Eq. 3)"),
        on_disconnected: OnDisconnected = typer.Option(OnDisconnected.report, "--on-disconnected",
                                                       help="report (exit 0) or fail (exit 2 naming the components)")):
    """Check the identifiability graph of a click log over the given bias factors."""
    from .preflight import IdentifiabilityError, check, describe_components  # lazy: +1.9 s (pandas, pyarrow, scipy)
    names = [f.strip() for f in factors.split(",") if f.strip()]
    if not names:
        raise typer.BadParameter("--factors: give at least one column, e.g. position,media_type")
    if figure is not None:     # before reading the sessions, so a refused --figure costs nothing
        from .figure import FIGURE  # lazy: +1.9 s (pandas, pyarrow, scipy)
        figure = output_path(figure, "--figure")
        check_output(figure, FIGURE, [] if is_url(path) else [path], "--figure")
    if is_url(path):    # a run at a URL; a local path may be a run or a sessions table (no run marker needed)
        with readable_run_dir(path, "PATH", include=(SESSIONS_DIR, CONFIG_FILE)) as local:
            frame, kinds = _sessions_and_kinds(local)
    else:
        frame, kinds = _sessions_and_kinds(Path(path))
    ig, report = check(frame, names, kinds, swap_sessions=swap_sessions)
    if figure is not None:
        from .figure import plot_graph  # lazy: +1.9 s (pandas, pyarrow, scipy)
        plot_graph(ig, figure)
    typer.echo(json.dumps(report, indent=2, default=str) if as_json else format_report(report))
    if not ig.connected and on_disconnected is OnDisconnected.fail:
        raise IdentifiabilityError(f"{path}: the bias factors ({', '.join(names)}) form {ig.n_components} "
                                   f"disconnected components {describe_components(ig)}")
