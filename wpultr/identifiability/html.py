"""The run report's identifiability section: the pre-flight's verdict, components, swaps, merges and the IG figure."""
from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from ..rundir.files import read_json
from ..rundir.layout import IDENTIFIABILITY, IDENTIFIABILITY_FIGURE, METRICS


def _rows(header: list[str], rows: list[list[Any]]) -> str:
    """A table as the report's (report/page.py): in a box that scrolls sideways, a long list of nodes wrapping."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    cell = lambda c: (f"<td class='text'>{html.escape(str(c))}</td>" if isinstance(c, str) and len(c) >= 40  # noqa: E731
                      else f"<td>{html.escape(str(c))}</td>")
    body = "".join("<tr>" + "".join(cell(c) for c in r) + "</tr>" for r in rows)
    return f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def section(run_root: Path) -> str:
    """HTML of the section, or '' when the train stage recorded no check."""
    run_root = Path(run_root)
    path = run_root / IDENTIFIABILITY
    if not path.exists():
        return ""
    report = read_json(path)
    if not report.get("checked"):
        body = f"<p>Not checked: {html.escape(report.get('reason', ''))}.</p>"
    else:
        verdict = ("connected: relevance is identifiable (Theorem 1)" if report["connected"] else
                   f"<b>disconnected</b> ({report['n_components']} components): relevance is not identifiable "
                   f"across them; action: {html.escape(report.get('action', 'none'))}")
        body = (f"<p>Bias factors: {html.escape(', '.join(report['factors']))}; {report['n_nodes']} nodes, "
                f"{report['n_edges']} edges, {report['n_documents']} documents — {verdict}. "
                f"Share of clicks in the largest component: {report['largest_click_share']:.3f}.</p>")
        body += _rows(["component", "size", "nodes", "impressions", "click share"],
                      [[c["component"], c["size"], ", ".join(c["nodes"][:20]) + (" …" if c["size"] > 20 else ""),
                        c["impressions"], c["click_share"]] for c in report["components"]])
        if report.get("interventions"):
            body += "<h3>Cheapest interventions (Eq. 3–6, MST)</h3>" + _rows(
                ["query", "document", "from", "to", "cost"],
                [[s["query_id"], s["doc_id"], s["from_node"], s["to_node"], s["cost"]]
                 for s in report["interventions"]])
        if report.get("merges"):
            body += "<h3>Merges that connect it (Eq. 7–8, MST)</h3>" + _rows(
                ["merge", "with", "cost"], [[m["a"], m["b"], m["cost"]] for m in report["merges"]])
        figure = run_root / IDENTIFIABILITY_FIGURE
        if figure.exists():
            data = base64.b64encode(figure.read_bytes()).decode()
            body += f"<p><img alt='identifiability graph' src='data:image/png;base64,{data}'></p>"
    metrics_path = run_root / METRICS
    truth = read_json(metrics_path).get("truth") if metrics_path.exists() else None
    if truth:
        body += _rows(["against the simulator's truth", "value"],
                      [["MCC", f"{truth['MCC']:.4f}"], ["click MSE", f"{truth['click_MSE']:.6f}"]])
    return f"<section><h2>Identifiability</h2>{body}</section>"
