"""The discovered click-model graph as an artifact: edge marks, provenance, JSON, diff, text and DOT views.

An epoch's graph lives in `<run>/epoch_<k>/graph.json`: nodes named after table columns plus
`relevance_score` and `click`, each edge with its marks (directed, undirected, bidirected), whether a
prior put it there rather than PC, and its stability over bootstrap resamples; beside them the CI
test, alpha, sample size and seed used, the separating sets PC found and every pair's bootstrap
frequencies (so edges that come and go between samples are visible); in `meta`, the evidence of every
candidate edge into click (`click_evidence`: p-values, effect size, stability, rows) and the
near-deterministic page-feature pairs with what the tests did about them (`near_deterministic`).
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from causallearn.graph.Endpoint import Endpoint

from ..errors import WpultrError
from ..rundir.files import write_json
from ..rundir.layout import EPOCH_PREFIX, GRAPH_FILE
from ..tables import table

DIRECTED = "directed"
UNDIRECTED = "undirected"
BIDIRECTED = "bidirected"
EDGE_TYPES = (DIRECTED, UNDIRECTED, BIDIRECTED)
GRAPH_FORMAT = "wpultr.graph/1"
_EPOCH_DIR = re.compile(rf"^{EPOCH_PREFIX}(\d+)$")


class GraphFileError(WpultrError, ValueError):
    """A graph file or run directory does not hold what `wpultr graph` expects; the message names it."""


class GraphRenderError(WpultrError, RuntimeError):
    """Graphviz's `dot` program, needed to draw svg/png, is not installed; the message says what to do."""


@dataclass(frozen=True)
class GraphEdge:
    """One edge; for a directed edge `source` → `target`, otherwise the two ends in node order."""

    source: str
    target: str
    type: str = DIRECTED
    stability: float | None = None   # share of bootstrap graphs holding this edge with these marks
    adjacency: float | None = None   # share of bootstrap graphs in which the two nodes are adjacent
    enforced: bool = False           # put (or oriented) by a prior, not found by PC

    @property
    def pair(self) -> frozenset[str]:
        return frozenset((self.source, self.target))

    def orientation(self) -> tuple[str, ...]:
        """The edge's marks as a comparable key: ("->", from, to), ("--",) or ("<->",)."""
        if self.type == DIRECTED:
            return ("->", self.source, self.target)
        return ("--",) if self.type == UNDIRECTED else ("<->",)

    def arrow(self) -> str:
        return {DIRECTED: "-->", UNDIRECTED: "---", BIDIRECTED: "<->"}[self.type]


@dataclass(frozen=True)
class PairStability:
    """Bootstrap frequencies of one node pair: adjacent at all, and with each set of marks."""

    a: str
    b: str
    adjacent: float
    a_to_b: float
    b_to_a: float
    undirected: float
    bidirected: float


@dataclass
class DiscoveredGraph:
    """A PC graph over named nodes with its provenance (`meta`: test, alpha, sample, seed, timings)."""

    nodes: tuple[str, ...]
    edges: tuple[GraphEdge, ...]
    node_kinds: dict[str, str] = field(default_factory=dict)
    sepsets: dict[tuple[str, str], tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    pair_stability: tuple[PairStability, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.nodes = tuple(self.nodes)
        self.edges = tuple(self.edges)
        _check_edges(self.nodes, self.edges, "graph")

    # --- queries -------------------------------------------------------------------------------
    def edge(self, a: str, b: str) -> GraphEdge | None:
        pair = frozenset((a, b))
        return next((e for e in self.edges if e.pair == pair), None)

    def adjacent(self, a: str, b: str) -> bool:
        return self.edge(a, b) is not None

    def neighbours(self, node: str) -> list[str]:
        return [n for n in self.nodes if n != node and self.adjacent(node, n)]

    def parents(self, node: str) -> list[str]:
        return [e.source for e in self.edges if e.type == DIRECTED and e.target == node]

    def children(self, node: str) -> list[str]:
        return [e.target for e in self.edges if e.type == DIRECTED and e.source == node]

    def undirected_neighbours(self, node: str) -> list[str]:
        return [next(iter(e.pair - {node})) for e in self.edges if e.type == UNDIRECTED and node in e.pair]

    def with_edges(self, edges: Iterable[GraphEdge]) -> DiscoveredGraph:
        return replace(self, edges=tuple(edges))

    # --- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": GRAPH_FORMAT,
            "nodes": list(self.nodes),
            "node_kinds": dict(self.node_kinds),
            "edges": [{"from": e.source, "to": e.target, "type": e.type, "stability": e.stability,
                       "adjacency": e.adjacency, "enforced": e.enforced} for e in self.edges],
            "sepsets": [{"a": a, "b": b, "sets": [list(s) for s in sets]} for (a, b), sets in self.sepsets.items()],
            "pair_stability": [vars(p) for p in self.pair_stability],
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, state: dict[str, Any], where: str = "graph") -> DiscoveredGraph:
        if state.get("format") != GRAPH_FORMAT:
            raise GraphFileError(f"{where}: format {state.get('format')!r} is not {GRAPH_FORMAT!r}")
        try:
            edges = tuple(GraphEdge(e["from"], e["to"], e["type"], e.get("stability"), e.get("adjacency"),
                                    bool(e.get("enforced", False))) for e in state["edges"])
            sepsets = {(s["a"], s["b"]): tuple(tuple(x) for x in s["sets"]) for s in state.get("sepsets", [])}
            pairs = tuple(PairStability(**p) for p in state.get("pair_stability", []))
            nodes = tuple(state["nodes"])
        except (KeyError, TypeError) as e:
            raise GraphFileError(f"{where}: malformed graph entry ({e})") from None
        _check_edges(nodes, edges, where)
        return cls(nodes, edges, dict(state.get("node_kinds", {})), sepsets, pairs, dict(state.get("meta", {})))

    def save(self, path: str | Path) -> None:
        """Write the graph as JSON atomically (temporary sibling, then rename)."""
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> DiscoveredGraph:
        path = Path(path)
        if not path.is_file():
            raise GraphFileError(f"{path}: no such graph file")
        try:
            state = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise GraphFileError(f"{path}: line {e.lineno} column {e.colno}: not valid JSON ({e.msg})") from None
        return cls.from_dict(state, str(path))


def _check_edges(nodes: tuple[str, ...], edges: tuple[GraphEdge, ...], where: str) -> None:
    known = set(nodes)
    seen: set[frozenset[str]] = set()
    for i, e in enumerate(edges):
        if e.type not in EDGE_TYPES:
            raise GraphFileError(f"{where}: edges[{i}] type {e.type!r} is not one of {', '.join(EDGE_TYPES)}")
        for end in (e.source, e.target):
            if end not in known:
                raise GraphFileError(f"{where}: edges[{i}] names node {end!r}, not among {list(nodes)}")
        if e.source == e.target:
            raise GraphFileError(f"{where}: edges[{i}] is a self-loop on {e.source!r}")
        if e.pair in seen:
            raise GraphFileError(f"{where}: edges[{i}] repeats the pair {sorted(e.pair)}")
        seen.add(e.pair)


# ---------------------------------------------------------------------------------------------
# From causal-learn
# ---------------------------------------------------------------------------------------------
def edges_from_matrix(matrix, nodes: tuple[str, ...]) -> tuple[GraphEdge, ...]:
    """Edges of causal-learn's endpoint matrix, where g[i, j] is the mark at node i's end
    (g[i, j] = TAIL, g[j, i] = ARROW: i → j)."""
    tail, arrow = Endpoint.TAIL.value, Endpoint.ARROW.value
    edges = []
    for i in range(len(nodes)):
        for j in range(i + 1, len(nodes)):
            at_i, at_j = int(matrix[i, j]), int(matrix[j, i])  # mark at node i's end, at node j's end
            if at_i == 0 and at_j == 0:
                continue
            if at_i == tail and at_j == arrow:
                edges.append(GraphEdge(nodes[i], nodes[j], DIRECTED))
            elif at_i == arrow and at_j == tail:
                edges.append(GraphEdge(nodes[j], nodes[i], DIRECTED))
            elif at_i == tail and at_j == tail:
                edges.append(GraphEdge(nodes[i], nodes[j], UNDIRECTED))
            elif at_i == arrow and at_j == arrow:
                edges.append(GraphEdge(nodes[i], nodes[j], BIDIRECTED))
            else:
                raise ValueError(f"edge {nodes[i]}–{nodes[j]} has marks ({at_i}, {at_j}) that PC does not produce")
    return tuple(edges)


def sepsets_from_causallearn(cg, nodes: tuple[str, ...]) -> dict[tuple[str, str], tuple[tuple[str, ...], ...]]:
    """The separating sets PC recorded for each removed pair, by node name."""
    out = {}
    for i in range(len(nodes)):
        for j in range(i + 1, len(nodes)):
            sets = cg.sepset[i, j]
            if sets is not None:
                out[(nodes[i], nodes[j])] = tuple(tuple(nodes[k] for k in s) for s in sets)
    return out


# ---------------------------------------------------------------------------------------------
# Comparing graphs
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GraphDiff:
    appeared: tuple[GraphEdge, ...]
    vanished: tuple[GraphEdge, ...]
    reoriented: tuple[tuple[GraphEdge, GraphEdge], ...]   # (before, after)

    def is_empty(self) -> bool:
        return not (self.appeared or self.vanished or self.reoriented)


def diff_graphs(before: DiscoveredGraph, after: DiscoveredGraph) -> GraphDiff:
    """Edges that appeared, vanished or changed marks from `before` to `after` (matched by node pair)."""
    old = {e.pair: e for e in before.edges}
    new = {e.pair: e for e in after.edges}
    appeared = tuple(e for e in after.edges if e.pair not in old)
    vanished = tuple(e for e in before.edges if e.pair not in new)
    reoriented = tuple((old[e.pair], e) for e in after.edges
                       if e.pair in old and old[e.pair].orientation() != e.orientation())
    return GraphDiff(appeared, vanished, reoriented)


def structural_hamming_distance(estimate: Iterable[GraphEdge], truth: Iterable[GraphEdge],
                                nodes: Iterable[str]) -> int:
    """Node pairs among `nodes` whose adjacency or marks differ (an undirected edge vs a directed one counts 1)."""
    keep = set(nodes)
    est = {e.pair: e.orientation() for e in estimate if e.pair <= keep}
    tru = {e.pair: e.orientation() for e in truth if e.pair <= keep}
    return sum(1 for pair in est.keys() | tru.keys() if est.get(pair) != tru.get(pair))


# ---------------------------------------------------------------------------------------------
# Views
# ---------------------------------------------------------------------------------------------
def _fraction(x: float | None) -> str:
    return "  -  " if x is None else f"{x:5.2f}"


def to_text(graph: DiscoveredGraph) -> str:
    """A plain-text table of the edges with stabilities, under a line of provenance."""
    meta = graph.meta
    test = meta.get("test", {})
    sample = meta.get("sample", {})
    lines = [f"nodes: {', '.join(graph.nodes)}",
             f"test: {test.get('name', '?')}  alpha: {test.get('alpha', '?')}  rows: {sample.get('n_rows', '?')}"
             f"  bootstrap resamples: {meta.get('n_bootstrap', 0)}"]
    width = max([len(n) for n in graph.nodes] + [4])
    lines.append(f"{'from':<{width}}      {'to':<{width}}  stable  adjacent")
    for e in sorted(graph.edges, key=lambda e: (graph.nodes.index(e.source), graph.nodes.index(e.target))):
        flag = "  (prior)" if e.enforced else ""
        lines.append(f"{e.source:<{width}} {e.arrow()} {e.target:<{width}}  {_fraction(e.stability)}   "
                     f"{_fraction(e.adjacency)}{flag}")
    if not graph.edges:
        lines.append("(no edges)")
    lines += _click_evidence_lines(meta) + _within_document_lines(meta) + _near_deterministic_lines(meta)
    return "\n".join(lines)


WITHIN_DOCUMENT_HEADER = ["page feature", "decision", "within-document click-rate ratio (95% CI)", "p", "rows",
                          "sessions", "documents", "strata"]


def within_document_rows(meta: dict[str, Any]) -> list[list[Any]]:
    """How sure the graph is of each candidate page feature → click edge (graph.json meta `click_evidence`): the
    decision, the within-document effect with its interval, its p and what carried it; one row per page feature,
    none for a graph without the within-document test (`WITHIN_DOCUMENT_HEADER` names the columns)."""
    rows = []
    for e in meta.get("click_evidence") or []:
        if "within_document" not in e and e.get("verdict") != "not testable within documents":
            continue
        w = e.get("within_document") or {}
        ratios = "; ".join(f"{lv['level']} {lv['ratio']:.2f} [{lv['ci95'][0]:.2f}, {lv['ci95'][1]:.2f}]"
                           for lv in w.get("levels", []))
        if ratios and w.get("unit", "").startswith("against"):
            ratios = f"{ratios} ({w['unit']})"
        ratios = ratios or w.get("note", "-")
        p = w.get("p_value")
        rows.append([e["node"], e.get("verdict", ""), ratios, "-" if p is None else f"{p:.2e}", w.get("rows", "-"),
                     w.get("sessions", "-"), w.get("documents", "-"), w.get("strata", "-")])
    return rows


def _within_document_lines(meta: dict[str, Any]) -> list[str]:
    """`within_document_rows` as text, after a line saying how the click test works."""
    rows = within_document_rows(meta)
    if not rows:
        return []
    cells = [WITHIN_DOCUMENT_HEADER] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[j]) for r in cells) for j in range(len(WITHIN_DOCUMENT_HEADER))]
    out = ["", "page feature -> click, within documents (impressions of the same (query, document) compared; "
               "rows/sessions/documents: where the feature varied with a click and a non-click beside it):"]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return out


def _p(x: float | None) -> str:
    return "-" if x is None else f"{x:.2e}"


def _click_evidence_lines(meta: dict[str, Any]) -> list[str]:
    """The evidence of every candidate edge into click (graph.json meta `click_evidence`), one line each."""
    evidence = meta.get("click_evidence")
    if not evidence:
        return []
    rows = meta.get("click_rows", {})
    lines = ["", "edges into click: 'p (decided)' is the p of the test that decided the edge (PC's largest p over its "
                 "conditioning sets: the within-document test where discovery.click_test is within_document; '-' where "
                 "no test decided it); the 'given r̂' columns are the association with click given click's other "
                 "parents, r̂ among them — not a test of the edge "
                 f"({rows.get('n_rows', '?')} rows, {rows.get('n_sessions', '?')} sessions: {rows.get('source', '?')})"]
    if meta.get("test", {}).get("click_error") == "per_graph":
        lines.append(f"page feature -> click edges decided per graph (discovery.click_error: per_graph): Holm's "
                     f"step-down over the page features' p (PC) at alpha {meta['test'].get('alpha', '?')}")
    table_rows = []
    for e in evidence:
        effect = e.get("effect") or {}
        flag = "yes (prior)" if e.get("by_prior") else ("yes" if e.get("in_graph") else "no")
        note = e["decision"] + (f"; proxies left out: {', '.join(e['proxies_left_out'])}"
                                if e.get("proxies_left_out") else "")
        if e.get("effect_note"):
            note += f"; {e['effect_note']}"
        table_rows.append([e["node"], flag, _p(deciding_p(e)),
                           f"{effect['loglik_gain_per_row']:.2e}" if effect else "-",
                           f"{effect['click_rate_change']:.4f}" if effect else "-", _p(effect.get("p_value")),
                           _fraction(e.get("stability")).strip(), note])
    lines += table(["node", "in graph", "p (decided)", "given r̂: Δloglik/row", "Δclick rate", "p", "stable",
                    "decision"], table_rows, left=2, text_last=True).splitlines()
    return lines


def deciding_p(evidence: dict[str, Any]) -> float | None:
    """The p of the test that decided a candidate click edge (PC's largest p over its conditioning sets); None for an
    edge a prior put there or a feature no test could judge (not testable within documents)."""
    if evidence.get("by_prior") or str(evidence.get("verdict", "")).startswith("not testable"):
        return None
    return evidence.get("p_value")


def _near_deterministic_lines(meta: dict[str, Any]) -> list[str]:
    """Near-deterministic page-feature pairs found (graph.json meta `near_deterministic`) and their handling."""
    section = meta.get("near_deterministic")
    if not section:
        return []
    pairs = section.get("pairs", [])
    if not pairs:
        return ["", f"near-deterministic page features (d >= {section.get('threshold')}): none"]
    lines = ["", f"near-deterministic page features (d >= {section.get('threshold')}):"]
    for p in pairs:
        lines.append(f"{p['feature']} ~ f({p['proxy']}): d = {p['determination']:.3f} (reverse {p['reverse']:.3f}, "
                     f"{p['measure']}); {p['handling']}")
    return lines


_NODE_SHAPES = {"relevance": "doubleoctagon", "click": "box"}


def to_dot(graph: DiscoveredGraph) -> str:
    """Graphviz DOT source: directed →, undirected without heads, bidirected with two; prior edges dashed."""
    import graphviz  # lazy: optional for rendering only (bench/bert_throughput.py runs without it)
    dot = graphviz.Digraph("click_model", graph_attr={"rankdir": "LR"})
    for node in graph.nodes:
        dot.node(node, shape=_NODE_SHAPES.get(graph.node_kinds.get(node, ""), "ellipse"))
    for e in graph.edges:
        attrs = {"dir": {DIRECTED: "forward", UNDIRECTED: "none", BIDIRECTED: "both"}[e.type]}
        if e.stability is not None:
            attrs["label"] = f"{e.stability:.2f}"
        if e.enforced:
            attrs["style"] = "dashed"
        dot.edge(e.source, e.target, **attrs)
    return dot.source


def render(graph: DiscoveredGraph, fmt: str) -> bytes:
    """The graph drawn by Graphviz's `dot` program in `fmt` (svg, png)."""
    import graphviz  # lazy: optional for rendering only (bench/bert_throughput.py runs without it)
    try:
        return graphviz.Source(to_dot(graph)).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise GraphRenderError(f"rendering {fmt} needs Graphviz's 'dot' program on PATH "
                           "(e.g. apt-get install graphviz); --format dot or text work without it") from None


# ---------------------------------------------------------------------------------------------
# Where graphs live in a run directory
# ---------------------------------------------------------------------------------------------
def epoch_dir(run_dir: str | Path, epoch: int) -> Path:
    return Path(run_dir) / f"{EPOCH_PREFIX}{epoch}"


def graph_epochs(run_dir: str | Path) -> list[int]:
    """Epochs of `run_dir` that hold a graph, ascending."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise GraphFileError(f"{run_dir}: no such run directory")
    found = [int(m.group(1)) for p in run_dir.iterdir()
             if (m := _EPOCH_DIR.match(p.name)) and (p / GRAPH_FILE).is_file()]
    return sorted(found)


def load_epoch_graph(run_dir: str | Path, epoch: int | None = None) -> tuple[int, DiscoveredGraph]:
    """The graph of `epoch` (default: the latest) in `run_dir`, with its epoch number."""
    epochs = graph_epochs(run_dir)
    if not epochs:
        raise GraphFileError(f"{run_dir}: no epoch_<k>/{GRAPH_FILE} found (has the discover stage run?)")
    if epoch is None:
        epoch = epochs[-1]
    elif epoch not in epochs:
        raise GraphFileError(f"{run_dir}: epoch {epoch} has no graph; epochs with a graph: {epochs}")
    return epoch, DiscoveredGraph.load(epoch_dir(run_dir, epoch) / GRAPH_FILE)
