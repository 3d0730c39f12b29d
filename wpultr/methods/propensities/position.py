"""Position propensities shared by the position-based baselines (IPW, Regression-EM, DLA, pairwise debiasing).

What lives here:

* propensity tables (position -> examination propensity, relative to position 1) and their clipping;
* three ways to obtain a table for IPW, chosen by `propensity.source`:
    - ``randomisation``: a result-randomisation experiment. RandPair (Joachims et al. 2017 §5, the swap
      intervention; restated in paper 004 §3.3, Eqs. (15)–(20)): each experiment session draws a partner
      position k in 2..K and swaps the results at positions 1 and k with probability 1/2. Under the
      examination hypothesis the CTR at k is θ_k·r_B without the swap and θ_k·r_A with it, and the CTR at
      1 is θ_1·r_A and θ_1·r_B, where A and B are the results the logging ranker put at 1 and k; so
      (CTR_k^noswap + CTR_k^swap) / (CTR_1^noswap + CTR_1^swap) = θ_k / θ_1 whatever r_A and r_B are.
      The experiment is read from logs that carry the `randpair` / `randpair_swapped` columns, or run on
      the simulator (`simulate_randpair`: same corpus and users as `simulate(cfg, seed)`, fresh sessions);
    - ``harvest``: intervention harvesting from ordinary logs — the position-based click model fitted by
      EM over (query, document) pairs seen at several positions (Wang et al. 2018 §3's PBM EM; the
      estimator behind Agarwal et al. 2019's intervention harvesting), for logs without randomisation;
    - ``table``: `propensity.table`, given;
* `weighted_softmax_loss`, the IPW softmax loss summed over clicks (not normalised per list), which
  DLA and listwise IPW need to stay unbiased;
* `true_position_examination`, the simulator's truth by position, for tests and reports.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ...errors import ConfigError
from ...schema import (
    CHUNK_ROWS,
    CLICK,
    DOC_ID,
    POSITION,
    QUERY_ID,
    SESSION_ID,
    SchemaError,
    query_document_pairs,
    row_spans,
)
from ...settings.propensity import SOURCES
from ...simulate.generate import simulation_engine
from ...simulate.logging_policy import logging_scores, shown_order
from ...simulate.page import build_page, presented_media

if TYPE_CHECKING:
    from ...config import RunConfig
    from ...settings.simulate import SimulateConfig

# Columns a sessions table carries for sessions of a RandPair experiment.
RANDPAIR = "randpair"                    # the position swapped with position 1 (2..K); 0 outside the experiment
RANDPAIR_SWAPPED = "randpair_swapped"    # 1 when the swap was made, 0 in the control arm

RANDPAIR_CHUNK = 50_000                  # sessions simulated at once by simulate_randpair


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------
def as_table(values: np.ndarray | Mapping[Any, float], first: int = 1) -> dict[str, float]:
    """A JSON-able table {"1": p_1, "2": p_2, ...} from an array indexed from `first` or a mapping."""
    if isinstance(values, Mapping):
        return {str(int(k)): float(v) for k, v in sorted(values.items(), key=lambda kv: int(kv[0]))}
    return {str(i + first): float(v) for i, v in enumerate(np.asarray(values, dtype=np.float64))}


def relative_to_first(values: np.ndarray) -> np.ndarray:
    """Propensities divided by position 1's (index 0), the scale every method reports."""
    values = np.asarray(values, dtype=np.float64)
    return values / values[0] if values.size and values[0] > 0 else values


def propensity_array(table: Mapping[Any, float], max_position: int, clip: float,
                     key: str = "propensity.table") -> np.ndarray:
    """(max_position + 1,) array indexed by position (index 0 unused), relative to position 1 and clipped.

    A position missing from the table takes the value of the nearest listed position above it (the
    last listed value beyond the table's end); propensities are clipped to [clip, 1] after dividing
    by position 1's, so an IPW weight never exceeds 1 / clip.
    """
    if not table:
        raise ConfigError(f"{key}: empty; expected {{position: propensity}} for positions 1..{max_position}")
    parsed: dict[int, float] = {}
    for k, v in table.items():
        try:
            position, value = int(k), float(v)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}.{k}: expected an integer position and a number, got {k!r}: {v!r}") from None
        if position < 1 or not np.isfinite(value) or value <= 0:
            raise ConfigError(f"{key}.{k}: expected a position >= 1 and a propensity > 0, got {value!r}")
        parsed[position] = value
    known = np.array(sorted(parsed))
    first = parsed[int(known[0])]
    out = np.ones(max_position + 1, dtype=np.float64)
    for position in range(1, max_position + 1):
        nearest = known[known <= position][-1] if (known <= position).any() else known[0]
        out[position] = parsed[int(nearest)] / first
    out[1:] = np.clip(out[1:], clip, 1.0)
    return out


def max_position(frame: pd.DataFrame) -> int:
    if POSITION not in frame.columns or not len(frame):
        raise SchemaError(f"sessions: need a non-empty {POSITION!r} column; present: {list(frame.columns)}")
    return int(frame[POSITION].max())


# ---------------------------------------------------------------------------------------------
# Result randomisation: RandPair
# ---------------------------------------------------------------------------------------------
def randpair_estimate(frame: pd.DataFrame) -> dict[str, Any]:
    """θ_k/θ_1 from the sessions of a RandPair experiment (module docstring; 004 §3.3, Eqs. (16)–(19)).

    `frame` is a sessions table with `randpair` (the partner position k, 0 outside the experiment) and
    `randpair_swapped`. Returns {"propensities": {k: θ_k/θ_1}, "sessions": {k: n}, "clicks": {...}}.
    """
    for column in (SESSION_ID, POSITION, CLICK, RANDPAIR, RANDPAIR_SWAPPED):
        if column not in frame.columns:
            raise SchemaError(f"sessions: the RandPair estimate needs column {column!r}; "
                              f"present: {list(frame.columns)}")
    exp = frame[frame[RANDPAIR] > 0]
    if exp.empty:
        raise SchemaError(f"sessions: no row has {RANDPAIR!r} > 0, i.e. no session of a RandPair experiment")
    partner = exp[RANDPAIR].to_numpy()
    position = exp[POSITION].to_numpy()
    at_one, at_partner = position == 1, position == partner
    table = pd.DataFrame({"k": partner, "swapped": exp[RANDPAIR_SWAPPED].to_numpy().astype(int),
                          "click": exp[CLICK].to_numpy().astype(float), "at_one": at_one, "at_k": at_partner})
    out: dict[str, Any] = {"propensities": {"1": 1.0}, "sessions": {}, "clicks_at_1": {}, "clicks_at_k": {}}
    for k, group in table.groupby("k"):
        ctr_1 = ctr_k = 0.0
        for _, arm in group.groupby("swapped"):
            ones, ks = arm[arm["at_one"]], arm[arm["at_k"]]
            if len(ones) and len(ks):
                ctr_1 += ones["click"].mean()            # θ_1 r_A (control) or θ_1 r_B (swapped)
                ctr_k += ks["click"].mean()              # θ_k r_B (control) or θ_k r_A (swapped)
        n = int(group.loc[group["at_one"]].shape[0])
        out["sessions"][str(int(k))] = n
        out["clicks_at_1"][str(int(k))] = int(group.loc[group["at_one"], "click"].sum())
        out["clicks_at_k"][str(int(k))] = int(group.loc[group["at_k"], "click"].sum())
        if ctr_1 > 0:
            out["propensities"][str(int(k))] = float(ctr_k / ctr_1)   # Eq. (19) with ψ(1, k) = θ_k
    out["propensities"] = as_table(out["propensities"])
    return out


def simulate_randpair(cfg: SimulateConfig, seed: int, n_sessions: int) -> pd.DataFrame:
    """A RandPair experiment on the simulated engine of `simulate(cfg, seed)`: the same corpus, users and
    logging ranker, `n_sessions` fresh sessions; returns session_id, query_id, position, click,
    randpair, randpair_swapped (one row per shown result).

    The corpus, user model and context scales are drawn from the same seed streams `simulate` uses, so
    the experiment runs on the engine whose logs are being debiased; the sessions use their own streams.
    """
    k = cfg.results_per_page
    if k < 2:
        raise ConfigError("data.simulate.results_per_page: a RandPair experiment needs at least 2 positions")

    def randpair(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        partner = rng.integers(2, k + 1, size=n)                        # RandPair: pivot 1, partner k
        return np.ones((n, 1), dtype=np.int64), partner[:, None], {RANDPAIR: partner}

    return simulate_swaps(cfg, seed, n_sessions, randpair)


SwapDraw = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]]


def simulate_swaps(cfg: SimulateConfig, seed: int, n_sessions: int, draw: SwapDraw,
                   stream: int = 0x52414E44) -> pd.DataFrame:
    """A swap intervention on the simulated engine of `simulate(cfg, seed)` (RandPair, or 004 §3.3's pair swap).

    `draw(rng, n)` gives each session's pivot and partner positions, (n, m) arrays of 1-based positions,
    and the columns to record; with probability 1/2 (`randpair_swapped`) the results at pivots[:, t] and
    partners[:, t] trade places for every t. `stream` tags the experiment's own SeedSequence.
    """

    engine = simulation_engine(cfg, seed)
    corpus, model, context_scales = engine.corpus, engine.model, engine.context_scales
    # the experiment's own randomness: a different SeedSequence, so it never replays the logged sessions
    queries, logging, swap, page_rng, clicks_rng, presentation = (
        np.random.default_rng(s) for s in np.random.SeedSequence([seed, stream]).spawn(6))
    k = cfg.results_per_page
    parts = []
    for first in range(0, n_sessions, RANDPAIR_CHUNK):         # bounded memory, as the simulator's chunks
        n = min(RANDPAIR_CHUNK, n_sessions - first)
        query_index = queries.choice(corpus.n_queries, size=n, p=corpus.popularity)
        candidates = corpus.docs_of(query_index)
        media = presented_media(corpus.media_type[candidates], cfg, presentation)
        scores = logging_scores(corpus.logging_base[candidates], media,
                                np.asarray(cfg.logging_media_boost, dtype=np.float64), cfg.logging_noise, logging)
        order = shown_order(scores, k, logging)
        doc_rows = np.take_along_axis(candidates, order, axis=1)
        media = np.take_along_axis(media, order, axis=1)                # a result keeps its presentation
        pivots, partners, columns = draw(swap, n)
        swapped = swap.random(n) < 0.5
        rows = np.flatnonzero(swapped)
        for t in range(pivots.shape[1]):
            a, b = pivots[rows, t] - 1, partners[rows, t] - 1
            for shown in (doc_rows, media):
                top, other = shown[rows, a].copy(), shown[rows, b].copy()
                shown[rows, a], shown[rows, b] = other, top
        page = build_page(doc_rows, corpus, cfg, model.layout_columns, context_scales, page_rng, media_type=media)
        clicks = model.sample_clicks(page, clicks_rng)
        parts.append(pd.DataFrame({
            SESSION_ID: np.repeat(np.arange(first, first + n), k),
            QUERY_ID: corpus.query_ids[np.repeat(query_index, k)],
            POSITION: np.asarray(page.position).reshape(-1).astype(np.int64),
            CLICK: clicks.reshape(-1).astype(np.int8),
            **{name: np.repeat(values, k) for name, values in columns.items()},
            RANDPAIR_SWAPPED: np.repeat(swapped.astype(np.int8), k),
        }))
    return pd.concat(parts, ignore_index=True)


# ---------------------------------------------------------------------------------------------
# Intervention harvesting: PBM EM over (query, document)
# ---------------------------------------------------------------------------------------------
def shown_at_several_positions(pairs: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Per row: was its (query, document) pair shown at two positions or more? Those impressions are the
    harvested interventions that tell examination from relevance (Agarwal et al. 2019)."""
    return positions_per_pair(pairs, positions)[pairs] >= 2


def positions_per_pair(pairs: np.ndarray, positions: np.ndarray, chunk_rows: int = CHUNK_ROWS) -> np.ndarray:
    """How many distinct positions each pair code 0..P-1 was shown at, from the distinct (pair, position)
    combinations of `chunk_rows` rows at a time (never a group-by of the whole log)."""
    pairs, positions = np.asarray(pairs), np.asarray(positions)
    if not len(pairs):
        return np.zeros(0, np.int64)
    combos = []
    for span in row_spans(len(pairs), chunk_rows):
        combos.append(pd.DataFrame({"pair": pairs[span], "position": positions[span]}).drop_duplicates())
    distinct = pd.concat(combos, ignore_index=True).drop_duplicates()
    return np.bincount(distinct["pair"].to_numpy(np.int64), minlength=int(pairs.max()) + 1)


def share_shown_at_several_positions(pairs: np.ndarray, positions: np.ndarray) -> float:
    """The share of rows whose pair was shown at two positions or more (`shown_at_several_positions`'s mean)."""
    if not len(pairs):
        return float("nan")
    several = positions_per_pair(pairs, positions) >= 2
    impressions = sum(np.bincount(np.asarray(pairs[s]), minlength=len(several)) for s in row_spans(len(pairs)))
    return float(impressions[several].sum()) / len(pairs)


def harvest_propensities(frame: pd.DataFrame, iterations: int = 200, tol: float = 1e-7) -> dict[str, Any]:
    """θ_k/θ_1 of the position-based model P(c) = θ_k γ_{q,d} fitted by EM on the logs (Wang et al. 2018 §3).

    E-step for an unclicked result (clicked ones are examined and relevant):
        P(E=1 | c=0) = θ(1-γ)/(1-θγ),   P(R=1 | c=0) = (1-θ)γ/(1-θγ)
    M-step: θ_k = mean over results at k of P(E=1 | c), γ_{q,d} = mean over its impressions of P(R=1 | c).
    Only (query, document) pairs shown at two positions or more carry information on θ (the harvested
    interventions), so the others are left out.
    """
    for column in (QUERY_ID, DOC_ID, POSITION, CLICK):
        if column not in frame.columns:
            raise SchemaError(f"sessions: intervention harvesting needs column {column!r} (the same document "
                              f"shown at several positions); present: {list(frame.columns)}")
    pair = query_document_pairs(frame)
    position = frame[POSITION].to_numpy().astype(np.int64)
    keep = shown_at_several_positions(pair, position)
    if not keep.any():
        raise SchemaError("sessions: no (query_id, doc_id) is shown at two positions; harvesting has no intervention")
    pair, position, click = pair[keep], position[keep] - 1, frame[CLICK].to_numpy()[keep].astype(np.float64)
    pair = pd.factorize(pair)[0]
    n_pos, n_pair = int(position.max()) + 1, int(pair.max()) + 1
    per_pos = np.maximum(np.bincount(position, minlength=n_pos), 1)
    per_pair = np.bincount(pair, minlength=n_pair)
    ctr = np.bincount(position, click, minlength=n_pos) / per_pos
    theta = np.clip(ctr / max(ctr[0], 1e-9), 1e-3, 1.0)                 # start: click-through ratios
    gamma = np.full(n_pair, 0.5)
    for _ in range(iterations):
        t, g = theta[position], gamma[pair]
        denom = np.maximum(1.0 - t * g, 1e-12)
        exam = click + (1 - click) * t * (1 - g) / denom                   # P(E=1 | c)
        rel = click + (1 - click) * (1 - t) * g / denom                    # P(R=1 | c)
        new_theta = np.clip(np.bincount(position, exam, minlength=n_pos) / per_pos, 1e-6, 1.0)
        gamma = np.clip(np.bincount(pair, rel, minlength=n_pair) / per_pair, 1e-6, 1 - 1e-6)
        done = np.max(np.abs(new_theta - theta)) < tol
        theta = new_theta
        if done:
            break
    return {"propensities": as_table(relative_to_first(theta)), "theta": as_table(theta),
            "pairs": n_pair, "rows": int(keep.sum())}


# ---------------------------------------------------------------------------------------------
# Choosing the source for IPW
# ---------------------------------------------------------------------------------------------
def resolve_propensities(train: pd.DataFrame, config: RunConfig) -> tuple[dict[str, float], dict[str, Any]]:
    """(table {position: θ_k/θ_1}, info) from `propensity.source` (module docstring).

    auto: the given table if any; else the RandPair columns of `train` if present; else a simulated
    RandPair experiment when `data.source` is simulate; else harvesting from the logs.
    """
    source = config.propensity.source
    if source not in SOURCES:
        raise ConfigError(f"propensity.source: {source!r} is not allowed; allowed values: "
                            f"{', '.join(map(repr, SOURCES))}")
    table = config.propensity.table
    if source == "auto":
        if table:
            source = "table"
        elif ((RANDPAIR in train.columns and (train[RANDPAIR] > 0).any())
              or getattr(getattr(config, "data", None), "source", None) == "simulate"):
            source = "randomisation"
        else:
            source = "harvest"
    if source == "table":
        if not table:
            raise ConfigError("propensity.table: propensity.source 'table' needs {position: propensity}")
        return as_table(table), {"source": "table"}
    if source == "harvest":
        info = harvest_propensities(train, int(config.propensity.harvest_iterations))
        return info["propensities"], {"source": "harvest", **{k: v for k, v in info.items() if k != "propensities"}}
    if RANDPAIR in train.columns and (train[RANDPAIR] > 0).any():
        info = randpair_estimate(train)
        origin = "logs"
    elif getattr(getattr(config, "data", None), "source", None) == "simulate":
        n = int(config.propensity.randomisation_sessions)
        if n <= 0:
            raise ConfigError(f"propensity.randomisation_sessions: must be > 0, got {n}")
        info = randpair_estimate(simulate_randpair(config.data.simulate, config.seed, n))
        origin = f"simulated RandPair experiment, {n} sessions"
    else:
        raise ConfigError(f"propensity.source: 'randomisation' needs sessions with {RANDPAIR!r} / "
                            f"{RANDPAIR_SWAPPED!r} columns or data.source 'simulate'; use 'harvest' or 'table'")
    return info["propensities"], {"source": "randomisation", "experiment": origin,
                                  **{k: v for k, v in info.items() if k != "propensities"}}


# ---------------------------------------------------------------------------------------------
# Loss and truth
# ---------------------------------------------------------------------------------------------
def true_position_examination(truth_sessions: pd.DataFrame, column: str = "examination_prob") -> dict[str, float]:
    """The simulator's mean examination probability by position, relative to position 1."""
    means = truth_sessions.groupby(POSITION)[column].mean().sort_index()
    return as_table(dict(zip(means.index.astype(int), relative_to_first(means.to_numpy()), strict=True)))


