"""The causal graph the simulator generates from, over the observable columns plus true relevance.

Edges are exactly the dependencies the generator uses, so a discovered graph can be scored against it:
an edge is left out when its mechanism is switched off by the configuration (e.g. position_power 0
removes position -> click). Nodes: `relevance` (the true grade; what a ranker's relevance_score
estimates), every page feature column, each context factor, `features` when clicks depend on the
dense document features (individual-level observation), and `click`.
"""
from __future__ import annotations

from typing import Any

from ..schema import CLICK, FEATURES, POSITION
from ..settings.simulate import SimulateConfig
from .page import MEDIA_TYPE, SERP_HEIGHT, SERP_MAX_SHOW_HEIGHT, context_columns
from .user_models import UserModel

TRUE_RELEVANCE = "relevance"
DIRECTED = "directed"

MECHANISMS: dict[str, str] = {
    TRUE_RELEVANCE: "graded relevance 0-4 of the document to the query, drawn per document",
    MEDIA_TYPE: "presented media type (0 plain, 1 image, 2 video, 3 ad): the document's own, drawn per document, "
                "or with chance 1 - media_type_consistency one drawn per impression; the document's own "
                "depends on its grade when media_label_tilt is not all 0",
    POSITION: "rank given by the logging ranker: grade + media boost + N(0, logging_noise^2), per session",
    SERP_HEIGHT: "type's mean height times a log-normal factor, whole px",
    SERP_MAX_SHOW_HEIGHT: "most of the result on screen at once: min(height, screen, scroll + screen - top); "
                          "top grows with position, scroll depth is exponential per session",
    FEATURES: "dense document features: noisy tanh/bump views of the grade",
    CLICK: "drawn by the user model from examination and click-given-examination probabilities",
}
LETOR_MECHANISMS: dict[str, str] = {   # data.simulate.corpus letor: the file, not the simulator, gives these
    TRUE_RELEVANCE: "graded relevance 0-4 of the document, read from the LETOR file (data.simulate.letor_path)",
    FEATURES: "dense document features: the LETOR file's feature vector of the document (dependent on its grade)",
}


def true_parents(cfg: SimulateConfig, model: UserModel) -> dict[str, list[str]]:
    """Parents of every node of the generating graph, in a fixed node order."""
    contexts = context_columns(cfg.n_context_factors)
    click_parents = [TRUE_RELEVANCE, *model.click_parents()]
    if cfg.context_strength > 0:
        click_parents += contexts
    if len(set(cfg.media_click_scale)) > 1 and MEDIA_TYPE not in click_parents:
        click_parents.append(MEDIA_TYPE)     # media_click_scale scales examination by the presented type
    parents: dict[str, list[str]] = {
        TRUE_RELEVANCE: [],
        MEDIA_TYPE: [TRUE_RELEVANCE] if any(cfg.media_label_tilt) else [],
        POSITION: [TRUE_RELEVANCE] + ([MEDIA_TYPE] if len(set(cfg.logging_media_boost)) > 1 else []),
        SERP_HEIGHT: [MEDIA_TYPE] if len(set(cfg.media_heights)) > 1 else [],
        SERP_MAX_SHOW_HEIGHT: [POSITION, SERP_HEIGHT],
        **{name: [] for name in contexts},
    }
    if FEATURES in click_parents:
        parents[FEATURES] = [TRUE_RELEVANCE]
    parents[CLICK] = click_parents
    return parents


def true_graph(cfg: SimulateConfig, model: UserModel) -> dict[str, Any]:
    """JSON-able graph: nodes, edges ({from, to, type: directed}, as wpultr.causal graph files mark them),
    parents per node and each node's mechanism."""
    parents = true_parents(cfg, model)
    nodes = list(parents)
    edges = [{"from": parent, "to": child, "type": DIRECTED} for child in nodes for parent in parents[child]]
    known = {**MECHANISMS, **(LETOR_MECHANISMS if cfg.corpus == "letor" else {})}
    mechanisms = {node: known.get(node, "context bias factor: level drawn uniformly per shown result; "
                                             "scales examination") for node in nodes}
    return {"nodes": nodes, "edges": edges, "parents": parents, "mechanisms": mechanisms,
            "relevance_node": TRUE_RELEVANCE}
