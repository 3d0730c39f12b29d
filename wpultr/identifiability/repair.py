"""Connecting a disconnected IG: node intervention (§4.1, Eq. 3–6, Appendix B.2) and node merging
(§4.2, Eq. 7–8, Appendix B.3).

Both build the complete graph over the K components with the cheapest way to join each pair as the
edge weight and keep its minimum spanning tree (scipy's `minimum_spanning_tree`; the paper runs Prim's
algorithm, same tree up to ties): K − 1 swaps to run online, or K − 1 merges that give a method one
shared observation for each merged group of bias factors.

The equations lost their symbols in the text extraction; what they say, derived from the definitions:

* Eq. 3 (intervention cost of showing document x, seen under t1, under t2): Proposition 1 bounds how far
  the ratio of the two observed click rates r'(x,t1)/r'(x,t2), each an average of N Bernoulli clicks with
  p_i = r(x)·o(t_i), strays from o(t1)/o(t2). By the delta method, N·Var[log(r'(x,t1)/r'(x,t2))] =
  (1 − p1)/p1 + (1 − p2)/p2, so cost(x, t1, t2) = 1/p1 + 1/p2 − 2. (The plain ratio's variance carries the
  factor (o(t1)/o(t2))² as well; across unconnected components that factor is exactly what the logs
  cannot identify, so the log form, which drops it, is used. N is a common constant and is dropped.)
  Proposition 1 averages both click rates over N clicks; in practice the source side r'(x, t1) is already
  in the logs, averaged over the n(x, t1) impressions it had, so with N planned swap sessions its term is
  scaled by N / n(x, t1): cost = N/n(x,t1)·(1 − p1)/p1 + (1 − p2)/p2 (the paper's form when n = N). Without
  this a document seen once and clicked by luck looks like the best anchor.
* Eq. 4 / Eq. 5: the cheapest (x, t1 ∈ C1, t2 ∈ C2) with (x, t1) in the logs (x moves into C2), and the
  reverse (x seen under t2 ∈ C2 moves to t1 ∈ C1); Eq. 6 keeps the cheaper of the two.
* Eq. 7: merging cost = Euclidean distance between the two bias factors' feature vectors (Appendix C.3:
  position × `position_weight` ⊕ the other factors, one-hot when categorical), so close positions merge
  first and, with a heavy position, different media types at the same position before different positions.
* Eq. 8: the cheapest pair (t1 ∈ C1, t2 ∈ C2) by Eq. 7.

The relevance r(x) and observation o(t) of Eq. 3 are plug-in estimates from the logs unless given
(footnote 2 allows "rational estimations"): o(t) = CTR(t) / max CTR, r(x) = clicks(x) / Σ o(t) over x's
impressions, clipped to [0.001, 1].
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.sparse.csgraph import connected_components, minimum_spanning_tree
from scipy.spatial.distance import cdist

from .factor_graph import DOC, IdentifiabilityGraph

POSITION_WEIGHT = 10.0        # Appendix C.3: position × 10 in the bias feature, so positions merge last
_EPS = 1e-9                   # keeps a zero weight an edge for scipy's MST (0 means "no edge" there)
_P_CLIP = (1e-6, 1.0 - 1e-6)
_CANDIDATES_PER_NODE = 64   # documents per source node whose swap cost is evaluated exactly


@dataclass(frozen=True)
class Swap:
    """One node intervention: show document (query_id, doc_id) under `to_node` (it was seen under `from_node`)."""

    query_id: str | None
    doc_id: str | None
    doc: int                       # the document's code in the IG
    from_node: str
    to_node: str
    from_values: tuple[Any, ...]
    to_values: tuple[Any, ...]
    cost: float                    # Eq. 3
    joins: tuple[int, int]         # the two components (of the IG before any swap) it joins

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["from_values"] = [_jsonable(v) for v in self.from_values]
        d["to_values"] = [_jsonable(v) for v in self.to_values]
        d["joins"] = list(self.joins)
        return d


@dataclass(frozen=True)
class Merge:
    """One node merge: bias factors `a` and `b` share one observation probability."""

    a: str
    b: str
    a_values: tuple[Any, ...]
    b_values: tuple[Any, ...]
    cost: float                    # Eq. 7
    joins: tuple[int, int]

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "a_values": [_jsonable(v) for v in self.a_values],
                "b_values": [_jsonable(v) for v in self.b_values], "cost": self.cost, "joins": list(self.joins)}


def _jsonable(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


# ---------------------------------------------------------------------------------------------
# Estimates for Eq. 3
# ---------------------------------------------------------------------------------------------
def plug_in_estimates(ig: IdentifiabilityGraph) -> tuple[np.ndarray, np.ndarray]:
    """(r̂ per document, ô per node) from the logs alone (see the module docstring)."""
    ctr = ig.clicks / np.maximum(ig.impressions, 1)
    top = ctr.max()
    observation = np.clip(ctr / top if top > 0 else np.ones_like(ctr), 1e-3, 1.0)
    pairs = ig.pairs
    docs = pairs[DOC].to_numpy()
    n_docs = len(ig.doc_keys)
    exposure = np.bincount(docs, weights=pairs["impressions"].to_numpy() * observation[pairs["node"].to_numpy()],
                           minlength=n_docs)
    doc_clicks = np.bincount(docs, weights=pairs["clicks"].to_numpy(), minlength=n_docs)
    relevance = np.clip(doc_clicks / np.maximum(exposure, 1e-12), 1e-3, 1.0)
    return relevance, observation


def swap_cost(relevance: np.ndarray | float, obs_from: np.ndarray | float, obs_to: np.ndarray | float,
              source_share: np.ndarray | float = 1.0) -> np.ndarray:
    """Eq. 3 (derived, see module docstring): (1 − p1)/p1 / source_share + (1 − p2)/p2 with p_i = r(x)·o(t_i);
    source_share = n(x, t1) / N (1: the paper's 1/p1 + 1/p2 − 2)."""
    p1 = np.clip(np.asarray(relevance) * obs_from, *_P_CLIP)
    p2 = np.clip(np.asarray(relevance) * obs_to, *_P_CLIP)
    return (1.0 / p1 - 1.0) / np.asarray(source_share, dtype=np.float64) + 1.0 / p2 - 1.0


def _cheapest_links(cost: np.ndarray, component: np.ndarray, k: int
                    ) -> tuple[np.ndarray, dict[tuple[int, int], tuple[int, int]]]:
    """For every pair of components a < b, the cheapest node link between them, either way.

    `cost[s, t]` is the cost of linking node s to node t (a swap from s into t, or a merge distance). Returns
    the (k, k) symmetric weights the MST runs on and, per (a, b), the ordered (s, t) that costs the weight:
    s ∈ C_a, t ∈ C_b unless the cheapest link runs from C_b into C_a (ties go to C_a → C_b).
    """
    weights = np.full((k, k), np.inf)
    choice: dict[tuple[int, int], tuple[int, int]] = {}
    for a in range(k):
        for b in range(a + 1, k):
            in_a, in_b = np.flatnonzero(component == a), np.flatnonzero(component == b)
            block_ab = cost[np.ix_(in_a, in_b)]
            block_ba = cost[np.ix_(in_b, in_a)]
            i, j = np.unravel_index(np.argmin(block_ab), block_ab.shape)
            u, v = np.unravel_index(np.argmin(block_ba), block_ba.shape)
            if block_ab[i, j] <= block_ba[u, v]:
                weights[a, b] = weights[b, a] = block_ab[i, j]
                choice[(a, b)] = (int(in_a[i]), int(in_b[j]))
            else:
                weights[a, b] = weights[b, a] = block_ba[u, v]
                choice[(a, b)] = (int(in_b[u]), int(in_a[v]))
    return weights, choice


def _mst_edges(weights: np.ndarray) -> list[tuple[int, int]]:
    """Edges (i < j) of a minimum spanning tree of the complete graph with these (symmetric) weights."""
    k = len(weights)
    if k <= 1:
        return []
    dense = np.triu(weights + _EPS, k=1)
    tree = minimum_spanning_tree(sparse.csr_matrix(dense)).tocoo()
    return sorted((min(i, j), max(i, j)) for i, j in zip(tree.row.tolist(), tree.col.tolist(), strict=True))


# ---------------------------------------------------------------------------------------------
# Node intervention (§4.1, Appendix B.2)
# ---------------------------------------------------------------------------------------------
def plan_interventions(ig: IdentifiabilityGraph, relevance: np.ndarray | None = None,
                       observation: np.ndarray | None = None, sessions: int | None = None) -> list[Swap]:
    """The K − 1 swaps of minimal total cost (Eq. 3–6 on the MST of components) that connect the IG.

    `relevance` (per document code) and `observation` (per node) default to `plug_in_estimates`;
    `sessions` is N, the sessions each swap will be shown in (None: the paper's form, as if every
    logged click rate were averaged over N too).
    """
    k = ig.n_components
    if k <= 1:
        return []
    if relevance is None or observation is None:
        est_r, est_o = plug_in_estimates(ig)
        relevance = est_r if relevance is None else np.asarray(relevance, dtype=np.float64)
        observation = est_o if observation is None else np.asarray(observation, dtype=np.float64)
    n = len(ig.nodes)
    pairs = ig.pairs.assign(r=relevance[ig.pairs[DOC].to_numpy()])
    share = np.ones(len(pairs)) if sessions is None else np.minimum(pairs["impressions"].to_numpy() / sessions, 1.0)
    pairs = pairs.assign(share=share, proxy=pairs["r"] * np.sqrt(share))
    # Eq. 3 falls as r(x) and n(x, t1) grow: each source node's candidates are its best documents by both
    candidates = (pairs.sort_values(["node", "proxy", DOC], ascending=[True, False, True])
                  .groupby("node", sort=True).head(_CANDIDATES_PER_NODE))
    cand_node = candidates["node"].to_numpy()
    # cost of each candidate (x, t1) moved to every node t2 (Eq. 4 when t1 ∈ C1, Eq. 5 when t1 ∈ C2)
    cand_cost = swap_cost(candidates["r"].to_numpy()[:, None], observation[cand_node][:, None], observation[None, :],
                          candidates["share"].to_numpy()[:, None])
    cost = np.full((n, n), np.inf)
    best_row = np.zeros((n, n), dtype=np.int64)
    for node in np.unique(cand_node):
        rows = np.flatnonzero(cand_node == node)
        pick = np.argmin(cand_cost[rows], axis=0)
        cost[node] = cand_cost[rows][pick, np.arange(n)]
        best_row[node] = rows[pick]
    cand_doc = candidates[DOC].to_numpy()
    weights, choice = _cheapest_links(cost, ig.component, k)   # Eq. 4 (C_a into C_b), Eq. 5 (back), Eq. 6 (min)
    swaps = []
    for a, b in _mst_edges(weights):
        t_from, t_to = choice[(a, b)]
        doc = int(cand_doc[best_row[t_from, t_to]])
        keys = ig.doc_keys.iloc[doc] if len(ig.doc_keys.columns) else {}
        swaps.append(Swap(query_id=_text(keys, "query_id"), doc_id=_text(keys, "doc_id"), doc=doc,
                          from_node=ig.node_name(t_from), to_node=ig.node_name(t_to),
                          from_values=tuple(ig.nodes[t_from]), to_values=tuple(ig.nodes[t_to]),
                          cost=round(float(weights[a, b]), 6), joins=(a, b)))
    return swaps


def _text(keys: Any, column: str) -> str | None:
    return str(keys[column]) if column in getattr(keys, "index", keys) else None


# ---------------------------------------------------------------------------------------------
# Node merging (§4.2, Appendix B.3)
# ---------------------------------------------------------------------------------------------
def bias_features(ig: IdentifiabilityGraph, kinds: Mapping[str, str] | None = None,
                  position_weight: float = POSITION_WEIGHT) -> np.ndarray:
    """(N, d) bias feature vector of each node (Appendix C.3): `position` × `position_weight`, other
    numeric factors as they are, categorical ones (by `kinds`, or non-numeric values) one-hot."""
    kinds = dict(kinds or {})
    blocks = []
    for i, factor in enumerate(ig.factors):
        values = [node[i] for node in ig.nodes]
        numeric = all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
                      for v in values)
        kind = kinds.get(factor, "ordinal" if factor == "position" else "categorical")
        if numeric and kind != "categorical":
            column = np.asarray(values, dtype=np.float64)[:, None]
            blocks.append(column * (position_weight if factor == "position" else 1.0))
        else:
            codes, _ = pd.factorize(pd.Series([str(v) for v in values]), sort=True)
            blocks.append(np.eye(codes.max() + 1)[codes])
    return np.hstack(blocks)


def plan_merges(ig: IdentifiabilityGraph, kinds: Mapping[str, str] | None = None,
                position_weight: float = POSITION_WEIGHT) -> list[Merge]:
    """The K − 1 merges of minimal total cost (Eq. 7–8 on the MST of components) that connect the IG."""
    k = ig.n_components
    if k <= 1:
        return []
    features = bias_features(ig, kinds, position_weight)
    distance = cdist(features, features)                       # Eq. 7
    weights, choice = _cheapest_links(distance, ig.component, k)     # Eq. 8
    merges = []
    for a, b in _mst_edges(weights):
        s, t = choice[(a, b)]
        merges.append(Merge(a=ig.node_name(s), b=ig.node_name(t), a_values=tuple(ig.nodes[s]),
                            b_values=tuple(ig.nodes[t]), cost=round(float(weights[a, b]), 6), joins=(a, b)))
    return merges


def merged_mapping(ig: IdentifiabilityGraph, merges: Sequence[Merge]) -> dict[int, int]:
    """{node: representative node} for every node a merge moves: each group of merged nodes is
    represented by its node with the most impressions (ties: the first node)."""
    if not merges:
        return {}
    index = {tuple(node): i for i, node in enumerate(ig.nodes)}
    n = len(ig.nodes)
    rows = [index[tuple(m.a_values)] for m in merges]
    cols = [index[tuple(m.b_values)] for m in merges]
    links = sparse.coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    _, group = connected_components(links, directed=False)
    mapping = {}
    for g in np.unique(group):
        members = np.flatnonzero(group == g)
        if len(members) < 2:
            continue
        rep = int(members[np.lexsort((members, -ig.impressions[members]))[0]])
        mapping.update({int(m): rep for m in members if m != rep})
    return mapping


def apply_merges(frame: pd.DataFrame, ig: IdentifiabilityGraph, mapping: Mapping[int, int]) -> pd.DataFrame:
    """`frame` (the table `ig` was built from) with each merged node's factor columns set to its
    representative's values, so a method models one observation probability for the group."""
    if not mapping:
        return frame
    out = frame.copy()
    for node, rep in mapping.items():
        rows = np.logical_and.reduce([_equal(frame[f].to_numpy(), v)
                                      for f, v in zip(ig.factors, ig.nodes[node], strict=True)])
        for i, factor in enumerate(ig.factors):
            column = out[factor]
            out.loc[rows, factor] = np.asarray([ig.nodes[rep][i]], dtype=column.dtype)[0]
    return out


def _equal(column: np.ndarray, value: Any) -> np.ndarray:
    """Rows of `column` holding `value`, a missing value matching a missing value (a node of the IG can be one)."""
    if pd.isna(value):
        return pd.isna(column)
    return column == value


def mapping_table(ig: IdentifiabilityGraph, mapping: Mapping[int, int]) -> list[dict[str, Any]]:
    """The merged bias-factor mapping as JSON rows: the node, the node it now counts as, and their values."""
    return [{"node": ig.node_name(n), "as": ig.node_name(r), "values": [_jsonable(v) for v in ig.nodes[n]],
             "as_values": [_jsonable(v) for v in ig.nodes[r]]} for n, r in sorted(mapping.items())]
