"""The identifiability graph (IG) of a click log and its connected components (Theorem 1).

Nodes are bias factors: the distinct values (or tuples of values) of the factor columns, e.g. positions
or (position, media_type). Two nodes share an edge when one document appears under both (Remark 1,
Appendix B.1): the same query–document pair (`query_id`, `doc_id`), or, without a `doc_id`, the same
feature vector (or the same title and abstract tokens). The relevance model is identifiable up to scale
iff the IG is connected (Theorem 1). Components come from scipy's `connected_components` on the
document–node incidence graph (a document joins every node it appears under), edges from its product.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from ..errors import SchemaError
from ..schema import (
    ABSTRACT_TOKENS,
    CHUNK_ROWS,
    CLICK,
    DOC_ID,
    FEATURES,
    QUERY_ID,
    TITLE_TOKENS,
    ids_as_text,
    pair_codes,
)

DOC = "doc"   # column of `IdentifiabilityGraph.pairs`: the document's code
DOC_KEY = "_document"     # `condensed_impressions`' identity of a document in a log without doc_id
IMPRESSIONS = "impressions"


@dataclass
class IdentifiabilityGraph:
    """The IG of one log: nodes with their impressions and clicks, edges, components and the (document, node) pairs."""

    factors: tuple[str, ...]
    nodes: list[tuple[Any, ...]]          # each node's factor values, in `factors` order
    impressions: np.ndarray               # (N,) shown results under each node
    clicks: np.ndarray                    # (N,) clicks under each node
    component: np.ndarray                 # (N,) component of each node: 0 = the most nodes (then impressions)
    edges: sparse.coo_matrix              # (N, N) upper triangle: documents shared by the two nodes
    pairs: pd.DataFrame                   # doc, node, impressions, clicks: every (document, node) seen
    doc_keys: pd.DataFrame                # per document code: query_id and doc_id when the log has them

    @property
    def n_components(self) -> int:
        return int(self.component.max()) + 1 if len(self.component) else 0

    @property
    def connected(self) -> bool:
        return self.n_components <= 1

    def node_name(self, node: int) -> str:
        values = self.nodes[node]
        if len(self.factors) == 1:
            return _plain(values[0])
        return ", ".join(f"{f}={_plain(v)}" for f, v in zip(self.factors, values, strict=True))

    def components(self) -> list[list[int]]:
        """Node indices of each component, component 0 first."""
        return [np.flatnonzero(self.component == c).tolist() for c in range(self.n_components)]

    def summary(self) -> dict[str, Any]:
        """JSON-able: each component's nodes, size, impressions and share of clicks; the largest's click share."""
        total_clicks = float(self.clicks.sum())
        comps = []
        for c, members in enumerate(self.components()):
            clicks = float(self.clicks[members].sum())
            comps.append({"component": c, "size": len(members), "nodes": [self.node_name(n) for n in members],
                          "impressions": int(self.impressions[members].sum()), "clicks": int(clicks),
                          "click_share": round(clicks / total_clicks, 4) if total_clicks else 0.0})
        return {"factors": list(self.factors), "n_nodes": len(self.nodes), "n_edges": int(self.edges.nnz),
                "n_documents": int(len(self.doc_keys)), "n_components": self.n_components,
                "connected": self.connected,
                "largest_click_share": comps[0]["click_share"] if comps else 0.0, "components": comps}


def _plain(value: Any) -> str:
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value.item() if isinstance(value, np.generic) else value)


def document_codes(frame: pd.DataFrame, per_document: bool = False) -> tuple[np.ndarray, pd.DataFrame]:
    """(code of each row's document, one row of keys per code), codes in order of first appearance: (query_id,
    doc_id) when the log has a doc_id, else the feature vector, else the title and abstract tokens (the
    query–document's own identity). `per_document`: the doc_id alone, for a ranker that reads nothing else
    (`ranker.backbone: embedding`), so one document shown for several queries is one feature; its keys name the
    first query that showed it."""
    if DOC_ID in frame.columns:
        query = (_as_text(frame[QUERY_ID]) if QUERY_ID in frame.columns and not per_document
                 else pd.Series("", index=frame.index))
        key = pair_codes(query, _as_text(frame[DOC_ID]))   # as factorising "query\tdoc" texts, no string per row
    else:
        key = frame[DOC_KEY] if DOC_KEY in frame.columns else document_key(frame)
    codes, _ = pd.factorize(key, sort=False)
    first = np.unique(codes, return_index=True)[1]
    keep = [c for c in (QUERY_ID, DOC_ID) if c in frame.columns]
    doc_keys = ids_as_text(frame.iloc[first][keep].reset_index(drop=True), frame) if keep \
        else pd.DataFrame(index=range(len(first)))
    return codes.astype(np.int64), doc_keys


def document_key(frame: pd.DataFrame) -> pd.Series:
    """A hashable identity per row for a log without doc_id: the feature vector's bytes, else the title and
    abstract tokens' bytes."""
    if FEATURES in frame.columns:
        return frame[FEATURES].map(lambda v: np.asarray(v, dtype=np.float32).tobytes())
    if TITLE_TOKENS in frame.columns and ABSTRACT_TOKENS in frame.columns:
        return pd.Series([np.asarray(t, np.int32).tobytes() + b"|" + np.asarray(a, np.int32).tobytes()
                          for t, a in zip(frame[TITLE_TOKENS], frame[ABSTRACT_TOKENS], strict=True)], index=frame.index)
    raise SchemaError(f"sessions: no column identifies a document (need {DOC_ID!r}, {FEATURES!r} or "
                      f"{TITLE_TOKENS!r} + {ABSTRACT_TOKENS!r}); present: {list(frame.columns)}")


def condensed_impressions(frame: pd.DataFrame, factors: Sequence[str], chunk_rows: int = CHUNK_ROWS
                          ) -> pd.DataFrame:
    """One row per distinct (document, bias factors) of `frame` with its impressions and clicks, in order of first
    appearance: all the IG reads of a log. Built `chunk_rows` rows at a time and merged, so a log of tens of millions
    of rows costs a chunk's group-by (measured: the whole-table group-bys of 20 M rows held 1.8 GB at once)."""
    doc_columns = [c for c in (QUERY_ID, DOC_ID) if c in frame.columns] if DOC_ID in frame.columns else [DOC_KEY]
    keys = [*doc_columns, *factors]
    clicks = frame[CLICK] if CLICK in frame.columns else None
    parts = []
    for start in range(0, len(frame), chunk_rows):
        chunk = frame.iloc[start: start + chunk_rows]
        columns = {c: chunk[c] for c in keys if c != DOC_KEY}
        if DOC_KEY in keys:
            columns[DOC_KEY] = document_key(chunk)
        columns.update(_impressions=np.ones(len(chunk), np.int64),
                       _clicks=np.zeros(len(chunk), np.int64) if clicks is None
                       else clicks.iloc[start: start + chunk_rows].to_numpy().astype(np.int64),
                       _first=np.arange(start, start + len(chunk)))
        parts.append(pd.DataFrame(columns)[[*keys, "_impressions", "_clicks", "_first"]]
                     .groupby(keys, sort=False, dropna=False)
                     .agg(_impressions=("_impressions", "sum"), _clicks=("_clicks", "sum"), _first=("_first", "min"))
                     .reset_index())
    merged = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    if len(parts) > 1:
        merged = (merged.groupby(keys, sort=False, dropna=False)
                  .agg(_impressions=("_impressions", "sum"), _clicks=("_clicks", "sum"), _first=("_first", "min"))
                  .reset_index())
    out = merged.sort_values("_first", kind="stable").reset_index(drop=True)
    out = out.rename(columns={"_impressions": IMPRESSIONS, "_clicks": CLICK}).drop(columns="_first")
    out.attrs = frame.attrs                            # the text of coded ids (`schema.IdText`), for doc_keys
    return out


def _as_text(column: pd.Series) -> pd.Series:
    """An id column as its text, so 1 and "1" are the same id; integer codes (a streamed BAL's ids,
    `io.parquet.column_table`) are kept as they are: their text would tell them apart no better, and a
    Python string per row of a large log costs gigabytes."""
    return column if pd.api.types.is_integer_dtype(column) else column.astype(str)


def node_codes(frame: pd.DataFrame, factors: Sequence[str]) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
    """(node of each row, the factor values of each node, sorted)."""
    _require_rows(frame, factors)
    grouped = frame.groupby(list(factors), sort=True, dropna=False)
    codes = grouped.ngroup().to_numpy().astype(np.int64)
    keys = list(grouped.size().index)                  # in group order, the order ngroup numbers them
    nodes = [k if isinstance(k, tuple) else (k,) for k in keys]
    return codes, nodes


def _require_rows(frame: pd.DataFrame, factors: Sequence[str]) -> None:
    missing = [f for f in factors if f not in frame.columns]
    if missing:
        raise SchemaError(f"sessions: bias factor column(s) {missing} missing; present: {list(frame.columns)}")
    if not len(frame):
        raise SchemaError("sessions: no rows to build the identifiability graph from")


def build_graph(frame: pd.DataFrame, factors: Sequence[str], per_document: bool = False) -> IdentifiabilityGraph:
    """The IG of a sessions table (one row per shown result) over the bias factor columns `factors`
    (Appendix B.1: each document's set of bias factors becomes a clique), from its condensed impressions
    (`condensed_impressions`: one row per distinct document and factor values); `per_document`: documents are
    doc_ids, not query–document pairs (`document_codes`)."""
    factors = tuple(factors)
    if not factors:
        raise ValueError("build_graph: needs at least one bias factor")
    _require_rows(frame, factors)
    condensed = condensed_impressions(frame, factors)
    row_node, nodes = node_codes(condensed, factors)
    row_doc, doc_keys = document_codes(condensed, per_document)
    shown, clicks = condensed[IMPRESSIONS].to_numpy(), condensed[CLICK].to_numpy()
    n_nodes, n_docs = len(nodes), len(doc_keys)
    pairs = (pd.DataFrame({DOC: row_doc, "node": row_node, "shown": shown, "click": clicks})
             .groupby([DOC, "node"], sort=True).agg(impressions=("shown", "sum"), clicks=("click", "sum"))
             .reset_index())
    incidence = sparse.csr_matrix((np.ones(len(pairs)), (pairs[DOC].to_numpy(), pairs["node"].to_numpy())),
                                  shape=(n_docs, n_nodes))
    bipartite = sparse.bmat([[None, incidence], [incidence.T, None]], format="csr")
    _, labels = connected_components(bipartite, directed=False)
    node_labels = labels[n_docs:]
    impressions = np.bincount(row_node, weights=shown, minlength=n_nodes).astype(np.int64)
    node_clicks = np.bincount(row_node, weights=clicks, minlength=n_nodes).astype(np.int64)
    component = _ordered_components(node_labels, impressions)
    shared = (incidence.T @ incidence).tocoo()
    upper = shared.row < shared.col
    edges = sparse.coo_matrix((shared.data[upper], (shared.row[upper], shared.col[upper])), shape=(n_nodes, n_nodes))
    return IdentifiabilityGraph(factors, nodes, impressions, node_clicks, component, edges, pairs, doc_keys)


def _ordered_components(labels: np.ndarray, impressions: np.ndarray) -> np.ndarray:
    """Relabel components 0..K-1: the most nodes first, then the most impressions, then the first node."""
    uniq, inverse = np.unique(labels, return_inverse=True)
    sizes = np.bincount(inverse)
    weight = np.bincount(inverse, weights=impressions)
    first = np.array([np.flatnonzero(inverse == c)[0] for c in range(len(uniq))])
    order = np.lexsort((first, -weight, -sizes))
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[inverse]
