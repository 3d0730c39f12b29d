"""The unbiased-click ceiling's logs (`data.clicks: unbiased`): the same shown results, clicks with no bias.

Every shown result is examined and clicked with its relevance's chance (`click_relevance` with the world's own
click noise ε), drawn from a stream of its own. A ranker trained on these clicks is what a perfect debiaser of
the biased logs could reach: bench/bal.py's Ceiling, as a row of an experiment (pipelines/reproduce/whole_page.yaml).
The truth's sessions table says the same (examination 1, click chance by relevance alone).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from ..schema import CLICK
from .generate import CLICK_PROB, EXAMINATION_PROB, TRUE_LABEL, SimulatedLogs
from .user_models import click_relevance

DEFAULT_CLICK_NOISE = 0.1      # the user models' ε where the world names none (bench/bal.py reads it the same way)
SEED_OFFSET = 7919             # the clicks' own stream: seed + this (bench/bal.py's unbiased_clicks)


def with_unbiased_clicks(logs: SimulatedLogs, seed: int) -> SimulatedLogs:
    """`logs` with every click redrawn: examined always, clicked with chance ε + (1 - ε)(2^y - 1)/(2^ymax - 1)."""
    truth = logs.truth_session_table
    click_noise = float(logs.truth["user_model"]["params"].get("click_noise", DEFAULT_CLICK_NOISE))
    chance = click_relevance(truth[TRUE_LABEL].to_numpy().astype(np.float64), click_noise)
    clicks = (np.random.default_rng(seed + SEED_OFFSET).random(len(chance)) < chance).astype(np.int8)
    sessions = logs.session_table
    sessions = sessions.set_column(sessions.schema.get_field_index(CLICK), CLICK, pa.array(clicks, pa.int8()))
    truth = truth.set_column(truth.schema.get_field_index(EXAMINATION_PROB), EXAMINATION_PROB,
                             pa.array(np.ones(len(chance)), pa.float64()))
    truth = truth.set_column(truth.schema.get_field_index(CLICK_PROB), CLICK_PROB, pa.array(chance, pa.float64()))
    note = {"clicks": "unbiased: every shown result examined, clicked with its relevance's chance "
                      f"(click noise {click_noise:g}); the logged clicks' bias is not in these logs"}
    return dataclasses.replace(logs, session_table=sessions, truth_session_table=truth, truth={**logs.truth, **note})
