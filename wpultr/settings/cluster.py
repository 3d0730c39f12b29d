"""Where a run executes (run config key `cluster`): a LocalCluster or an existing Dask scheduler, and where DDP
ranks may run; a resume may change it (config.EXECUTION_SECTIONS)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import require
from .checks import finite as _finite
from .checks import int_at_least as _int_at_least

_HOST = r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)"
_SCHEDULER = re.compile(rf"((tcp|tls|ws|wss|ucx)://)?{_HOST}:(?P<port>[0-9]{{1,5}})/?|inproc://\S+")


@dataclass
class ClusterConfig:
    KEY: ClassVar[str] = "cluster"

    scheduler: str | None = None          # address of an existing Dask scheduler; None = LocalCluster
    n_workers: int = 2
    threads_per_worker: int = 1
    memory_limit: str = "4GiB"            # per LocalCluster worker: a size ("4GiB", "500MB") or "auto"
    connect_timeout: float = 10.0         # seconds to reach `scheduler` before giving up
    no_worker_timeout: float = 60.0       # seconds a stage may wait on a cluster with no workers
    rank_workers: list[str] | None = None  # with `scheduler`: the workers (names or addresses) DDP ranks may run on
    rank_resources: dict[str, float] | None = None  # with `scheduler`: what a rank's worker must hold, e.g. {GPU: 1}
    worker_profiling: bool = False        # Dask's statistical profiler on the LocalCluster's workers (it samples every
    #                                       thread's stack each 10 ms: about a sixth of an ingest's CPU); true for the
    #                                       dashboard's profile page. An external cluster's workers keep their own
    #                                       setting

    def __post_init__(self) -> None:
        k = self.KEY
        require(self.scheduler is None or _scheduler_address(self.scheduler), f"{k}.scheduler",
                "null (a LocalCluster) or a scheduler address: tcp://host:port, tls://host:port, host:port "
                "or inproc://…", self.scheduler)
        require(_int_at_least(self.n_workers, 1), f"{k}.n_workers", "an integer >= 1", self.n_workers)
        require(_int_at_least(self.threads_per_worker, 1), f"{k}.threads_per_worker", "an integer >= 1",
                self.threads_per_worker)
        require(self.memory_limit == "auto" or _size(self.memory_limit) > 0, f"{k}.memory_limit",
                "a size such as '4GiB' or '500MB', or 'auto'", self.memory_limit)
        require(_finite(self.connect_timeout, 0, low_open=True), f"{k}.connect_timeout", "a number of seconds > 0",
                self.connect_timeout)
        require(_finite(self.no_worker_timeout, 0, low_open=True), f"{k}.no_worker_timeout",
                "a number of seconds > 0", self.no_worker_timeout)
        require(self.rank_workers is None or (isinstance(self.rank_workers, list) and self.rank_workers
                                               and all(isinstance(w, str) and w for w in self.rank_workers)),
                f"{k}.rank_workers", "null or a list of Dask worker names or addresses", self.rank_workers)
        require(self.rank_resources is None or (isinstance(self.rank_resources, dict) and all(
            isinstance(n, str) and _finite(v, 0, low_open=True) for n, v in self.rank_resources.items())),
                f"{k}.rank_resources", "null or a mapping of Dask worker resource names to amounts > 0, e.g. {GPU: 1}",
                self.rank_resources)


def _scheduler_address(address: str) -> bool:
    """`address` looks like a Dask scheduler address (checked by its form only: no network call)."""
    match = _SCHEDULER.fullmatch(address.strip())
    return bool(match) and (match.group("port") is None or 1 <= int(match.group("port")) <= 65535)


def _size(text: Any) -> int:
    """Bytes of a size string ('4GiB'); 0 when it is not one."""
    from dask.utils import parse_bytes  # lazy: +0.2 s (dask); the config loads without Dask
    try:
        return int(parse_bytes(text)) if isinstance(text, str) else 0
    except (ValueError, TypeError):
        return 0
