"""The evidence behind every candidate edge into click, recorded in graph.json (issue 14, item 3).

For each node x other than click: whether the edge is in the graph (and whether a prior put it
there), the p-values of PC's tests of x ⫫ click (the largest decides: PC removes the edge as soon as
one test exceeds alpha), an effect size, the edge's stability over the bootstrap resamples and the rows
used. The effect is x's gain in a flexible logistic model of the click given the click's other
parents in the graph (near-deterministic proxies of x left out): the in-sample log-likelihood gain per
row and the mean absolute change in predicted click probability. A node left out of discovery gets an
entry saying why it was not tested. r̂ → click is required (prior 1) and PC never tests it; its record says so,
and warns when r̂'s own effect test given the other click parents finds no dependence (a ranker whose scores
do not predict clicks).

With the within-document test (issue 30), each page feature also gets `within_document`: its click-rate
ratio(s) within (query, document) strata with 95% confidence intervals, and the rows, sessions and documents
that carried it; and every record a `verdict`: edge, no edge, or not testable within documents.

With `discovery.click_error: per_graph` (the default), `decide_per_graph` re-decides the page feature → click edges
PC kept by Holm's step-down over the testable page features' deciding p-values, so alpha bounds the chance of any
false click parent in a graph; each candidate's record gains `holm` (rule, raw and adjusted p, family, kept).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from ..schema import CLICK, RELEVANCE_SCORE
from .click_ci import ClickCITest
from .graph import DiscoveredGraph
from .within_document_ci import NOT_TESTABLE, WithinDocumentTest

REQUIRED_UNTESTED = "required by prior 1: PC keeps r̂ — click without testing it"


def _parse_key(key: str) -> tuple[set[int], list[int]]:
    """causal-learn's cache key 'x;y|s1.s2' as ({x, y}, [s1, s2])."""
    pair, _, cond = key.partition("|")
    a, b = pair.split(";")
    return {int(a), int(b)}, [int(s) for s in cond.split(".")] if cond else []


def click_evidence(graph: DiscoveredGraph, p_values: Mapping[str, float], bootstrap: Sequence[DiscoveredGraph],
                   tester: ClickCITest, proxies: Mapping[int, set[int]], alpha: float,
                   left_out: Mapping[str, str], within: WithinDocumentTest | None = None,
                   untestable: Collection[str] = ()) -> list[dict[str, Any]]:
    """One record per candidate parent of click (graph nodes, then the nodes `left_out` with the reason);
    `within` (the within-document test) adds each page feature's within-document effect, and a feature in
    `untestable` is reported as not testable within documents."""
    names = list(graph.nodes)
    c = names.index(CLICK)
    parents = [n for n in names if n != CLICK and graph.adjacent(n, CLICK)]
    records = []
    for i, x in enumerate(names):
        if x == CLICK:
            continue
        tests = [(cond, float(p)) for key, p in p_values.items()
                 for pair, cond in [_parse_key(key)] if pair == {i, c}]
        edge = graph.edge(x, CLICK)
        required = x == RELEVANCE_SCORE and edge is not None and not tests     # prior 1, kept by PC untested
        record: dict[str, Any] = {"node": x, "in_graph": edge is not None,
                                  "by_prior": bool(edge is not None and edge.enforced)}
        if tests:
            worst_cond, worst = max(tests, key=lambda t: t[1])
            record.update({"pc_tests": len(tests), "p_value": worst, "given": [names[s] for s in worst_cond],
                           "decision": ("kept: every test rejected independence" if worst <= alpha else
                                        "removed: independent given " + (", ".join(names[s] for s in worst_cond)
                                                                          or "nothing"))})
        elif required:
            record.update({"by_prior": True, "pc_tests": 0, "p_value": None, "given": None,
                           "decision": REQUIRED_UNTESTED})
        else:
            record.update({"pc_tests": 0, "p_value": None, "given": None,
                           "decision": "not tested by PC (the priors alone decided)"})
        record["verdict"] = "edge" if edge is not None else "no edge"
        if x in untestable:
            record["verdict"] = NOT_TESTABLE
            record["decision"] = (f"{NOT_TESTABLE}: under the minimum share of its variance within (query, "
                                  "document) pairs; its effect cannot be told from relevance")
        if proxies.get(i):
            record["proxies_left_out"] = [names[j] for j in sorted(proxies[i])]   # of every click test of x
        if bootstrap:
            record["stability"] = sum(g.adjacent(x, CLICK) for g in bootstrap) / len(bootstrap)
        else:
            record["stability"] = None
        Z = [names.index(p) for p in parents if p != x and names.index(p) not in proxies.get(i, set())]
        try:
            effect = tester.effect(i, Z)
            record["effect"] = {"given": [names[z] for z in Z], **effect}
        except (np.linalg.LinAlgError, ValueError) as e:
            record["effect"] = None
            record["effect_note"] = f"effect not estimated: {e}"
        if required and (record["effect"] or {}).get("p_value", 0.0) > alpha:
            record["decision"] += (f"; its effect test given the other click parents finds no dependence (p "
                                   f"{record['effect']['p_value']:.2g} > {alpha:g}): r̂ does not predict clicks")
        if within is not None and x != RELEVANCE_SCORE and x not in untestable:
            record["within_document"] = _within_effect(within, i, Z)
        records.append(record)
    for name, reason in left_out.items():
        records.append({"node": name, "in_graph": False, "by_prior": False, "pc_tests": 0, "p_value": None,
                        "given": None, "decision": f"not tested: {reason}", "stability": None, "effect": None,
                        "verdict": "no edge"})
    return records


def _within_effect(within: WithinDocumentTest, x: int, Z: Sequence[int]) -> dict[str, Any] | None:
    """x's within-document effect given click's other parents, or None with the reason when it cannot be fitted."""
    try:
        return within.effect(x, Z)
    except (np.linalg.LinAlgError, ValueError) as e:
        return {"note": f"within-document effect not estimated: {e}"}


def holm_adjusted(p_values: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values (the family-wise error at which each hypothesis is rejected): the k-th
    smallest p times (m − k + 1), made non-decreasing and capped at 1; reject where adjusted p ≤ alpha."""
    order = sorted(p_values, key=lambda k: p_values[k])
    adjusted, running, m = {}, 0.0, len(order)
    for i, name in enumerate(order):
        running = max(running, min(1.0, (m - i) * float(p_values[name])))
        adjusted[name] = running
    return adjusted


def deciding_p_values(evidence: Sequence[Mapping[str, Any]], nodes: Collection[str]) -> dict[str, float]:
    """Each candidate page feature → click edge's deciding p-value: the largest of PC's tests of it (PC keeps the
    edge only while every test rejects; 1 where PC never tested it). The candidates: page features among `nodes`
    the click test can test (r̂ → click is a required prior, not a candidate)."""
    return {e["node"]: 1.0 if e.get("p_value") is None else float(e["p_value"]) for e in evidence
            if e["node"] in nodes and e["node"] not in (RELEVANCE_SCORE, CLICK) and e.get("verdict") != NOT_TESTABLE
            and not e.get("by_prior")}


def decide_per_graph(graph: DiscoveredGraph, evidence: list[dict[str, Any]], alpha: float) -> DiscoveredGraph:
    """Re-decide the page feature → click edges PC kept as one claim per graph: Holm's step-down at `alpha` over
    the candidates' deciding p-values (a false click parent in at most alpha of graphs, not alpha per edge). Each
    candidate's record gains `holm` (raw and adjusted p, family size); an edge Holm rejects leaves the graph."""
    p = deciding_p_values(evidence, graph.nodes)
    adjusted = holm_adjusted(p)
    removed = set()
    for record in evidence:
        name = record["node"]
        if name not in adjusted:
            continue
        kept = adjusted[name] <= alpha
        record["holm"] = {"rule": f"Holm's step-down over the {len(p)} page features' click tests, "
                                  f"family-wise alpha {alpha:g}",
                          "p_value": p[name], "adjusted_p": adjusted[name], "family": len(p), "kept": kept}
        if record["in_graph"] and kept:
            record["decision"] += f"; Holm: adjusted p {adjusted[name]:.2g} ≤ {alpha:g} over {len(p)} page features"
        if record["in_graph"] and not kept:
            removed.add(name)
            record.update({"in_graph": False,
                           "verdict": f"no edge (Holm: adjusted p {adjusted[name]:.2g} > {alpha:g})",
                           "decision": f"removed by Holm: PC kept it (p {p[name]:.2g} ≤ {alpha:g}), but its "
                                       f"adjusted p {adjusted[name]:.2g} over {len(p)} page features is > {alpha:g}"})
    if not removed:
        return graph
    return graph.with_edges(e for e in graph.edges if not (CLICK in e.pair and e.pair & removed))
