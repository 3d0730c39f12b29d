"""torch's intra-op CPU threads capped for a block: BAL's small networks (64-wide, batches of 2 048 rows) spend
more on waking many threads than they save.

Measured on a 16-core machine (`bench/cpu_threads.py`, docs/benchmarks.md): an influence-estimator epoch on 20 000
rows took 30–36 ms on torch's default 16 threads (≈ 14 000 minor page faults a fit) and 17–29 ms on 1–4; the tiny
BERT's BAL epochs went 6.2–11.5 s → 3.0–3.8 s (weights step 4.5–8.8 s → 1.5–2.1 s). On 2 cores the cap is moot.
With a GPU as the training device the networks run there (`bal.influence.device: train`, the click model too); the
cap then bounds the CPU side of those steps (the numpy passes, the transfers).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


def capped(limit: int | None, available: int) -> int:
    """Threads to use: `available` (torch's current setting) capped at `limit` (None: no cap), at least 1."""
    return available if limit is None else max(1, min(int(limit), available))


@contextmanager
def torch_threads(limit: int | None) -> Iterator[int]:
    """torch's intra-op threads at most `limit` inside the block (None: unchanged), restored on leaving; yields the
    count in use. torch's setting is process-wide: the block is for the single-threaded epoch loop of a fit."""
    before = torch.get_num_threads()
    use = capped(limit, before)
    if use != before:
        torch.set_num_threads(use)
    try:
        yield use
    finally:
        if use != before:
            torch.set_num_threads(before)
