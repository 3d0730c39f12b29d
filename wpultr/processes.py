"""Whether a process of this host still lives: the one check behind a run's "died" stage and the sweep of a killed
BAL fit's scratch rows."""
from __future__ import annotations

import psutil


def process_started(pid: int) -> float | None:
    """The start time of process `pid` (to tell a live process from a reused pid), None if it is gone."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
