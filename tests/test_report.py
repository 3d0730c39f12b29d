"""The run report's pictures (issue 32 item 1), checked without a browser: the page parses, every picture is in it
(no external source), each method kind gets its figures, and the drawn graphs' edges are graph.json's."""
import base64
import json
from html.parser import HTMLParser

import numpy as np
import pytest
from scipy.special import logit

from tiny_runs import tiny_run
from wpultr.bal.click_model import ClickModel, examination_table, page_inputs
from wpultr.bal.node_columns import NodeColumns
from wpultr.bal.rows import RAW_POSITION, TrainingRows
from wpultr.bal.separability import unchecked
from wpultr.bal.weights import weight_histogram
from wpultr.report.figures import FIGURE_KEYS
from wpultr.report.graph_svg import evidence_label
from wpultr.schema import CLICK
from wpultr.settings.bal import ClickModelConfig


class Page(HTMLParser):
    """Every tag with its attributes, the figures' keys and the graph panels' edges, as the page holds them."""

    def __init__(self):
        super().__init__()
        self.tags, self.drawn, self.omitted, self.panels, self.texts = [], [], [], {}, []
        self._epoch = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "figure":
            self.drawn.append(a["data-figure"])
        elif tag == "p" and a.get("class") == "omitted":
            self.omitted.append(a["data-figure"])
        elif tag == "div" and a.get("class") == "graph-panel":
            self._epoch = int(a["data-epoch"])
            self.panels[self._epoch] = []
        elif tag == "g" and a.get("class") == "edge":
            self.panels[self._epoch].append((a["data-from"], a["data-to"], a["data-type"]))

    def handle_data(self, data):
        self.texts.append(data)


def parse(path) -> Page:
    page = Page()
    page.feed(path.read_text())
    page.close()
    return page


def external_sources(page: Page) -> list:
    """Attributes that would fetch something from outside the page."""
    out = []
    for tag, attrs in page.tags:
        for name in ("src", "href", "xlink:href", "data"):
            value = attrs.get(name)
            if value is not None and not (value.startswith("data:") or value.startswith("#")):
                out.append((tag, name, value[:60]))
    return out


def _run(tmp_path, client, method, **evaluation):
    return tiny_run(tmp_path, client, method, epochs=2, **evaluation)


@pytest.fixture(scope="module")
def bal_run(tmp_path_factory, dask_client):
    return _run(tmp_path_factory.mktemp("report"), dask_client, "bal", heldout_sessions=0.25)   # r̂ → position


@pytest.mark.e2e
def test_a_bal_report_embeds_every_figure_and_draws_graph_json(bal_run):
    page = parse(bal_run / "report.html")
    assert page.drawn == list(FIGURE_KEYS) == ["causal_graph", "examination", "weights", "training"]
    assert page.omitted == []
    assert external_sources(page) == []
    images = [a for tag, a in page.tags if tag == "img"]
    assert {a["alt"] for a in images} >= {"Learned examination", "Importance weights", "Training and validation "
                                          "curves", "identifiability graph"}
    for a in images:                                               # each a whole PNG
        assert base64.b64decode(a["src"].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert sum(tag == "svg" for tag, _ in page.tags) == 2         # one graph per epoch
    for k, drawn in page.panels.items():                           # the drawn edges are graph.json's, exactly
        graph = json.loads((bal_run / f"epoch_{k}" / "graph.json").read_text())
        assert sorted(drawn) == sorted((e["from"], e["to"], e["type"]) for e in graph["edges"])
        evidence = {e["node"]: e for e in graph["meta"]["click_evidence"]}
        for source, target, _kind in drawn:                         # each page feature → click edge: its evidence
            if target == "click" and source != "relevance_score" and evidence_label(evidence.get(source)):
                assert evidence_label(evidence[source]) in page.texts
    assert sorted(page.panels) == [0, 1]


@pytest.mark.e2e
def test_bal_saves_the_examination_table_and_weight_histogram_each_epoch(bal_run):
    history = json.loads((bal_run / "train" / "history.json").read_text())["epochs"]
    epochs = [e for e in history if e["phase"] == "bal"]
    assert len(epochs) == 2
    for e in epochs:
        table, weights = e["train"]["examination"], e["weights"]
        cells = table["by_position"]
        assert sorted(cells, key=int) == sorted(e["train"]["examination_by_position"], key=int)
        n_rows = sum(c["rows"] for c in cells.values())
        for k, c in cells.items():          # the same point estimates as the recorded profile, inside their interval
            assert c["relative"] == pytest.approx(e["train"]["examination_by_position"][k], abs=1e-3)
            assert c["low"] <= c["relative"] <= c["high"]
        assert cells["1"]["low"] == cells["1"]["high"] == 1.0
        assert any(c["high"] > c["low"] for c in cells.values())
        media = table["levels"]["media_type"]
        assert sum(c["rows"] for c in media["codes"].values()) == n_rows
        if weights.get("confounded"):
            assert sum(weights["histogram"]["counts"]) + weights["histogram"]["zeros"] == weights["n_rows"] == n_rows


@pytest.mark.e2e
def test_a_dla_report_plots_its_propensities_and_notes_what_it_lacks(tmp_path, dask_client):
    run = _run(tmp_path, dask_client, "dla", discover_graph=False)
    page = parse(run / "report.html")
    assert page.drawn == ["examination", "training"]               # DLA's position propensities, its curves
    assert page.omitted == ["causal_graph", "weights"]             # no graph learned, no importance weights
    assert external_sources(page) == []
    assert "Learned position propensities" in {a["alt"] for tag, a in page.tags if tag == "img"}
    notes = [t for t in page.texts if "left out" in t]
    assert len(notes) == 2 and all("\n" not in t for t in notes)


def _rows_with(positions: np.ndarray, media: np.ndarray, clicks: np.ndarray) -> TrainingRows:
    nodes = NodeColumns(len(positions))
    nodes.add(RAW_POSITION, positions)
    nodes.add("media", media)
    nodes.add(CLICK, clicks.astype(np.float32))
    nodes.set_scores(np.full(len(positions), 60.0, np.float32))   # σ(u) = 1: every click is the page's
    return TrainingRows((), {"media": "categorical"}, {"media": 3}, nodes, None, {}, unchecked(0.0, False))


def test_the_examination_interval_is_the_risk_ratio_interval_when_relevance_is_certain():
    """With σ(u) = 1 and the page logits at each position's click rate (the cell's maximum likelihood), the
    sandwich interval of examination(k) / examination(1) is Katz's log interval for a ratio of two proportions."""
    rng = np.random.default_rng(0)
    positions = np.repeat([1, 2, 3], [4000, 3000, 2000])
    clicks = (rng.random(len(positions)) < np.array([0.0, 0.6, 0.35, 0.2])[positions]).astype(np.int64)
    rate = {k: clicks[positions == k].mean() for k in (1, 2, 3)}
    v = logit(np.array([rate[k] for k in positions]))
    media = rng.integers(1, 3, len(positions))
    rows = _rows_with(positions, media, clicks)
    model = ClickModel(page_inputs([], {}, {}), ClickModelConfig())
    table = examination_table(model, rows.nodes.column("relevance_score"), v, np.ones(len(positions)), rows)
    for k in (2, 3):
        n1, n = (positions == 1).sum(), (positions == k).sum()
        half = 1.96 * np.sqrt((1 - rate[1]) / (n1 * rate[1]) + (1 - rate[k]) / (n * rate[k]))
        cell = table["by_position"][str(k)]
        assert cell["rows"] == n and cell["relative"] == pytest.approx(rate[k] / rate[1], abs=1e-5)
        assert cell["low"] == pytest.approx(rate[k] / rate[1] * np.exp(-half), abs=1e-4)
        assert cell["high"] == pytest.approx(rate[k] / rate[1] * np.exp(half), abs=1e-4)
    levels = table["levels"]["media"]
    assert levels["n_codes"] == 3 and set(levels["codes"]) == {"1", "2"}     # code 0 (unknown) never shown
    reference = max(levels["codes"].values(), key=lambda c: c["rows"])
    assert reference["relative"] == reference["low"] == reference["high"] == 1.0


def test_the_weight_histogram_counts_every_weight_once():
    w = np.array([0.5, 1.0, 1.0, 2.0, 4.0, 0.0])
    h = weight_histogram(w, bins=4)
    assert h["counts"] == [1, 2, 1, 1] and h["zeros"] == 1
    assert h["log10_edges"][0] == pytest.approx(np.log10(0.5), abs=1e-5)
    assert h["log10_edges"][-1] == pytest.approx(np.log10(4.0), abs=1e-5)
    assert sum(weight_histogram(np.ones(7), bins=3)["counts"]) == 7


def test_every_edge_kind_is_drawn_once_with_its_ends_and_the_click_evidence():
    from wpultr.causal.graph import DiscoveredGraph, GraphEdge
    from wpultr.report.graph_svg import graph_svg
    nodes = ("relevance_score", "position", "media", "height", "click")
    edges = (GraphEdge("relevance_score", "position"), GraphEdge("relevance_score", "click"),
             GraphEdge("position", "click", enforced=True), GraphEdge("media", "height", "undirected"),
             GraphEdge("height", "position", "bidirected"), GraphEdge("media", "click", stability=0.8))
    evidence = [{"node": "media", "verdict": "edge", "decision": "kept",
                 "within_document": {"unit": "against 0", "p_value": 1e-4,
                                     "levels": [{"level": "1", "ratio": 1.5, "ci95": [1.2, 1.9]}]}}]
    graph = DiscoveredGraph(nodes, edges, meta={"click_evidence": evidence})
    page = Page()
    page.feed(f"<div class='graph-panel' data-epoch='0'>{graph_svg(graph, 'epoch 0', 'g0', ['click'])}</div>")
    assert sorted(page.panels[0]) == sorted((e.source, e.target, e.type) for e in edges)
    assert "edge ×1.50 1 vs 0 [1.20, 1.90]" in page.texts
    assert {a["data-node"] for tag, a in page.tags if tag == "g" and a.get("class") == "node"} == set(nodes)
