"""What BAL holds for every training row, built once per fit from the sessions' own columns, never the ranker's.

`TrainingRows.build(train, config)` encodes the page features BAL sees (Bradley–Terry position scores,
standardised continuous features, category codes: `features.encoders`) and fixes what every epoch reads the
same: clicks, positions, the rows discovery samples, the (query, document) codes of the click model's document
effects and which page features vary within a document (`separability`). Nothing after it reads the sessions
frame, so a streamed fit (`BAL.fit_streamed`) lets that frame go and BAL's per-row memory is these arrays (plus
r̂, the weights and the page logits of the epoch).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..causal.discovery import click_row_mask, one_row_per_session, sample_session_ids
from ..features.encoders import CategoricalEncoder, PageFeatureEncoder
from ..methods.position_propensity import share_shown_at_several_positions
from ..schema import CLICK, DOC_ID, POSITION, QUERY_ID, RELEVANCE_SCORE, SESSION_ID, PageFeature, \
    page_features_from_config, query_document_pairs
from .separability import Separability, separability

if TYPE_CHECKING:
    from ..config import RunConfig


def bal_features(config: "RunConfig") -> tuple[PageFeature, ...]:
    """The declared page features BAL sees (`bal.features` selects; None keeps them all)."""
    declared = page_features_from_config(config.data.page_features, "data.page_features")
    wanted = config.bal.features
    return declared if wanted is None else tuple(f for f in declared if f.name in set(wanted))


def discovery_seed(config: "RunConfig") -> int:
    """The seed of BAL's discovery rows and CI tests: the same every epoch, so r̂-free tests can be reused."""
    return config.seed * 1000


def document_pairs(train: pd.DataFrame, config: "RunConfig", codes: np.ndarray | None = None
                   ) -> tuple[np.ndarray | None, dict[str, Any]]:
    """Each row's (query, document) code for the click model's document effects, or None, and why (`codes`:
    `schema.query_document_pairs` of `train` when the caller already has them).

    `bal.click_model.document_effects`: true needs query_id and doc_id; auto turns them on when at least
    half the rows belong to a pair shown at two positions or more (the harvested interventions that tell
    examination from relevance); false keeps the paper's u = α·r̂ + β.
    """
    wanted = config.bal.click_model.document_effects
    if wanted is False:
        return None, {"used": False, "reason": "bal.click_model.document_effects is false"}
    if DOC_ID not in train.columns or QUERY_ID not in train.columns:
        if wanted is True:
            from ..errors import ConfigError
            raise ConfigError("bal.click_model.document_effects: true needs the sessions' query_id and doc_id columns; "
                              f"present: {sorted(map(str, train.columns))}")
        return None, {"used": False, "reason": "the sessions have no doc_id"}
    pairs = query_document_pairs(train) if codes is None else codes
    share = share_shown_at_several_positions(pairs, train[POSITION].to_numpy())
    info = {"pairs": int(pairs.max()) + 1 if len(pairs) else 0, "rows_in_pairs_at_two_positions": round(share, 4)}
    if wanted == "auto" and share < 0.5:
        return None, {**info, "used": False, "reason": "auto: under half the rows' documents were shown at two "
                                                       "positions or more"}
    return pairs, {**info, "used": True}


@dataclass(frozen=True)
class GraphRows:
    """The rows every epoch's discovery reads (drawn once, by the run's seed): one shown result per sampled
    session for KCI, and the whole sessions of hybrid's click tests (a mask, None for other tests) with their
    session ids (the click test's clusters)."""

    kci: np.ndarray
    click_mask: np.ndarray | None
    click_sessions: np.ndarray | None

    @classmethod
    def draw(cls, train: pd.DataFrame, config: "RunConfig") -> "GraphRows":
        d, seed = config.discovery, discovery_seed(config)
        ids = sample_session_ids(train, d.n_sessions, stratify=d.stratify,
                                 n_strata=d.n_strata, seed=seed)
        chosen = train.loc[train[SESSION_ID].isin(ids), [SESSION_ID, POSITION]].assign(_row=lambda f: f.index)
        mask = click_row_mask(train, d, seed)
        sessions = None if mask is None else train[SESSION_ID].to_numpy()[mask]
        return cls(one_row_per_session(chosen, seed)["_row"].to_numpy(), mask, sessions)

    def click_frame(self, nodes: pd.DataFrame) -> pd.DataFrame | None:
        """Hybrid's click rows of `nodes` with their session_id; None without a mask."""
        if self.click_mask is None:
            return None
        return nodes.loc[self.click_mask].assign(**{SESSION_ID: self.click_sessions}).reset_index(drop=True)


@dataclass
class TrainingRows:
    """BAL's per-row state of one fit (see the module doc); `nodes` gets r̂ each epoch (`with_scores`)."""

    features: tuple[PageFeature, ...]
    kinds: dict[str, str]                      # feature → ordinal | continuous | categorical
    n_categories: dict[str, int]               # categorical feature → codes (vocabulary + unknown)
    nodes: pd.DataFrame                        # encoded page features, r̂, c: the graph's variables per row
    clicks: np.ndarray                         # float32: the nodes' click column itself (read-only)
    positions: np.ndarray
    graph_rows: GraphRows | None               # None for a fixed-graph variant (`bal.graph`)
    pairs: np.ndarray | None                   # (query, document) codes of the click model's document effects
    document_effects: dict[str, Any]
    separable: Separability

    @classmethod
    def build(cls, train: pd.DataFrame, config: "RunConfig", consume: bool = False) -> "TrainingRows":
        """From the sessions' ids, position, click and page-feature columns (rows in training order).

        `consume` (a streamed fit, whose frame holds nothing else): the id columns are dropped from `train` once
        their last user is done, before the encoded columns are allocated, and each page feature's column once it
        is encoded, so the frame and the rows are never both whole in memory."""
        features = bal_features(config)
        encoder = PageFeatureEncoder(features, config.discovery.preprocess).fit(train)
        graph_rows = GraphRows.draw(train, config) if config.bal.graph == "discovered" else None
        codes = None
        if {QUERY_ID, DOC_ID} <= set(train.columns):                 # sorted once, for both users
            codes = query_document_pairs(train)
            if len(codes) and codes.max() < np.iinfo(np.int32).max:
                codes = codes.astype(np.int32)
        pairs, document_effects = document_pairs(train, config, codes)
        separable = separability(train, features, config.bal.min_within_document_share, codes)
        if consume:
            for column in (SESSION_ID, QUERY_ID, DOC_ID):
                if column in train.columns:
                    del train[column]
        positions = train[POSITION].to_numpy()
        nodes = encoder.transform(train, drop=consume)
        nodes[RELEVANCE_SCORE] = np.zeros(len(nodes), np.float32)      # r̂: replaced every epoch
        nodes[CLICK] = train[CLICK].to_numpy(np.float32)
        return cls(features, {f.name: f.kind.value for f in features},
                   {name: len(enc.vocabulary_) + 1 for name, enc in encoder.encoders_.items()
                    if isinstance(enc, CategoricalEncoder)},
                   nodes, nodes[CLICK].to_numpy(), positions, graph_rows, pairs, document_effects, separable)

    def with_scores(self, r: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
        """`nodes` with this epoch's r̂ (in place: the other columns never change), and r̂ as the nodes' own
        column (read-only): the caller can let its `r` go, one copy of r̂ is held."""
        self.nodes[RELEVANCE_SCORE] = r
        return self.nodes, self.nodes[RELEVANCE_SCORE].to_numpy()
