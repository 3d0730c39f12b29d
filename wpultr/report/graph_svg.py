"""A learned causal graph as inline SVG, written by hand (no Graphviz, no matplotlib): relevance score on the
left, the page features in a column in the middle, click on the right, on the same layout for every epoch.

Every edge is a `<g class="edge" data-from data-to data-type>` with a `<title>`, so the drawing can be checked
against graph.json (and read by hovering); each page feature → click edge is labelled with its evidence
(graph.json meta `click_evidence`: the verdict and the within-document click-rate ratio with its 95 % interval).
"""
from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from ..causal.graph import DiscoveredGraph, GraphEdge, within_document_rows

RELEVANCE, CLICK = "relevance_score", "click"
WIDTH, ROW, TOP = 660, 62, 34          # px: the drawing's width, a page feature's row, the margin above them
LEFT, MIDDLE, RIGHT = 80, 330, 585     # px: the three columns' centres
COLOURS = {"directed": "#1f4e79", "undirected": "#777777", "bidirected": "#a23b3b"}
LEGEND = ("blue →: directed   grey —: undirected   red ↔: bidirected   dashed: put there by a prior; "
          "label on a page feature → click edge: verdict, within-document click-rate ratio [95% CI]")


def layout(nodes: Sequence[str]) -> tuple[dict[str, tuple[float, float]], float]:
    """Fixed positions (px) and the drawing's height: relevance left and click right at mid height, the other
    nodes down the middle."""
    middle = [n for n in nodes if n not in (RELEVANCE, CLICK)]
    height = TOP * 2 + ROW * max(len(middle), 2)
    pos = {n: (MIDDLE, TOP + ROW * (i + 0.5)) for i, n in enumerate(middle)}
    pos[RELEVANCE], pos[CLICK] = (LEFT, height / 2), (RIGHT, height / 2)
    return pos, height


def half_size(name: str) -> tuple[float, float]:
    """Half the width and height of a node's box, plus a margin: where an edge stops short of it."""
    return box_width(name) / 2 + 3, 16.0


def box_width(name: str) -> float:
    """A node's box width (px): its name at about 7 px a character, with padding."""
    return max(60, 7 * len(name) + 14)


def evidence_label(evidence: dict[str, Any] | None) -> str:
    """What a page feature → click edge rests on, short: the verdict and the within-document ratio [CI] (one
    level), or the p-value and the number of levels (several)."""
    if not evidence:
        return ""
    parts = ["prior" if evidence.get("by_prior") else evidence.get("verdict", "")]
    within = evidence.get("within_document") or {}
    levels = within.get("levels") or []
    if len(levels) == 1:
        lv, unit = levels[0], within.get("unit", "")
        what = f"{lv['level']} vs {unit[len('against '):]}" if unit.startswith("against ") else lv["level"]
        parts.append(f"×{lv['ratio']:.2f} {what} [{lv['ci95'][0]:.2f}, {lv['ci95'][1]:.2f}]")
    elif levels:
        p = within.get("p_value")
        parts.append(f"{len(levels)} levels" + ("" if p is None else f", p {p:.1e}"))
    return " ".join(p for p in parts if p)


def _evidence_details(graph: DiscoveredGraph) -> dict[str, str]:
    """Each candidate click edge's full evidence for its hover title: the decision, and every level's ratio and p
    as `causal.graph.within_document_rows` writes them (the run report's table, `wpultr graph show`)."""
    rows = {r[0]: r for r in within_document_rows(graph.meta)}
    details = {}
    for e in graph.meta.get("click_evidence") or []:
        row = rows.get(e["node"])
        within = f"\nwithin documents: {row[2]} (p {row[3]})" if row else ""
        details[e["node"]] = f"\n{e.get('decision', '')}{within}"
    return details


def _path(a: tuple[float, float], b: tuple[float, float], ends: tuple[str, str], height: float,
          column_half: float) -> str:
    """A straight line between columns, from border to border; an arc left of the middle column between two of its
    nodes, or under it from relevance to click, so no edge runs through a node (`column_half`: its widest box's
    half width)."""
    (x1, y1), (x2, y2) = a, b
    if x1 == x2:
        (h1, _), (h2, _) = half_size(ends[0]), half_size(ends[1])
        bend = x1 - column_half - 50 - 0.3 * abs(y2 - y1)
        return f"M{x1 - h1:.0f},{y1:.0f} Q{bend:.0f},{(y1 + y2) / 2:.0f} {x2 - h2:.0f},{y2:.0f}"
    if {x1, x2} == {LEFT, RIGHT}:                       # lowest point of the arc: 8 px above the bottom
        return f"M{x1:.0f},{y1 + 16:.0f} Q{MIDDLE:.0f},{1.5 * height - 32:.0f} {x2:.0f},{y2 + 16:.0f}"
    (sx, sy), (tx, ty) = _border(a, (x2 - x1, y2 - y1), ends[0]), _border(b, (x1 - x2, y1 - y2), ends[1])
    return f"M{sx:.0f},{sy:.0f} L{tx:.0f},{ty:.0f}"


def _border(centre: tuple[float, float], towards: tuple[float, float], name: str) -> tuple[float, float]:
    """Where the ray from a node's centre in direction `towards` leaves its box."""
    (x, y), (dx, dy), (hx, hy) = centre, towards, half_size(name)
    scale = min(hx / abs(dx) if dx else float("inf"), hy / abs(dy) if dy else float("inf"))
    return x + dx * scale, y + dy * scale


def _edge(edge: GraphEdge, pos: dict[str, tuple[float, float]], height: float, column_half: float, marker: str,
          evidence: dict[str, Any] | None, details: str) -> str:
    colour = COLOURS.get(edge.type, "#777777")
    ends = {"directed": f" marker-end='url(#{marker}-{edge.type})'",
            "bidirected": f" marker-start='url(#{marker}-{edge.type}-start)' marker-end='url(#{marker}-{edge.type})'"
            }.get(edge.type, "")
    dash = " stroke-dasharray='6 4'" if edge.enforced else ""
    stability = "" if edge.stability is None else f", bootstrap stability {edge.stability:.2f}"
    title = f"{edge.source} {edge.arrow()} {edge.target}{stability}" + (" (prior)" if edge.enforced else "")
    label = ""
    into_click = edge.target == CLICK and edge.source != RELEVANCE and edge.type == "directed"
    if into_click and evidence_label(evidence):
        (x1, y1), (x2, y2) = pos[edge.source], pos[edge.target]
        x, y = x1 + 0.5 * (x2 - x1), y1 + 0.5 * (y2 - y1) + 4
        text, width = evidence_label(evidence), 5.8 * len(evidence_label(evidence)) + 8
        label = (f"<rect x='{x - width / 2:.0f}' y='{y - 10:.0f}' width='{width:.0f}' height='14' fill='white' "
                 f"fill-opacity='0.9'/><text x='{x:.0f}' y='{y:.0f}' text-anchor='middle' font-size='10' "
                 f"fill='#333'>{html.escape(text)}</text>")
        title += details
    return (f"<g class='edge' data-from='{html.escape(edge.source)}' data-to='{html.escape(edge.target)}' "
            f"data-type='{html.escape(edge.type)}'><title>{html.escape(title)}</title>"
            f"<path d='{_path(pos[edge.source], pos[edge.target], (edge.source, edge.target), height, column_half)}' "
            f"fill='none' stroke='{colour}' "
            f"stroke-width='1.6'{dash}{ends}/>{label}</g>")


def _node(name: str, kind: str, x: float, y: float) -> str:
    fill = "#fff7d6" if name == CLICK else "#e3efd9" if name == RELEVANCE else "#e8f0fb"
    width = box_width(name)
    return (f"<g class='node' data-node='{html.escape(name)}'><title>{html.escape(f'{name} ({kind})')}</title>"
            f"<rect x='{x - width / 2:.0f}' y='{y - 13:.0f}' width='{width}' height='26' rx='8' fill='{fill}' "
            f"stroke='#555' stroke-width='0.8'/><text x='{x:.0f}' y='{y + 4:.0f}' text-anchor='middle' "
            f"font-size='12'>{html.escape(name)}</text></g>")


def _markers(marker: str) -> str:
    out = []
    for kind in ("directed", "bidirected"):
        for suffix, shape in (("", "M0,0 L10,5 L0,10 z"), ("-start", "M10,0 L0,5 L10,10 z")):
            out.append(f"<marker id='{marker}-{kind}{suffix}' viewBox='0 0 10 10' refX='{10 if not suffix else 0}' "
                       f"refY='5' markerWidth='7' markerHeight='7' orient='auto'><path d='{shape}' "
                       f"fill='{COLOURS[kind]}'/></marker>")
    return "<defs>" + "".join(out) + "</defs>"


def graph_svg(graph: DiscoveredGraph, title: str, marker: str, nodes: Sequence[str] | None = None) -> str:
    """The graph as one `<svg class='wpultr-graph'>` (`marker`: a prefix unique in the page for its arrowheads;
    `nodes`: the layout's nodes, the graph's own by default, so several epochs can share one layout)."""
    pos, height = layout(list(dict.fromkeys([*(nodes or ()), *graph.nodes])))   # every node of the graph drawn
    column_half = max([half_size(n)[0] for n, (x, _) in pos.items() if x == MIDDLE] or [0.0])
    evidence = {e["node"]: e for e in graph.meta.get("click_evidence") or []}
    details = _evidence_details(graph)
    edges = "".join(_edge(e, pos, height, column_half, marker, evidence.get(e.source), details.get(e.source, ""))
                    for e in graph.edges)
    kinds = graph.node_kinds
    node_marks = "".join(_node(n, kinds.get(n, ""), x, y) for n, (x, y) in pos.items())
    return (f"<svg class='wpultr-graph' xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{height:.0f}' "
            f"viewBox='0 0 {WIDTH} {height:.0f}' role='img' aria-label='{html.escape(title)}'>"
            f"<title>{html.escape(title)}</title>{_markers(marker)}"
            f"<text x='{WIDTH / 2:.0f}' y='16' text-anchor='middle' font-size='13' font-weight='bold'>"
            f"{html.escape(title)}</text>{edges}{node_marks}</svg>")


def no_edge_notes(graph: DiscoveredGraph) -> list[str]:
    """One line per candidate page feature → click edge the graph does not hold, with why (its evidence)."""
    held = {e.source for e in graph.edges if e.target == CLICK} | {e.target for e in graph.edges if e.source == CLICK}
    return [f"{e['node']}: {evidence_label(e) or e.get('decision', '')}"
            for e in graph.meta.get("click_evidence") or [] if e["node"] not in held and e["node"] != RELEVANCE]
