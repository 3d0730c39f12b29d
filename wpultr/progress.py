"""Progress bars for long work (ingest, training, discovery, experiments): the one helper all of them use.

Bars go to stderr and only when a person is watching: off when stderr is not a terminal or under
CI (`CI=true`), so logs, pipes and Dask workers stay clean. `WPULTR_PROGRESS=1` forces them on
(`0` forces them off), whatever the terminal.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tqdm import tqdm

ENV_FLAG = "WPULTR_PROGRESS"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def progress_enabled() -> bool:
    """Whether bars are drawn: the WPULTR_PROGRESS flag if set, else a terminal on stderr outside CI."""
    forced = os.environ.get(ENV_FLAG, "").strip().lower()
    if forced in _TRUE:
        return True
    if forced in _FALSE:
        return False
    if os.environ.get("CI", "").strip().lower() in _TRUE:
        return False
    stream = sys.stderr
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):   # a replaced or closed stream
        return False


def progress(iterable: Iterable[Any] | None = None, *, total: float | None = None, desc: str | None = None,
             unit: str = "it", enabled: bool | None = None, **options: Any) -> tqdm:
    """A tqdm bar over `iterable` (or to `update` by hand up to `total`); disabled, it is a no-op pass-through.

    `enabled` overrides `progress_enabled()`; other keywords go to tqdm (e.g. unit_scale, postfix).
    """
    on = progress_enabled() if enabled is None else enabled
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=not on, file=sys.stderr,
                dynamic_ncols=True, mininterval=0.5, **options)


def gather(client: Any, futures: Sequence[Any], *, desc: str, unit: str = "task",
           weights: Sequence[float] | None = None,
           postfix: Callable[[list[Any], float], dict[str, Any]] | None = None) -> list[Any]:
    """`client.gather(futures)` under a bar that moves as each future finishes (by its weight, default 1).

    `postfix(finished results, seconds so far)` adds live figures (MB, sessions/s, …). Without a bar
    this is exactly `client.gather`; with one, the first failed or cancelled future ends the wait and
    `gather` raises its error as before.
    """
    futures = list(futures)
    if not progress_enabled():
        return client.gather(futures)
    from distributed import as_completed  # lazy: +1.0 s (dask, distributed)
    weight_of = {id(f): w for f, w in zip(futures, weights, strict=True)} if weights is not None else {}
    total = sum(weights) if weights is not None else len(futures)
    finished: list[Any] = []
    with progress(total=total, desc=desc, unit=unit) as bar:
        for future in as_completed(futures):
            if future.status != "finished":
                break
            if postfix is not None:
                finished.append(future.result())
                bar.set_postfix(postfix(finished, bar.format_dict["elapsed"]), refresh=False)
            bar.update(weight_of.get(id(future), 1))
    return client.gather(futures)


def ingest_rates(summaries: list[Any], seconds: float) -> dict[str, Any]:
    """Live figures of an ingest from its finished per-file summaries: MB read and sessions per second."""
    megabytes = sum(getattr(s, "bytes_read", 0) for s in summaries) / 1e6
    sessions = sum(getattr(s, "sessions", 0) for s in summaries)
    return {"MB": f"{megabytes:.1f}", "sessions/s": f"{sessions / max(seconds, 1e-9):,.0f}"}
