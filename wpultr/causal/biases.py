"""Which biases a discovered graph implies (BAL §3.1, "two types of potential bias"; §3.2 Figure 2).

* Confounding bias: r̂ is adjacent to a page feature x and x is adjacent to c; the priors orient
  these as r̂ → x → c, so r̂ opens a backdoor path x ← r̂ → c. The importance weights of the next
  stage need x's parent set: case 1 when r̂ is x's only parent (w = p(x) / p(x | r̂), Eq. 8–9),
  case 2 when other page features m are parents too (w = p(x | m) / p(x | r̂, m)). A page feature
  joined to x by an undirected edge is counted among x's parents, as BAL's "other SEPP features
  connected in the causal graph", and listed in `undirected` so a consumer can tell.
* Page-feature bias: a page feature x with x → c; the ranker must not learn its effect on c.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..columns import CLICK, RELEVANCE_SCORE
from .graph import DiscoveredGraph


@dataclass(frozen=True)
class ConfoundedFeature:
    """A page feature on a backdoor path x ← r̂ → c, with the parents its influence estimator conditions on."""

    feature: str
    parents: tuple[str, ...]          # r̂ first, then page features in node order
    case: Literal[1, 2]               # 1: r̂ only; 2: r̂ and other page features
    undirected: tuple[str, ...] = ()  # parents joined by an undirected edge (orientation not identified)


@dataclass(frozen=True)
class BiasReport:
    """What the influence estimators, the weights and the click model of the next stage consume."""

    confounded: tuple[ConfoundedFeature, ...]
    page_feature_biases: tuple[str, ...]     # page features adjacent to c (x → c by prior 2)
    click_parents: tuple[str, ...]           # every node adjacent to c (all parents by the priors)

    def to_dict(self) -> dict[str, Any]:
        return {"confounded": [{"feature": c.feature, "parents": list(c.parents), "case": c.case,
                                "undirected": list(c.undirected)} for c in self.confounded],
                "page_feature_biases": list(self.page_feature_biases),
                "click_parents": list(self.click_parents)}

    def without(self, features: Sequence[str]) -> BiasReport:
        """The report with `features` no longer corrected (not in the click model's page term, no weights), for
        page features the logs cannot tell apart from relevance (`separability`); they stay in the graph and may
        still condition another feature's influence estimator."""
        drop = set(features)
        return BiasReport(tuple(c for c in self.confounded if c.feature not in drop),
                          tuple(x for x in self.page_feature_biases if x not in drop),
                          tuple(x for x in self.click_parents if x not in drop))

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> BiasReport:
        return cls(tuple(ConfoundedFeature(c["feature"], tuple(c["parents"]), c["case"], tuple(c["undirected"]))
                         for c in state["confounded"]),
                   tuple(state["page_feature_biases"]), tuple(state["click_parents"]))


def identify_biases(graph: DiscoveredGraph, page_features: Sequence[str] | None = None) -> BiasReport:
    """Confounded features (with parent sets and case) and page-feature biases of a graph.

    Adjacencies to r̂ and c are read as the priors orient them (r̂ → x, x → c), so the result is
    the same for a graph PC left partly undirected there and for one `enforce_priors` oriented.
    """
    features = [n for n in graph.nodes if n not in (RELEVANCE_SCORE, CLICK)] if page_features is None \
        else [n for n in graph.nodes if n in set(page_features)]
    biased = tuple(x for x in features if graph.adjacent(x, CLICK))
    confounded = []
    for x in biased:
        if not graph.adjacent(RELEVANCE_SCORE, x):
            continue
        directed = set(graph.parents(x))
        loose = set(graph.undirected_neighbours(x))
        others = [m for m in features if m != x and (m in directed or m in loose)]
        confounded.append(ConfoundedFeature(x, (RELEVANCE_SCORE, *others), 1 if not others else 2,
                                            tuple(m for m in others if m in loose)))
    click_parents = tuple(n for n in graph.nodes if n != CLICK and graph.adjacent(n, CLICK))
    return BiasReport(tuple(confounded), biased, click_parents)
