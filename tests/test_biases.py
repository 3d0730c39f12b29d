"""Bias identification on hand-built graphs: both confounder cases and page-feature biases."""
from wpultr.causal.biases import BiasReport, ConfoundedFeature, identify_biases
from wpultr.causal.graph import BIDIRECTED, DIRECTED, UNDIRECTED, DiscoveredGraph, GraphEdge
from wpultr.schema import CLICK, RELEVANCE_SCORE

R, C = RELEVANCE_SCORE, CLICK


def graph(*edges: tuple[str, str, str]) -> DiscoveredGraph:
    names = [R, "position", "media_type", "serp_height", "max_height", C]
    return DiscoveredGraph(tuple(names), tuple(GraphEdge(a, b, t) for a, b, t in edges))


def test_case_1_relevance_is_the_only_parent():
    g = graph((R, C, DIRECTED), (R, "position", DIRECTED), ("position", C, DIRECTED))
    report = identify_biases(g)
    assert report.confounded == (ConfoundedFeature("position", (R,), 1),)
    assert report.page_feature_biases == ("position",)
    assert report.click_parents == (R, "position")


def test_case_2_other_page_features_are_parents_too():
    g = graph((R, C, DIRECTED), (R, "position", DIRECTED), ("media_type", "position", DIRECTED),
              ("position", C, DIRECTED), ("media_type", C, DIRECTED),
              ("serp_height", "position", UNDIRECTED), ("position", "max_height", DIRECTED))
    report = identify_biases(g)
    assert report.confounded == (ConfoundedFeature("position", (R, "media_type", "serp_height"), 2, ("serp_height",)),)
    assert report.page_feature_biases == ("position", "media_type")   # media_type: a bias, not confounded
    assert report.click_parents == (R, "position", "media_type")


def test_only_paths_through_both_adjacencies_count():
    g = graph((R, C, DIRECTED), (R, "serp_height", DIRECTED),            # r̂ → h, but h not adjacent to c
              ("max_height", C, DIRECTED),                                # bias without confounding
              ("media_type", "max_height", BIDIRECTED))                   # a latent link is not a parent
    report = identify_biases(g)
    assert report.confounded == ()
    assert report.page_feature_biases == ("max_height",)


def test_adjacencies_are_read_as_the_priors_orient_them():
    g = graph((R, C, DIRECTED), (R, "position", UNDIRECTED), (C, "position", DIRECTED))
    report = identify_biases(g)
    assert [c.feature for c in report.confounded] == ["position"] and report.confounded[0].case == 1
    assert BiasReport.from_dict(report.to_dict()) == report


def test_no_biases_when_click_depends_on_relevance_alone():
    report = identify_biases(graph((R, C, DIRECTED), (R, "position", DIRECTED), ("position", "media_type", DIRECTED)))
    assert report == BiasReport((), (), (R,))
