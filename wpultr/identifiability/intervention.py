"""Node intervention played by the simulator: the online swap experiment of §4.1 on simulated logs.

For each swap the plan prescribes (document x of query q, seen at position t1, to be shown at t2), the
simulator replays `sessions_per_swap` sessions of q in the same world (corpus, user model) as the logs:
the logging policy orders the page as usual, then x is put at t2 and the result that stood there takes
x's old slot (or, when x was not shown, is replaced). The user model clicks as on any page, so the
added sessions carry what an online experiment would have collected. Their random streams are their
own (seeded from the run's seed), so the logs they are added to are unchanged.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..schema import POSITION, SESSION_ID
from ..settings.simulate import SimulateConfig
from ..simulate.generate import _session_chunk, simulation_engine
from .repair import Swap

_STREAMS = ("presentation", "logging", "page", "clicks")
_INTERVENTION_SALT = 0x1D_E7_1F   # separates the intervention's random streams from the logs'


def _swap_into(column: int, target_slot: int):
    """A `reorder` for the simulator: candidate `column` goes to `target_slot`, the result there to its slot."""
    def reorder(order: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        out = order.copy()
        shown = out == column
        has = shown.any(axis=1)
        slot = shown.argmax(axis=1)
        displaced = out[:, target_slot].copy()
        out[has, slot[has]] = displaced[has]
        out[:, target_slot] = column
        return out
    return reorder


def simulate_interventions(cfg: SimulateConfig, seed: int, swaps: Sequence[Swap], factors: Sequence[str],
                           sessions_per_swap: int, first_session: int) -> pd.DataFrame:
    """Sessions (the simulator's session columns) that show each swap `sessions_per_swap` times, with
    session ids from `first_session` on."""
    if tuple(factors) != (POSITION,):
        raise ConfigError(f"identifiability.on_disconnected: 'intervene' replays position swaps only; the bias "
                          f"factors are {list(factors)} (use 'merge', or identifiability.factors: [position])")
    engine = simulation_engine(cfg, seed)
    corpus = engine.corpus
    rngs = {name: np.random.default_rng(s)
            for name, s in zip(_STREAMS, np.random.SeedSequence([seed, _INTERVENTION_SALT]).spawn(len(_STREAMS)),
                               strict=True)}
    query_index = {str(q): i for i, q in enumerate(corpus.query_ids)}
    tables = []
    next_session = first_session
    for swap in swaps:
        if swap.query_id not in query_index:
            raise ConfigError(f"identifiability: swap of query {swap.query_id!r} names no query of the "
                              "simulated corpus")
        q = query_index[swap.query_id]
        docs = corpus.docs_of(np.array([q]))[0]
        match = np.flatnonzero(corpus.doc_ids[docs].astype(str) == str(swap.doc_id))
        if not len(match):
            raise ConfigError(f"identifiability: swap document {swap.doc_id!r} is not a candidate of query "
                              f"{swap.query_id!r}")
        target = int(swap.to_values[0]) - 1
        if not 0 <= target < cfg.results_per_page:
            raise ConfigError(f"identifiability: swap target position {target + 1} is outside the page "
                              f"(results_per_page {cfg.results_per_page})")
        chunk = _session_chunk(next_session, np.full(sessions_per_swap, q), corpus, cfg, engine.model,
                               engine.context_scales, rngs, reorder=_swap_into(int(match[0]), target))
        tables.append(chunk.session_table.to_pandas())
        next_session += sessions_per_swap
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def append_sessions(frame: pd.DataFrame, extra: pd.DataFrame) -> pd.DataFrame:
    """`frame` with the rows of `extra` appended, in `frame`'s columns and dtypes."""
    missing = [c for c in frame.columns if c not in extra.columns]
    if missing:
        raise ConfigError(f"identifiability: the simulated intervention sessions lack the training columns {missing}")
    extra = extra[list(frame.columns)].copy()
    for column in frame.columns:
        if frame[column].dtype != object and extra[column].dtype != frame[column].dtype:
            extra[column] = extra[column].astype(frame[column].dtype)
    return pd.concat([frame, extra], ignore_index=True).sort_values(SESSION_ID, kind="stable").reset_index(drop=True)
