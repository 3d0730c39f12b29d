"""Graph artifacts: JSON round trip, causal-learn conversion, diff, SHD, and the `graph show/diff` commands."""
import json
import re
import shutil

import pytest
from causallearn.graph.Edge import Edge
from causallearn.graph.Endpoint import Endpoint
from causallearn.graph.GraphClass import CausalGraph
from typer.testing import CliRunner

from wpultr.causal.cli import graph_app
from wpultr.causal.graph import (
    BIDIRECTED,
    DIRECTED,
    UNDIRECTED,
    DiscoveredGraph,
    GraphEdge,
    GraphFileError,
    PairStability,
    diff_graphs,
    edges_from_matrix,
    epoch_dir,
    load_epoch_graph,
    structural_hamming_distance,
    to_dot,
    to_text,
)
from wpultr.rundir.files import RunDir
from wpultr.schema import CLICK, RELEVANCE_SCORE

R, C = RELEVANCE_SCORE, CLICK
NODES = (R, "position", "media_type", C)


def sample_graph(**changes) -> DiscoveredGraph:
    edges = (GraphEdge(R, C, DIRECTED, 1.0, 1.0, True), GraphEdge(R, "position", DIRECTED, 0.8, 0.9),
             GraphEdge("position", C, DIRECTED, 0.6, 0.7), GraphEdge("position", "media_type", UNDIRECTED, 0.4, 0.5))
    graph = DiscoveredGraph(NODES, edges, {R: "relevance", C: "click", "position": "ordinal",
                                           "media_type": "categorical"},
                            {("media_type", C): (("position",),)},
                            (PairStability(R, "position", 0.9, 0.8, 0.0, 0.1, 0.0),),
                            {"test": {"name": "kci", "alpha": 0.05}, "sample": {"n_rows": 2000}, "n_bootstrap": 10})
    return graph.with_edges(changes["edges"]) if "edges" in changes else graph


def test_json_round_trip(tmp_path):
    graph = sample_graph()
    graph.save(tmp_path / "g.json")
    loaded = DiscoveredGraph.load(tmp_path / "g.json")
    assert loaded == graph
    state = json.loads((tmp_path / "g.json").read_text())
    assert state["edges"][0] == {"from": R, "to": C, "type": "directed", "stability": 1.0, "adjacency": 1.0,
                                 "enforced": True}
    assert state["meta"]["test"] == {"name": "kci", "alpha": 0.05}


def test_bad_graph_files_are_named(tmp_path):
    path = tmp_path / "g.json"
    path.write_text('{"format": "wpultr.graph/1",\n "nodes": [}')
    with pytest.raises(GraphFileError, match=r"g.json: line 2 column"):
        DiscoveredGraph.load(path)
    state = sample_graph().to_dict()
    state["edges"][2]["to"] = "ghost"
    with pytest.raises(GraphFileError, match=r"edges\[2\] names node 'ghost'"):
        DiscoveredGraph.from_dict(state, "g.json")
    with pytest.raises(GraphFileError, match="repeats the pair"):
        DiscoveredGraph(NODES, (GraphEdge(R, C), GraphEdge(C, R)))


def test_edges_from_causallearn_marks():
    cg = CausalGraph(4, list(NODES))
    g = cg.G
    nodes = g.get_nodes()
    g.remove_edge(g.get_edge(nodes[0], nodes[3]))
    g.add_directed_edge(nodes[0], nodes[3])                    # r̂ → c
    g.remove_edge(g.get_edge(nodes[1], nodes[2]))
    g.add_edge(Edge(nodes[1], nodes[2], Endpoint.ARROW, Endpoint.ARROW))
    g.remove_edge(g.get_edge(nodes[0], nodes[1]))
    edges = {e.pair: e for e in edges_from_matrix(g.graph, NODES)}
    assert edges[frozenset((R, C))].orientation() == ("->", R, C)
    assert edges[frozenset(("position", "media_type"))].type == BIDIRECTED
    assert edges[frozenset(("position", C))].type == UNDIRECTED
    assert frozenset((R, "position")) not in edges


def test_diff_and_structural_hamming_distance():
    before = sample_graph()
    after = sample_graph(edges=(GraphEdge(R, C), GraphEdge("position", R),                      # re-oriented
                                GraphEdge("media_type", C)))                                    # appeared
    changes = diff_graphs(before, after)
    assert [(e.source, e.target) for e in changes.appeared] == [("media_type", C)]
    assert sorted((e.source, e.target) for e in changes.vanished) == [("position", C), ("position", "media_type")]
    assert [(a.orientation(), b.orientation()) for a, b in changes.reoriented] == [(("->", R, "position"),
                                                                                    ("->", "position", R))]
    assert diff_graphs(before, before).is_empty()
    assert structural_hamming_distance(after.edges, before.edges, NODES) == 4
    assert structural_hamming_distance(after.edges, before.edges, (R, C)) == 0


def test_text_and_dot_views():
    text = to_text(sample_graph())
    assert re.search(r"relevance_score --> click +1.00 +1.00  \(prior\)", text)
    assert re.search(r"position +--- media_type +0.40 +0.50", text) and "test: kci  alpha: 0.05  rows: 2000" in text
    dot = to_dot(sample_graph())
    assert '"relevance_score" -> click' in dot or "relevance_score -> click" in dot
    assert "dir=none" in dot and "style=dashed" in dot


def make_run(tmp_path):
    run = RunDir.create(tmp_path / "run").root     # a run directory (its marker): what graph show reads
    sample_graph().save(epoch_dir(run, 0) / "graph.json")
    sample_graph(edges=(GraphEdge(R, C), GraphEdge("media_type", C))).save(epoch_dir(run, 2) / "graph.json")
    return run


def test_graph_show_renders(tmp_path):
    run = make_run(tmp_path)
    runner = CliRunner()
    text = runner.invoke(graph_app, ["show", str(run)])
    assert text.exit_code == 0, text.output
    assert "epoch 2" in text.output and re.search(r"media_type +--> click", text.output)
    assert "page-feature biases (x -> click): media_type" in text.output
    first = runner.invoke(graph_app, ["show", str(run), "--epoch", "0", "--format", "text"])
    assert "confounded (case 2): position <- relevance_score, media_type" in first.output
    dot = runner.invoke(graph_app, ["show", str(run), "--epoch", "0", "--format", "dot"])
    assert dot.exit_code == 0 and dot.output.startswith("digraph click_model")


@pytest.mark.skipif(shutil.which("dot") is None,
                    reason="Graphviz's dot program is not installed (apt-get install graphviz): svg/png not checked")
def test_graph_show_renders_svg_and_png_with_graphviz(tmp_path):
    run = make_run(tmp_path)
    runner = CliRunner()
    svg = runner.invoke(graph_app, ["show", str(run), "--epoch", "0", "--format", "svg"])
    assert svg.exit_code == 0, svg.output
    image = epoch_dir(run, 0) / "graph.svg"
    assert svg.output.strip() == str(image) and "<svg" in image.read_text()
    assert all(f"<title>{node}</title>" in image.read_text() for node in NODES)    # every node drawn
    png = runner.invoke(graph_app, ["show", str(run), "-f", "png", "-o", str(tmp_path / "g.png")])
    assert png.exit_code == 0 and (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_graph_show_without_graphviz_names_the_missing_program(tmp_path, monkeypatch):
    run = make_run(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    out = CliRunner().invoke(graph_app, ["show", str(run), "--format", "svg"])
    assert out.exit_code == 2 and "needs Graphviz's 'dot' program on PATH" in out.output
    assert not (epoch_dir(run, 2) / "graph.svg").exists()


def test_graph_diff_and_errors(tmp_path):
    run = make_run(tmp_path)
    runner = CliRunner()
    out = runner.invoke(graph_app, ["diff", str(run), "--from", "0", "--to", "2"])
    assert out.exit_code == 0, out.output
    assert "appeared    media_type --> click" in out.output
    assert "vanished    relevance_score --> position" in out.output
    same = runner.invoke(graph_app, ["diff", str(run), "--from", "2", "--to", "2"])
    assert "no change" in same.output
    missing = runner.invoke(graph_app, ["show", str(run), "--epoch", "1"])
    assert missing.exit_code == 2 and "epoch 1 has no graph; epochs with a graph: [0, 2]" in missing.output
    assert runner.invoke(graph_app, ["show", str(tmp_path / "nowhere")]).exit_code == 2
    assert load_epoch_graph(run)[0] == 2


def test_graph_show_prints_click_evidence_and_near_deterministic_pairs(tmp_path):
    graph = sample_graph()
    graph.meta.update({
        "click_rows": {"n_rows": 100000, "n_sessions": 10000, "source": "every shown result of the sampled sessions"},
        "click_evidence": [
            {"node": "position", "in_graph": True, "by_prior": False, "pc_tests": 3, "p_value": 1.5e-30,
             "given": [R], "decision": "kept: every test rejected independence", "stability": 0.8,
             "proxies_left_out": ["serp_height"],
             "effect": {"given": [R], "p_value": 2e-31, "statistic": 150.0, "df": 9, "loglik_gain_per_row": 0.0123,
                        "click_rate_change": 0.0456, "rows": 100000, "sessions": 10000}},
            {"node": "media_type", "in_graph": False, "by_prior": False, "pc_tests": 0, "p_value": None,
             "given": None, "decision": "not tested: constant in the sample", "stability": None, "effect": None}],
        "near_deterministic": {"threshold": 0.9, "pairs": [
            {"feature": "media_type", "proxy": "serp_height", "determination": 0.97, "reverse": 0.95,
             "measure": "uncertainty coefficient",
             "handling": "tests of media_type against click leave serp_height out"}]}})
    graph.save(epoch_dir(RunDir.create(tmp_path / "run").root, 0) / "graph.json")
    out = CliRunner().invoke(graph_app, ["show", str(tmp_path / "run")]).output
    assert "edges into click" in out and "100000 rows, 10000 sessions" in out
    assert re.search(r"position +yes +1\.50e-30 +1\.23e-02 +0\.0456 +2\.00e-31 +0\.80 +kept: every test rejected "
                     r"independence; proxies left out: serp_height", out)
    assert re.search(r"media_type +no +- .* not tested: constant in the sample", out)
    assert "media_type ~ f(serp_height): d = 0.970 (reverse 0.950" in out
    assert "tests of media_type against click leave serp_height out" in out
