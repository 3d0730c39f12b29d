"""The Dask client every stage runs on: a LocalCluster by default, or an existing scheduler by address."""
from __future__ import annotations

import contextlib
from typing import Iterator

from distributed import Client, LocalCluster

from ..config import ClusterConfig


@contextlib.contextmanager
def open_client(cfg: ClusterConfig | None = None) -> Iterator[Client]:
    """Yield a Client on `cfg.scheduler` if given, else on a fresh LocalCluster closed on exit."""
    cfg = cfg or ClusterConfig()
    if cfg.scheduler:
        with Client(cfg.scheduler) as client:
            yield client
        return
    with LocalCluster(n_workers=cfg.n_workers, threads_per_worker=cfg.threads_per_worker,
                      memory_limit=cfg.memory_limit, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        yield client
