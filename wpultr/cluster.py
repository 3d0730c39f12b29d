"""The Dask client every stage runs on: a LocalCluster by default, or an existing scheduler by address; none at all
for `wpultr ingest` of less than IN_PROCESS_INPUT_BYTES without a scheduler (`client_for_input`).

An external cluster can fail in two ways a user can fix, and both end in one `ClusterError` line
instead of a traceback or a silent hang: the scheduler does not answer within
`cluster.connect_timeout`, or a stage waits on a cluster that has had no worker for
`cluster.no_worker_timeout` seconds (the scheduler would otherwise keep the tasks forever).
"""
from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pyarrow as pa

from .config import ClusterConfig
from .errors import ClusterError
from .memory import trim_heap
from .storage import size

if TYPE_CHECKING:     # distributed is imported where a client is made: a command that needs none starts without it
    from distributed import Client

# an ingest of less input than this runs in the calling process: a LocalCluster's start-up (worker processes,
# each importing the readers) costs more than reading it (`wpultr ingest` without --scheduler)
IN_PROCESS_INPUT_BYTES = 50 * 10**6
local_clusters_started = 0     # LocalClusters this process has started (open_client); tests read it


def current_client() -> Client | None:
    """The Dask client of this process (the run's), or None when there is none (or no Dask installed: a method
    fitted in process on a machine with torch alone, as bench/gpu.py runs BAL)."""
    try:
        from distributed import default_client  # lazy: Dask is optional where a method fits in process (bench/gpu.py)
    except ImportError:
        return None
    try:
        return default_client()
    except ValueError:                       # distributed: "No clients found"
        return None


def n_workers(client: Client) -> int:
    return len(client.nthreads())


def inside_worker() -> bool:
    """True in a Dask worker's task (an experiment's run): the runs, not one job, share the workers there."""
    from distributed import get_worker  # lazy: Dask is optional where a method fits in process (bench/gpu.py)
    try:
        get_worker()
        return True
    except ValueError:
        return False


@contextlib.contextmanager
def open_client(cfg: ClusterConfig | None = None) -> Iterator[Client]:
    """Yield a Client on `cfg.scheduler` if given, else on a fresh LocalCluster closed on exit."""
    cfg = cfg or ClusterConfig()
    if cfg.scheduler:
        client = connect(cfg.scheduler, cfg.connect_timeout)
        with client:
            yield client
        return
    import dask  # lazy: Dask is optional where a method fits in process (bench/gpu.py)
    from distributed import Client, LocalCluster  # lazy: Dask is optional where a method fits in process (bench/gpu.py)
    global local_clusters_started
    local_clusters_started += 1
    # the workers start with this process's Dask config: their statistical profiler off unless asked for
    with dask.config.set({"distributed.worker.profile.enabled": bool(cfg.worker_profiling)}), \
            LocalCluster(n_workers=cfg.n_workers, threads_per_worker=cfg.threads_per_worker,
                         memory_limit=cfg.memory_limit, processes=True, dashboard_address=":0",
                         silence_logs=logging.ERROR) as cluster, \
            Client(cluster) as client:
        yield client


@contextlib.contextmanager
def dask_messages_to(path: Path) -> Iterator[Path]:
    """Dask's own log records in this process (the scheduler's and nannies' warnings, a task's 'Compute Failed'
    block as the client sees it) go to the file `path` instead of the terminal while the block runs; the user's
    terminal keeps wpultr's one-line errors. The workers print only errors (open_client: silence_logs)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    saved = []
    for name in ("distributed", "tornado", "bokeh"):
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.propagate))
        logger.handlers[:] = [handler]
        logger.propagate = False
    try:
        yield path
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers[:] = handlers
            logger.propagate = propagate
        handler.close()


@contextlib.contextmanager
def client_for_input(cfg: ClusterConfig, inputs: Sequence[str]) -> Iterator[Client | None]:
    """`open_client(cfg)`, or None — work in this process, no cluster — when no scheduler is named and the inputs
    (paths or URLs) hold less than IN_PROCESS_INPUT_BYTES together."""
    if not cfg.scheduler and sum(_input_bytes(p) for p in inputs) < IN_PROCESS_INPUT_BYTES:
        yield None
        return
    with open_client(cfg) as client:
        yield client


def _input_bytes(path: str) -> int:
    """Bytes of an input as stored; 0 for one that cannot be read (the ingest itself then says why, at once)."""
    try:
        return size(path)
    except (OSError, ValueError):
        return 0


# A full collection walks every tracked object: ~0.24 s in a worker that has imported torch (measured), at every
# stage. Below this resident size there is no cycle-held memory worth that; the Arrow pool and the heap are released.
COLLECT_ABOVE_BYTES = 1 << 30


def release_memory() -> int:
    """Hand this process's freed memory back to the OS (Python's cycles collected when it holds COLLECT_ABOVE_BYTES
    or more, Arrow's pool released, glibc's heap trimmed); returns the resident bytes released (0 where nothing could
    be measured). Nothing in use moves."""
    before = psutil.Process().memory_info().rss
    if before >= COLLECT_ABOVE_BYTES:
        gc.collect()
    pa.default_memory_pool().release_unused()
    trim_heap()      # not glibc: the collection and Arrow's release still ran
    return max(0, before - psutil.Process().memory_info().rss)


def release_worker_memory(client: Client | None) -> int:
    """`release_memory` on every worker of `client` (between stages: stages hand each other files, never worker
    memory, so what a worker still holds is its allocator's retained heap); the bytes released, summed."""
    if client is None:
        return 0
    try:
        return int(sum(client.run(release_memory).values()))
    except Exception as e:  # a worker that cannot answer only keeps its memory; the run goes on
        logging.getLogger(__name__).warning("could not release the Dask workers' memory: %s", e)
        return 0


def connect(address: str, timeout: float) -> Client:
    """A Client on the scheduler at `address`; ClusterError (one line) when none answers within `timeout` s."""
    client_log = logging.getLogger("distributed.client")
    level = client_log.level
    client_log.setLevel(logging.CRITICAL)   # distributed logs the failed attempt as a traceback: the error says it
    from distributed import Client  # lazy: Dask is optional where a method fits in process (bench/gpu.py)
    try:
        return Client(address, timeout=timeout)
    except (OSError, TimeoutError):
        raise ClusterError(f"cluster.scheduler: no Dask scheduler answered at {address} within {timeout:g} s "
                           f"(cluster.connect_timeout): start one (dask scheduler) or fix the address") from None
    finally:
        client_log.setLevel(level)


def scheduler_address(client: Any) -> str:
    """The address workers join, for messages; '?' when the client cannot say."""
    try:
        return str(client.scheduler.address)
    except AttributeError:
        return "?"


class WorkerWatch:
    """Watches a client's cluster during one stage; after `grace` s without a worker it cancels the pending work.

    Cancelling makes the stage's blocking `gather`/`result` raise at once, so the runner can turn
    the hang into `self.error` (a ClusterError naming the stage and what to do). A stage that only
    computes in this process never notices: nothing is pending, nothing is cancelled.
    """

    def __init__(self, client: Any, stage: str, grace: float, poll: float | None = None,
                 rerun_hint: str = "rerun the same `wpultr run` (or `wpultr experiment`) command"):
        self.client, self.stage, self.grace, self.rerun_hint = client, stage, grace, rerun_hint
        self.poll = poll if poll is not None else min(1.0, grace / 4)
        self.error: ClusterError | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"wpultr-watch-{stage}", daemon=True)

    def __enter__(self) -> WorkerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=max(5.0, 2 * self.poll))

    def _workers(self) -> int:
        try:
            return len(self.client.nthreads())
        except Exception:  # a scheduler that does not answer has no usable worker either
            return 0

    def _pending(self) -> list[str]:
        futures = dict(getattr(self.client, "futures", {}) or {})
        return [key for key, state in futures.items() if getattr(state, "status", None) in ("pending", "lost")]

    def _watch(self) -> None:
        empty_since: float | None = None
        while not self._stop.wait(self.poll):
            if self._workers():
                empty_since = None
                continue
            now = time.monotonic()
            empty_since = now if empty_since is None else empty_since
            pending = self._pending()
            if now - empty_since < self.grace or not pending:
                continue
            address = scheduler_address(self.client)
            self.error = ClusterError(
                f"stage {self.stage}: the Dask cluster at {address} has had no workers for {self.grace:g} s "
                f"(cluster.no_worker_timeout); start workers (dask worker {address}) and {self.rerun_hint}: "
                f"finished stages are kept")
            self._cancel(pending)
            return

    def _cancel(self, keys: list[str]) -> None:
        from distributed import Future  # lazy: Dask is optional where a method fits in process (bench/gpu.py)
        with contextlib.suppress(Exception):  # the scheduler may be gone too; the stage still unblocks below
            self.client.cancel([Future(key, self.client) for key in keys], msg=str(self.error))
